// qkv convert: reads a GPT-2 folder in any naming or float dtype qkv loads and writes it
// back as transformers' save_pretrained does (float32, transformer.* names, Conv1D
// layout), with the tokenizer files copied.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "output.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "qkv/models/gpt2.h"

namespace qkv::tool {
namespace {

struct ConvertOptions {
  std::string model, out;
  bool overwrite = false;
};

int run_convert(const ConvertOptions& o, std::ostream& os) {
  namespace fs = std::filesystem;
  check_input_folder(o.model, "convert: --model", "a GPT-2 model folder");
  std::error_code ec;
  if (fs::exists(o.out, ec) && same_file(o.model, o.out))
    throw ValueError("convert: --out is the --model folder; write to another folder");
  check_output_folder(o.out, {.cmd = "convert", .overwrite = o.overwrite});
  const auto m = models::load_gpt2(o.model);
  io::StagedFolder f(o.out, "convert");  // OUT appears (or is replaced) whole, once complete
  models::save_gpt2(*m, f.path());
  for (const char* name : {"vocab.json", "merges.txt"}) {
    const fs::path src = fs::path(o.model) / name;
    if (fs::exists(src, ec)) io::write_file_atomic(f.file(name), io::read_file(src.string(), "convert"), "convert");
  }
  f.commit();
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
          "atomically, plus vocab.json and merges.txt when present. transformers loads the result. OUT appears whole once "
          "every file is written; an OUT that already holds files is refused unless --overwrite.\n\n"
          "Example:\n  qkv convert --model tests/fixtures/gpt2_tiny --out /tmp/gpt2_tiny_qkv");
      auto opt = std::make_shared<ConvertOptions>();
      add_model_option(sub, opt->model, "GPT-2 model folder to read")->required();
      sub.add_option("--out", opt->out, "Folder to write (created if missing)")->type_name("DIR")->required();
      add_overwrite_flag(sub, opt->overwrite, "--out");
      return [opt] { return run_convert(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
