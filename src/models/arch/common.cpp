// What the architecture files share (see common.h).
#include "common.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "../hf_json.h"
#include "qkv/core/error.h"
#include "qkv/models/decoder_io.h"

namespace qkv::models::arch {
namespace {

using i64 = std::int64_t;

std::string rope_types() { return "default, linear, llama3, yarn, longrope"; }

}  // namespace

const json* object_field(const json& j, const char* key, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  if (!it->is_object()) hf::bad(src, fmt::format("field '{}' must be an object, got {}", key, it->dump()));
  return &*it;
}

std::vector<float> float_list(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) hf::bad(where, fmt::format("'{}' must be a list of numbers", key));
  std::vector<float> out;
  for (const json& v : *it) {
    if (!v.is_number()) hf::bad(where, fmt::format("'{}' holds {}, not a number", key, v.dump()));
    out.push_back(static_cast<float>(v.get<double>()));
  }
  return out;
}

RopeSpec rope_from_config(const json* rp, const std::string& field, double theta, i64 dims, const std::string& src) {
  RopeSpec r;
  r.theta = theta;
  r.dims = dims;
  if (!rp) return r;
  r.theta = hf::get_double(*rp, "rope_theta", src, r.theta);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (auto it = rp->find(key); it != rp->end() && !it->is_null()) {
      if (!it->is_string()) hf::bad(src, fmt::format("{}.{} must be a string, got {}", field, key, it->dump()));
      type = it->get<std::string>();
      break;
    }
  const std::string where = src + " (" + field + ")";
  kernels::RopeScaling& s = r.scaling;
  auto original = [&](i64 dflt) {
    return static_cast<double>(hf::get_int(*rp, "original_max_position_embeddings", where, dflt));
  };
  if (type == "default") {
    s.type = kernels::RopeScaling::Type::None;
  } else if (type == "linear") {
    s.type = kernels::RopeScaling::Type::Linear;
    s.factor = hf::get_double(*rp, "factor", where, 1.0);
  } else if (type == "llama3") {
    s.type = kernels::RopeScaling::Type::Llama3;
    s.factor = hf::get_double(*rp, "factor", where, 8.0);
    s.low_freq_factor = hf::get_double(*rp, "low_freq_factor", where, 1.0);
    s.high_freq_factor = hf::get_double(*rp, "high_freq_factor", where, 4.0);
    s.original_max_positions = original(8192);
  } else if (type == "yarn") {
    s.type = kernels::RopeScaling::Type::Yarn;
    s.factor = hf::get_double(*rp, "factor", where, 1.0);
    s.original_max_positions = original(4096);
    s.beta_fast = hf::get_double(*rp, "beta_fast", where, 32.0);
    s.beta_slow = hf::get_double(*rp, "beta_slow", where, 1.0);
    s.truncate = hf::get_bool(*rp, "truncate", where, true);
    s.attention_factor = hf::get_double(*rp, "attention_factor", where, 0.0);
    if (rp->contains("mscale") || rp->contains("mscale_all_dim"))
      hf::bad(where, "yarn's mscale / mscale_all_dim are not supported");
  } else if (type == "longrope" || type == "su") {
    s.type = kernels::RopeScaling::Type::LongRope;
    s.original_max_positions = original(4096);
    s.short_factor = float_list(*rp, "short_factor", where);
    s.long_factor = float_list(*rp, "long_factor", where);
    s.attention_factor = hf::get_double(*rp, "attention_factor", where, 0.0);
    if (rp->contains("factor") && !(*rp)["factor"].is_null())
      hf::bad(where, "longrope's explicit factor is not supported (it is max_position_embeddings / "
                     "original_max_position_embeddings)");
  } else {
    hf::bad(src, fmt::format("rope type \"{}\" is not supported ({})", type, rope_types()));
  }
  return r;
}

std::optional<std::vector<bool>> sliding_layers(const json& j, i64 layers, const std::string& src) {
  auto it = j.find("layer_types");
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_array() || static_cast<i64>(it->size()) != layers)
    hf::bad(src, fmt::format("layer_types must list the {} layers' types, got {}", layers, it->dump()));
  std::vector<bool> out;
  for (const json& t : *it) {
    const std::string v = t.is_string() ? t.get<std::string>() : std::string();
    if (v != "sliding_attention" && v != "full_attention")
      hf::bad(src, fmt::format("layer_types holds {} (sliding_attention or full_attention)", t.dump()));
    out.push_back(v == "sliding_attention");
  }
  return out;
}

