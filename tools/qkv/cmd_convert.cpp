// qkv convert: rewrites a model. OUT a folder: a folder of a family the registry writes back (the
// model qkv trains, GPT-2), as transformers' save_pretrained does, with the tokenizer files
// copied. OUT a .gguf file: any causal LM of the registry (folder or GGUF) written as a GGUF file llama.cpp and gguf-py load, its weights kept or
// given the types llama-quantize gives them for the file type --type names (models/quant_mix.h).
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
#include "qkv/models/quant_mix.h"
#include "qkv/models/registry.h"
#include "qkv/tokenize/gguf_vocab.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;

struct ConvertOptions {
  std::string model, out, type;
  bool pure = false;
  bool overwrite = false;
};

bool ends_with_gguf(const std::string& p) { return p.size() > 5 && p.compare(p.size() - 5, 5, ".gguf") == 0; }

// A folder's chat template text ("" when it has none).
std::string folder_chat_template_text(const std::string& dir) {
  const auto t = infer::folder_chat_template_source(dir);
  return t ? t->text : std::string();
}

int run_gguf(const ConvertOptions& o, std::ostream& os) {
  models::GgufQuant quant;
  if (!o.type.empty()) {
    quant.ftype = models::llama_ftype_from_name(o.type);
    if (!quant.ftype)
      throw ValueError("convert: --type must be one of " + models::llama_ftype_names() + " (llama-quantize's names); got '" +
                       o.type + "'");
  }
  if (o.pure && !quant.ftype) throw ValueError("convert: --pure needs a --type");
  quant.pure = o.pure;
  std::error_code ec;
  const bool in_file = fs::is_regular_file(o.model, ec);
  if (fs::exists(o.out, ec) && fs::equivalent(o.model, o.out, ec))
    throw ValueError("convert: --out is the --model file; write to another file");
  check_output_file(o.out, {.cmd = "convert", .flag = "--out", .overwrite = o.overwrite});
  const std::string name = fs::path(o.out).stem().string();
  const models::ModelKind kind = models::model_kind(o.model);
  if (in_file && !io::is_gguf_file(o.model)) throw FormatError("convert: " + o.model + " is not a GGUF file or a model folder");
  if (!kind.family || !kind.family->write_gguf) {
    if (kind.family)
      throw ValueError("convert: " + o.model + " is a " + kind.family->display + (kind.gguf ? " GGUF file" : " folder") +
                       "; qkv convert writes GGUF from " + role_needs(models::ModelRole::CausalLM));
    if (!kind.declared.empty())
      throw FormatError("convert: " + o.model + (kind.gguf ? ": GGUF architecture '" : ": model_type \"") + kind.declared +
                        (kind.gguf ? "'" : "\"") + " is not one qkv converts (" +
                        (kind.gguf ? models::gguf_architectures_list() : models::model_types_list(models::ModelRole::CausalLM)) + ")");
    throw FormatError("convert: " + o.model + " is not a model folder qkv reads (no config.json with a model_type)");
  }
  // The tokenizer and chat template travel with the weights.
  io::GGUFMetadata tok;
  if (in_file) {
    const io::GGUFFile f = io::GGUFFile::open_header(o.model);
    if (f.find_value("tokenizer.ggml.model")) {
      const auto t = f.find_string("tokenizer.chat_template");
      tok = tokenize::gguf_tokenizer_metadata(tokenize::gguf_vocab_from(f), t ? std::string(*t) : std::string());
    }
  } else if (tokenize::find_tokenizer(o.model)) {
    tok = tokenize::gguf_tokenizer_metadata(tokenize::gguf_vocab_from_folder(o.model), folder_chat_template_text(o.model));
  }
  const std::string what = kind.family->write_gguf(o.model, o.out, quant, tok, name);
  os << "wrote " << o.out << " (GGUF, " << what << ", " << fs::file_size(o.out, ec) << " bytes)\n";
  return 0;
}

