// Llama-family files: Hugging Face config.json and (sharded) model.safetensors, and GGUF files,
// read into LlamaConfig and LlamaWeights views of the mapped bytes (see llama.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf_json.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/llama.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;
using json = nlohmann::json;
namespace fs = std::filesystem;

const std::set<std::string>& supported_types() {
  static const std::set<std::string> s = {"llama", "mistral", "qwen2"};
  return s;
}

std::string list(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < 12; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > 12) out += ", ... (" + std::to_string(v.size() - 12) + " more)";
  return out;
}

// rope_parameters (transformers 5) or rope_scaling (earlier): the scaling rule.
void read_rope(const json& j, const std::string& src, LlamaConfig& c) {
  const json* rp = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) rp = &*it;
  else if (auto it2 = j.find("rope_scaling"); it2 != j.end() && !it2->is_null()) rp = &*it2;
  c.rope_theta = hf::get_double(j, "rope_theta", src, c.rope_theta);
  if (!rp) return;
  const char* field = j.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!rp->is_object()) hf::bad(src, std::string("field '") + field + "' must be an object, got " + rp->dump());
  c.rope_theta = hf::get_double(*rp, "rope_theta", src, c.rope_theta);
  std::string type = "default";
  for (const char* key : {"rope_type", "type"})
    if (auto it = rp->find(key); it != rp->end() && !it->is_null()) {
      if (!it->is_string()) hf::bad(src, std::string(field) + "." + key + " must be a string, got " + it->dump());
      type = it->get<std::string>();
      break;
    }
  const std::string where = src + " (" + field + ")";
  if (type == "default") {
    c.rope_scaling.type = kernels::RopeScaling::Type::None;
  } else if (type == "linear") {
    c.rope_scaling.type = kernels::RopeScaling::Type::Linear;
    c.rope_scaling.factor = hf::get_double(*rp, "factor", where, 1.0);
  } else if (type == "llama3") {
    c.rope_scaling.type = kernels::RopeScaling::Type::Llama3;
    c.rope_scaling.factor = hf::get_double(*rp, "factor", where, 8.0);
    c.rope_scaling.low_freq_factor = hf::get_double(*rp, "low_freq_factor", where, 1.0);
    c.rope_scaling.high_freq_factor = hf::get_double(*rp, "high_freq_factor", where, 4.0);
    c.rope_scaling.original_max_positions =
        static_cast<double>(hf::get_int(*rp, "original_max_position_embeddings", where, 8192));
  } else {
    hf::bad(src, "rope type \"" + type + "\" is not supported (default, linear, llama3)");
  }
}

}  // namespace

void check_llama_config(const LlamaConfig& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw ValueError("LlamaConfig: " + what);
  };
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_hidden_layers},
                         {"num_attention_heads", c.num_attention_heads}, {"num_key_value_heads", c.num_key_value_heads},
                         {"head_dim", c.head_dim}, {"max_position_embeddings", c.max_position_embeddings}})
    need(v >= 1 && v <= (std::int64_t{1} << 24), std::string(name) + " must be in [1, 2^24], got " + std::to_string(v));
  need(c.num_attention_heads % c.num_key_value_heads == 0,
       "num_attention_heads " + std::to_string(c.num_attention_heads) + " is not a multiple of num_key_value_heads " +
           std::to_string(c.num_key_value_heads));
  need(c.rope_dim >= 2 && c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim,
       "the rotary dims " + std::to_string(c.rope_dim) + " must be even, >= 2 and <= head_dim " +
           std::to_string(c.head_dim));
  need(c.rms_norm_eps > 0 && std::isfinite(c.rms_norm_eps), "rms_norm_eps must be finite and > 0");
  need(c.sliding_window >= 0, "sliding_window must be >= 0, got " + std::to_string(c.sliding_window));
  kernels::rope_inv_freq(c.rope_dim, c.rope_theta, c.rope_scaling);  // ValueError naming the rope setting
}

