// What Qwen3.5 and Qwen3.5-MoE share (internal header of models/arch/): the hybrid of Gated DeltaNet
// linear attention and gated full attention (see qwen3_5.cpp), read from config.json and from
// llama.cpp's qwen35 / qwen35moe GGUF metadata, with one table of tensor names.
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"

namespace qkv::models::arch {

using json = nlohmann::json;
using i64 = std::int64_t;

// Qwen3_5TextConfig's defaults, for a multimodal checkpoint's text_config that leaves them out
// (`wrapper`: the multimodal model_type, `text`: its text model's).
inline json qwen3_5_text_config(const json& j, const std::string& src, const std::string& wrapper,
                                const std::string& text) {
  if (j.value("model_type", "") != wrapper) return j;
  const json* t = arch::object_field(j, "text_config", src);
  json c = t ? *t : json::object();
  for (auto [k, v] : std::initializer_list<std::pair<const char*, json>>{
           {"vocab_size", 248320}, {"hidden_size", 4096}, {"intermediate_size", 12288}, {"num_hidden_layers", 32},
           {"num_attention_heads", 16}, {"num_key_value_heads", 4}, {"head_dim", 256},
           {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6}})
    if (!c.contains(k) || c[k].is_null()) c[k] = v;
  c["model_type"] = text;
  for (const char* k : {"bos_token_id", "eos_token_id", "tie_word_embeddings"})
    if (!c.contains(k) && j.contains(k)) c[k] = j[k];
  return c;
}

inline void qwen3_5_attention_layer(LayerSpec& l) {
  l.qk_norm = true;
  l.attn_output_gate = true;
}

// The spec of a (text) config.json: every layer's mixer from layer_types (or
// full_attention_interval), the linear attention's sizes, the gated attention layers.
inline DecoderSpec qwen3_5_spec_from_config(const json& j, const std::string& src) {
  DecoderSpec c = arch::spec_from_config(j, src, {.max_position_embeddings = 32768});
  // partial_rotary_factor: 0.25 unless given (Qwen3_5TextConfig sets that default).
  const json* rp = arch::object_field(j, "rope_parameters", src);
  if (!j.contains("partial_rotary_factor") && !(rp && rp->contains("partial_rotary_factor")))
    c.ropes.front().dims = static_cast<i64>(static_cast<double>(c.head_dim) * 0.25);
  const i64 L = c.num_layers();
  std::vector<bool> linear(static_cast<std::size_t>(L));
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || static_cast<i64>(it->size()) != L)
      hf::bad(src, fmt::format("layer_types must list one type per layer ({}), got {}", L,
                               it->is_array() ? std::to_string(it->size()) + " entries" : it->dump()));
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& t = (*it)[i];
      if (!t.is_string() || (t != "linear_attention" && t != "full_attention"))
        hf::bad(src, fmt::format("layer_types[{}] is {}, expected \"linear_attention\" or \"full_attention\"", i, t.dump()));
      linear[i] = t == "linear_attention";
    }
  } else {
    const i64 every = hf::get_int(j, "full_attention_interval", src, 4);
    if (every < 1) hf::bad(src, fmt::format("full_attention_interval must be >= 1, got {}", every));
    for (i64 i = 0; i < L; ++i) linear[static_cast<std::size_t>(i)] = (i + 1) % every != 0;
  }
  if (!hf::get_bool(j, "attn_output_gate", src, true))
    hf::bad(src, "attn_output_gate false is not supported (Qwen3.5's full attention is gated)");
  LinearAttnSpec& g = c.linear;
  g.key_heads = hf::get_int(j, "linear_num_key_heads", src, 16);
  g.value_heads = hf::get_int(j, "linear_num_value_heads", src, 32);
  g.key_dim = hf::get_int(j, "linear_key_head_dim", src, 128);
  g.value_dim = hf::get_int(j, "linear_value_head_dim", src, 128);
  g.conv_kernel = hf::get_int(j, "linear_conv_kernel_dim", src, 4);
  g.tiled = false;
  for (auto [name, v] : {std::pair{"linear_num_key_heads", g.key_heads}, {"linear_num_value_heads", g.value_heads},
                         {"linear_key_head_dim", g.key_dim}, {"linear_value_head_dim", g.value_dim},
                         {"linear_conv_kernel_dim", g.conv_kernel}})
    if (v < 1 || v > (i64{1} << 16)) hf::bad(src, fmt::format("{} must be in [1, 65536], got {}", name, v));
  if (g.value_heads % g.key_heads)
    hf::bad(src, fmt::format("linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", g.value_heads,
                             g.key_heads));
  for (i64 i = 0; i < L; ++i) {
    LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
    if (linear[static_cast<std::size_t>(i)]) l.mixer = Mixer::GatedDeltaNet;
    else qwen3_5_attention_layer(l);
  }
  return c;
}

