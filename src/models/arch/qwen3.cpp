// Qwen3 (0.6B - 32B): transformers' Qwen3ForCausalLM: Llama's layout with an RMSNorm over each
// head of q and of k (q_norm, k_norm: weight w, before RoPE) and head_dim given apart from
// hidden_size / heads; a sliding window on layers max_window_layers.. when use_sliding_window.
// llama.cpp's architecture qwen3 (attn_q_norm, attn_k_norm; q / k rows not permuted).
#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

Architecture qwen3() {
  Architecture a = arch::llama_layout("qwen3", "Qwen3", "qwen3", /*interleaved_rope=*/false);
  a.tensors.push_back({Slot::QNorm, "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"});
  a.tensors.push_back({Slot::KNorm, "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"});
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src, {.max_position_embeddings = 32768});
    const auto sliding = arch::sliding_layers(j, c.num_layers(), src);
    const bool use_window = hf::get_bool(j, "use_sliding_window", src, false);
    const std::int64_t first = hf::get_int(j, "max_window_layers", src, 28);
    for (std::size_t i = 0; i < c.layers.size(); ++i) {
      LayerSpec& l = c.layers[i];
      l.qk_norm = true;
      // transformers: layer_types as given, else sliding from max_window_layers on (with
      // use_sliding_window); the window is sliding_window on those layers.
      const bool slides = sliding ? (*sliding)[i] : use_window && static_cast<std::int64_t>(i) >= first;
      if (slides && use_window) l.window = hf::get_int(j, "sliding_window", src, 4096);
    }
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("qwen3"));
    for (LayerSpec& l : c.layers) l.qk_norm = true;
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(qwen3, qwen3())

}  // namespace qkv::models
