// PNG heatmaps of attention weights: viridis cells, token labels, title,
// colour bar and axis captions, drawn on an RGB canvas with the embedded 5x7
// font and written with libpng's simplified API. Also the per-map file names
// and the report writer (all PNGs + index.html) behind `qkv heatmap`.
#include "qkv/viz/heatmap.h"

#include <png.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "font.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"

namespace qkv::viz {

// matplotlib's viridis (van der Walt & Smith, CC0), 256 entries rounded to 8 bits.
const Rgb kViridis[256] = {
    {68, 1, 84}, {68, 2, 86}, {69, 4, 87}, {69, 5, 89}, {70, 7, 90}, {70, 8, 92}, {70, 10, 93}, {70, 11, 94},
    {71, 13, 96}, {71, 14, 97}, {71, 16, 99}, {71, 17, 100}, {71, 19, 101}, {72, 20, 103}, {72, 22, 104}, {72, 23, 105},
    {72, 24, 106}, {72, 26, 108}, {72, 27, 109}, {72, 28, 110}, {72, 29, 111}, {72, 31, 112}, {72, 32, 113}, {72, 33, 115},
    {72, 35, 116}, {72, 36, 117}, {72, 37, 118}, {72, 38, 119}, {72, 40, 120}, {72, 41, 121}, {71, 42, 122}, {71, 44, 122},
    {71, 45, 123}, {71, 46, 124}, {71, 47, 125}, {70, 48, 126}, {70, 50, 126}, {70, 51, 127}, {70, 52, 128}, {69, 53, 129},
    {69, 55, 129}, {69, 56, 130}, {68, 57, 131}, {68, 58, 131}, {68, 59, 132}, {67, 61, 132}, {67, 62, 133}, {66, 63, 133},
    {66, 64, 134}, {66, 65, 134}, {65, 66, 135}, {65, 68, 135}, {64, 69, 136}, {64, 70, 136}, {63, 71, 136}, {63, 72, 137},
    {62, 73, 137}, {62, 74, 137}, {62, 76, 138}, {61, 77, 138}, {61, 78, 138}, {60, 79, 138}, {60, 80, 139}, {59, 81, 139},
    {59, 82, 139}, {58, 83, 139}, {58, 84, 140}, {57, 85, 140}, {57, 86, 140}, {56, 88, 140}, {56, 89, 140}, {55, 90, 140},
    {55, 91, 141}, {54, 92, 141}, {54, 93, 141}, {53, 94, 141}, {53, 95, 141}, {52, 96, 141}, {52, 97, 141}, {51, 98, 141},
    {51, 99, 141}, {50, 100, 142}, {50, 101, 142}, {49, 102, 142}, {49, 103, 142}, {49, 104, 142}, {48, 105, 142}, {48, 106, 142},
    {47, 107, 142}, {47, 108, 142}, {46, 109, 142}, {46, 110, 142}, {46, 111, 142}, {45, 112, 142}, {45, 113, 142}, {44, 113, 142},
    {44, 114, 142}, {44, 115, 142}, {43, 116, 142}, {43, 117, 142}, {42, 118, 142}, {42, 119, 142}, {42, 120, 142}, {41, 121, 142},
    {41, 122, 142}, {41, 123, 142}, {40, 124, 142}, {40, 125, 142}, {39, 126, 142}, {39, 127, 142}, {39, 128, 142}, {38, 129, 142},
    {38, 130, 142}, {38, 130, 142}, {37, 131, 142}, {37, 132, 142}, {37, 133, 142}, {36, 134, 142}, {36, 135, 142}, {35, 136, 142},
    {35, 137, 142}, {35, 138, 141}, {34, 139, 141}, {34, 140, 141}, {34, 141, 141}, {33, 142, 141}, {33, 143, 141}, {33, 144, 141},
    {33, 145, 140}, {32, 146, 140}, {32, 146, 140}, {32, 147, 140}, {31, 148, 140}, {31, 149, 139}, {31, 150, 139}, {31, 151, 139},
    {31, 152, 139}, {31, 153, 138}, {31, 154, 138}, {30, 155, 138}, {30, 156, 137}, {30, 157, 137}, {31, 158, 137}, {31, 159, 136},
    {31, 160, 136}, {31, 161, 136}, {31, 161, 135}, {31, 162, 135}, {32, 163, 134}, {32, 164, 134}, {33, 165, 133}, {33, 166, 133},
    {34, 167, 133}, {34, 168, 132}, {35, 169, 131}, {36, 170, 131}, {37, 171, 130}, {37, 172, 130}, {38, 173, 129}, {39, 173, 129},
    {40, 174, 128}, {41, 175, 127}, {42, 176, 127}, {44, 177, 126}, {45, 178, 125}, {46, 179, 124}, {47, 180, 124}, {49, 181, 123},
    {50, 182, 122}, {52, 182, 121}, {53, 183, 121}, {55, 184, 120}, {56, 185, 119}, {58, 186, 118}, {59, 187, 117}, {61, 188, 116},
    {63, 188, 115}, {64, 189, 114}, {66, 190, 113}, {68, 191, 112}, {70, 192, 111}, {72, 193, 110}, {74, 193, 109}, {76, 194, 108},
    {78, 195, 107}, {80, 196, 106}, {82, 197, 105}, {84, 197, 104}, {86, 198, 103}, {88, 199, 101}, {90, 200, 100}, {92, 200, 99},
    {94, 201, 98}, {96, 202, 96}, {99, 203, 95}, {101, 203, 94}, {103, 204, 92}, {105, 205, 91}, {108, 205, 90}, {110, 206, 88},
    {112, 207, 87}, {115, 208, 86}, {117, 208, 84}, {119, 209, 83}, {122, 209, 81}, {124, 210, 80}, {127, 211, 78}, {129, 211, 77},
    {132, 212, 75}, {134, 213, 73}, {137, 213, 72}, {139, 214, 70}, {142, 214, 69}, {144, 215, 67}, {147, 215, 65}, {149, 216, 64},
    {152, 216, 62}, {155, 217, 60}, {157, 217, 59}, {160, 218, 57}, {162, 218, 55}, {165, 219, 54}, {168, 219, 52}, {170, 220, 50},
    {173, 220, 48}, {176, 221, 47}, {178, 221, 45}, {181, 222, 43}, {184, 222, 41}, {186, 222, 40}, {189, 223, 38}, {192, 223, 37},
    {194, 223, 35}, {197, 224, 33}, {200, 224, 32}, {202, 225, 31}, {205, 225, 29}, {208, 225, 28}, {210, 226, 27}, {213, 226, 26},
    {216, 226, 25}, {218, 227, 25}, {221, 227, 24}, {223, 227, 24}, {226, 228, 24}, {229, 228, 25}, {231, 228, 25}, {234, 229, 26},
    {236, 229, 27}, {239, 229, 28}, {241, 229, 29}, {244, 230, 30}, {246, 230, 32}, {248, 230, 33}, {251, 231, 35}, {253, 231, 37},
};

Rgb viridis(double t) {
  if (!(t > 0.0)) return kViridis[0];  // also NaN
  if (t >= 1.0) return kViridis[255];
  return kViridis[static_cast<int>(std::lround(t * 255.0))];
}

namespace {

using detail::Canvas;
using detail::kLineH;

constexpr int kMargin = 16;
constexpr int kTitleScale = 2, kCaptionScale = 2, kTickScale = 2, kValueScale = 1;
constexpr int kTickChars = 5;  // "0.125" at most (see tick_label)
constexpr Rgb kBackground{255, 255, 255};
constexpr Rgb kInk{34, 34, 34};
constexpr Rgb kFrame{90, 90, 90};

std::vector<std::string> labels_or_indices(const std::vector<std::string>& labels, std::int64_t n) {
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    out.push_back(labels.empty() ? std::to_string(i)
                                 : detail::ellipsize(detail::to_ascii(labels[static_cast<std::size_t>(i)]),
                                                     kMaxLabelChars));
  return out;
}

int widest(const std::vector<std::string>& labels, int scale) {
  int w = 0;
  for (const auto& s : labels) w = std::max(w, detail::text_width(s, scale));
  return w;
}

std::string tick_label(double v, double vmax) {
  char buf[32];
  std::snprintf(buf, sizeof buf, vmax >= 0.1 ? "%.2f" : "%.3f", v);
  return buf;
}

void check_labels(const char* what, const std::vector<std::string>& labels, std::int64_t n) {
  if (!labels.empty() && static_cast<std::int64_t>(labels.size()) != n)
    throw ShapeError(std::string("write_heatmap_png: ") + what + " has " + std::to_string(labels.size()) +
                     " labels for " + std::to_string(n) + " positions");
}

}  // namespace

HeatmapLayout heatmap_layout(std::int64_t lq, std::int64_t lk, const std::vector<std::string>& row_labels,
                             const std::vector<std::string>& col_labels, const std::string& title) {
  if (lq <= 0 || lk <= 0 || lq > 4096 || lk > 4096)
    throw ShapeError("heatmap_layout: map is [" + std::to_string(lq) + ", " + std::to_string(lk) +
                     "]; each side must be in [1, 4096]");
  check_labels("row_labels", row_labels, lq);
  check_labels("col_labels", col_labels, lk);
  HeatmapLayout L;
  const std::int64_t longest = std::max(lq, lk);
  L.cell = static_cast<int>(std::clamp<std::int64_t>(480 / longest, 3, 48));
  L.label_scale = L.cell >= 18 ? 2 : 1;
  const int line = kLineH * L.label_scale;
  L.label_stride = L.cell >= line ? 1 : (line + L.cell - 1) / L.cell;

  const auto rows = labels_or_indices(row_labels, lq);
  const auto cols = labels_or_indices(col_labels, lk);
  const int title_h = kLineH * kTitleScale;
  const int caption_h = kLineH * kCaptionScale;

  // Left to right: caption "query position" (rotated), row labels, grid, colour bar, tick labels.
  L.row_label_x = kMargin + caption_h + 8;
  L.row_label_w = std::max(widest(rows, L.label_scale), 1);
  L.grid_x = L.row_label_x + L.row_label_w + 8;
  L.grid_w = static_cast<int>(lk) * L.cell;
  L.bar_x = L.grid_x + L.grid_w + 24;
  L.bar_w = 20;
  const int tick_w = detail::text_width(std::string(kTickChars, '0'), kTickScale);
  const int content_right = L.bar_x + L.bar_w + 4 + 6 + tick_w;

  // Top to bottom: title, grid (beside the colour bar), column labels (rotated), caption "key position".
  L.grid_y = kMargin + title_h + 14;
  L.grid_h = static_cast<int>(lq) * L.cell;
  L.bar_y = L.grid_y;
  L.bar_h = std::max(L.grid_h, 160);
  L.col_label_y = L.grid_y + L.grid_h + 8;
  L.col_label_h = std::max(widest(cols, L.label_scale), 1);
  const int caption_y = L.col_label_y + L.col_label_h + 10;
  const int bottom = std::max(caption_y + caption_h, L.bar_y + L.bar_h + kLineH * kTickScale / 2);

  L.width = std::max(content_right, kMargin + detail::text_width(detail::to_ascii(title), kTitleScale)) + kMargin;
  L.height = bottom + kMargin;
  return L;
}

void write_heatmap_png(const std::string& path, const Tensor& weights, const std::vector<std::string>& row_labels,
                       const std::vector<std::string>& col_labels, const std::string& title) {
  // weights [Lq, Lk]; row_labels Lq (or none); col_labels Lk (or none)
  if (!weights.defined() || weights.dim() != 2)
    throw ShapeError("write_heatmap_png: weights must be [Lq, Lk], got " +
                     (weights.defined() ? weights.shape_str() : std::string("an undefined tensor")));
  const std::int64_t lq = weights.size(0), lk = weights.size(1);
  const HeatmapLayout L = heatmap_layout(lq, lk, row_labels, col_labels, title);
  const std::vector<double> w = weights.to_vector<double>();  // any float dtype and layout
  double vmax = 0.0;
  for (double v : w) {
    if (!std::isfinite(v)) throw ValueError("write_heatmap_png: weights contain a non-finite value (" + path + ")");
    vmax = std::max(vmax, v);
  }
  if (vmax <= 0.0) vmax = 1.0;

  Canvas cv(L.width, L.height, kBackground);
  const std::string t = detail::to_ascii(title);
  cv.text((L.width - detail::text_width(t, kTitleScale)) / 2, kMargin, t, kTitleScale, kInk);

  // Cells, with their values printed when a cell is large enough.
  const bool show_values = L.cell >= 40;
  for (std::int64_t i = 0; i < lq; ++i)
    for (std::int64_t j = 0; j < lk; ++j) {
      const double v = w[static_cast<std::size_t>(i * lk + j)];
      const Rgb c = viridis(v / vmax);
      const int x = L.grid_x + static_cast<int>(j) * L.cell, y = L.grid_y + static_cast<int>(i) * L.cell;
      cv.fill_rect(x, y, L.cell, L.cell, c);
      if (show_values) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%.2f", v);
        const double lum = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
        const Rgb ink = lum < 128 ? Rgb{255, 255, 255} : Rgb{20, 20, 20};
        cv.text(x + (L.cell - detail::text_width(buf, kValueScale)) / 2,
                y + (L.cell - detail::kGlyphH * kValueScale) / 2, buf, kValueScale, ink);
      }
    }
  cv.rect_outline(L.grid_x - 1, L.grid_y - 1, L.grid_w + 2, L.grid_h + 2, kFrame);