inline std::optional<std::string> qwen3_5_rename(const std::string& n) {
  // transformers 5 writes "model.language_model.X"; the vision tower and the multi-token-prediction
  // blocks are not the decoder's.
  if (n.rfind("model.language_model.", 0) == 0) return "model." + n.substr(std::string("model.language_model.").size());
  for (const char* p : {"model.visual.", "visual.", "mtp.", "model.mtp."})
    if (n.rfind(p, 0) == 0) return std::nullopt;
  return n;
}

// A Hugging Face folder stores A_log (the decay is A = -exp(A_log), computed in float32 as
// transformers does) and the convolution's taps as [Cc, 1, K].
inline void qwen3_5_hf_convert(std::map<std::string, FolderTensor>& t, std::vector<std::shared_ptr<const void>>& keep,
                const DecoderSpec& spec, const std::string& src) {
  for (i64 l = 0; l < spec.num_layers(); ++l) {
    if (spec.layers[static_cast<std::size_t>(l)].mixer != Mixer::GatedDeltaNet) continue;
    const std::string a_log = fmt::format("model.layers.{}.linear_attn.A_log", l);
    if (auto it = t.find(a_log); it != t.end()) {
      FolderTensor& f = it->second;
      if (!f.qtype || (*f.qtype != kernels::QType::F32 && *f.qtype != kernels::QType::F16 &&
                       *f.qtype != kernels::QType::BF16) || f.shape.size() != 1)
        throw FormatError(fmt::format("{}: {} is {} {}, expected a float vector [{}]", src, a_log, f.dtype,
                                      shape_str(f.shape), spec.linear.value_heads));
      auto v = std::make_shared<std::vector<float>>(static_cast<std::size_t>(f.shape[0]));
      kernels::dequantize_row(*f.qtype, f.data, v->data(), f.shape[0]);
      for (float& x : *v) x = -std::exp(x);
      f.qtype = kernels::QType::F32;
      f.data = v->data();
      f.dtype = "F32";
      keep.push_back(v);
    }
    const std::string conv = fmt::format("model.layers.{}.linear_attn.conv1d.weight", l);
    if (auto it = t.find(conv); it != t.end() && it->second.shape.size() == 3 && it->second.shape[1] == 1)
      it->second.shape = Shape{it->second.shape[0], it->second.shape[2]};
  }
}