DecoderSpec spec_from_config(const json& j, const std::string& src, const ConfigDefaults& d) {
  DecoderSpec c;
  c.model_type = j.at("model_type").get<std::string>();
  if (auto it = j.find(d.act_field); it != j.end() && !it->is_null()) {
    const bool ok = it->is_string() &&
                    std::find(d.activations.begin(), d.activations.end(), it->get<std::string>()) != d.activations.end();
    if (!ok) {
      std::string allowed;
      for (const std::string& a : d.activations) allowed += (allowed.empty() ? "\"" : ", \"") + a + "\"";
      hf::bad(src, fmt::format("{} {} is not supported (only {})", d.act_field, it->dump(), allowed));
    }
  }
  c.vocab_size = hf::get_int(j, "vocab_size", src);
  c.hidden_size = hf::get_int(j, "hidden_size", src);
  c.intermediate_size = hf::get_int(j, "intermediate_size", src);
  const i64 L = hf::get_int(j, "num_hidden_layers", src);
  c.num_heads = hf::get_int(j, "num_attention_heads", src);
  c.num_kv_heads = hf::get_int(j, "num_key_value_heads", src, c.num_heads);
  if (c.hidden_size % c.num_heads && !j.contains("head_dim"))
    hf::bad(src, fmt::format("hidden_size {} is not divisible by num_attention_heads {}", c.hidden_size, c.num_heads));
  c.head_dim = hf::get_int(j, "head_dim", src, c.hidden_size / c.num_heads);
  c.max_positions = hf::get_int(j, "max_position_embeddings", src, d.max_position_embeddings);
  c.norm_eps = hf::get_double(j, "rms_norm_eps", src, d.rms_norm_eps);
  if (hf::get_bool(j, "mlp_bias", src, false)) hf::bad(src, "mlp_bias true is not supported");
  c.tied = hf::get_bool(j, "tie_word_embeddings", src, d.tie_word_embeddings);
  c.attention_bias = hf::get_bool(j, "attention_bias", src, false);
  // RoPE: rope_parameters (transformers 5; per layer type for some models: the full attention's
  // here) or rope_theta + rope_scaling (transformers 4); partial_rotary_factor at the top or in it.
  const json* rp = object_field(j, "rope_parameters", src);
  std::string field = "rope_parameters";
  if (!rp) rp = object_field(j, "rope_scaling", src), field = "rope_scaling";
  if (rp && rp->contains("full_attention")) rp = object_field(*rp, "full_attention", src), field += ".full_attention";
  double prf = hf::get_double(j, "partial_rotary_factor", src, 1.0);
  if (rp) prf = hf::get_double(*rp, "partial_rotary_factor", src, prf);
  if (!(prf > 0 && prf <= 1)) hf::bad(src, fmt::format("partial_rotary_factor must be in (0, 1], got {}", prf));
  const i64 dims = static_cast<i64>(static_cast<double>(c.head_dim) * prf);  // transformers: int(head_dim * factor)
  c.ropes.push_back(rope_from_config(rp, field, hf::get_double(j, "rope_theta", src, d.rope_theta), dims, src));
  if (L > kMaxDecoderLayers)
    hf::bad(src, fmt::format("num_hidden_layers must be in [1, {}], got {}", kMaxDecoderLayers, L));
  c.layers.assign(static_cast<std::size_t>(L), LayerSpec{});
  c.bos_token_id = hf::get_token_id(j, "bos_token_id", src);
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_array()) {
      for (const json& e : *it) {
        if (!e.is_number_integer() || e.get<i64>() < 0)
          hf::bad(src, "field 'eos_token_id' must hold non-negative integers, got " + it->dump());
        c.eos_token_ids.push_back(e.get<i64>());
      }
    } else {
      c.eos_token_ids.push_back(*hf::get_token_id(j, "eos_token_id", src));
    }
  }
  return c;
}

