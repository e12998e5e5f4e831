// Mistral (v0.1 - v0.3, Ministral): transformers' MistralForCausalLM: Llama's layout with a
// sliding window on every layer (sliding_window W: a query sees its last W positions). llama.cpp's
// converter writes it as architecture llama (permuted q / k); GGUF files of architecture mistral
// (transformers' own writer) keep Hugging Face's order.
#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

Architecture mistral() {
  Architecture a;
  a.name = "mistral";
  a.display = "Mistral";
  a.model_types = {"mistral"};
  a.gguf_names = {"mistral"};
  a.gguf_name = "llama";
  a.gguf_interleaved_rope = true;
  a.tensors = arch::llama_tensor_names();
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src);
    c.attention_bias = hf::get_bool(j, "attention_bias", src, false);
    if (auto it = j.find("sliding_window"); it != j.end() && !it->is_null()) {
      const std::int64_t w = hf::get_int(j, "sliding_window", src);
      for (LayerSpec& l : c.layers) l.window = w;
    }
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) { return arch::spec_from_gguf(f, *find_architecture("mistral")); };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(mistral, mistral())

}  // namespace qkv::models