  // Token labels: queries right-aligned left of their row, keys reading upwards below their column.
  const auto rows = labels_or_indices(row_labels, lq);
  const auto cols = labels_or_indices(col_labels, lk);
  const int glyph_h = detail::kGlyphH * L.label_scale;
  for (std::int64_t i = 0; i < lq; i += L.label_stride) {
    const std::string& s = rows[static_cast<std::size_t>(i)];
    const int y = L.grid_y + static_cast<int>(i) * L.cell + (L.cell - glyph_h) / 2;
    cv.text(L.row_label_x + L.row_label_w - detail::text_width(s, L.label_scale), y, s, L.label_scale, kInk);
  }
  for (std::int64_t j = 0; j < lk; j += L.label_stride) {
    const std::string& s = cols[static_cast<std::size_t>(j)];
    const int x = L.grid_x + static_cast<int>(j) * L.cell + (L.cell - glyph_h) / 2;
    cv.text_up(x, L.col_label_y, s, L.label_scale, kInk);
  }

  // Axis captions.
  const std::string xcap = "key position", ycap = "query position";
  const int caption_y = L.col_label_y + L.col_label_h + 10;
  cv.text(L.grid_x + (L.grid_w - detail::text_width(xcap, kCaptionScale)) / 2, caption_y, xcap, kCaptionScale, kInk);
  cv.text_up(kMargin, L.grid_y + (L.grid_h - detail::text_width(ycap, kCaptionScale)) / 2, ycap, kCaptionScale,
             kInk);