DecoderSpec spec_from_gguf(const io::GGUFFile& f, const Architecture& a) {
  DecoderSpec c;
  const std::string arch(f.get_string("general.architecture"));
  c.model_type = arch;
  auto key = [&](const char* k) { return arch + "." + k; };
  auto positive = [&](const std::string& k, i64 v) {
    if (v < 1) throw FormatError(fmt::format("{}: GGUF key '{}' must be >= 1, got {}", f.source(), k, v));
    return v;
  };
  const i64 L = positive(key("block_count"), f.get_int(key("block_count")));
  c.hidden_size = positive(key("embedding_length"), f.get_int(key("embedding_length")));
  // (A file whose every layer is a mixture may have no dense width: the experts' then.)
  const auto ff = f.find_int(key("feed_forward_length"));
  c.intermediate_size = positive(key("feed_forward_length"),
                                 ff || !f.find_int(key("expert_count")) ? f.get_int(key("feed_forward_length"))
                                                                        : f.get_int(key("expert_feed_forward_length")));
  c.num_heads = positive(key("attention.head_count"), f.get_int(key("attention.head_count")));
  c.num_kv_heads =
      positive(key("attention.head_count_kv"), f.find_int(key("attention.head_count_kv")).value_or(c.num_heads));
  c.head_dim = positive(key("attention.key_length"),
                        f.find_int(key("attention.key_length")).value_or(c.hidden_size / c.num_heads));
  c.max_positions = positive(key("context_length"), f.find_int(key("context_length")).value_or(2048));
  c.norm_eps = f.find_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5);
  RopeSpec r;
  r.dims = positive(key("rope.dimension_count"), f.find_int(key("rope.dimension_count")).value_or(c.head_dim));
  r.theta = f.find_float(key("rope.freq_base")).value_or(10000.0);
  if (auto t = f.find_string(key("rope.scaling.type")); t && *t != "none") {
    if (*t == "linear") {
      r.scaling.type = kernels::RopeScaling::Type::Linear;
      r.scaling.factor = f.get_float(key("rope.scaling.factor"));
    } else if (*t == "yarn") {
      r.scaling.type = kernels::RopeScaling::Type::Yarn;
      r.scaling.factor = f.get_float(key("rope.scaling.factor"));
      r.scaling.original_max_positions = static_cast<double>(f.get_int(key("rope.scaling.original_context_length")));
      if (auto v = f.find_float(key("rope.scaling.yarn_beta_fast"))) r.scaling.beta_fast = *v;
      if (auto v = f.find_float(key("rope.scaling.yarn_beta_slow"))) r.scaling.beta_slow = *v;
      if (auto v = f.find_float(key("rope.scaling.attn_factor"))) r.scaling.attention_factor = *v;
    } else {
      throw FormatError(fmt::format("{}: GGUF rope scaling '{}' is not supported (none, linear, yarn)", f.source(), *t));
    }
  }
  r.style = arch == a.gguf_name && a.gguf_interleaved_rope ? kernels::RopeStyle::Interleaved : kernels::RopeStyle::Half;
  c.ropes.push_back(r);
  // Each layer holds tensors: a block_count beyond the file's tensors (or the layer limit) is
  // refused before the per-layer specs are allocated.
  if (L > kMaxDecoderLayers || L > static_cast<i64>(f.tensors().size()))
    throw FormatError(fmt::format("{}: GGUF key '{}' is {}, but the file holds {} tensors (at most {} layers)", f.source(),
                                  key("block_count"), L, f.tensors().size(), kMaxDecoderLayers));
  c.layers.assign(static_cast<std::size_t>(L), LayerSpec{});
  const i64 window = f.find_int(key("attention.sliding_window")).value_or(0);
  for (LayerSpec& l : c.layers) l.window = window;
  c.attention_bias = f.find("blk.0.attn_q.bias") != nullptr;
  c.tied = f.find("output.weight") == nullptr;
  if (const i64 E = f.find_int(key("expert_count")).value_or(0); E > 0) {
    // (Bounded here: the experts' tensor shapes are computed from these before the spec's check.)
    auto bounded = [&](const std::string& k, i64 v, i64 hi) {
      if (v < 1 || v > hi) throw FormatError(fmt::format("{}: GGUF key '{}' must be in [1, {}], got {}", f.source(), k, hi, v));
      return v;
    };
    c.moe.experts = bounded(key("expert_count"), E, kMaxExperts);
    c.moe.top_k = bounded(key("expert_used_count"), f.get_int(key("expert_used_count")), E);
    c.moe.expert_ff = bounded(key("expert_feed_forward_length"),
                              f.find_int(key("expert_feed_forward_length")).value_or(c.intermediate_size), i64{1} << 24);
    c.moe.routing.renormalize = true;
    if (auto s = f.find_float(key("expert_weights_scale")); s && *s != 0) c.moe.routing.scale = static_cast<float>(*s);
    for (LayerSpec& l : c.layers) l.moe = true;
  }
  if (auto v = f.find_int(key("vocab_size"))) c.vocab_size = *v;
  else if (f.find_value("tokenizer.ggml.tokens")) c.vocab_size = static_cast<i64>(f.get_string_array("tokenizer.ggml.tokens").size());
  else c.vocab_size = f.at("token_embd.weight").shape.empty() ? 0 : f.at("token_embd.weight").shape[0];
  if (auto b = f.find_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = *b;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto e = f.find_int(k); e && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *e) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(*e);
  return c;
}

