// llama-quantize's file types and its per-tensor type choice: which GGML type each tensor of a
// model gets in a "Q4_K_M" (or Q3_K_S, IQ4_XS, Q8_0 ...) file, the rules of llama.cpp's
// src/llama-quant.cpp (tensor_allows_quantization, llama_tensor_get_type and what it calls: the
// output / token_embd rules, attn_v and ffn_down by layer with use_more_bits, the fallback when a
// row length is not a multiple of the type's block), without an importance matrix or overrides.
// Used by the GGUF writers (models/decoder_io.h, models/gguf_export.h) and qkv convert --type.
// The reference: tests/reference/make_quant_mix_fixtures.py records llama-quantize's own choice.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/kernels/quant.h"

namespace qkv::models {

// llama.cpp's enum llama_ftype (the value of general.file_type): the ones qkv writes.
enum class LlamaFtype : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 7,
  Q5_0 = 8,
  Q5_1 = 9,
  Q2_K = 10,
  Q3_K_S = 11,
  Q3_K_M = 12,
  Q3_K_L = 13,
  Q4_K_S = 14,
  Q4_K_M = 15,
  Q5_K_S = 16,
  Q5_K_M = 17,
  Q6_K = 18,
  IQ4_NL = 25,
  IQ4_XS = 30,
  BF16 = 32,
  MXFP4_MOE = 38,  // the experts (3-D tensors) MXFP4, the other matrices Q8_0
};

// llama-quantize's name of a file type ("Q4_K_M", "F16").
const char* llama_ftype_name(LlamaFtype f);
// The file type of one of llama-quantize's names, case-insensitive ("q4_k_m"; its aliases too:
// "q4_k" = Q4_K_M, "q5_k" = Q5_K_M, "q3_k" = Q3_K_M), among those qkv writes; nullopt otherwise.
std::optional<LlamaFtype> llama_ftype_from_name(std::string_view name);
// Those names in lower case, for help and messages: "f32, f16, bf16, q8_0, ...".
std::string llama_ftype_names();
// The type most tensors get (llama_ftype_get_default_type): Q4_K for Q4_K_M, F16 for F16, ...
kernels::QType llama_ftype_default_type(LlamaFtype f);
// The file type whose default type is t (Q4_K -> Q4_K_M, Q5_K -> Q5_K_M, Q3_K -> Q3_K_M): the
// general.file_type of a file of mostly t; F32 for a type with none.
LlamaFtype llama_ftype_of_type(kernels::QType t);

// What the rules read of the model.
struct QuantMixModel {
  std::string arch;              // general.architecture ("llama", "qwen2", "falcon", ...)
  std::int64_t n_layer = 0;      // {arch}.block_count
  std::int64_t n_head = 0;       // attention heads of the first layer
  std::int64_t n_head_kv = 0;    // key/value heads of the first layer (n_gqa = n_head / n_head_kv)
  std::int64_t n_expert = 0;     // experts of a mixture-of-experts FFN, 0 without
};

// One tensor of the file being written: its GGUF name, its dims in GGUF order (dims[0] is the row
// length) and its type as it comes (kept where llama-quantize keeps it: norms, 1-D tensors, ...).
struct QuantMixTensor {
  std::string name;
  std::vector<std::int64_t> dims;
  kernels::QType type = kernels::QType::F32;
};

// What a GGUF writer does to the tensors' types (qkv convert --type): keep each tensor's stored
// type (no file type), or give each the type llama-quantize gives it in a file of `ftype`.
struct GgufQuant {
  std::optional<LlamaFtype> ftype;  // nullopt: as stored
  bool pure = false;                // llama-quantize --pure
};

// "Q4_K_M (llama-quantize's types)", "Q4_K_M --pure (every quantized tensor Q4_K)", "weights as
// stored": what a writer was asked, for messages.
std::string describe(const GgufQuant& quant);

// The type of each tensor (in the order given) in a file of type `ftype`, as llama-quantize
// chooses it; pure: llama-quantize --pure (every tensor it quantizes gets the default type, the
// row-length fallback aside). The counters llama.cpp keeps (the attn_v and ffn_down tensors met
// so far) follow its order (layer, then name), so the order given does not matter.
std::vector<kernels::QType> quant_mix_types(LlamaFtype ftype, const QuantMixModel& model,
                                            const std::vector<QuantMixTensor>& tensors, bool pure = false);

}  // namespace qkv::models
