// BERT encoder (see bert.h).
#include "qkv/models/bert.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/io/tensors.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops/ops.h"

namespace qkv::models {

// ---- config ----

BertConfig bert_config_from_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw FormatError(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw FormatError(source + ": expected a JSON object");
  BertConfig c;
  auto get_int = [&](const char* key, std::int64_t& dst, std::int64_t lo) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    if (!v.is_number_integer()) throw FormatError(source + ": '" + key + "' must be an integer, got " + v.dump());
    dst = v.get<std::int64_t>();
    if (dst < lo) throw ValueError(source + ": '" + key + "' must be >= " + std::to_string(lo) + ", got " + v.dump());
  };
  auto get_string = [&](const char* key) -> std::string {
    if (!j.contains(key) || j.at(key).is_null()) return "";
    if (!j.at(key).is_string()) throw FormatError(source + ": '" + key + "' must be a string, got " + j.at(key).dump());
    return j.at(key).get<std::string>();
  };
  auto require = [&](const char* key, const std::string& value, std::initializer_list<const char*> ok) {
    if (value.empty()) return;
    for (const char* o : ok)
      if (value == o) return;
    std::string list;
    for (const char* o : ok) list += std::string(list.empty() ? "" : ", ") + "'" + o + "'";
    throw ValueError(source + ": unsupported " + key + " '" + value + "' (supported: " + list + ")");
  };
  get_int("vocab_size", c.vocab_size, 1);
  get_int("hidden_size", c.hidden_size, 1);
  get_int("num_hidden_layers", c.num_hidden_layers, 0);
  get_int("num_attention_heads", c.num_attention_heads, 1);
  get_int("intermediate_size", c.intermediate_size, 1);
  get_int("max_position_embeddings", c.max_position_embeddings, 1);
  get_int("type_vocab_size", c.type_vocab_size, 1);
  if (j.contains("pad_token_id") && !j.at("pad_token_id").is_null()) get_int("pad_token_id", c.pad_token_id, 0);
  if (j.contains("layer_norm_eps")) {
    const auto& v = j.at("layer_norm_eps");
    if (!v.is_number()) throw FormatError(source + ": 'layer_norm_eps' must be a number, got " + v.dump());
    c.layer_norm_eps = v.get<double>();
    if (!(c.layer_norm_eps > 0.0)) throw ValueError(source + ": 'layer_norm_eps' must be > 0, got " + v.dump());
  }
  require("model_type", get_string("model_type"), {"bert"});
  require("hidden_act", get_string("hidden_act"), {"gelu"});
  require("position_embedding_type", get_string("position_embedding_type"), {"absolute"});
  for (const char* key : {"is_decoder", "add_cross_attention"})
    if (j.contains(key) && j.at(key).is_boolean() && j.at(key).get<bool>())
      throw ValueError(source + ": unsupported " + key + " true (only the encoder is supported)");
  if (c.hidden_size % c.num_attention_heads != 0)
    throw ValueError(source + ": hidden_size " + std::to_string(c.hidden_size) + " is not divisible by num_attention_heads " +
                     std::to_string(c.num_attention_heads));
  // Bounds that keep a hostile config from asking for absurd allocations before the tensors are checked.
  for (auto [key, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size}, {"max_position_embeddings", c.max_position_embeddings},
                        {"num_hidden_layers", c.num_hidden_layers}, {"type_vocab_size", c.type_vocab_size}})
    if (v > (std::int64_t{1} << 24)) throw ValueError(source + ": '" + key + "' " + std::to_string(v) + " is absurdly large");
  return c;
}

std::vector<std::pair<std::string, Shape>> bert_expected_tensors(const BertConfig& c) {
  const std::int64_t C = c.hidden_size, F = c.intermediate_size;
  std::vector<std::pair<std::string, Shape>> t = {
      {"embeddings.word_embeddings.weight", {c.vocab_size, C}},
      {"embeddings.position_embeddings.weight", {c.max_position_embeddings, C}},
      {"embeddings.token_type_embeddings.weight", {c.type_vocab_size, C}},
      {"embeddings.LayerNorm.weight", {C}},
      {"embeddings.LayerNorm.bias", {C}},
  };
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "encoder.layer." + std::to_string(i) + ".";
    for (const char* n : {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      t.push_back({p + n + ".weight", {C, C}});
      t.push_back({p + n + ".bias", {C}});
    }
    t.push_back({p + "attention.output.LayerNorm.weight", {C}});
    t.push_back({p + "attention.output.LayerNorm.bias", {C}});
    t.push_back({p + "intermediate.dense.weight", {F, C}});
    t.push_back({p + "intermediate.dense.bias", {F}});
    t.push_back({p + "output.dense.weight", {C, F}});
    t.push_back({p + "output.dense.bias", {C}});
    t.push_back({p + "output.LayerNorm.weight", {C}});
    t.push_back({p + "output.LayerNorm.bias", {C}});
  }
  return t;
}