  // Colour bar: top = vmax, bottom = 0, with five ticks.
  for (int y = 0; y < L.bar_h; ++y)
    cv.fill_rect(L.bar_x, L.bar_y + y, L.bar_w, 1, viridis(1.0 - static_cast<double>(y) / (L.bar_h - 1)));
  cv.rect_outline(L.bar_x - 1, L.bar_y - 1, L.bar_w + 2, L.bar_h + 2, kFrame);
  for (int k = 0; k <= 4; ++k) {
    const int y = L.bar_y + static_cast<int>(std::lround((L.bar_h - 1) * (1.0 - k / 4.0)));
    cv.fill_rect(L.bar_x + L.bar_w, y, 4, 1, kFrame);
    const std::string s = tick_label(vmax * k / 4.0, vmax);
    cv.text(L.bar_x + L.bar_w + 10, y - detail::kGlyphH * kTickScale / 2, s, kTickScale, kInk);
  }

  // Encode with libpng's simplified API, then write atomically.
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(L.width);
  img.height = static_cast<png_uint_32>(L.height);
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  const auto stride = static_cast<png_int_32>(L.width * 3);
  if (!png_image_write_to_memory(&img, nullptr, &size, 0, cv.rgb().data(), stride, nullptr))
    throw IOError("write_heatmap_png: cannot encode '" + path + "': " + img.message);
  std::string bytes(size, '\0');
  if (!png_image_write_to_memory(&img, bytes.data(), &size, 0, cv.rgb().data(), stride, nullptr))
    throw IOError("write_heatmap_png: cannot encode '" + path + "': " + img.message);
  bytes.resize(size);
  io::write_file_atomic(path, bytes, "write_heatmap_png");
}

