// qkv convert: reads a GPT-2 folder in any naming or float dtype qkv loads and writes it
// back as transformers' save_pretrained does (float32, transformer.* names, Conv1D
// layout), with the tokenizer files copied.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "qkv/core/error.h"
#include "qkv/models/gpt2.h"

namespace qkv::tool {
namespace {

struct ConvertOptions {
  std::string model, out;
};

int run_convert(const ConvertOptions& o, std::ostream& os) {
  namespace fs = std::filesystem;
  if (fs::exists(o.out) && fs::equivalent(o.model, o.out))
    throw ValueError("--out is the --model folder; write to another folder");
  const auto m = models::load_gpt2(o.model);
  models::save_gpt2(*m, o.out);
  for (const char* f : {"vocab.json", "merges.txt"}) {
    const fs::path src = fs::path(o.model) / f;
    if (!fs::exists(src)) continue;
    std::error_code ec;
    fs::copy_file(src, fs::path(o.out) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) throw IOError("convert: cannot copy '" + src.string() + "' to '" + o.out + "': " + ec.message());
  }
  const models::GPT2Config& c = m->config();
  os << "wrote " << o.out << " (GPT-2, " << c.n_layer << " layers, n_embd " << c.n_embd << ", vocab " << c.vocab_size
     << ", " << m->num_parameters() << " parameters, float32)\n";
  return 0;
}

QKV_TOOL_COMMAND(convert, {
    .name = "convert",
    .summary = "Rewrite a GPT-2 folder as transformers writes it (float32, Hugging Face names)",
    .order = 62,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Loads a GPT-2 folder the way qkv generate does (names with or without 'transformer.', the old attn.bias "
          "buffers, F16/BF16 weights) and writes OUT/config.json and OUT/model.safetensors as GPT2LMHeadModel."
          "save_pretrained would (float32, Conv1D [in, out] weights, no lm_head.weight when tied), each file "
          "atomically, plus vocab.json and merges.txt when present. transformers loads the result.\n\n"
          "Example:\n  qkv convert --model tests/fixtures/gpt2_tiny --out /tmp/gpt2_tiny_qkv");
      auto opt = std::make_shared<ConvertOptions>();
      sub.add_option("--model", opt->model, "GPT-2 folder to read")->required()->check(CLI::ExistingDirectory);
      sub.add_option("--out", opt->out, "Folder to write (created if missing)")->required();
      return [opt] { return run_convert(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
