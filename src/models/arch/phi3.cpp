// Phi-3, Phi-3.5 and Phi-4-mini: transformers' Phi3ForCausalLM: Llama's maths with q, k and v in
// one matrix (qkv_proj, rows [q; k; v]) and gate and up in one (gate_up_proj, rows [gate; up]),
// partial rotary dims (partial_rotary_factor), LongRoPE scaling (short / long factors by the
// sequence's length, cos and sin scaled by the attention factor) and a sliding window on every
// layer. llama.cpp's architecture phi3 (attn_qkv, ffn_up holding gate and up, rope_factors_long /
// _short tensors; it ignores the sliding window, which transformers applies: qkv follows
// transformers).
#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

using json = nlohmann::json;

Architecture phi3() {
  Architecture a = arch::llama_layout("phi3", "Phi-3", "phi3", /*interleaved_rope=*/false);
  a.tensors = arch::without(a.tensors, Slot::RopeFreqs);
  for (Slot s : {Slot::Q, Slot::K, Slot::V, Slot::QBias, Slot::KBias, Slot::VBias, Slot::Gate, Slot::Up})
    a.tensors = arch::without(a.tensors, s);
  a.tensors.push_back({Slot::QKV, "model.layers.{i}.self_attn.qkv_proj.weight", "blk.{i}.attn_qkv.weight"});
  a.tensors.push_back({Slot::GateUp, "model.layers.{i}.mlp.gate_up_proj.weight", "blk.{i}.ffn_up.weight"});
  a.tensors.push_back({Slot::RopeLong, nullptr, "rope_factors_long.weight"});
  a.tensors.push_back({Slot::RopeShort, nullptr, "rope_factors_short.weight"});
  a.from_config = [](const json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src, {.rms_norm_eps = 1e-5, .max_position_embeddings = 4096});
    kernels::RopeScaling& s = c.ropes.front().scaling;
    // LongRoPE's original context: in rope_parameters, else the config's own field.
    if (s.type == kernels::RopeScaling::Type::LongRope) {
      const json* rp = arch::object_field(j, "rope_parameters", src);
      if (!rp) rp = arch::object_field(j, "rope_scaling", src);
      if (!rp || !rp->contains("original_max_position_embeddings"))
        s.original_max_positions = static_cast<double>(hf::get_int(j, "original_max_position_embeddings", src, 4096));
    }
    if (c.attention_bias) hf::bad(src, "attention_bias true is not supported for phi3 (its fused qkv_proj has no bias)");
    arch::window_on_every_layer(j, src, c);
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("phi3"));
    kernels::RopeScaling& s = c.ropes.front().scaling;
    // LongRoPE when the file has its factors (read by the loader into the spec).
    if (f.find("rope_factors_long.weight")) {
      // The factors' placeholders are allocated here: the rotary dims bounded first (dims <=
      // head_dim <= 2^24, as check_decoder_spec wants them).
      const std::int64_t dims = c.ropes.front().dims;
      if (dims > c.head_dim || c.head_dim > (std::int64_t{1} << 24))
        throw FormatError(fmt::format("{}: GGUF key 'phi3.rope.dimension_count' is {} for a head size of {} (the "
                                      "rotary dims must be <= the head size <= 2^24)",
                                      f.source(), dims, c.head_dim));
      s.type = kernels::RopeScaling::Type::LongRope;
      s.original_max_positions =
          static_cast<double>(f.find_int("phi3.rope.scaling.original_context_length").value_or(c.max_positions));
      if (auto af = f.find_float("phi3.rope.scaling.attn_factor")) s.attention_factor = *af;
      // The loader fills the factors; until then, placeholders of the right length.
      s.short_factor = s.long_factor = std::vector<float>(static_cast<std::size_t>(c.ropes.front().dims / 2), 1.f);
    }
    return c;
  };
  a.gguf_metadata = [](const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
    const kernels::RopeScaling& s = c.ropes.front().scaling;
    if (s.type == kernels::RopeScaling::Type::LongRope) {
      meta.emplace_back(prefix + "rope.scaling.original_context_length",
                        io::GGUFMeta::u32(static_cast<std::uint32_t>(s.original_max_positions)));
      meta.emplace_back(prefix + "rope.scaling.attn_factor",
                        io::GGUFMeta::f32(static_cast<float>(kernels::rope_attention_factor(s, static_cast<double>(c.max_positions)))));
    }
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(phi3, phi3())

}  // namespace qkv::models