LlamaConfig llama_config_from_json(const std::string& text, const std::string& src) {
  const json j = hf::parse_object(text, src);
  LlamaConfig c;
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) hf::bad(src, "field 'model_type' is missing or not a string");
  c.model_type = mt->get<std::string>();
  if (!supported_types().count(c.model_type))
    hf::bad(src, "model_type \"" + c.model_type + "\" is not a Llama-family model qkv runs (llama, mistral, qwen2)");
  if (auto it = j.find("hidden_act"); it != j.end() && !(it->is_string() && it->get<std::string>() == "silu"))
    hf::bad(src, "hidden_act " + it->dump() + " is not supported (only \"silu\")");
  c.vocab_size = hf::get_int(j, "vocab_size", src);
  c.hidden_size = hf::get_int(j, "hidden_size", src);
  c.intermediate_size = hf::get_int(j, "intermediate_size", src);
  c.num_hidden_layers = hf::get_int(j, "num_hidden_layers", src);
  c.num_attention_heads = hf::get_int(j, "num_attention_heads", src);
  c.num_key_value_heads = hf::get_int(j, "num_key_value_heads", src, c.num_attention_heads);
  if (c.hidden_size % c.num_attention_heads && !j.contains("head_dim"))
    hf::bad(src, "hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                     std::to_string(c.num_attention_heads));
  c.head_dim = hf::get_int(j, "head_dim", src, c.hidden_size / c.num_attention_heads);
  c.rope_dim = c.head_dim;
  c.max_position_embeddings = hf::get_int(j, "max_position_embeddings", src, 2048);
  c.rms_norm_eps = hf::get_double(j, "rms_norm_eps", src, 1e-6);
  read_rope(j, src, c);
  c.rope_style = kernels::RopeStyle::Half;
  c.attention_bias = c.model_type == "qwen2" || hf::get_bool(j, "attention_bias", src, false);
  if (hf::get_bool(j, "mlp_bias", src, false)) hf::bad(src, "mlp_bias true is not supported");
  c.tie_word_embeddings = hf::get_bool(j, "tie_word_embeddings", src, false);
  if (c.model_type == "mistral") {
    if (auto it = j.find("sliding_window"); it != j.end() && !it->is_null())
      c.sliding_window = hf::get_int(j, "sliding_window", src);
  } else if (c.model_type == "qwen2" && hf::get_bool(j, "use_sliding_window", src, false)) {
    hf::bad(src, "use_sliding_window true is not supported for qwen2");
  }
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
  try {
    check_llama_config(c);
  } catch (const ValueError& e) {
    hf::bad(src, e.what());
  }
  return c;
}