// The spec of llama.cpp's GGUF metadata (architecture `name` of the registry).
inline DecoderSpec qwen3_5_spec_from_gguf(const io::GGUFFile& f, const std::string& name) {
  DecoderSpec c = arch::spec_from_gguf(f, *find_architecture(name));
  const std::string p = std::string(f.get_string("general.architecture")) + ".";
  auto bounded = [&](const std::string& k, i64 v, i64 lo, i64 hi) {
    if (v < lo || v > hi) throw FormatError(fmt::format("{}: GGUF key '{}' must be in [{}, {}], got {}", f.source(), k, lo, hi, v));
    return v;
  };
  // The multi-token-prediction blocks come after the decoder's layers (block_count counts them).
  const i64 all = c.num_layers();
  const i64 nextn = bounded(p + "nextn_predict_layers", f.find_int(p + "nextn_predict_layers").value_or(0), 0, all - 1);
  const i64 L = all - nextn;
  c.layers.resize(static_cast<std::size_t>(L));
  std::vector<bool> linear(static_cast<std::size_t>(L));
  if (const io::GGUFValue* v = f.find_value(p + "attention.recurrent_layers"); v && v->is_array()) {
    if (static_cast<i64>(v->size()) != all && static_cast<i64>(v->size()) != L)
      throw FormatError(fmt::format("{}: GGUF key '{}attention.recurrent_layers' has {} entries for {} layers",
                                    f.source(), p, v->size(), all));
    for (i64 i = 0; i < L; ++i) {
      const auto e = v->element(static_cast<std::size_t>(i));
      const std::optional<bool> b = e ? (e->as_bool() ? e->as_bool() : e->as_int() ? std::optional<bool>(*e->as_int() != 0)
                                                                                  : std::nullopt)
                                      : std::nullopt;
      if (!b) throw FormatError(fmt::format("{}: GGUF key '{}attention.recurrent_layers' is {}, expected a bool per layer",
                                            f.source(), p, v->describe()));
      linear[static_cast<std::size_t>(i)] = *b;
    }
  } else {
    const i64 every = bounded(p + "full_attention_interval", f.find_int(p + "full_attention_interval").value_or(4), 1, all);
    for (i64 i = 0; i < L; ++i) linear[static_cast<std::size_t>(i)] = (i + 1) % every != 0;
  }
  LinearAttnSpec& g = c.linear;
  constexpr i64 kMax = i64{1} << 16;
  g.conv_kernel = bounded(p + "ssm.conv_kernel", f.get_int(p + "ssm.conv_kernel"), 1, 64);
  g.key_dim = bounded(p + "ssm.state_size", f.get_int(p + "ssm.state_size"), 1, kMax);
  g.key_heads = bounded(p + "ssm.group_count", f.get_int(p + "ssm.group_count"), 1, kMax);
  g.value_heads = bounded(p + "ssm.time_step_rank", f.get_int(p + "ssm.time_step_rank"), 1, kMax);
  const i64 inner = bounded(p + "ssm.inner_size", f.get_int(p + "ssm.inner_size"), 1, kMax * kMax);
  if (inner % g.value_heads || g.value_heads % g.key_heads)
    throw FormatError(fmt::format("{}: GGUF keys '{}ssm.*' are inconsistent: inner size {} for {} value heads on {} key "
                                  "heads",
                                  f.source(), p, inner, g.value_heads, g.key_heads));
  g.value_dim = inner / g.value_heads;
  g.tiled = true;  // llama.cpp's converter reorders the value heads
  for (i64 i = 0; i < L; ++i) {
    LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
    if (linear[static_cast<std::size_t>(i)]) l.mixer = Mixer::GatedDeltaNet;
    else qwen3_5_attention_layer(l);
  }
  return c;
}

