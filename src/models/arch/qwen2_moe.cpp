// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): transformers' Qwen2MoeForCausalLM: Qwen2's
// attention (biases on q, k and v: qkv_bias) with a mixture of num_experts experts of width
// moe_intermediate_size, num_experts_per_tok per token (renormalised with norm_topk_prob), and a
// shared expert of width shared_expert_intermediate_size that every token runs, its output
// weighed by sigmoid(h . shared_expert_gate) and added to the routed experts'; the layers listed
// in mlp_only_layers, or not on the decoder_sparse_step, keep a dense feed-forward. llama.cpp's
// architecture qwen2moe (it never renormalises, and has no dense layers).
#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"
#include "qkv/core/error.h"

namespace qkv::models {
namespace {

Architecture qwen2_moe() {
  Architecture a = arch::llama_layout("qwen2_moe", "Qwen2-MoE", "qwen2moe", /*interleaved_rope=*/false);
  a.gguf_names = {"qwen2moe"};
  a.tensors.push_back({Slot::SharedGate, "model.layers.{i}.mlp.shared_expert.gate_proj.weight", "blk.{i}.ffn_gate_shexp.weight"});
  a.tensors.push_back({Slot::SharedUp, "model.layers.{i}.mlp.shared_expert.up_proj.weight", "blk.{i}.ffn_up_shexp.weight"});
  a.tensors.push_back({Slot::SharedDown, "model.layers.{i}.mlp.shared_expert.down_proj.weight", "blk.{i}.ffn_down_shexp.weight"});
  a.tensors.push_back({Slot::SharedExpertGate, "model.layers.{i}.mlp.shared_expert_gate.weight", "blk.{i}.ffn_gate_inp_shexp.weight"});
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = find_architecture("qwen2")->from_config(j, src);  // Qwen2's attention
    c.attention_bias = hf::get_bool(j, "qkv_bias", src, true);
    arch::moe_from_config(j, src, {.renormalize = false}, c);
    arch::sparse_layers_from_config(j, src, c);
    c.moe.shared_ff = hf::get_int(j, "shared_expert_intermediate_size", src);
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("qwen2_moe"));
    c.moe.routing.renormalize = false;  // (llama.cpp's qwen2moe never renormalises)
    const auto shared = f.find_int("qwen2moe.expert_shared_feed_forward_length");
    c.moe.shared_ff = shared.value_or(c.intermediate_size);  // (llama.cpp: n_ff without the key)
    if (c.moe.shared_ff < 1 || c.moe.shared_ff > (std::int64_t{1} << 24))
      throw FormatError(fmt::format("{}: GGUF key 'qwen2moe.expert_shared_feed_forward_length' must be in [1, 2^24], "
                                    "got {}", f.source(), c.moe.shared_ff));
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(qwen2_moe, qwen2_moe())

}  // namespace qkv::models
