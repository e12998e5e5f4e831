// Mixtral (8x7B, 8x22B): transformers' MixtralForCausalLM: Mistral's layout with a mixture of
// experts for every feed-forward (num_local_experts experts of width intermediate_size, the
// router's top num_experts_per_tok renormalised), stored as block_sparse_moe.gate and
// block_sparse_moe.experts.{e}.w1 (gate) / w3 (up) / w2 (down). llama.cpp's converter writes it as
// architecture llama with expert tensors, which the llama architecture reads.
#include "common.h"

namespace qkv::models {
namespace {

Architecture mixtral() {
  Architecture a = arch::llama_layout("mixtral", "Mixtral", "llama", /*interleaved_rope=*/true);
  a.gguf_names = {};  // (its GGUF files say llama)
  a.tensors = arch::with(a.tensors, {Slot::Router, "model.layers.{i}.block_sparse_moe.gate.weight", "blk.{i}.ffn_gate_inp.weight"});
  a.tensors = arch::with(a.tensors, {Slot::ExpertGate, "model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight",
                                     "blk.{i}.ffn_gate_exps.weight"});
  a.tensors = arch::with(a.tensors, {Slot::ExpertUp, "model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight",
                                     "blk.{i}.ffn_up_exps.weight"});
  a.tensors = arch::with(a.tensors, {Slot::ExpertDown, "model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight",
                                     "blk.{i}.ffn_down_exps.weight"});
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src, {.rope_theta = 1e6, .max_position_embeddings = 4096 * 32});
    arch::window_on_every_layer(j, src, c);
    arch::moe_from_config(
        j, src, {.experts_field = "num_local_experts", .expert_ff_field = "intermediate_size", .norm_field = nullptr, .renormalize = true},
        c);
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(mixtral, mixtral())

}  // namespace qkv::models
