// The slots of the architectures' tensor tables (see tensor_slots.h and arch/arch.h).
#include "tensor_slots.h"

#include <algorithm>

#include "qkv/core/error.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;

}  // namespace

const char* slot_name(Slot s) {
  switch (s) {
    case Slot::Embed: return "embed";
    case Slot::FinalNorm: return "norm";
    case Slot::LmHead: return "lm_head";
    case Slot::RopeFreqs: return "rope_freqs";
    case Slot::RopeLong: return "rope_factors_long";
    case Slot::RopeShort: return "rope_factors_short";
    case Slot::AttnNorm: return "attn_norm";
    case Slot::Q: return "q";
    case Slot::K: return "k";
    case Slot::V: return "v";
    case Slot::QKV: return "qkv";
    case Slot::QBias: return "q_bias";
    case Slot::KBias: return "k_bias";
    case Slot::VBias: return "v_bias";
    case Slot::O: return "o";
    case Slot::OBias: return "o_bias";
    case Slot::Sinks: return "sinks";
    case Slot::QNorm: return "q_norm";
    case Slot::KNorm: return "k_norm";
    case Slot::PostAttnNorm: return "post_attn_norm";
    case Slot::FfnNorm: return "ffn_norm";
    case Slot::Gate: return "gate";
    case Slot::Up: return "up";
    case Slot::GateUp: return "gate_up";
    case Slot::Down: return "down";
    case Slot::PostFfnNorm: return "post_ffn_norm";
    case Slot::Router: return "router";
    case Slot::RouterBias: return "router_bias";
    case Slot::ExpertGate: return "expert_gate";
    case Slot::ExpertUp: return "expert_up";
    case Slot::ExpertDown: return "expert_down";
    case Slot::ExpertGateBias: return "expert_gate_bias";
    case Slot::ExpertUpBias: return "expert_up_bias";
    case Slot::ExpertDownBias: return "expert_down_bias";
    case Slot::SharedGate: return "shared_gate";
    case Slot::SharedUp: return "shared_up";
    case Slot::SharedDown: return "shared_down";
    case Slot::SharedExpertGate: return "shared_expert_gate";
    case Slot::LinQKV: return "linear_qkv";
    case Slot::LinZ: return "linear_z";
    case Slot::LinBeta: return "linear_beta";
    case Slot::LinAlpha: return "linear_alpha";
    case Slot::LinOut: return "linear_out";
    case Slot::LinConv: return "linear_conv";
    case Slot::LinDecay: return "linear_decay";
    case Slot::LinDtBias: return "linear_dt_bias";
    case Slot::LinNorm: return "linear_norm";
  }
  return "?";
}

bool slot_is_per_layer(Slot s) {
  switch (s) {
    case Slot::Embed:
    case Slot::FinalNorm:
    case Slot::LmHead:
    case Slot::RopeFreqs:
    case Slot::RopeLong:
    case Slot::RopeShort: return false;
    default: return true;
  }
}

bool slot_is_matrix(Slot s) {
  switch (s) {
    case Slot::Embed:
    case Slot::LmHead:
    case Slot::Q:
    case Slot::K:
    case Slot::V:
    case Slot::QKV:
    case Slot::O:
    case Slot::Gate:
    case Slot::Up:
    case Slot::GateUp:
    case Slot::Down:
    case Slot::Router:
    case Slot::ExpertGate:
    case Slot::ExpertUp:
    case Slot::ExpertDown:
    case Slot::SharedGate:
    case Slot::SharedUp:
    case Slot::SharedDown:
    case Slot::LinQKV:
    case Slot::LinZ:
    case Slot::LinBeta:
    case Slot::LinAlpha:
    case Slot::LinOut: return true;
    default: return false;
  }
}

bool slot_is_expert(Slot s) { return s == Slot::ExpertGate || s == Slot::ExpertUp || s == Slot::ExpertDown; }

bool slot_is_norm(Slot s) {
  switch (s) {
    case Slot::FinalNorm:
    case Slot::AttnNorm:
    case Slot::QNorm:
    case Slot::KNorm:
    case Slot::PostAttnNorm:
    case Slot::FfnNorm:
    case Slot::PostFfnNorm: return true;
    default: return false;
  }
}

bool has_slot(const Architecture& a, Slot slot) {
  return std::any_of(a.tensors.begin(), a.tensors.end(), [&](const TensorName& t) { return t.slot == slot; });
}

std::string expand_name(const char* pattern, i64 layer, i64 expert) {
  std::string s(pattern);
  if (auto at = s.find("{i}"); at != std::string::npos) s.replace(at, 3, std::to_string(layer));
  if (auto at = s.find("{e}"); at != std::string::npos) s.replace(at, 3, std::to_string(expert));
  return s;
}

bool per_expert_name(const char* pattern) { return std::string(pattern).find("{e}") != std::string::npos; }

