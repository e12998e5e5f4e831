// qkv convert: rewrites a model. OUT a folder: a GPT-2 folder in any naming or float dtype qkv
// loads, written back as transformers' save_pretrained does (float32, transformer.* names,
// Conv1D layout), with the tokenizer files copied. OUT a .gguf file: a GPT-2 or Llama-family
// model (folder or GGUF) written as a GGUF file llama.cpp and gguf-py load, its weights kept or
// converted to --type.
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "command.h"
#include "model_dir.h"
#include "output.h"
#include "qkv/core/error.h"
#include "qkv/infer/language_model.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "qkv/io/gguf.h"
#include "qkv/models/gguf_export.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/llama.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  std::string model, out, type;
  bool overwrite = false;
};

bool ends_with_gguf(const std::string& p) { return p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0; }

// A folder's chat template text ("" when it has none).
std::string folder_chat_template_text(const std::string& dir) {
  const auto t = infer::folder_chat_template_source(dir);
  return t ? t->text : std::string();
}

int run_gguf(const ConvertOptions& o, std::ostream& os) {
  std::optional<kernels::QType> type;
  if (!o.type.empty()) {
    type = kernels::qtype_from_name(o.type);
    const bool writable = type && (*type == kernels::QType::F32 || *type == kernels::QType::F16 ||
                                   *type == kernels::QType::BF16 || *type == kernels::QType::Q8_0 ||
                                   *type == kernels::QType::Q4_0 || *type == kernels::QType::Q4_1 ||
                                   *type == kernels::QType::Q5_0 || *type == kernels::QType::Q5_1);
    if (!writable)
      throw ValueError("convert: --type must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1; got '" + o.type + "'");
  }
  std::error_code ec;
  const bool in_file = fs::is_regular_file(o.model, ec);
  if (fs::exists(o.out, ec) && fs::equivalent(o.model, o.out, ec))
    throw ValueError("convert: --out is the --model file; write to another file");
  check_output_file(o.out, {.cmd = "convert", .flag = "--out", .overwrite = o.overwrite});
  const std::string kind = infer::model_kind(o.model);
  const std::string name = fs::path(o.out).stem().string();
  std::string what;
  if (in_file) {
    if (!io::is_gguf_file(o.model)) throw FormatError("convert: " + o.model + " is not a GGUF file or a model folder");
    auto f = std::make_shared<const io::GGUFFile>(io::GGUFFile::open(o.model));
    const auto m = models::load_llama_gguf(f);
    io::GGUFMetadata tok;
    if (f->find_value("tokenizer.ggml.model")) {
      const auto t = f->find_string("tokenizer.chat_template");
      tok = models::gguf_tokenizer_metadata(tokenize::gguf_vocab_from(*f), t ? std::string(*t) : std::string());
    }
    models::save_llama_gguf(*m, o.out, type, tok, name);
    what = kind;
  } else if (kind == "gpt2") {
    const auto m = models::load_gpt2(o.model);
    io::GGUFMetadata tok;
    if (fs::exists(fs::path(o.model) / "vocab.json", ec) || fs::exists(fs::path(o.model) / "tokenizer.json", ec))
      tok = models::gguf_tokenizer_metadata(models::gguf_vocab_from_folder(o.model), folder_chat_template_text(o.model));
    models::save_gpt2_gguf(*m, o.out, type.value_or(kernels::QType::F32), tok, name);
    what = "gpt2";
  } else if (kind == "llama" || kind == "mistral" || kind == "qwen2") {
    const auto m = models::load_llama(o.model);
    io::GGUFMetadata tok;
    if (fs::exists(fs::path(o.model) / "tokenizer.json", ec) || fs::exists(fs::path(o.model) / "vocab.json", ec))
      tok = models::gguf_tokenizer_metadata(models::gguf_vocab_from_folder(o.model), folder_chat_template_text(o.model));
    models::save_llama_gguf(*m, o.out, type, tok, name);
    what = kind;
  } else {
    require_model_kind(o.model, {"gpt2", "llama", "mistral", "qwen2"}, "convert",
                       "a GPT-2 / Llama / Mistral / Qwen2 folder or a GGUF file to write GGUF");
    throw FormatError("convert: " + o.model + " is not a model folder qkv reads (no config.json with a model_type)");
  }
  os << "wrote " << o.out << " (GGUF, " << what << ", weights " << (type ? kernels::qtype_name(*type) : "as stored")
     << ", " << fs::file_size(o.out, ec) << " bytes)\n";
  return 0;
}

int run_convert(const ConvertOptions& o, std::ostream& os) {
  if (ends_with_gguf(o.out)) return run_gguf(o, os);
  if (!o.type.empty()) throw ValueError("convert: --type applies to GGUF output (an --out ending in .gguf)");
  check_input_folder(o.model, "convert: --model", "a GPT-2 model folder");
  std::error_code ec;
  if (fs::exists(o.out, ec) && same_file(o.model, o.out))
    throw ValueError("convert: --out is the --model folder; write to another folder");
  require_model_kind(o.model, {"gpt2"}, "convert", "a GPT-2 folder to write a folder (give an --out ending in .gguf for GGUF)");
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
    .summary = "Rewrite a model: a GPT-2 folder as transformers writes it, or any model as a GGUF file",
    .order = 62,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "OUT a folder: loads a GPT-2 folder the way qkv generate does (names with or without 'transformer.', the "
          "old attn.bias buffers, F16/BF16 weights) and writes OUT/config.json and OUT/model.safetensors as "
          "GPT2LMHeadModel.save_pretrained would (float32, Conv1D [in, out] weights, no lm_head.weight when tied), "
          "plus vocab.json and merges.txt when present. transformers loads the result. OUT appears whole once every "
          "file is written.\n"
          "OUT ending in .gguf: writes a GPT-2 or Llama-family model (a folder or a GGUF file) as GGUF v3 with the "
          "names, metadata and layouts of llama.cpp's converter (llama.cpp and gguf-py load it), the tokenizer and "
          "chat template included; --type converts every weight matrix (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1; "
          "default: as stored, float32 for GPT-2), norms and biases stay F32. Written atomically.\n"
          "An OUT that already holds something is refused unless --overwrite.\n\n"
          "Examples:\n  qkv convert --model tests/fixtures/gpt2_tiny --out /tmp/gpt2_tiny_qkv\n"
          "  qkv convert --model tests/fixtures/llama_family/llama --out /tmp/tiny_llama.gguf --type q8_0");
      auto opt = std::make_shared<ConvertOptions>();
      add_lm_model_option(sub, opt->model, "Model to read: a folder, or a GGUF file (GGUF output)")->required();
      sub.add_option("--out", opt->out, "Folder to write, or a .gguf file")->type_name("PATH")->required();
      sub.add_option("--type", opt->type, "GGUF output: f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1");
      add_overwrite_flag(sub, opt->overwrite, "--out");
      return [opt] { return run_convert(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
