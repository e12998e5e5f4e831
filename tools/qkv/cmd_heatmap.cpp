// qkv heatmap: PNG heatmaps per layer and head plus one self-contained index.html
// attention explorer, for a pretrained model folder on a text (models/text_attention.h)
// or a trained checkpoint on one input (models/attention_maps.h).
#include "cmd_heatmap.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "model_dir.h"
#include "output.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/folder.h"
#include "qkv/models/attention_maps.h"
#include "qkv/models/text_attention.h"
#include "qkv/ops/ops.h"
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

std::vector<std::int64_t> parse_index_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> v;
  std::size_t i = 0;
  auto number = [&](std::size_t& at, const std::string& part) {
    std::size_t j = at;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j == at || j - at > 6)
      throw ValueError("heatmap: " + flag + " '" + part + "' is not a number or a range like 2-4 (give e.g. 0,2-4)");
    const std::int64_t n = std::stoll(text.substr(at, j - at));
    at = j;
    return n;
  };
  while (i <= text.size()) {
    const std::size_t end = std::min(text.find(',', i), text.size());
    const std::string part = text.substr(i, end - i);
    std::size_t at = i;
    const std::int64_t a = number(at, part);
    std::int64_t b = a;
    if (at < end && text[at] == '-') {
      ++at;
      b = number(at, part);
    }
    if (at != end) throw ValueError("heatmap: " + flag + " '" + part + "' is not a number or a range like 2-4 (give e.g. 0,2-4)");
    if (b < a) throw ValueError("heatmap: " + flag + " range '" + part + "' runs backwards");
    for (std::int64_t k = a; k <= b; ++k) v.push_back(k);
    i = end + 1;
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

namespace {

// A trained checkpoint's maps, restricted to the selected layers and heads.
std::vector<models::AttentionMap> select_maps(std::vector<models::AttentionMap> maps, const HeatmapOptions& o) {
  std::vector<models::AttentionMap> out;
  std::int64_t max_layer = -1, max_head = 0;
  for (const auto& m : maps) {
    max_layer = std::max<std::int64_t>(max_layer, m.layer);
    max_head = std::max<std::int64_t>(max_head, m.weights.size(0));
  }
  for (std::int64_t l : o.layers)
    if (l > max_layer)
      throw ValueError("heatmap: --layers " + std::to_string(l) + " is not a layer of the model (it has " +
                       std::to_string(max_layer + 1) + ": 0.." + std::to_string(max_layer) + ")");
  for (std::int64_t h : o.heads)
    if (h >= max_head)
      throw ValueError("heatmap: --heads " + std::to_string(h) + " is not a head of the model (it has " +
                       std::to_string(max_head) + " per layer: 0.." + std::to_string(max_head - 1) + ")");
  for (auto& m : maps) {
    if (!o.layers.empty() && std::find(o.layers.begin(), o.layers.end(), m.layer) == o.layers.end()) continue;
    if (!o.heads.empty()) {
      std::vector<Tensor> rows;
      std::vector<std::int64_t> ids;
      for (std::int64_t h : o.heads) {
        rows.push_back(m.weights.select(0, h));
        ids.push_back(m.head_id(h));
      }
      m.weights = stack(rows, 0);
      m.head_ids = ids;
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::string quoted_text(const std::string& t) {
  return "\"" + (t.size() > 60 ? t.substr(0, 57) + "..." : t) + "\"";
}

}  // namespace

int run_heatmap(const HeatmapOptions& opt, std::ostream& out, std::vector<std::string>* written) {
  const bool pretrained = !opt.model.empty();
  if (pretrained == !opt.checkpoint.empty())
    throw ValueError("heatmap: give --model DIR --text TEXT (a pretrained model folder) or --checkpoint FILE --input "
                     "INPUT (a model trained by qkv train), not both");
  if (pretrained) {
    if (std::filesystem::is_regular_file(opt.model))
      check_input_file(opt.model, "heatmap: --model", "a GGUF file or a model folder");
    else
      check_input_folder(opt.model, "heatmap: --model", "a model folder or a GGUF file");
  } else {
    check_input_file(opt.checkpoint, "heatmap: --checkpoint", "a checkpoint file (.safetensors)");
  }
  check_output_folder(opt.out, {.cmd = "heatmap", .overwrite = opt.overwrite});

  std::vector<models::AttentionMap> maps;
  std::string title, source, kind, input;
  std::vector<std::int64_t> linear_layers;
  if (pretrained) {
    const models::TextAttention a = models::text_attention(opt.model, opt.text);
    linear_layers = a.linear_layers;
    maps = models::text_attention_maps(a, opt.layers, opt.heads);
    source = opt.model;
    kind = a.model_type;
    input = opt.text;
    title = a.family + " attention: " + std::filesystem::path(opt.model).filename().string() + " on " + quoted_text(opt.text);
  } else {
    const io::Checkpoint ckpt = io::load_checkpoint(opt.checkpoint);
    maps = select_maps(models::attention_maps_for(ckpt, opt.input), opt);
    if (maps.empty()) throw ValueError("heatmap: the " + ckpt.model_type + " model gave no attention maps");
    source = opt.checkpoint;
    kind = ckpt.model_type;
    input = opt.input;
    title = ckpt.model_type + " attention: " + std::filesystem::path(opt.checkpoint).filename().string();
  }
  const std::vector<std::string> files = write_report(opt.out, maps, title);
  if (written) written->insert(written->end(), files.begin(), files.end());

  if (opt.json) {
    nlohmann::json jm = nlohmann::json::array();
    for (const auto& m : maps)
      jm.push_back({{"name", m.name},
                    {"kind", m.kind},
                    {"layer", m.layer},
                    {"heads", m.head_ids.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.head_ids)},
                    {"shape", m.weights.shape()},
                    {"query_tokens", m.query_tokens},
                    {"key_tokens", m.key_tokens}});
    nlohmann::json j{{pretrained ? "model" : "checkpoint", source}, {"model_type", kind}, {"input", input},
                     {"out", opt.out}, {"maps", jm}, {"files", files}};
    if (!linear_layers.empty()) j["linear_layers"] = linear_layers;
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    return 0;
  }

  out << (pretrained ? "model:      " : "checkpoint: ") << source << " (" << kind << ")\n"
      << "input:      " << input << '\n';
  if (pretrained && !maps.empty()) {
    out << "tokens:     ";
    for (std::size_t i = 0; i < maps[0].query_tokens.size(); ++i) out << (i ? " | " : "") << maps[0].query_tokens[i];
    out << "  (" << maps[0].query_tokens.size() << ")\n";
  }
  out << "maps:       " << maps.size() << '\n';
  if (!linear_layers.empty()) {
    out << "no map:     layers";
    for (std::size_t i = 0; i < linear_layers.size(); ++i) out << (i ? ", " : " ") << linear_layers[i];
    out << " (linear attention, Gated DeltaNet: a recurrent state, no softmax over the keys)\n";
  }
  Table t({"map", "kind", "layer", "weights"});
  t.align(1, Table::Align::Left).align(3, Table::Align::Left);
  for (const auto& m : maps) t.add_row({m.name, m.kind, std::to_string(m.layer), shape_paren(m.weights.shape())});
  t.print(out);
  if (opt.list_files) {
    out << "\nFiles written (" << files.size() << "):\n";
    for (const auto& f : files) out << "  " << f << '\n';
  } else {
    out << "\nFiles written: " << files.size() - 1 << " PNGs and index.html in " << opt.out << '\n';
  }
  out << "Open " << files.back() << " in a browser to explore the attention (works offline).\n";
  return 0;
}

QKV_TOOL_COMMAND(heatmap, {
    .name = "heatmap",
    .summary = "Attention heatmaps (PNG per layer and head) and an HTML explorer: a pretrained model, or a trained checkpoint",
    .order = 44,
    .group = "The tutorials' experiments",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Runs a model once and writes, into --out, one PNG per attention map and head named "
          "<kind>_layer<L>_head<H>.png (prefixed with encoder_/decoder_ when a seq2seq model has self-attention in "
          "both) plus index.html: one self-contained page (no network access) to pick the layer and head, hover "
          "tokens and see their attention. --out appears whole once every file is written; an --out that already "
          "holds files is refused unless --overwrite.\n\n"
          "--model PATH --text TEXT: a pretrained Hugging Face folder or a GGUF file of a causal language model "
          "(causal maps; byte-level tokens shown as the text they stand for; the BOS first where the tokenizer adds "
          "one) or a sentence-embedding folder ([CLS] and [SEP] added, as the model sees them); the weights are "
          "transformers' output_attentions=True with eager attention. Model types: " +
          [] {
            std::string s;
            for (const std::string& t : models::text_attention_families()) s += (s.empty() ? "" : ", ") + t;
            return s;
          }() + ".\n"
          "--checkpoint FILE --input INPUT: a model saved by 'qkv train ... --save', on its own input format "
          "(space-separated token ids for the classifier, e.g. \"3 7 1 0 5 2 9 4\"; the source digits for seq2seq).\n"
          "--layers and --heads pick some (e.g. --layers 0,5 --heads 0-3); the default is every layer and head.\n\n"
          "Examples:\n"
          "  qkv heatmap --model models/all-MiniLM-L6-v2 --text \"I love NLP\" --out minilm_heads\n"
          "  qkv heatmap --model tests/fixtures/gpt2_tiny --text \"And God said\" --layers 1 --out gpt2_heads\n"
          "  qkv heatmap --checkpoint clf.safetensors --input \"3 7 1 0 5 2 9 4\" --out clf_heads");
      auto opt = std::make_shared<HeatmapOptions>();
      auto layers = std::make_shared<std::string>(), heads = std::make_shared<std::string>();
      auto* model = add_lm_model_option(sub, opt->model, "Pretrained model: a folder or a GGUF file, with --text");
      auto* text = sub.add_option("--text", opt->text, "The text to run --model on");
      auto* ckpt = sub.add_option("--checkpoint", opt->checkpoint, "Checkpoint file written by qkv train --save, with --input")
                       ->type_name("FILE");
      auto* input = sub.add_option("--input", opt->input, "The input to run --checkpoint's model on (its own text format)");
      model->excludes(ckpt);
      text->needs(model);
      input->needs(ckpt);
      sub.add_option("--layers", *layers, "Layers to draw, e.g. 0,2-4 (default: all)")->type_name("LIST");
      sub.add_option("--heads", *heads, "Heads to draw in each layer, e.g. 0-3 (default: all)")->type_name("LIST");
      sub.add_option("--out", opt->out, "Output folder (created if missing)")->type_name("DIR")->capture_default_str();
      add_overwrite_flag(sub, opt->overwrite, "--out");
      sub.add_flag("--json", opt->json, "Print one JSON object (maps and files written) instead of text");
      sub.parse_complete_callback([model, text, ckpt, input] {
        if (model->count() + ckpt->count() == 0)
          throw CLI::ValidationError("heatmap", "give --model DIR --text TEXT or --checkpoint FILE --input INPUT");
        if (model->count() && !text->count())
          throw CLI::ValidationError("--model", "needs --text TEXT (the text the model reads)");
        if (ckpt->count() && !input->count())
          throw CLI::ValidationError("--checkpoint", "needs --input INPUT (the model's own input format)");
      });
      return [opt, layers, heads] {
        if (!layers->empty()) opt->layers = parse_index_list(*layers, "--layers");
        if (!heads->empty()) opt->heads = parse_index_list(*heads, "--heads");
        return run_heatmap(*opt, std::cout);
      };
    }});

}  // namespace qkv::tool
