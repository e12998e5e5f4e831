// qkv heatmap: PNG heatmaps per layer and head plus one self-contained
// index.html attention explorer for a trained checkpoint and one input.
#include "cmd_heatmap.h"

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "output.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/folder.h"
#include "qkv/models/attention_maps.h"
#include "qkv/viz/heatmap.h"

namespace qkv::tool {
namespace {

// The PNGs and index.html, written into a staging folder and swapped into place as a whole.
std::vector<std::string> write_report(const std::string& out, const std::vector<models::AttentionMap>& maps,
                                      const std::string& title) {
  io::StagedFolder f(out, "heatmap");
  std::vector<std::string> files = viz::write_attention_report(f.path(), maps, title);
  f.commit();
  for (std::string& p : files) p = (std::filesystem::path(out) / std::filesystem::path(p).filename()).string();
  return files;
}

}  // namespace

int run_heatmap(const HeatmapOptions& opt, std::ostream& out, std::vector<std::string>* written) {
  check_input_file(opt.checkpoint, "heatmap: --checkpoint", "a checkpoint file (.safetensors)");
  check_output_folder(opt.out, {.cmd = "heatmap", .overwrite = opt.overwrite});
  const io::Checkpoint ckpt = io::load_checkpoint(opt.checkpoint);
  const std::vector<models::AttentionMap> maps = models::attention_maps_for(ckpt, opt.input);
  if (maps.empty()) throw ValueError("heatmap: the " + ckpt.model_type + " model gave no attention maps");
  const std::string title = ckpt.model_type + " attention: " + std::filesystem::path(opt.checkpoint).filename().string();
  const std::vector<std::string> files = write_report(opt.out, maps, title);
  if (written) written->insert(written->end(), files.begin(), files.end());

  if (opt.json) {
    nlohmann::json jm = nlohmann::json::array();
    for (const auto& m : maps)
      jm.push_back({{"name", m.name},
                    {"kind", m.kind},
                    {"layer", m.layer},
                    {"shape", m.weights.shape()},
                    {"query_tokens", m.query_tokens},
                    {"key_tokens", m.key_tokens}});
    out << nlohmann::json{{"checkpoint", opt.checkpoint}, {"model_type", ckpt.model_type}, {"input", opt.input},
                          {"out", opt.out},           {"maps", jm},                     {"files", files}}
               .dump()
        << '\n';
    return 0;
  }

  out << "checkpoint: " << opt.checkpoint << " (" << ckpt.model_type << ")\n"
      << "input:      " << opt.input << '\n'
      << "maps:       " << maps.size() << '\n';
  Table t({"map", "kind", "layer", "weights"});
  t.align(1, Table::Align::Left).align(3, Table::Align::Left);
  for (const auto& m : maps) t.add_row({m.name, m.kind, std::to_string(m.layer), shape_paren(m.weights.shape())});
  t.print(out);
  out << "\nFiles written (" << files.size() << "):\n";
  for (const auto& f : files) out << "  " << f << '\n';
  out << "Open " << files.back() << " in a browser to explore the attention (works offline).\n";
  return 0;
}

QKV_TOOL_COMMAND(heatmap, {
    .name = "heatmap",
    .summary = "Write attention heatmaps (PNG per layer and head) and an HTML attention explorer for a checkpoint",
    .order = 60,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Loads the model in --checkpoint (saved by 'qkv train ... --save'), runs it on --input and writes, into "
          "--out (created if missing), one PNG per attention map and head named <kind>_layer<L>_head<H>.png "
          "(prefixed with encoder_/decoder_ when a seq2seq model has self-attention in both) plus index.html: one "
          "self-contained page (no network access) to pick the layer and head, hover tokens and see their "
          "attention. The input format is the model's: space-separated token ids for the classifier "
          "(e.g. \"3 7 1 0 5 2 9 4\"), the source sequence for seq2seq. A missing or corrupt checkpoint or an "
          "unwritable --out gives one line naming the problem and exit code 1.");
      auto opt = std::make_shared<HeatmapOptions>();
      sub.add_option("--checkpoint", opt->checkpoint, "Checkpoint file (.safetensors) written by qkv train --save")
          ->required();
      sub.add_option("--input", opt->input, "The input to run the model on (the model's own text format)")
          ->required();
      sub.add_option("--out", opt->out, "Output directory (created if missing)")->capture_default_str();
      sub.add_flag("--json", opt->json, "Print one JSON object (maps and files written) instead of text");
      sub.add_flag("--overwrite", opt->overwrite, "Replace --out if it already holds files (else refused)");
      return [opt] { return run_heatmap(*opt, std::cout); };
    }});

}  // namespace qkv::tool