std::vector<bool> sliding_layers_from_gguf(const io::GGUFFile& f, i64 layers, i64 pattern) {
  const std::string key = std::string(f.get_string("general.architecture")) + ".attention.sliding_window_pattern";
  std::vector<bool> slides(static_cast<std::size_t>(layers));
  const io::GGUFValue* pv = f.find_value(key);
  if (pv && pv->is_array()) {
    if (static_cast<i64>(pv->size()) != layers)
      throw FormatError(fmt::format("{}: GGUF key '{}' has {} entries for {} layers", f.source(), key, pv->size(), layers));
    for (std::size_t i = 0; i < slides.size(); ++i) {
      const auto e = pv->element(i);
      const std::optional<bool> b = e ? (e->as_bool() ? e->as_bool() : e->as_int() ? std::optional<bool>(*e->as_int() != 0)
                                                                                  : std::nullopt)
                                      : std::nullopt;
      if (!b)
        throw FormatError(fmt::format("{}: GGUF key '{}' is {}, expected a bool (or integer) per layer", f.source(), key,
                                      pv->describe()));
      slides[i] = *b;
    }
    return slides;
  }
  if (pv) pattern = f.get_int(key);
  if (pattern < 1) throw FormatError(fmt::format("{}: GGUF key '{}' must be >= 1, got {}", f.source(), key, pattern));
  for (std::size_t i = 0; i < slides.size(); ++i) slides[i] = static_cast<i64>(i) % pattern < pattern - 1;
  return slides;
}

void sliding_pattern_gguf_metadata(const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta,
                                   i64 pattern) {
  bool regular = true;
  std::vector<i64> flags;
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    regular = regular && (c.layers[i].window > 0) == (static_cast<i64>(i) % pattern < pattern - 1);
    flags.push_back(c.layers[i].window > 0);
  }
  if (!regular)
    meta.emplace_back(prefix + "attention.sliding_window_pattern", io::GGUFMeta::int_array(io::GGUFType::BOOL, flags));
}

