// Llama (1, 2, 3.x; TinyLlama, SmolLM2, ...): transformers' LlamaForCausalLM, llama.cpp's
// architecture llama (attn_q / attn_k rows permuted for RoPE on adjacent pairs; llama3 rope
// scaling as the rope_freqs tensor). The Llama layout every other architecture starts from.
#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

Architecture llama() {
  Architecture a;
  a.name = "llama";
  a.display = "Llama";
  a.model_types = {"llama"};
  a.gguf_names = {"llama"};
  a.gguf_name = "llama";
  a.gguf_interleaved_rope = true;
  a.tensors = arch::llama_tensor_names();
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src);
    c.attention_bias = hf::get_bool(j, "attention_bias", src, false);
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) { return arch::spec_from_gguf(f, *find_architecture("llama")); };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(llama, llama())

}  // namespace qkv::models