std::string llama_config_to_json(const LlamaConfig& c) {
  nlohmann::ordered_json j;
  const char* arch = c.model_type == "mistral" ? "MistralForCausalLM"
                     : c.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                               : "LlamaForCausalLM";
  j["architectures"] = {arch};
  if (c.model_type == "llama") j["attention_bias"] = c.attention_bias;
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  nlohmann::ordered_json rp;
  rp["rope_theta"] = c.rope_theta;
  switch (c.rope_scaling.type) {
    case kernels::RopeScaling::Type::None: rp["rope_type"] = "default"; break;
    case kernels::RopeScaling::Type::Linear:
      rp["rope_type"] = "linear";
      rp["factor"] = c.rope_scaling.factor;
      break;
    case kernels::RopeScaling::Type::Llama3:
      rp["rope_type"] = "llama3";
      rp["factor"] = c.rope_scaling.factor;
      rp["low_freq_factor"] = c.rope_scaling.low_freq_factor;
      rp["high_freq_factor"] = c.rope_scaling.high_freq_factor;
      rp["original_max_position_embeddings"] = static_cast<i64>(c.rope_scaling.original_max_positions);
      break;
  }
  j["rope_parameters"] = rp;
  if (c.model_type == "mistral") j["sliding_window"] = c.sliding_window ? json(c.sliding_window) : json(nullptr);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

LlamaConfig llama_config_from_gguf(const io::GGUFFile& f) {
  LlamaConfig c;
  const std::string arch(f.get_string("general.architecture"));
  if (!supported_types().count(arch))
    throw FormatError(f.source() + ": GGUF architecture '" + arch +
                      "' is not a Llama-family model qkv runs (llama, mistral, qwen2)");
  c.model_type = arch;
  auto key = [&](const char* k) { return arch + "." + k; };
  auto positive = [&](const std::string& k, i64 v) {
    if (v < 1) throw FormatError(f.source() + ": GGUF key '" + k + "' must be >= 1, got " + std::to_string(v));
    return v;
  };
  c.num_hidden_layers = positive(key("block_count"), f.get_int(key("block_count")));
  c.hidden_size = positive(key("embedding_length"), f.get_int(key("embedding_length")));
  c.intermediate_size = positive(key("feed_forward_length"), f.get_int(key("feed_forward_length")));
  c.num_attention_heads = positive(key("attention.head_count"), f.get_int(key("attention.head_count")));
  c.num_key_value_heads = positive(key("attention.head_count_kv"),
                                   f.find_int(key("attention.head_count_kv")).value_or(c.num_attention_heads));
  c.head_dim = positive(key("attention.key_length"),
                        f.find_int(key("attention.key_length")).value_or(c.hidden_size / c.num_attention_heads));
  c.rope_dim = positive(key("rope.dimension_count"), f.find_int(key("rope.dimension_count")).value_or(c.head_dim));
  c.max_position_embeddings = positive(key("context_length"), f.find_int(key("context_length")).value_or(2048));
  c.rms_norm_eps = f.find_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5);
  c.rope_theta = f.find_float(key("rope.freq_base")).value_or(10000.0);
  if (auto t = f.find_string(key("rope.scaling.type")); t && *t != "none") {
    if (*t != "linear")
      throw FormatError(f.source() + ": GGUF rope scaling '" + std::string(*t) + "' is not supported (none, linear)");
    c.rope_scaling.type = kernels::RopeScaling::Type::Linear;
    c.rope_scaling.factor = f.get_float(key("rope.scaling.factor"));
  }
  // llama.cpp's converter permutes attn_q / attn_k rows of the llama architecture for RoPE on
  // adjacent pairs; Qwen2 and (transformers') Mistral GGUFs keep Hugging Face's order.
  c.rope_style = arch == "llama" ? kernels::RopeStyle::Interleaved : kernels::RopeStyle::Half;
  c.attention_bias = f.find("blk.0.attn_q.bias") != nullptr;
  c.tie_word_embeddings = f.find("output.weight") == nullptr;
  c.sliding_window = f.find_int(key("attention.sliding_window")).value_or(0);
  if (auto v = f.find_int(key("vocab_size"))) c.vocab_size = *v;
  else if (f.find_value("tokenizer.ggml.tokens")) c.vocab_size = static_cast<i64>(f.get_string_array("tokenizer.ggml.tokens").size());
  else c.vocab_size = f.at("token_embd.weight").shape.empty() ? 0 : f.at("token_embd.weight").shape[0];
  if (auto b = f.find_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = *b;
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto e = f.find_int(k); e && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), *e) == c.eos_token_ids.end())
      c.eos_token_ids.push_back(*e);
  try {
    check_llama_config(c);
  } catch (const ValueError& e) {
    throw FormatError(f.source() + ": " + e.what());
  }
  return c;
}