namespace {

std::string first_component(const std::string& name) { return name.substr(0, name.find('.')); }

bool ambiguous(const std::vector<models::AttentionMap>& all, std::size_t i) {
  for (std::size_t j = 0; j < all.size(); ++j)
    if (j != i && all[j].kind == all[i].kind && all[j].layer == all[i].layer) return true;
  return false;
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  return s.empty() ? "map" : s;
}

}  // namespace

std::string heatmap_file_stem(const std::vector<models::AttentionMap>& all, std::size_t i, std::int64_t head) {
  const models::AttentionMap& m = all.at(i);
  std::string stem = safe_name(m.kind) + "_layer" + std::to_string(m.layer) + "_head" + std::to_string(m.head_id(head));
  if (ambiguous(all, i)) stem = safe_name(first_component(m.name)) + "_" + stem;
  return stem;
}

std::string heatmap_title(const std::vector<models::AttentionMap>& all, std::size_t i, std::int64_t head) {
  const models::AttentionMap& m = all.at(i);
  std::string t = "layer " + std::to_string(m.layer) + " head " + std::to_string(m.head_id(head)) + " " + m.kind + "-attention";
  if (ambiguous(all, i)) t = first_component(m.name) + " " + t;
  return t;
}

std::vector<std::string> write_attention_report(const std::string& dir, const std::vector<models::AttentionMap>& maps,
                                                const std::string& title) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw IOError("heatmap: cannot create output directory '" + dir + "': " +
                  (ec ? ec.message() : std::string("a file of that name exists")));
  std::vector<std::string> written;
  for (std::size_t i = 0; i < maps.size(); ++i) {
    const models::AttentionMap& m = maps[i];
    if (!m.weights.defined() || m.weights.dim() != 3)
      throw ShapeError("heatmap: map '" + m.name + "' weights must be [H, Lq, Lk], got " +
                       (m.weights.defined() ? m.weights.shape_str() : std::string("an undefined tensor")));
    for (std::int64_t h = 0; h < m.weights.size(0); ++h) {
      const std::string path = (fs::path(dir) / (heatmap_file_stem(maps, i, h) + ".png")).string();
      write_heatmap_png(path, m.weights.select(0, h), m.query_tokens, m.key_tokens, heatmap_title(maps, i, h));
      written.push_back(path);
    }
  }
  const std::string index = (fs::path(dir) / "index.html").string();
  write_explorer_html(index, maps, title);
  written.push_back(index);
  return written;
}

}  // namespace qkv::viz
