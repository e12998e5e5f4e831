// Qwen2 and Qwen2.5: transformers' Qwen2ForCausalLM: Llama's layout with biases on the q, k and
// v projections. llama.cpp's architecture qwen2 keeps Hugging Face's order of q / k rows.
#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

Architecture qwen2() {
  Architecture a = arch::llama_layout("qwen2", "Qwen2", "qwen2", /*interleaved_rope=*/false);
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src);
    c.attention_bias = true;
    if (hf::get_bool(j, "use_sliding_window", src, false))
      hf::bad(src, "use_sliding_window true is not supported for qwen2");
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(qwen2, qwen2())

}  // namespace qkv::models
