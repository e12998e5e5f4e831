// Gemma 3 text models (270M, 1B: gemma3_text; the language model of the 4B - 27B gemma3
// checkpoints): Gemma 2's layout (gemma_common.h) with an RMSNorm (1 + w) over each head of q and
// k instead of soft-capped scores, five sliding layers to one global (layer_types), and two
// RoPEs: rope_local_base_freq (10000) on sliding layers, rope_theta (1e6, linear scaling on the
// larger models) on global ones. llama.cpp's architecture gemma3 (rope.freq_base_swa for the
// sliding layers' base).
#include "gemma_common.h"

namespace qkv::models {
namespace {

using json = nlohmann::json;

// Gemma3TextConfig's defaults, for a multimodal checkpoint's text_config that leaves them out.
json text_config_with_defaults(const json& j, const std::string& src) {
  if (j.value("model_type", "") != "gemma3") return j;
  const json* t = arch::object_field(j, "text_config", src);
  json c = t ? *t : json::object();
  for (auto [k, v] : std::initializer_list<std::pair<const char*, json>>{
           {"vocab_size", 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216}, {"num_hidden_layers", 26},
           {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256}, {"max_position_embeddings", 131072},
           {"rms_norm_eps", 1e-6}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096}})
    if (!c.contains(k) || c[k].is_null()) c[k] = v;
  c["model_type"] = "gemma3";
  for (const char* k : {"bos_token_id", "eos_token_id", "tie_word_embeddings"})
    if (!c.contains(k) && j.contains(k)) c[k] = j[k];
  return c;
}

DecoderSpec from_config(const json& config, const std::string& src) {
  const json j = text_config_with_defaults(config, src);
  DecoderSpec c = arch::gemma_spec_from_config(j, src, 6, 131072);
  // Two RoPEs: [0] the global layers' (rope_parameters.full_attention, or rope_theta +
  // rope_scaling), [1] the sliding layers' (rope_parameters.sliding_attention, or
  // rope_local_base_freq, no scaling).
  const json* rp = arch::object_field(j, "rope_parameters", src);
  RopeSpec local = c.ropes.front();
  local.scaling = {};
  local.theta = hf::get_double(j, "rope_local_base_freq", src, 10000.0);
  if (rp && rp->contains("sliding_attention"))
    local = arch::rope_from_config(arch::object_field(*rp, "sliding_attention", src), "rope_parameters.sliding_attention",
                                   local.theta, local.dims, src);
  if (!rp || !rp->contains("full_attention")) c.ropes.front().theta = hf::get_double(j, "rope_theta", src, 1e6);
  if (rp && !rp->contains("full_attention") && !rp->contains("sliding_attention"))
    hf::bad(src, "rope_parameters of gemma3 must be keyed by layer type (full_attention, sliding_attention)");
  c.ropes.push_back(local);
  for (LayerSpec& l : c.layers) {
    l.qk_norm = true;
    l.attn_softcap = 0.f;
    if (l.window > 0) l.rope = 1;
  }
  if (hf::get_double(j, "attn_logit_softcapping", src, 0.0) != 0.0)
    hf::bad(src, "attn_logit_softcapping is not a Gemma 3 setting (soft-capped scores are Gemma 2's)");
  return c;
}

std::optional<std::string> rename(const std::string& n) {
  // transformers 5 writes "model.language_model.X", 4 wrote "language_model.model.X" and
  // "language_model.lm_head.weight"; the vision tower and projector are not the decoder's.
  for (const char* p : {"model.language_model.", "language_model.model."})
    if (n.rfind(p, 0) == 0) return "model." + n.substr(std::string(p).size());
  if (n == "language_model.lm_head.weight") return "lm_head.weight";
  for (const char* p : {"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.", "multi_modal_projector."})
    if (n.rfind(p, 0) == 0) return std::nullopt;
  return n;
}

Architecture gemma3() {
  Architecture a;
  a.name = "gemma3";
  a.display = "Gemma 3";
  a.model_types = {"gemma3_text", "gemma3"};
  a.gguf_names = {"gemma3"};
  a.gguf_name = "gemma3";
  a.norm_offset = 1.f;
  a.tensors = arch::gemma_tensor_names();
  a.tensors.push_back({Slot::QNorm, "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"});
  a.tensors.push_back({Slot::KNorm, "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"});
  a.hf_rename = rename;
  a.from_config = from_config;
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::gemma_spec_from_gguf(f, *find_architecture("gemma3"), 6, 62);
    RopeSpec local = c.ropes.front();
    local.scaling = {};  // llama.cpp: the sliding layers' frequency scale is 1
    local.theta = f.find_float("gemma3.rope.freq_base_swa").value_or(10000.0);
    c.ropes.push_back(local);
    for (LayerSpec& l : c.layers) {
      l.qk_norm = true;
      l.attn_softcap = 0.f;
      if (l.window > 0) l.rope = 1;
    }
    return c;
  };
  a.gguf_metadata = [](const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
    arch::gemma_gguf_metadata(c, prefix, meta, 6);
    if (c.ropes.size() > 1)
      meta.emplace_back(prefix + "rope.freq_base_swa", io::GGUFMeta::f32(static_cast<float>(c.ropes[1].theta)));
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(gemma3, gemma3())

}  // namespace qkv::models
