// What Gemma 2 and Gemma 3 share (internal header of models/arch/): the layout of four norms per
// layer (input, post-attention, pre- and post-feed-forward), norms computed with (1 + w), the
// embedding scaled by sqrt(hidden_size), GELU (tanh) gated feed-forward, the attention scale
// from query_pre_attn_scalar, and sliding-window layers from layer_types.
#pragma once
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"

namespace qkv::models::arch {

inline std::vector<TensorName> gemma_tensor_names() {
  std::vector<TensorName> t = without(llama_tensor_names(), Slot::RopeFreqs);
  t = with(t, {Slot::FfnNorm, "model.layers.{i}.pre_feedforward_layernorm.weight", "blk.{i}.ffn_norm.weight"});
  t.push_back({Slot::PostAttnNorm, "model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.post_attention_norm.weight"});
  t.push_back({Slot::PostFfnNorm, "model.layers.{i}.post_feedforward_layernorm.weight", "blk.{i}.post_ffw_norm.weight"});
  return t;
}

// The fields Gemma 2 and 3 configs share, on top of spec_from_config. `pattern`: every pattern-th
// layer is global when the config has no layer_types (Gemma 2: 2, Gemma 3: 6).
inline DecoderSpec gemma_spec_from_config(const json& j, const std::string& src, std::int64_t pattern,
                                          std::int64_t max_positions) {
  DecoderSpec c = spec_from_config(j, src,
                                   {.tie_word_embeddings = true,
                                    .max_position_embeddings = max_positions,
                                    .act_field = "hidden_activation",
                                    .activations = {"gelu_pytorch_tanh"}});
  if (hf::get_bool(j, "attention_bias", src, false)) hf::bad(src, "attention_bias true is not supported for Gemma");
  if (hf::get_bool(j, "use_bidirectional_attention", src, false))
    hf::bad(src, "use_bidirectional_attention true (an embedding model) is not supported");
  c.activation = FfnActivation::GeluTanh;
  // transformers: torch.tensor(hidden_size ** 0.5) in the embedding's dtype (float32 here).
  c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  c.final_softcap = static_cast<float>(hf::get_double(j, "final_logit_softcapping", src, 0.0));
  const double qpas = hf::get_double(j, "query_pre_attn_scalar", src, 256.0);
  if (!(qpas > 0)) hf::bad(src, fmt::format("query_pre_attn_scalar must be > 0, got {}", qpas));
  const auto sliding = sliding_layers(j, c.num_layers(), src);
  const std::int64_t window = hf::get_int(j, "sliding_window", src, 4096);
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    LayerSpec& l = c.layers[i];
    l.attn_scale = static_cast<float>(std::pow(qpas, -0.5));  // transformers: query_pre_attn_scalar ** -0.5
    l.attn_softcap = static_cast<float>(hf::get_double(j, "attn_logit_softcapping", src, 0.0));
    l.post_attn_norm = l.post_ffn_norm = true;
    const bool slides = sliding ? (*sliding)[i] : (static_cast<std::int64_t>(i) + 1) % pattern != 0;
    if (slides) l.window = window;
  }
  return c;
}

// The GGUF side: llama.cpp's rules for Gemma files. Layers i with i % pattern < pattern - 1
// slide (the `{arch}.attention.sliding_window_pattern` key when present); the attention scale is
// `{arch}.attention.scale` when present (qkv writes it when query_pre_attn_scalar is not
// head_dim), else llama.cpp's: 1/sqrt(hidden / heads) for the 27B models (`big_layers` layers),
// 1/sqrt(head_dim) for the others.
inline DecoderSpec gemma_spec_from_gguf(const io::GGUFFile& f, const Architecture& a, std::int64_t pattern,
                                        std::int64_t big_layers) {
  DecoderSpec c = spec_from_gguf(f, a);
  const std::string arch(f.get_string("general.architecture"));
  auto key = [&](const char* k) { return arch + "." + k; };
  c.activation = FfnActivation::GeluTanh;
  c.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  c.final_softcap = static_cast<float>(f.find_float(key("final_logit_softcapping")).value_or(0.0));
  const std::int64_t window = f.find_int(key("attention.sliding_window")).value_or(4096);
  const std::vector<bool> slides = sliding_layers_from_gguf(f, c.num_layers(), pattern);
  float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  if (c.num_layers() == big_layers)
    scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.hidden_size / c.num_heads)));
  if (auto s = f.find_float(key("attention.scale"))) scale = static_cast<float>(*s);
  const float softcap = static_cast<float>(f.find_float(key("attn_logit_softcapping")).value_or(0.0));
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    LayerSpec& l = c.layers[i];
    l.attn_scale = scale;
    l.attn_softcap = softcap;
    l.post_attn_norm = l.post_ffn_norm = true;
    l.window = slides[i] ? window : 0;
  }
  return c;
}

// The GGUF keys of the Gemma fields (llama.cpp's names).
inline void gemma_gguf_metadata(const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta,
                                std::int64_t pattern) {
  using io::GGUFMeta;
  const LayerSpec& l0 = c.layers.front();
  if (c.final_softcap > 0) meta.emplace_back(prefix + "final_logit_softcapping", GGUFMeta::f32(c.final_softcap));
  if (l0.attn_softcap > 0) meta.emplace_back(prefix + "attn_logit_softcapping", GGUFMeta::f32(l0.attn_softcap));
  const float head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  if (l0.attn_scale > 0 && l0.attn_scale != head_scale)
    meta.emplace_back(prefix + "attention.scale", GGUFMeta::f32(l0.attn_scale));
  sliding_pattern_gguf_metadata(c, prefix, meta, pattern);
}

}  // namespace qkv::models::arch
