// Attention figures: PNG heatmaps (one per layer and head) and one
// self-contained HTML attention explorer, what `qkv heatmap` writes.
//
//   auto maps = models::attention_maps_for(io::load_checkpoint("clf.safetensors"), "3 7 1 0");
//   auto files = viz::write_attention_report("out", maps, "classifier");   // PNGs + out/index.html
//
// Every writer is atomic (temp file next to the target, fsync, rename) and
// throws qkv::IOError naming the path when it cannot write.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/models/attention_maps.h"

namespace qkv::viz {

// The 256-entry viridis colormap (matplotlib's default), entry 0 = low, 255 = high.
struct Rgb {
  std::uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};
Rgb viridis(double t);  // t clamped to [0, 1], nearest of the 256 entries
extern const Rgb kViridis[256];

// Geometry of a heatmap figure, in pixels (origin top-left). All of it
// follows from Lq, Lk and the longest labels (see heatmap_layout()).
struct HeatmapLayout {
  int width = 0, height = 0;             // the whole image
  int cell = 0;                          // cell side
  int grid_x = 0, grid_y = 0;            // top-left corner of cell (0, 0)
  int grid_w = 0, grid_h = 0;            // Lk * cell, Lq * cell
  int row_label_x = 0, row_label_w = 0;  // query labels: [row_label_x, row_label_x + row_label_w) left of the grid
  int col_label_y = 0, col_label_h = 0;  // key labels (vertical text) below the grid
  int bar_x = 0, bar_y = 0, bar_w = 0, bar_h = 0;  // colour bar (top = max, bottom = 0)
  int label_scale = 2;                   // font scale of the token labels (1 or 2)
  int label_stride = 1;                  // every label_stride-th label is drawn when cells are small
};

// Labels are cut to kMaxLabelChars characters (with ".." at the end).
inline constexpr int kMaxLabelChars = 12;
// The layout for an [Lq, Lk] map with these labels and title.
HeatmapLayout heatmap_layout(std::int64_t lq, std::int64_t lk, const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& col_labels, const std::string& title);

// Writes one heatmap: cells coloured with viridis scaled over [0, max weight]
// (max 0 -> [0, 1]), query tokens on the rows, key tokens on the columns,
// the title on top, a colour bar with ticks 0 .. max on the right, and the
// axis captions "key position" / "query position". Values are printed in
// the cells when they are large enough.
//   weights     [Lq, Lk] any float dtype, finite
//   row_labels  Lq strings (empty: "0", "1", ...)
//   col_labels  Lk strings (empty: "0", "1", ...)
// ShapeError for a bad rank or label count, IOError naming `path` if it cannot be written.
void write_heatmap_png(const std::string& path, const Tensor& weights, const std::vector<std::string>& row_labels,
                       const std::vector<std::string>& col_labels, const std::string& title);

// Writes the attention explorer: one HTML file with inline CSS, JS and the
// weights as inline JSON (no network access). It lets the reader pick the
// attention module (when there are several kinds), the layer and the head
// (or all heads overlaid); it draws bertviz's head view (query tokens left,
// key tokens right, lines with opacity = weight; hovering a token shows only
// its attention) beside a matrix view of the same weights. After rendering,
// <body> carries data-heads (heads per map), data-layers (distinct layers),
// data-maps, data-ready="1", and data-error if any script error happened;
// each head button has class "head-option".
//   maps  each weights [H, Lq, Lk], tokens matching Lq / Lk
// ValueError for no maps or inconsistent tokens, IOError naming `path` if it cannot be written.
void write_explorer_html(const std::string& path, const std::vector<models::AttentionMap>& maps,
                         const std::string& title);

// File stem for one map and head: "<kind>_layer<L>_head<H>", prefixed with
// the module's first name component ("encoder_self_layer0_head0") when
// another map has the same kind and layer (seq2seq has encoder and decoder
// self-attention). `all` is the full list the map belongs to.
std::string heatmap_file_stem(const std::vector<models::AttentionMap>& all, std::size_t map_index, std::int64_t head);
// Title of that figure: "layer 0 head 1 self-attention" (with the prefix when ambiguous).
std::string heatmap_title(const std::vector<models::AttentionMap>& all, std::size_t map_index, std::int64_t head);

// Creates `dir` if missing and writes a PNG per map and head plus
// `dir/index.html`; returns the paths written, in order (index.html last).
// IOError naming the directory if it cannot be created.
std::vector<std::string> write_attention_report(const std::string& dir, const std::vector<models::AttentionMap>& maps,
                                                const std::string& title);

}  // namespace qkv::viz