// ---- modules ----

BertLayer::BertLayer(const BertConfig& c) : cfg_(c) {
  auto lin = [&](const char* name, std::int64_t in, std::int64_t out) {
    return register_module(name, std::make_shared<nn::Linear>(nn::LinearOptions{.in_features = in, .out_features = out}));
  };
  auto norm = [&](const char* name) {
    return register_module(name, std::make_shared<nn::LayerNorm>(
                                     nn::LayerNormOptions{.normalized_shape = c.hidden_size, .eps = c.layer_norm_eps}));
  };
  const std::int64_t C = c.hidden_size, F = c.intermediate_size;
  query = lin("attention.self.query", C, C);
  key = lin("attention.self.key", C, C);
  value = lin("attention.self.value", C, C);
  attn_out = lin("attention.output.dense", C, C);
  attn_norm = norm("attention.output.LayerNorm");
  intermediate = lin("intermediate.dense", C, F);
  output = lin("output.dense", F, C);
  output_norm = norm("output.LayerNorm");
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& key_mask, Tensor* attn_weights) const {
  const std::int64_t B = x.size(0), T = x.size(1), H = cfg_.num_attention_heads, D = cfg_.hidden_size / H;
  // [B, T, C] -> view [B, T, H, D] -> transpose(1, 2) -> [B, H, T, D]
  auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  const Mask mask = key_mask.defined() ? Mask::keep(key_mask) : Mask();
  AttentionOutput att = scaled_dot_product_attention(heads(query->forward(x)), heads(key->forward(x)),
                                                     heads(value->forward(x)), mask,
                                                     {.need_weights = attn_weights != nullptr});
  if (attn_weights) *attn_weights = att.weights;                             // [B, H, T, T]
  Tensor a = att.output;                                                     // [B, H, T, D]
  a = a.transpose(1, 2).contiguous().view({B, T, cfg_.hidden_size});         // merge heads [B, T, C]
  const Tensor h = attn_norm->forward(add(x, attn_out->forward(a)));         // post-norm
  const Tensor f = output->forward(gelu(intermediate->forward(h), GeluApprox::None));
  return output_norm->forward(add(h, f));
}

BertModel::BertModel(const BertConfig& c) : cfg_(c) {
  const std::int64_t C = c.hidden_size;
  {
    MemoryEstimate est, layer;
    est.add({c.vocab_size, C}).add({c.max_position_embeddings, C}).add({c.type_vocab_size, C}).add({C}, 2);
    nn::add_encoder_block_memory(layer, nn::EncoderBlockOptions{.d_model = C, .num_heads = c.num_attention_heads,
                                                                .d_ff = c.intermediate_size});
    est.add(layer.scale(c.num_hidden_layers))
        .check("BertModel (vocab_size " + std::to_string(c.vocab_size) + ", hidden_size " + std::to_string(C) +
               ", intermediate_size " + std::to_string(c.intermediate_size) + ", " +
               std::to_string(c.num_hidden_layers) + " layers)");
  }
  auto emb = [&](const char* name, std::int64_t n) {
    return register_module(name, std::make_shared<nn::Embedding>(nn::EmbeddingOptions{.num_embeddings = n, .embedding_dim = C}));
  };
  word_embeddings = emb("embeddings.word_embeddings", c.vocab_size);
  position_embeddings = emb("embeddings.position_embeddings", c.max_position_embeddings);
  token_type_embeddings = emb("embeddings.token_type_embeddings", c.type_vocab_size);
  embeddings_norm = register_module("embeddings.LayerNorm", std::make_shared<nn::LayerNorm>(nn::LayerNormOptions{
                                                                .normalized_shape = C, .eps = c.layer_norm_eps}));
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(register_module("encoder.layer." + std::to_string(i), std::make_shared<BertLayer>(c)));
}

