// What an architecture file of models/arch/ defines (internal header of models/): how to read
// the decoder's spec from a Hugging Face config.json and from GGUF metadata, the one table of its
// tensors' names (read by the loaders and written by the GGUF writer), and the GGUF keys it
// writes beyond the common ones. Each file ends with QKV_REGISTER_ARCH, which puts its
// Architecture in the registry (models/registry.h).
//
// Adding an architecture is one file here (docs/adding-a-model.md).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/shape.h"
#include "qkv/io/gguf.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/models/decoder.h"
#include "qkv/models/registry.h"

namespace qkv::models {

// Where a tensor goes in DecoderWeights (and the rope tensors of GGUF files).
enum class Slot : std::uint8_t {
  // per model
  Embed,
  FinalNorm,
  LmHead,
  RopeFreqs,      // llama3 scaling's per-frequency divisors (GGUF rope_freqs)
  RopeLong,       // LongRope's long and short factors (GGUF rope_factors_long / _short)
  RopeShort,
  // per layer
  AttnNorm,
  Q,
  K,
  V,
  QKV,            // q, k and v stacked by rows (Phi-3's qkv_proj): read as three views
  QBias,
  KBias,
  VBias,
  O,
  OBias,          // the output projection's bias (gpt-oss)
  Sinks,          // attention sinks [H] (gpt-oss)
  QNorm,
  KNorm,
  PostAttnNorm,
  FfnNorm,
  Gate,
  Up,
  GateUp,         // gate and up stacked by rows (Phi-3's gate_up_proj): read as two views
  Down,
  PostFfnNorm,
  // a mixture-of-experts layer (LayerSpec::moe)
  Router,         // [E, C]
  RouterBias,     // [E]
  ExpertGate,     // per expert [F_e, C]: one 3-D [E, F_e, C] tensor, or one per expert ("{e}" in its name)
  ExpertUp,       // per expert [F_e, C]
  ExpertDown,     // per expert [C, F_e]
  ExpertGateBias, // [E, F_e] (gpt-oss)
  ExpertUpBias,   // [E, F_e]
  ExpertDownBias, // [E, C]
  SharedGate,     // the shared expert's gate / up [F_s, C] and down [C, F_s] (Qwen2-MoE)
  SharedUp,
  SharedDown,
  SharedExpertGate,  // [1, C]: the weight of the shared expert's sigmoid gate
  // a Gated DeltaNet layer (LayerSpec::mixer; DecoderLayerWeights' lin_*)
  LinQKV,         // in_proj_qkv [2 Hk Dk + Hv Dv, C]
  LinZ,           // in_proj_z [Hv Dv, C]
  LinBeta,        // in_proj_b [Hv, C]
  LinAlpha,       // in_proj_a [Hv, C]
  LinOut,         // out_proj [C, Hv Dv]
  LinConv,        // the convolution's taps [Cc, K] (float32)
  LinDecay,       // A = -exp(A_log) [Hv] (Hugging Face files store A_log: hf_convert turns it into A)
  LinDtBias,      // dt_bias [Hv]
  LinNorm,        // the gated RMSNorm's weight [Dv] (never offset)
};
const char* slot_name(Slot s);
bool slot_is_per_layer(Slot s);
bool slot_is_matrix(Slot s);

// One tensor of an architecture: its slot and its names, "{i}" standing for the layer (and "{e}"
// for the expert, in the names of tensors stored one per expert). A null
// name: the tensor is not in that kind of file. Shapes come from the spec (PyTorch order).
struct TensorName {
  Slot slot;
  const char* hf;
  const char* gguf;
};

// A tensor of a Hugging Face folder, in place: its safetensors dtype, bytes and shape (PyTorch
// order); `qtype` the GGML type the decoder reads it as (F32 / F16 / BF16, or a block type a
// conversion produced), unset for a dtype the decoder does not read (uint8 MXFP4 blocks, say).
struct FolderTensor {
  std::optional<kernels::QType> qtype;
  const void* data = nullptr;
  Shape shape;
  std::string dtype;  // the safetensors dtype's name ("BF16", "U8", ...), for messages
};

struct Architecture {
  std::string name;                      // the registry's name: "llama", "qwen3", ...
  std::string display;                   // for people: "Llama", "Qwen3", ...
  std::vector<std::string> model_types;  // config.json model_type values read as this architecture
  std::vector<std::string> gguf_names;   // general.architecture values read as this architecture
  std::string gguf_name;                 // general.architecture written (llama.cpp's name)
  std::vector<TensorName> tensors;
  // llama.cpp's converter permutes the rows of attn_q / attn_k of this architecture for RoPE on
  // adjacent pairs (its rope type NORM): read with RopeStyle::Interleaved, written permuted.
  bool gguf_interleaved_rope = false;
  // The norms of this architecture compute x * (offset + w); Hugging Face files store w (the
  // offset is added as they are read), GGUF files offset + w (llama.cpp's converter adds it).
  float norm_offset = 0.f;
  // config.json (model_type already checked) -> spec; FormatError naming `source` and the field.
  std::function<DecoderSpec(const nlohmann::json& config, const std::string& source)> from_config;
  // GGUF metadata -> spec (tensors only for their presence and shapes); FormatError naming the
  // file and the key.
  std::function<DecoderSpec(const io::GGUFFile& file)> from_gguf;
  // Optional: the table's name of a Hugging Face tensor name (a multimodal checkpoint's
  // "model.language_model.layers.0..." -> "model.layers.0..."), or nullopt for a tensor the
  // decoder does not use (a vision tower's). Unset: names as they are.
  std::function<std::optional<std::string>(const std::string& name)> hf_rename;
  // Optional: rewrites a Hugging Face folder's tensors into the table's, for checkpoints that
  // store a weight in a form the decoder does not read in place (gpt-oss's experts: gate and up
  // interleaved, transposed, or in MXFP4 blocks). `t` holds every tensor of the folder (after
  // hf_rename), of any safetensors dtype; the function replaces what it converts by tensors whose
  // bytes it allocates and hands to `keep` (they live as long as the model). FormatError naming
  // `source` for a tensor it cannot convert.
  std::function<void(std::map<std::string, FolderTensor>& t, std::vector<std::shared_ptr<const void>>& keep,
                     const DecoderSpec& spec, const std::string& source)>
      hf_convert;
  // Optional: whether a tensor of a file (named as in the file; after hf_rename for folders) is one
  // the decoder does not read and need not be told about (Qwen3.5's multi-token-prediction blocks
  // after a GGUF file's decoder layers). Unset: every tensor must be used.
  std::function<bool(const std::string& name, const DecoderSpec& spec)> ignored;
  // The GGUF keys this architecture writes beyond write_common_gguf_metadata's (may be empty).
  std::function<void(const DecoderSpec& spec, const std::string& prefix, io::GGUFMetadata& meta)> gguf_metadata;
};

void register_architecture(const Architecture& a);
// Calls every architecture file's registration function (the build's generated arch_list.cpp).
void register_builtin_architectures();
// The architecture of a registry name, or null.
const Architecture* find_architecture(std::string_view name);

// Defines the registration function of an architecture file: QKV_REGISTER_ARCH(stem, expr),
// `stem` the file's name without .cpp, `expr` an Architecture. The build lists every file of
// models/arch/ in a generated source that calls each file's function once, the first time the
// registry is used: a new file registers itself, and no file has to name the others.
#define QKV_REGISTER_ARCH(stem, ...) \
  void qkv_register_arch_##stem() { ::qkv::models::register_architecture(__VA_ARGS__); }
// The same for a family that is not a decoder (GPT-2, BERT): `expr` a ModelFamily.
#define QKV_REGISTER_FAMILY(stem, ...) \
  void qkv_register_arch_##stem() { ::qkv::models::register_model_family(__VA_ARGS__); }

}  // namespace qkv::models