int run_convert(const ConvertOptions& o, std::ostream& os) {
  if (ends_with_gguf(o.out)) return run_gguf(o, os);
  if (!o.type.empty() || o.pure)
    throw ValueError("convert: --type and --pure apply to GGUF output (an --out ending in .gguf)");
  check_input_folder(o.model, "convert: --model", "a model folder");
  std::error_code ec;
  if (fs::exists(o.out, ec) && same_file(o.model, o.out))
    throw ValueError("convert: --out is the --model folder; write to another folder");
  const models::ModelKind kind = models::model_kind(o.model);
  if (kind.family && !kind.family->write_folder)
    throw ValueError("convert: " + o.model + " is a " + kind.family->display +
                     " folder; qkv convert writes a folder back only for a family it trains (give an --out ending in "
                     ".gguf for GGUF)");
  check_output_folder(o.out, {.cmd = "convert", .overwrite = o.overwrite});
  // A folder without model_type: the family that reads such folders names what is wrong with it.
  const models::ModelFamily* family = kind.family;
  if (!family)
    for (const models::ModelFamily* f : models::model_families())
      if (f->untyped_folders && f->write_folder) family = f;
  if (!family) throw FormatError("convert: " + o.model + " is not a model folder qkv reads");
  os << "wrote " << o.out << " (" << family->write_folder(o.model, o.out) << ")\n";
  return 0;
}

// The model_types of the families convert writes as a folder again (those qkv trains).
std::string folder_families() {
  std::string s;
  for (const models::ModelFamily* f : models::model_families())
    if (f->write_folder)
      for (const std::string& t : f->model_types) s += (s.empty() ? "" : ", ") + t;
  return s;
}

QKV_TOOL_COMMAND(convert, {
    .name = "convert",
    .summary = "Rewrite a model: any text model as a GGUF file, or a folder again as transformers writes it",
    .order = 51,
    .group = "Inspect, convert and measure",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "OUT ending in .gguf: writes " + role_needs(models::ModelRole::CausalLM) + " as GGUF v3 with the "
          "names, metadata and layouts of llama.cpp's converter (llama.cpp and gguf-py load it), the tokenizer and "
          "chat template included. --type names a file type as llama-quantize does (f32, f16, bf16, q8_0, q4_0, q4_1, "
          "q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs, mxfp4_moe; "
          "q3_k, q4_k and q5_k are its aliases of the _m mixes) and gives every tensor the type llama-quantize gives it "
          "in such a file (q4_k_m: Q6_K for the output and for attn_v and ffn_down in about half the layers, Q4_K for "
          "the rest, a 32-value type where rows are not a multiple of 256; mxfp4_moe: MXFP4 for the experts, Q8_0 for "
          "the other matrices; norms stay F32), each block quantized as ggml "
          "quantizes it, and sets general.file_type; --pure gives every quantized tensor the file type's main type "
          "(llama-quantize --pure). Default: as stored (a family may set its own). Quantized weights are dequantized "
          "and quantized again. Written atomically.\n"
          "OUT a folder: loads a folder of a family qkv trains (" + folder_families() + ") the way qkv generate does "
          "and writes OUT/config.json and OUT/model.safetensors as transformers' save_pretrained would, plus the "
          "tokenizer files when present; transformers loads the result. OUT appears whole once every file is "
          "written.\n"
          "An OUT that already holds something is refused unless --overwrite.\n\n"
          "Examples:\n  qkv convert --model tests/fixtures/gpt2_tiny --out /tmp/gpt2_tiny_qkv\n"
          "  qkv convert --model tests/fixtures/llama_family/llama --out /tmp/tiny_llama.gguf --type q8_0\n"
          "  qkv convert --model models/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/smollm2.q4_k_m.gguf --type q4_k_m");
      auto opt = std::make_shared<ConvertOptions>();
      add_lm_model_option(sub, opt->model, "Model to read: a folder, or a GGUF file (GGUF output)")->required();
      sub.add_option("--out", opt->out, "Folder to write, or a .gguf file")->type_name("PATH")->required();
      sub.add_option("--type", opt->type,
                     "GGUF output: a llama-quantize file type (f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | "
                     "q2_k | q3_k_s | q3_k_m | q3_k_l | q4_k_s | q4_k_m | q5_k_s | q5_k_m | q6_k | iq4_nl | iq4_xs | "
                     "mxfp4_moe)");
      sub.add_flag("--pure", opt->pure, "With --type: every quantized tensor the type's main type (llama-quantize --pure)");
      add_overwrite_flag(sub, opt->overwrite, "--out");
      return [opt] { return run_convert(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