void write_common_gguf_metadata(const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
  using io::GGUFMeta;
  auto u32 = [](i64 v) { return GGUFMeta::u32(static_cast<std::uint32_t>(v)); };
  auto key = [&](const char* k) { return prefix + k; };
  const RopeSpec& r = c.ropes.front();
  meta.emplace_back(key("block_count"), u32(c.num_layers()));
  meta.emplace_back(key("context_length"), u32(c.max_positions));
  meta.emplace_back(key("embedding_length"), u32(c.hidden_size));
  meta.emplace_back(key("feed_forward_length"), u32(c.intermediate_size));
  meta.emplace_back(key("attention.head_count"), u32(c.num_heads));
  meta.emplace_back(key("attention.head_count_kv"), u32(c.num_kv_heads));
  meta.emplace_back(key("rope.freq_base"), GGUFMeta::f32(static_cast<float>(r.theta)));
  meta.emplace_back(key("attention.layer_norm_rms_epsilon"), GGUFMeta::f32(static_cast<float>(c.norm_eps)));
  meta.emplace_back(key("rope.dimension_count"), u32(r.dims));
  meta.emplace_back(key("vocab_size"), u32(c.vocab_size));
  if (c.head_dim * c.num_heads != c.hidden_size) {
    meta.emplace_back(key("attention.key_length"), u32(c.head_dim));
    meta.emplace_back(key("attention.value_length"), u32(c.head_dim));
  }
  switch (r.scaling.type) {
    case kernels::RopeScaling::Type::Linear:
      meta.emplace_back(key("rope.scaling.type"), GGUFMeta::string("linear"));
      meta.emplace_back(key("rope.scaling.factor"), GGUFMeta::f32(static_cast<float>(r.scaling.factor)));
      break;
    case kernels::RopeScaling::Type::Yarn:
      meta.emplace_back(key("rope.scaling.type"), GGUFMeta::string("yarn"));
      meta.emplace_back(key("rope.scaling.factor"), GGUFMeta::f32(static_cast<float>(r.scaling.factor)));
      meta.emplace_back(key("rope.scaling.original_context_length"), u32(static_cast<i64>(r.scaling.original_max_positions)));
      meta.emplace_back(key("rope.scaling.yarn_beta_fast"), GGUFMeta::f32(static_cast<float>(r.scaling.beta_fast)));
      meta.emplace_back(key("rope.scaling.yarn_beta_slow"), GGUFMeta::f32(static_cast<float>(r.scaling.beta_slow)));
      break;
    default: break;
  }
  i64 window = 0;
  for (const LayerSpec& l : c.layers) window = std::max(window, l.window);
  if (window) meta.emplace_back(key("attention.sliding_window"), u32(window));
  if (c.moe.experts > 0) {  // (the weights' renormalisation is the architecture's, as llama.cpp has it)
    meta.emplace_back(key("expert_count"), u32(c.moe.experts));
    meta.emplace_back(key("expert_used_count"), u32(c.moe.top_k));
    meta.emplace_back(key("expert_feed_forward_length"), u32(c.moe.expert_ff));
    if (c.moe.routing.scale != 1.f)
      meta.emplace_back(key("expert_weights_scale"), GGUFMeta::f32(c.moe.routing.scale));
  }
}

void moe_from_config(const json& j, const std::string& src, const MoeConfig& m, DecoderSpec& c) {
  // (transformers' configs alias num_experts and num_local_experts: save_pretrained may write either)
  const char* experts_field = m.experts_field;
  for (const char* alias : {"num_experts", "num_local_experts"})
    if (!j.contains(experts_field) && j.contains(alias)) experts_field = alias;
  c.moe.experts = hf::get_int(j, experts_field, src);
  c.moe.top_k = hf::get_int(j, "num_experts_per_tok", src);
  c.moe.expert_ff = hf::get_int(j, m.expert_ff_field, src);
  c.moe.routing.renormalize = m.norm_field ? hf::get_bool(j, m.norm_field, src, m.renormalize) : m.renormalize;
  if (c.moe.experts < 1 || c.moe.experts > kMaxExperts)
    hf::bad(src, fmt::format("{} must be in [1, {}], got {}", experts_field, kMaxExperts, c.moe.experts));
  if (c.moe.top_k < 1 || c.moe.top_k > c.moe.experts)
    hf::bad(src, fmt::format("num_experts_per_tok must be in [1, {}] ({}), got {}", c.moe.experts, experts_field,
                             c.moe.top_k));
  for (LayerSpec& l : c.layers) l.moe = true;
}

void sparse_layers_from_config(const json& j, const std::string& src, DecoderSpec& c) {
  const i64 step = hf::get_int(j, "decoder_sparse_step", src, 1);
  if (step < 1) hf::bad(src, fmt::format("decoder_sparse_step must be >= 1, got {}", step));
  std::vector<i64> dense;
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) hf::bad(src, "mlp_only_layers must be a list of layer indices");
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<i64>() < 0 || v.get<i64>() >= c.num_layers())
        hf::bad(src, fmt::format("mlp_only_layers holds {}, not a layer index below {}", v.dump(), c.num_layers()));
      dense.push_back(v.get<i64>());
    }
  }
  for (i64 i = 0; i < c.num_layers(); ++i)
    c.layers[static_cast<std::size_t>(i)].moe = std::find(dense.begin(), dense.end(), i) == dense.end() && (i + 1) % step == 0;
}

