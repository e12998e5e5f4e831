// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B): transformers'
// Qwen3MoeForCausalLM: Qwen3's attention (q/k norms per head, explicit head_dim) with a mixture
// of num_experts experts of width moe_intermediate_size, num_experts_per_tok per token,
// renormalised with norm_topk_prob; the layers listed in mlp_only_layers, or not on the
// decoder_sparse_step, keep a dense feed-forward of intermediate_size. llama.cpp's architecture
// qwen3moe (it always renormalises, and has no dense layers).
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
    arch::sparse_layers_from_config(j, src, c);
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