// The architecture `name` (the registry's), read from the model_types `text` and `wrapper` and
// GGUF architecture `gguf_name`: its tensors, readers and GGUF writer.
inline Architecture qwen3_5_layout(const std::string& name, const std::string& display, const std::string& text,
                                   const std::string& wrapper, const std::string& gguf_name) {
  Architecture a = arch::llama_layout(name, display, gguf_name, /*interleaved_rope=*/false);
  a.model_types = {text, wrapper};
  a.gguf_names = {gguf_name};
  a.norm_offset = 1.f;
  a.tensors = arch::with(a.tensors, {Slot::FfnNorm, "model.layers.{i}.post_attention_layernorm.weight",
                                     "blk.{i}.post_attention_norm.weight"});
  for (const TensorName& t : std::initializer_list<TensorName>{
           {Slot::QNorm, "model.layers.{i}.self_attn.q_norm.weight", "blk.{i}.attn_q_norm.weight"},
           {Slot::KNorm, "model.layers.{i}.self_attn.k_norm.weight", "blk.{i}.attn_k_norm.weight"},
           {Slot::LinQKV, "model.layers.{i}.linear_attn.in_proj_qkv.weight", "blk.{i}.attn_qkv.weight"},
           {Slot::LinZ, "model.layers.{i}.linear_attn.in_proj_z.weight", "blk.{i}.attn_gate.weight"},
           {Slot::LinBeta, "model.layers.{i}.linear_attn.in_proj_b.weight", "blk.{i}.ssm_beta.weight"},
           {Slot::LinAlpha, "model.layers.{i}.linear_attn.in_proj_a.weight", "blk.{i}.ssm_alpha.weight"},
           {Slot::LinConv, "model.layers.{i}.linear_attn.conv1d.weight", "blk.{i}.ssm_conv1d.weight"},
           {Slot::LinDecay, "model.layers.{i}.linear_attn.A_log", "blk.{i}.ssm_a"},
           {Slot::LinDtBias, "model.layers.{i}.linear_attn.dt_bias", "blk.{i}.ssm_dt.bias"},
           {Slot::LinNorm, "model.layers.{i}.linear_attn.norm.weight", "blk.{i}.ssm_norm.weight"},
           {Slot::LinOut, "model.layers.{i}.linear_attn.out_proj.weight", "blk.{i}.ssm_out.weight"}})
    a.tensors.push_back(t);
  a.hf_rename = qwen3_5_rename;
  a.hf_convert = qwen3_5_hf_convert;
  a.from_config = [text, wrapper](const json& j, const std::string& src) {
    return qwen3_5_spec_from_config(qwen3_5_text_config(j, src, wrapper, text), src);
  };
  a.from_gguf = [name](const io::GGUFFile& f) { return qwen3_5_spec_from_gguf(f, name); };
  // The multi-token-prediction blocks of a GGUF file (blk.{L}... after the decoder's L layers).
  a.ignored = [](const std::string& name, const DecoderSpec& c) {
    if (name.rfind("blk.", 0) != 0) return false;
    const std::size_t dot = name.find('.', 4);
    if (dot == std::string::npos) return false;
    try {
      return std::stoll(name.substr(4, dot - 4)) >= c.num_layers();
    } catch (const std::exception&) {
      return false;
    }
  };
  a.gguf_metadata = [gguf_name](const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
    const LinearAttnSpec& g = c.linear;
    // (save_decoder_gguf has put the value heads in llama.cpp's tiled order, the spec says so.)
    if (g.key_dim != g.value_dim)
      throw ValueError(fmt::format("convert: llama.cpp's {} needs equal linear key and value head dims, got {} and "
                                   "{}; nothing was written",
                                   gguf_name, g.key_dim, g.value_dim));
    using io::GGUFMeta;
    meta.emplace_back(prefix + "ssm.conv_kernel", GGUFMeta::u32(static_cast<std::uint32_t>(g.conv_kernel)));
    meta.emplace_back(prefix + "ssm.state_size", GGUFMeta::u32(static_cast<std::uint32_t>(g.key_dim)));
    meta.emplace_back(prefix + "ssm.group_count", GGUFMeta::u32(static_cast<std::uint32_t>(g.key_heads)));
    meta.emplace_back(prefix + "ssm.time_step_rank", GGUFMeta::u32(static_cast<std::uint32_t>(g.value_heads)));
    meta.emplace_back(prefix + "ssm.inner_size", GGUFMeta::u32(static_cast<std::uint32_t>(g.value_heads * g.value_dim)));
    std::vector<std::int64_t> rec;
    for (const LayerSpec& l : c.layers) rec.push_back(l.mixer == Mixer::GatedDeltaNet ? 1 : 0);
    meta.emplace_back(prefix + "attention.recurrent_layers", GGUFMeta::int_array(io::GGUFType::BOOL, rec));
    // (llama.cpp's qwen35 loader requires the multimodal RoPE's sections; text positions ignore them)
    meta.emplace_back(prefix + "rope.dimension_sections", GGUFMeta::int_array(io::GGUFType::I32, {11, 11, 10, 0}));
  };
  return a;
}

}  // namespace qkv::models::arch
