// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B): transformers'
// Qwen3MoeForCausalLM: Qwen3's attention (q/k norms per head, explicit head_dim) with a mixture
// of num_experts experts of width moe_intermediate_size, num_experts_per_tok per token,
// renormalised with norm_topk_prob; the layers listed in mlp_only_layers, or not on the
// decoder_sparse_step, keep a dense feed-forward of intermediate_size. llama.cpp's architecture
// qwen3moe (it always renormalises, and has no dense layers).
#include <algorithm>

#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

Architecture qwen3_moe() {
  Architecture a = arch::llama_layout("qwen3_moe", "Qwen3-MoE", "qwen3moe", /*interleaved_rope=*/false);
  a.gguf_names = {"qwen3moe"};
  a.tensors.push_back({Slot::QNorm, "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"});
  a.tensors.push_back({Slot::KNorm, "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"});
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = find_architecture("qwen3")->from_config(j, src);  // Qwen3's attention
    arch::moe_from_config(j, src, {.renormalize = false}, c);
    const std::int64_t step = hf::get_int(j, "decoder_sparse_step", src, 1);
    if (step < 1) hf::bad(src, fmt::format("decoder_sparse_step must be >= 1, got {}", step));
    std::vector<std::int64_t> dense;
    if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
      if (!it->is_array()) hf::bad(src, "mlp_only_layers must be a list of layer indices");
      for (const auto& v : *it) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= c.num_layers())
          hf::bad(src, fmt::format("mlp_only_layers holds {}, not a layer index below {}", v.dump(), c.num_layers()));
        dense.push_back(v.get<std::int64_t>());
      }
    }
    for (std::int64_t i = 0; i < c.num_layers(); ++i)
      c.layers[static_cast<std::size_t>(i)].moe =
          std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0;
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("qwen3_moe"));
    for (LayerSpec& l : c.layers) l.qk_norm = true;
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(qwen3_moe, qwen3_moe())

}  // namespace qkv::models
