// Mistral (v0.1 - v0.3, Ministral): transformers' MistralForCausalLM: Llama's layout with a
// sliding window on every layer (sliding_window W: a query sees its last W positions). llama.cpp's
// converter writes it as architecture llama (permuted q / k); GGUF files of architecture mistral
// (transformers' own writer) keep Hugging Face's order.
#include "common.h"

namespace qkv::models {
namespace {

Architecture mistral() {
  Architecture a = arch::llama_layout("mistral", "Mistral", "llama", /*interleaved_rope=*/true);
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src);
    arch::window_on_every_layer(j, src, c);
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(mistral, mistral())

}  // namespace qkv::models