namespace {

// The float32 copy of a small vector (norm weight, bias) of any float type; kept by `owned`.
const float* to_floats(kernels::QType type, const void* data, i64 n, std::vector<std::vector<float>>& owned) {
  owned.emplace_back(static_cast<std::size_t>(n));
  kernels::dequantize_row(type, data, owned.back().data(), n);
  return owned.back().data();
}

struct OwnedFloats {
  std::vector<std::vector<float>> v;
};

// The tensors of a model by name, wherever they come from, checked against the config: shapes,
// types, nothing missing, nothing unknown.
struct TensorSource {
  kernels::QType type;
  const void* data;
  Shape shape;  // PyTorch order
};

LlamaWeights assemble(const LlamaConfig& c, const std::map<std::string, TensorSource>& t, const std::string& source,
                      bool gguf) {
  const i64 C = c.hidden_size, F = c.intermediate_size, D = c.head_dim, H = c.num_attention_heads;
  const i64 Hkv = c.num_key_value_heads, V = c.vocab_size;
  auto owned = std::make_shared<OwnedFloats>();
  LlamaWeights w;
  std::vector<std::string> missing, wrong;
  std::set<std::string> used;
  auto find = [&](const std::string& name, const Shape& shape, bool matrix) -> const TensorSource* {
    auto it = t.find(name);
    if (it == t.end()) {
      missing.push_back(name);
      return nullptr;
    }
    used.insert(name);
    const TensorSource& s = it->second;
    if (s.shape != shape) {
      wrong.push_back(name + " is " + shape_str(s.shape) + ", the config needs " + shape_str(shape));
      return nullptr;
    }
    const bool is_float = s.type == kernels::QType::F32 || s.type == kernels::QType::F16 || s.type == kernels::QType::BF16;
    if (!matrix && !is_float) {
      wrong.push_back(name + " has type " + kernels::qtype_name(s.type) + " (a vector must be F32, F16 or BF16)");
      return nullptr;
    }
    if (matrix && shape[1] % kernels::qtype_traits(s.type).block) {
      wrong.push_back(name + " of type " + kernels::qtype_name(s.type) + " has rows of " + std::to_string(shape[1]) +
                      " values, not a multiple of its block");
      return nullptr;
    }
    return &s;
  };
  auto matrix = [&](const std::string& name, i64 rows, i64 cols) {
    const TensorSource* s = find(name, {rows, cols}, true);
    return s ? kernels::qmatrix(s->type, s->data, rows, cols) : kernels::QMatrix{};
  };
  auto vec = [&](const std::string& name, i64 n) -> const float* {
    const TensorSource* s = find(name, {n}, false);
    return s ? to_floats(s->type, s->data, n, owned->v) : nullptr;
  };
  auto optional_vec = [&](const std::string& name, i64 n) -> const float* {
    return t.count(name) ? vec(name, n) : nullptr;
  };
  const std::string emb = gguf ? "token_embd.weight" : "model.embed_tokens.weight";
  w.embed = matrix(emb, V, C);
  for (i64 i = 0; i < c.num_hidden_layers; ++i) {
    LlamaLayer l;
    const std::string p = gguf ? "blk." + std::to_string(i) + "." : "model.layers." + std::to_string(i) + ".";
    auto nm = [&](const char* hf_name, const char* gguf_name) { return p + (gguf ? gguf_name : hf_name); };
    l.attn_norm = vec(nm("input_layernorm.weight", "attn_norm.weight"), C);
    l.q.w = matrix(nm("self_attn.q_proj.weight", "attn_q.weight"), H * D, C);
    l.k.w = matrix(nm("self_attn.k_proj.weight", "attn_k.weight"), Hkv * D, C);
    l.v.w = matrix(nm("self_attn.v_proj.weight", "attn_v.weight"), Hkv * D, C);
    if (c.attention_bias) {
      l.q.bias = vec(nm("self_attn.q_proj.bias", "attn_q.bias"), H * D);
      l.k.bias = vec(nm("self_attn.k_proj.bias", "attn_k.bias"), Hkv * D);
      l.v.bias = vec(nm("self_attn.v_proj.bias", "attn_v.bias"), Hkv * D);
    }
    l.o.w = matrix(nm("self_attn.o_proj.weight", "attn_output.weight"), C, H * D);
    l.ffn_norm = vec(nm("post_attention_layernorm.weight", "ffn_norm.weight"), C);
    l.gate.w = matrix(nm("mlp.gate_proj.weight", "ffn_gate.weight"), F, C);
    l.up.w = matrix(nm("mlp.up_proj.weight", "ffn_up.weight"), F, C);
    l.down.w = matrix(nm("mlp.down_proj.weight", "ffn_down.weight"), C, F);
    w.layers.push_back(l);
  }
  w.norm = vec(gguf ? "output_norm.weight" : "model.norm.weight", C);
  const std::string head = gguf ? "output.weight" : "lm_head.weight";
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
    if (t.count(head)) used.insert(head);  // a tied head saved anyway: it is the embedding
  } else {
    w.lm_head = matrix(head, V, C);
  }
  if (gguf) {
    if (const float* f = optional_vec("rope_freqs.weight", c.rope_dim / 2))
      w.rope_freq_factors.assign(f, f + c.rope_dim / 2);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, s] : t)
    if (!used.count(name) && !(!gguf && name.find("rotary_emb.inv_freq") != std::string::npos)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !wrong.empty()) {
    std::string msg = source + ": does not match the " + c.model_type + " config:";
    if (!missing.empty()) msg += " missing " + std::to_string(missing.size()) + " tensors: " + list(missing) + ";";
    if (!unexpected.empty())
      msg += " unexpected " + std::to_string(unexpected.size()) + " tensors: " + list(unexpected) + ";";
    if (!wrong.empty()) msg += " wrong shape or type: " + list(wrong) + ";";
    msg.pop_back();
    throw FormatError(msg);
  }
  w.keep_alive.push_back(owned);
  return w;
}