Need slot_need(const DecoderSpec& c, const Architecture& a, Slot slot, i64 layer) {
  const LayerSpec* l = slot_is_per_layer(slot) ? &c.layers[static_cast<std::size_t>(layer)] : nullptr;
  auto yes = [](bool b) { return b ? Need::Yes : Need::No; };
  // A Gated DeltaNet layer has its own tensors instead of the attention's; an attention layer none of them.
  const bool linear = l && l->mixer == Mixer::GatedDeltaNet;
  switch (slot) {
    case Slot::LinQKV:
    case Slot::LinZ:
    case Slot::LinBeta:
    case Slot::LinAlpha:
    case Slot::LinOut:
    case Slot::LinConv:
    case Slot::LinDecay:
    case Slot::LinDtBias:
    case Slot::LinNorm: return yes(linear);
    case Slot::Q:
    case Slot::K:
    case Slot::V:
    case Slot::QKV:
    case Slot::O:
    case Slot::QBias:
    case Slot::KBias:
    case Slot::VBias:
    case Slot::OBias:
    case Slot::Sinks:
    case Slot::QNorm:
    case Slot::KNorm:
      if (linear) return Need::No;
      break;
    default: break;
  }
  switch (slot) {
    case Slot::LmHead: return c.tied ? Need::Ignored : Need::Yes;
    case Slot::RopeFreqs:
    case Slot::RopeLong:
    case Slot::RopeShort: return Need::IfPresent;
    case Slot::Q:
    case Slot::K:
    case Slot::V: return yes(!has_slot(a, Slot::QKV));
    case Slot::Gate:
    case Slot::Up: return yes(!l->moe && !has_slot(a, Slot::GateUp));
    case Slot::GateUp:
    case Slot::Down: return yes(!l->moe);
    case Slot::Router:
    case Slot::ExpertGate:
    case Slot::ExpertUp:
    case Slot::ExpertDown: return yes(l->moe);
    case Slot::QBias:
    case Slot::KBias:
    case Slot::VBias: return yes(c.attention_bias);
    case Slot::OBias: return yes(c.attention_out_bias);
    case Slot::Sinks: return yes(c.attention_sinks);
    case Slot::RouterBias: return yes(l->moe && c.moe.router_bias);
    case Slot::ExpertGateBias:
    case Slot::ExpertUpBias:
    case Slot::ExpertDownBias: return yes(l->moe && c.moe.expert_bias);
    case Slot::SharedGate:
    case Slot::SharedUp:
    case Slot::SharedDown:
    case Slot::SharedExpertGate: return yes(l->moe && c.moe.shared_ff > 0);
    case Slot::QNorm:
    case Slot::KNorm: return yes(l->qk_norm);
    case Slot::PostAttnNorm: return yes(l->post_attn_norm);
    case Slot::PostFfnNorm: return yes(l->post_ffn_norm);
    default: return Need::Yes;
  }
}

Shape slot_shape(const DecoderSpec& c, Slot slot, i64 layer) {
  const i64 C = c.hidden_size, F = c.intermediate_size, D = c.head_dim, V = c.vocab_size;
  const i64 E = c.moe.experts, Fe = c.moe.expert_ff;
  const bool whole = slot_is_per_layer(slot) && c.layers[static_cast<std::size_t>(layer)].qk_norm_whole;
  const i64 HD = c.num_heads * D, KD = c.num_kv_heads * D;
  switch (slot) {
    case Slot::Embed:
    case Slot::LmHead: return {V, C};
    case Slot::RopeFreqs:
    case Slot::RopeLong:
    case Slot::RopeShort: return {c.ropes.front().dims / 2};
    case Slot::Q: return {slot_is_per_layer(slot) && c.layers[static_cast<std::size_t>(layer)].attn_output_gate ? 2 * HD : HD, C};
    case Slot::K:
    case Slot::V: return {KD, C};
    case Slot::QKV: return {HD + 2 * KD, C};
    case Slot::QBias: return {HD};
    case Slot::KBias:
    case Slot::VBias: return {KD};
    case Slot::O: return {C, HD};
    case Slot::OBias: return {C};
    case Slot::Sinks: return {c.num_heads};
    case Slot::RouterBias: return {E};
    case Slot::ExpertGateBias:
    case Slot::ExpertUpBias: return {E, Fe};
    case Slot::ExpertDownBias: return {E, C};
    case Slot::SharedGate:
    case Slot::SharedUp: return {c.moe.shared_ff, C};
    case Slot::SharedDown: return {C, c.moe.shared_ff};
    case Slot::SharedExpertGate: return {1, C};  // (a Linear(hidden, 1), as both kinds of files store it)
    case Slot::QNorm: return {whole ? HD : D};
    case Slot::KNorm: return {whole ? KD : D};
    case Slot::Router: return {E, C};
    case Slot::ExpertGate:
    case Slot::ExpertUp: return {E, Fe, C};
    case Slot::ExpertDown: return {E, C, Fe};
    case Slot::Gate:
    case Slot::Up: return {F, C};
    case Slot::GateUp: return {2 * F, C};
    case Slot::Down: return {C, F};
    case Slot::FinalNorm:
    case Slot::AttnNorm:
    case Slot::PostAttnNorm:
    case Slot::FfnNorm:
    case Slot::PostFfnNorm: return {C};
    case Slot::LinQKV: return {c.linear.conv_channels(), C};
    case Slot::LinZ: return {c.linear.value_heads * c.linear.value_dim, C};
    case Slot::LinBeta:
    case Slot::LinAlpha: return {c.linear.value_heads, C};
    case Slot::LinOut: return {C, c.linear.value_heads * c.linear.value_dim};
    case Slot::LinConv: return {c.linear.conv_channels(), c.linear.conv_kernel};
    case Slot::LinDecay:
    case Slot::LinDtBias: return {c.linear.value_heads};
    case Slot::LinNorm: return {c.linear.value_dim};
  }
  return {};
}

