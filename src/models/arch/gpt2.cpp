// GPT-2 in the registry: a causal LM built from nn/ modules (it trains; models/gpt2.h), read from
// Hugging Face folders (GGUF files of architecture gpt2 are written by qkv convert, not read).
// Not a DecoderLM: its inference stays on the modules it trains with (docs/design.md says why).
#include <filesystem>

#include <fmt/format.h>

#include "arch.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "qkv/models/gguf_export.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/registry.h"

namespace qkv::models {
namespace {

LoadedCausalLM load(const std::string& path, const CausalLMLoadOptions& o) {
  auto m = load_gpt2(path);
  m->set_kv_type(o.kv_cache);
  LoadedCausalLM out;
  out.weight_bytes = m->num_parameters() * 4;
  if (m->config().eos_token_id) out.eos_ids.push_back(*m->config().eos_token_id);
  out.bos_id = m->config().bos_token_id;
  out.model = m;
  return out;
}

std::string write_gguf(const std::string& path, const std::string& out, const GgufQuant& quant,
                       const io::GGUFMetadata& tokenizer, const std::string& name) {
  const auto m = load_gpt2(path);
  save_gpt2_gguf(*m, out, quant, tokenizer, name);
  return "gpt2, " + (quant.ftype ? describe(quant) : std::string("weights F32"));
}

std::string write_folder(const std::string& path, const std::string& out) {
  const auto m = load_gpt2(path);
  io::StagedFolder f(out, "convert");  // OUT appears (or is replaced) whole, once complete
  save_gpt2(*m, f.path());
  for (const char* file : {"vocab.json", "merges.txt"}) {
    const std::filesystem::path src = std::filesystem::path(path) / file;
    if (std::filesystem::exists(src)) io::write_file_atomic(f.file(file), io::read_file(src.string(), "convert"), "convert");
  }
  f.commit();
  const GPT2Config& c = m->config();
  return fmt::format("GPT-2, {} layers, n_embd {}, vocab {}, {} parameters, float32", c.n_layer, c.n_embd, c.vocab_size,
                     m->num_parameters());
}

}  // namespace

QKV_REGISTER_FAMILY(gpt2, ModelFamily{.name = "gpt2",
                                      .display = "GPT-2",
                                      .model_types = {"gpt2"},
                                      .role = ModelRole::CausalLM,
                                      .untyped_folders = true,
                                      .load_causal_lm = &load,
                                      .write_gguf = &write_gguf,
                                      .write_folder = &write_folder})

}  // namespace qkv::models