void window_on_every_layer(const json& j, const std::string& src, DecoderSpec& c) {
  if (auto it = j.find("sliding_window"); it != j.end() && !it->is_null()) {
    const i64 w = hf::get_int(j, "sliding_window", src);
    for (LayerSpec& l : c.layers) l.window = w;
  }
}

Architecture llama_layout(const std::string& name, const std::string& display, const std::string& gguf_name,
                          bool interleaved_rope) {
  Architecture a;
  a.name = name;
  a.display = display;
  a.model_types = {name};
  a.gguf_names = {name};
  a.gguf_name = gguf_name;
  a.gguf_interleaved_rope = interleaved_rope;
  a.tensors = llama_tensor_names();
  a.from_config = [](const json& j, const std::string& src) { return spec_from_config(j, src); };
  a.from_gguf = [name](const io::GGUFFile& f) { return spec_from_gguf(f, *find_architecture(name)); };
  return a;
}

std::vector<TensorName> llama_tensor_names() {
  return {
      {Slot::Embed, "model.embed_tokens.weight", "token_embd.weight"},
      {Slot::FinalNorm, "model.norm.weight", "output_norm.weight"},
      {Slot::LmHead, "lm_head.weight", "output.weight"},
      {Slot::RopeFreqs, nullptr, "rope_freqs.weight"},
      {Slot::AttnNorm, "model.layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight"},
      {Slot::Q, "model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight"},
      {Slot::K, "model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight"},
      {Slot::V, "model.layers.{i}.self_attn.v_proj.weight", "blk.{i}.attn_v.weight"},
      {Slot::QBias, "model.layers.{i}.self_attn.q_proj.bias", "blk.{i}.attn_q.bias"},
      {Slot::KBias, "model.layers.{i}.self_attn.k_proj.bias", "blk.{i}.attn_k.bias"},
      {Slot::VBias, "model.layers.{i}.self_attn.v_proj.bias", "blk.{i}.attn_v.bias"},
      {Slot::O, "model.layers.{i}.self_attn.o_proj.weight", "blk.{i}.attn_output.weight"},
      {Slot::FfnNorm, "model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight"},
      {Slot::Gate, "model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight"},
      {Slot::Up, "model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight"},
      {Slot::Down, "model.layers.{i}.mlp.down_proj.weight", "blk.{i}.ffn_down.weight"},
      {Slot::Router, "model.layers.{i}.mlp.gate.weight", "blk.{i}.ffn_gate_inp.weight"},
      {Slot::ExpertGate, "model.layers.{i}.mlp.experts.{e}.gate_proj.weight", "blk.{i}.ffn_gate_exps.weight"},
      {Slot::ExpertUp, "model.layers.{i}.mlp.experts.{e}.up_proj.weight", "blk.{i}.ffn_up_exps.weight"},
      {Slot::ExpertDown, "model.layers.{i}.mlp.experts.{e}.down_proj.weight", "blk.{i}.ffn_down_exps.weight"},
  };
}

std::vector<TensorName> with(std::vector<TensorName> names, const TensorName& t) {
  for (TensorName& n : names)
    if (n.slot == t.slot) {
      n = t;
      return names;
    }
  names.push_back(t);
  return names;
}

std::vector<TensorName> without(std::vector<TensorName> names, Slot slot) {
  std::erase_if(names, [&](const TensorName& n) { return n.slot == slot; });
  return names;
}

LoadedCausalLM load_decoder_causal_lm(const std::string& path, const CausalLMLoadOptions& o) {
  auto m = load_decoder(path);
  m->set_activations(o.activations);
  m->set_kv_type(o.kv_cache);
  LoadedCausalLM out;
  out.weight_bytes = m->weight_bytes();
  out.q8_activations = true;
  out.eos_ids = m->spec().eos_token_ids;
  out.bos_id = m->spec().bos_token_id;
  out.model = m;
  return out;
}

std::string write_decoder_gguf(const std::string& path, const std::string& out, const GgufQuant& quant,
                               const io::GGUFMetadata& tokenizer, const std::string& name) {
  const auto m = load_decoder(path);
  save_decoder_gguf(*m, out, quant, tokenizer, name);
  return fmt::format("{}, {}", m->spec().arch, describe(quant));
}

}  // namespace qkv::models::arch
