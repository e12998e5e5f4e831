// qkv heatmap: attention heatmaps (PNG per map and head) and the explorer page, for a
// trained checkpoint on one input or a pretrained model folder on a text.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace qkv::tool {

struct HeatmapOptions {
  std::string checkpoint;    // written by `qkv train ... --save` (with input)
  std::string input;         // the model's own input format (classifier: space-separated token ids)
  std::string model;         // a pretrained model folder (GPT-2, BERT) (with text)
  std::string text;          // the text its tokenizer reads
  std::string out = "heatmaps";
  std::vector<std::int64_t> layers, heads;  // selections (empty: all)
  bool json = false;
  bool overwrite = false;    // replace an --out that holds files (else refused)
  bool list_files = true;    // print every file written (else a count)
};

// Runs the model and writes out/<kind>_layer<L>_head<H>.png for every selected map and head
// plus out/index.html (the folder appears whole, io::StagedFolder); prints what it wrote
// and appends the paths to `written` if given. qkv::Error (one line naming the file or
// problem) on failure, before anything is written.
int run_heatmap(const HeatmapOptions& opt, std::ostream& out, std::vector<std::string>* written = nullptr);

// "0,2-4" -> {0, 2, 3, 4} (sorted, no repeats). ValueError naming `flag` and the bad part.
std::vector<std::int64_t> parse_index_list(const std::string& text, const std::string& flag);

}  // namespace qkv::tool
