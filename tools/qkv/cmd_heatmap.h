// qkv heatmap: attention heatmaps (PNG per map and head) and the explorer page.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace qkv::tool {

struct HeatmapOptions {
  std::string checkpoint;    // written by `qkv train ... --save`
  std::string input;         // the model's own input format (classifier: space-separated token ids)
  std::string out = "heatmaps";
  bool json = false;
  bool overwrite = false;    // replace an --out that holds files (else refused)
};

// Loads the checkpoint, runs the model on the input and writes
// out/<kind>_layer<L>_head<H>.png for every map and head plus out/index.html;
// prints what it wrote and appends the paths to `written` if given.
// qkv::Error (one line naming the file or problem) on failure.
int run_heatmap(const HeatmapOptions& opt, std::ostream& out, std::vector<std::string>* written = nullptr);

}  // namespace qkv::tool