Tensor BertModel::forward(const Tensor& ids, const Tensor& attention_mask, std::vector<Tensor>* hidden_states,
                          std::vector<Tensor>* attentions) const {
  if (!ids.defined() || ids.dtype() != DType::I64 || ids.dim() != 2)
    throw ShapeError("BertModel: ids must be int64 [B, T], got " +
                     (ids.defined() ? std::string(dtype_name(ids.dtype())) + " " + ids.shape_str() : std::string("undefined")));
  const std::int64_t B = ids.size(0), T = ids.size(1);
  if (T > cfg_.max_position_embeddings)
    throw ValueError("BertModel: sequence length " + std::to_string(T) + " exceeds max_position_embeddings " +
                     std::to_string(cfg_.max_position_embeddings));
  Tensor key_mask;
  if (attention_mask.defined()) {
    if (attention_mask.shape() != ids.shape())
      throw ShapeError("BertModel: attention_mask must be [B, T] = " + ids.shape_str() + ", got " + attention_mask.shape_str());
    key_mask = ne(attention_mask, 0.0).view({B, 1, 1, T});
  }
  const Tensor positions = Tensor::arange(T, DType::I64);
  Tensor x = add(word_embeddings->forward(ids), position_embeddings->forward(positions));  // [B, T, C] + [T, C]
  x = add(x, token_type_embeddings->weight.select(0, 0));                                   // token type 0 for every token
  x = embeddings_norm->forward(x);
  if (hidden_states) {
    hidden_states->clear();
    hidden_states->push_back(x);
  }
  if (attentions) attentions->clear();
  for (const auto& layer : layers) {
    Tensor w;
    x = layer->forward(x, key_mask, attentions ? &w : nullptr);
    if (hidden_states) hidden_states->push_back(x);
    if (attentions) attentions->push_back(w);
  }
  return x;
}

// ---- loading ----

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool ignored_name(const std::string& n) {
  return n == "embeddings.position_ids" || n.rfind("pooler.", 0) == 0 || n.rfind("cls.", 0) == 0;
}

}  // namespace

std::shared_ptr<BertModel> BertModel::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw IOError("BertModel: model folder " + dir + " does not exist");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string weights_path = (fs::path(dir) / "model.safetensors").string();
  for (const auto& p : {config_path, weights_path})
    if (!fs::exists(p)) throw IOError("BertModel: " + p + " is missing");
  const BertConfig cfg = bert_config_from_json(read_text(config_path), config_path);
  io::LoadedTensors file = io::load_safetensors(weights_path);

  bool prefixed = false;
  for (const auto& [name, t] : file.tensors) prefixed = prefixed || name.rfind("bert.", 0) == 0;
  std::map<std::string, Tensor> named;
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : file.tensors) {
    std::string n = name;
    if (prefixed && n.rfind("bert.", 0) == 0) n = n.substr(5);
    if (ignored_name(n)) continue;
    named[n] = t;
  }
  std::vector<std::string> missing, wrong;
  std::set<std::string> expected_names;
  for (const auto& [name, shape] : bert_expected_tensors(cfg)) {
    expected_names.insert(name);
    auto it = named.find(name);
    if (it == named.end()) missing.push_back(name + " " + shape_str(shape));
    else if (it->second.shape() != shape) wrong.push_back(name + " is " + it->second.shape_str() + ", config.json needs " + shape_str(shape));
    else if (!is_floating(it->second.dtype())) wrong.push_back(name + " has dtype " + dtype_name(it->second.dtype()));
  }
  for (const auto& [name, t] : named)
    if (!expected_names.count(name)) unexpected.push_back((prefixed ? "bert." : "") + name + " " + t.shape_str());
  if (!missing.empty() || !unexpected.empty() || !wrong.empty()) {
    std::string msg = "BertModel: " + weights_path + " does not match " + config_path + ":";
    auto list = [&](const char* what, const std::vector<std::string>& v) {
      if (v.empty()) return;
      msg += std::string("\n  ") + what + " (" + std::to_string(v.size()) + "):";
      for (const auto& s : v) msg += "\n    " + s;
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("wrong shape or dtype", wrong);
    throw ValueError(msg);
  }
  auto model = [&] {
    nn::SkipInitGuard skip;  // every parameter is loaded next: no random initialisation
    return std::make_shared<BertModel>(cfg);
  }();
  autograd::NoGradGuard no_grad;
  // Parameters view the file's tensors (mapped float32, or converted copies): no copy. Every
  // name and shape was checked above.
  std::set<std::string> params;
  for (auto& [n, p] : model->named_parameters()) {
    const Tensor& t = named.at(n);
    if (t.dtype() == p.dtype()) p.set_data_(t);
    else p.copy_(t);
    params.insert(n);
  }
  nn::StateDict buffers;
  for (const auto& [n, t] : named)
    if (!params.count(n)) buffers[n] = t;
  if (!buffers.empty()) model->load_state_dict(buffers, false);
  for (auto& p : model->parameters()) p.requires_grad_(false);
  model->eval();
  return model;
}

}  // namespace qkv::models