const float** vector_slot(DecoderWeights& w, Slot slot, i64 layer) {
  if (slot == Slot::FinalNorm) return &w.norm;
  DecoderLayerWeights& L = w.layers[static_cast<std::size_t>(layer)];
  switch (slot) {
    case Slot::AttnNorm: return &L.attn_norm;
    case Slot::QBias: return &L.q.bias;
    case Slot::KBias: return &L.k.bias;
    case Slot::VBias: return &L.v.bias;
    case Slot::OBias: return &L.o.bias;
    case Slot::Sinks: return &L.sinks;
    case Slot::RouterBias: return &L.router.bias;
    case Slot::ExpertGateBias: return &L.expert_gate_bias;
    case Slot::ExpertUpBias: return &L.expert_up_bias;
    case Slot::ExpertDownBias: return &L.expert_down_bias;
    case Slot::SharedExpertGate: return &L.shared_expert_gate;
    case Slot::QNorm: return &L.q_norm;
    case Slot::KNorm: return &L.k_norm;
    case Slot::PostAttnNorm: return &L.post_attn_norm;
    case Slot::FfnNorm: return &L.ffn_norm;
    case Slot::PostFfnNorm: return &L.post_ffn_norm;
    case Slot::LinConv: return &L.lin_conv;
    case Slot::LinDecay: return &L.lin_decay;
    case Slot::LinDtBias: return &L.lin_dt_bias;
    case Slot::LinNorm: return &L.lin_norm;
    default: throw ValueError(std::string("vector_slot: ") + slot_name(slot) + " is not a vector of the weights");
  }
}

kernels::QMatrix* matrix_slot(DecoderWeights& w, Slot slot, i64 layer) {
  if (slot == Slot::Embed) return &w.embed;
  if (slot == Slot::LmHead) return &w.lm_head;
  DecoderLayerWeights& L = w.layers[static_cast<std::size_t>(layer)];
  switch (slot) {
    case Slot::Q: return &L.q.w;
    case Slot::K: return &L.k.w;
    case Slot::V: return &L.v.w;
    case Slot::O: return &L.o.w;
    case Slot::Gate: return &L.gate.w;
    case Slot::Up: return &L.up.w;
    case Slot::Down: return &L.down.w;
    case Slot::Router: return &L.router.w;
    case Slot::SharedGate: return &L.shared_gate.w;
    case Slot::SharedUp: return &L.shared_up.w;
    case Slot::SharedDown: return &L.shared_down.w;
    case Slot::LinQKV: return &L.lin_qkv.w;
    case Slot::LinZ: return &L.lin_z.w;
    case Slot::LinBeta: return &L.lin_b.w;
    case Slot::LinAlpha: return &L.lin_a.w;
    case Slot::LinOut: return &L.lin_out.w;
    default: throw ValueError(std::string("matrix_slot: ") + slot_name(slot) + " is not a matrix of the weights");
  }
}

const float* vector_of(const DecoderWeights& w, Slot slot, i64 layer) {
  return *vector_slot(const_cast<DecoderWeights&>(w), slot, layer);
}

const kernels::QMatrix* matrix_of(const DecoderWeights& w, Slot slot, i64 layer) {
  return matrix_slot(const_cast<DecoderWeights&>(w), slot, layer);
}

kernels::QMatrix row_view(const kernels::QMatrix& m, i64 r0, i64 n) {
  kernels::QMatrix v = m;
  v.data = static_cast<const std::uint8_t*>(m.data) + r0 * m.row_bytes;
  v.rows = n;
  v.rows8 = nullptr;
  return v;
}

}  // namespace qkv::models
