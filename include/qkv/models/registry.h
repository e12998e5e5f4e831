// The registry of the model families qkv reads: every decoder architecture of models/arch/ (one
// file each, registering itself), GPT-2 and BERT. Everything that lists supported kinds, tells
// what a folder or file holds, or names the kinds in an error asks here; no front end (CLI,
// Python, server) names an architecture.
//
//   const auto kind = models::model_kind("models/SmolLM2-135M-Instruct.Q4_1.gguf");
//   kind.family->display;                               // "Llama"
//   models::model_types_list(models::ModelRole::CausalLM);  // "gemma2, gemma3, gpt2, llama, ..."
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/models/quant_mix.h"

namespace qkv::models {

enum class ModelRole {
  CausalLM,  // generates text: generate, chat, serve's completions, bench generate
  Encoder,   // embeds text: embed, search, serve's embeddings
};

struct CausalLMLoadOptions {
  kernels::QActivations activations = kernels::QActivations::F32;  // DecoderLM::set_activations
  infer::KVType kv_cache = infer::KVType::F32;
};

// A causal LM as loaded, with what its config says about its special tokens.
struct LoadedCausalLM {
  std::string architecture;  // the family's name ("llama", "gpt2", ...)
  std::shared_ptr<infer::CausalLM> model;
  std::vector<std::int64_t> eos_ids;
  std::optional<std::int64_t> bos_id;
  std::int64_t weight_bytes = 0;  // bytes of weights the products read per generated token
  bool q8_activations = false;    // the model takes CausalLMLoadOptions::activations (quantized products)
};

struct ModelFamily {
  std::string name;                      // "llama", "qwen3", "gpt2", "bert", ...
  std::string display;                   // "Llama", "Qwen3", "GPT-2", "BERT", ...
  std::vector<std::string> model_types;  // config.json model_type values of this family
  std::vector<std::string> gguf_names;   // GGUF general.architecture values qkv reads as it
  ModelRole role = ModelRole::CausalLM;
  bool decoder = false;                  // run by models::DecoderLM (described by models/arch/)
  // Reads folders whose config.json has no model_type (GPT-2's first configs had none).
  bool untyped_folders = false;
  // Loads a folder (or, with gguf_names, a GGUF file) of this family; set for causal LMs.
  LoadedCausalLM (*load_causal_lm)(const std::string& path, const CausalLMLoadOptions& options) = nullptr;
  // Writes a folder (or GGUF file) of this family as GGUF to `out` (qkv convert), its tensors'
  // types as `quant` says (as stored unless it names a file type; the family may have a default),
  // with the tokenizer metadata given; returns what it wrote ("llama, Q4_K_M: 98 Q4_K, ...").
  // Null: the family is not converted.
  std::string (*write_gguf)(const std::string& path, const std::string& out, const GgufQuant& quant,
                            const io::GGUFMetadata& tokenizer, const std::string& name) = nullptr;
  // Writes a folder of this family again as transformers' save_pretrained does (qkv convert to a
  // folder); returns a description of the model written. Null: not supported.
  std::string (*write_folder)(const std::string& path, const std::string& out) = nullptr;
};

// Adds a family (at static initialisation: models/arch/). ValueError for a name or model_type
// already taken.
void register_model_family(const ModelFamily& f);
// Every family, sorted by name.
std::vector<const ModelFamily*> model_families();
// The family of a config.json model_type (or of a family name), or null.
const ModelFamily* find_model_family(std::string_view model_type);
// The family of a GGUF general.architecture, or null.
const ModelFamily* find_gguf_family(std::string_view gguf_architecture);
// The model_types of a role's families, sorted, as "a, b, c" (for messages and --help).
std::string model_types_list(ModelRole role);
// The GGUF architectures qkv reads, sorted, as "a, b, c".
std::string gguf_architectures_list();

// What a folder or file holds, from small headers only (config.json's model_type, a GGUF
// file's general.architecture): `declared` is what it says ("" when it says nothing or cannot be
// read), `family` the family qkv reads it as (null when none).
struct ModelKind {
  std::string declared;
  const ModelFamily* family = nullptr;
  bool gguf = false;  // a GGUF file (else a folder, or nothing qkv reads)
};
ModelKind model_kind(const std::string& path);

// Loads the causal LM at `path` (a GGUF file or a Hugging Face folder of any causal family).
// IOError when it does not exist; FormatError naming the path and what it is for another kind
// ("... is a BERT folder; generation needs a causal language model: a GGUF file or a folder of
// model_type gemma2, ..."), an unknown model_type or GGUF architecture (listing the supported ones).
LoadedCausalLM load_causal_lm(const std::string& path, const CausalLMLoadOptions& options = {});

}  // namespace qkv::models
