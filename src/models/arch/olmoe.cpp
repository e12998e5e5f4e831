// OLMoE (OLMoE-1B-7B): transformers' OlmoeForCausalLM: Llama's layout with an RMSNorm over the
// whole q projection and the whole k projection (q_norm [heads * head_dim], k_norm
// [kv_heads * head_dim], before RoPE) and a mixture of num_experts experts of width
// intermediate_size, num_experts_per_tok per token, not renormalised (norm_topk_prob false).
// llama.cpp's architecture olmoe.
#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

void olmoe_layers(DecoderSpec& c) {
  for (LayerSpec& l : c.layers) l.qk_norm = l.qk_norm_whole = true;
}

Architecture olmoe() {
  Architecture a = arch::llama_layout("olmoe", "OLMoE", "olmoe", /*interleaved_rope=*/false);
  a.tensors.push_back({Slot::QNorm, "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"});
  a.tensors.push_back({Slot::KNorm, "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"});
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src, {.rms_norm_eps = 1e-5, .max_position_embeddings = 4096});
    if (auto it = j.find("clip_qkv"); it != j.end() && !it->is_null())
      hf::bad(src, "clip_qkv " + it->dump() + " is not supported (OLMoE's published models have none)");
    arch::moe_from_config(j, src, {.expert_ff_field = "intermediate_size", .renormalize = false}, c);
    olmoe_layers(c);
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("olmoe"));
    c.moe.routing.renormalize = false;  // (llama.cpp's olmoe never renormalises)
    olmoe_layers(c);
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(olmoe, olmoe())

}  // namespace qkv::models
