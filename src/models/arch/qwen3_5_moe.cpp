// Qwen3.5-MoE text models (35B-A3B, 122B-A10B, 397B-A17B; transformers' Qwen3_5MoeForCausalLM,
// model_type qwen3_5_moe_text, and the language model of the qwen3_5_moe image-text checkpoints):
// Qwen3.5's hybrid of Gated DeltaNet and gated full attention (qwen3_5_common.h) with a mixture of
// num_experts experts of width moe_intermediate_size in every layer, num_experts_per_tok per token
// (softmax, top-k, always renormalised), and a shared expert of width
// shared_expert_intermediate_size that every token runs, weighed by sigmoid(h . shared_expert_gate)
// (as Qwen2-MoE's). llama.cpp's architecture qwen35moe.
#include "qwen3_5_common.h"

namespace qkv::models {
namespace {

Architecture qwen3_5_moe() {
  Architecture a =
      arch::qwen3_5_layout("qwen3_5_moe", "Qwen3.5-MoE", "qwen3_5_moe_text", "qwen3_5_moe", "qwen35moe");
  a.tensors.push_back({Slot::SharedGate, "model.layers.{i}.mlp.shared_expert.gate_proj.weight", "blk.{i}.ffn_gate_shexp.weight"});
  a.tensors.push_back({Slot::SharedUp, "model.layers.{i}.mlp.shared_expert.up_proj.weight", "blk.{i}.ffn_up_shexp.weight"});
  a.tensors.push_back({Slot::SharedDown, "model.layers.{i}.mlp.shared_expert.down_proj.weight", "blk.{i}.ffn_down_shexp.weight"});
  a.tensors.push_back({Slot::SharedExpertGate, "model.layers.{i}.mlp.shared_expert_gate.weight", "blk.{i}.ffn_gate_inp_shexp.weight"});
  const auto dense = a.from_config;
  a.from_config = [dense](const nlohmann::json& config, const std::string& src) {
    nlohmann::json j = arch::qwen3_5_text_config(config, src, "qwen3_5_moe", "qwen3_5_moe_text");
    // Every layer is a mixture: the config has no dense width (the spec's is the experts').
    if (!j.contains("intermediate_size") && j.contains("moe_intermediate_size")) j["intermediate_size"] = j["moe_intermediate_size"];
    DecoderSpec c = dense(j, src);
    arch::moe_from_config(j, src, {.norm_field = nullptr, .renormalize = true}, c);
    c.moe.shared_ff = hf::get_int(j, "shared_expert_intermediate_size", src);
    return c;
  };
  const auto dense_gguf = a.from_gguf;
  a.from_gguf = [dense_gguf](const io::GGUFFile& f) {
    DecoderSpec c = dense_gguf(f);
    const std::string p = std::string(f.get_string("general.architecture")) + ".";
    if (c.moe.experts < 1)
      throw FormatError(fmt::format("{}: GGUF key '{}expert_count' is missing (every qwen35moe layer is a mixture)",
                                    f.source(), p));
    const auto shared = f.find_int(p + "expert_shared_feed_forward_length");
    c.moe.shared_ff = shared.value_or(c.moe.expert_ff);
    if (c.moe.shared_ff < 1 || c.moe.shared_ff > (std::int64_t{1} << 24))
      throw FormatError(fmt::format("{}: GGUF key '{}expert_shared_feed_forward_length' must be in [1, 2^24], got {}",
                                    f.source(), p, c.moe.shared_ff));
    return c;
  };
  const auto dense_meta = a.gguf_metadata;
  a.gguf_metadata = [dense_meta](const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
    dense_meta(c, prefix, meta);
    meta.emplace_back(prefix + "expert_shared_feed_forward_length",
                      io::GGUFMeta::u32(static_cast<std::uint32_t>(c.moe.shared_ff)));
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(qwen3_5_moe, qwen3_5_moe())

}  // namespace qkv::models