std::optional<kernels::QType> st_qtype(io::StDType d) {
  switch (d) {
    case io::StDType::F32: return kernels::QType::F32;
    case io::StDType::F16: return kernels::QType::F16;
    case io::StDType::BF16: return kernels::QType::BF16;
    default: return std::nullopt;
  }
}

}  // namespace

std::shared_ptr<LlamaForCausalLM> load_llama_gguf(std::shared_ptr<const io::GGUFFile> file) {
  const io::GGUFFile& f = *file;
  const LlamaConfig c = llama_config_from_gguf(f);
  std::map<std::string, TensorSource> t;
  for (const io::GGUFTensorInfo& info : f.tensors())
    t[info.name] = TensorSource{info.type, f.data(info), info.shape};
  LlamaWeights w = assemble(c, t, f.source(), /*gguf=*/true);
  w.keep_alive.push_back(file);
  w.mapping = file->mapping();
  return std::make_shared<LlamaForCausalLM>(c, std::move(w));
}

bool is_llama_folder(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return false;
  try {
    const json j = json::parse(io::read_file(cfg.string(), "load_llama"));
    auto it = j.find("model_type");
    return it != j.end() && it->is_string() && supported_types().count(it->get<std::string>());
  } catch (const std::exception&) {
    return false;
  }
}

std::shared_ptr<LlamaForCausalLM> load_llama(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (!io::is_gguf_file(path))
      throw FormatError(path + ": not a GGUF file (a Llama-family model is a .gguf file or a Hugging Face folder)");
    return load_llama_gguf(std::make_shared<io::GGUFFile>(io::GGUFFile::open(path)));
  }
  if (!fs::is_directory(path, ec)) throw IOError("load_llama: '" + path + "' does not exist");
  const std::string cfg_path = (fs::path(path) / "config.json").string();
  const LlamaConfig c = llama_config_from_json(io::read_file(cfg_path, "load_llama"), cfg_path);
  // The weight files: model.safetensors, or the shards named by model.safetensors.index.json.
  std::vector<std::string> files;
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    json j;
    try {
      j = json::parse(io::read_file(index.string(), "load_llama"));
    } catch (const json::exception& e) {
      throw FormatError(index.string() + ": not valid JSON: " + e.what());
    }
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      throw FormatError(index.string() + ": needs an object 'weight_map' (tensor name -> file)");
    std::set<std::string> names;
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string()) throw FormatError(index.string() + ": weight_map['" + name + "'] is not a file name");
      const std::string fname = file.get<std::string>();
      if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
        throw FormatError(index.string() + ": weight_map['" + name + "'] = '" + fname + "' is not a file of the folder");
      names.insert(fname);
    }
    for (const std::string& n : names) files.push_back((fs::path(path) / n).string());
  } else {
    files.push_back((fs::path(path) / "model.safetensors").string());
  }
  std::map<std::string, TensorSource> t;
  std::vector<std::shared_ptr<const void>> keep;
  for (const std::string& file : files) {
    auto st = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(file));
    for (const io::StTensorInfo& info : st->tensors()) {
      const auto qt = st_qtype(info.dtype);
      if (!qt)
        throw FormatError(file + ": tensor " + info.name + " has dtype " + io::st_dtype_name(info.dtype) +
                          " (Llama-family weights must be F32, F16 or BF16)");
      if (t.count(info.name)) throw FormatError(file + ": tensor " + info.name + " is also in another shard");
      t[info.name] = TensorSource{*qt, st->data(info), info.shape};
    }
    keep.push_back(st);
  }
  LlamaWeights w = assemble(c, t, files.size() == 1 ? files[0] : path, /*gguf=*/false);
  for (auto& k : keep) w.keep_alive.push_back(k);
  return std::make_shared<LlamaForCausalLM>(c, std::move(w));
}

}  // namespace qkv::models
