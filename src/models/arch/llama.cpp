// Llama (1, 2, 3.x; TinyLlama, SmolLM2, ...): transformers' LlamaForCausalLM, llama.cpp's
// architecture llama (attn_q / attn_k rows permuted for RoPE on adjacent pairs; llama3 rope
// scaling as the rope_freqs tensor). The Llama layout every other architecture starts from.
#include "common.h"

namespace qkv::models {
namespace {

// Everything is the Llama layout's default (arch::llama_layout): the common config and GGUF
// fields, attention_bias when a config sets it.
Architecture llama() { return arch::llama_layout("llama", "Llama", "llama", /*interleaved_rope=*/true); }

}  // namespace

QKV_REGISTER_ARCH(llama, llama())

}  // namespace qkv::models
