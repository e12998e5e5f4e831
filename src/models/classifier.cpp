// TinyTextClassifier, its toy task and its attention maps (see classifier.h).
#include "qkv/models/classifier.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/models/attention_maps.h"
#include "qkv/ops/ops.h"

namespace qkv::models {

// ---- config ----

std::string classifier_config_to_json(const ClassifierOptions& o) {
  nlohmann::ordered_json j;
  j["model"] = "TinyTextClassifier";
  j["vocab_size"] = o.vocab_size;
  j["d_model"] = o.d_model;
  j["num_heads"] = o.num_heads;
  j["d_ff"] = o.d_ff;
  j["num_layers"] = o.num_layers;
  j["num_classes"] = o.num_classes;
  j["max_len"] = o.max_len;
  j["dropout"] = o.dropout;
  j["layer_norm_eps"] = o.layer_norm_eps;
  j["activation"] = "relu";
  j["norm_first"] = false;
  j["pooling"] = "x[:,0,:]";
  j["positional_encoding"] = "sinusoidal_interleaved";
  j["dtype"] = dtype_name(o.dtype);
  return j.dump();
}

ClassifierOptions classifier_config_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw ValueError(std::string("classifier config: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ValueError("classifier config: expected a JSON object, got " + j.dump());
  ClassifierOptions o;
  auto get_int = [&](const char* key, std::int64_t& dst, std::int64_t lo) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    if (!v.is_number_integer()) throw ValueError(std::string("classifier config: '") + key + "' must be an integer, got " + v.dump());
    dst = v.get<std::int64_t>();
    if (dst < lo) throw ValueError(std::string("classifier config: '") + key + "' must be >= " + std::to_string(lo) + ", got " + v.dump());
  };
  auto get_num = [&](const char* key, double& dst) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    if (!v.is_number()) throw ValueError(std::string("classifier config: '") + key + "' must be a number, got " + v.dump());
    dst = v.get<double>();
  };
  get_int("vocab_size", o.vocab_size, 1);
  get_int("d_model", o.d_model, 1);
  get_int("num_heads", o.num_heads, 1);
  get_int("d_ff", o.d_ff, 1);
  get_int("num_layers", o.num_layers, 0);
  get_int("num_classes", o.num_classes, 1);
  get_int("max_len", o.max_len, 1);
  get_num("dropout", o.dropout);
  get_num("layer_norm_eps", o.layer_norm_eps);
  if (j.contains("activation") && j.at("activation") != "relu")
    throw ValueError("classifier config: only activation 'relu' is supported, got " + j.at("activation").dump());
  if (j.contains("norm_first") && j.at("norm_first") != false)
    throw ValueError("classifier config: only post-norm (norm_first false) is supported");
  if (j.contains("dtype")) {
    if (!j.at("dtype").is_string())
      throw ValueError("classifier config: dtype must be \"float32\" or \"float64\", got " + j.at("dtype").dump());
    const auto s = j.at("dtype").get<std::string>();
    if (s == dtype_name(DType::F64)) o.dtype = DType::F64;
    else if (s != dtype_name(DType::F32)) throw ValueError("classifier config: dtype must be float32 or float64, got " + s);
  }
  if (o.d_model % o.num_heads != 0)
    throw ValueError("classifier config: d_model " + std::to_string(o.d_model) + " is not divisible by num_heads " +
                     std::to_string(o.num_heads));
  if (!(o.dropout >= 0.0 && o.dropout < 1.0))
    throw ValueError("classifier config: dropout must be in [0, 1), got " + std::to_string(o.dropout));
  return o;
}

namespace {

// A count that may be astronomically large (from a hostile config), printed as an integer or
// like 1.2e+18 (a double beyond the int64 range must not be cast to one).
std::string general_count(double v) {
  if (v < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

void check_classifier_config_fits(const ClassifierOptions& o, const nn::StateDict& model) {
  double have = 0;
  for (const auto& [name, t] : model) have += static_cast<double>(t.numel());
  const double d = static_cast<double>(o.d_model), f = static_cast<double>(o.d_ff);
  // Lower bound of what load_state_dict will require: embedding, per-layer attention
  // projections and feed-forward weights, the classifier's weight.
  const double need = static_cast<double>(o.vocab_size) * d + static_cast<double>(o.num_layers) * (4 * d * d + 2 * d * f) +
                      d * static_cast<double>(o.num_classes);
  if (need > have)
    throw ValueError("classifier config describes a model of at least " + general_count(need) +
                     " parameters, but the checkpoint's tensors hold only " + general_count(have) + " values");
  if (static_cast<double>(o.max_len) * d > have + (1 << 20))
    throw ValueError("classifier config asks for a positional table of " + std::to_string(o.max_len) + " x " +
                     std::to_string(o.d_model) + ", far larger than its model (" + general_count(have) + " values)");
}

// ---- model ----

TinyTextClassifier::TinyTextClassifier(const ClassifierOptions& o) : opt_(o) {
  if (o.d_model % o.num_heads != 0)
    throw ValueError("TinyTextClassifier: d_model " + std::to_string(o.d_model) + " is not divisible by num_heads " +
                     std::to_string(o.num_heads));
  {
    MemoryEstimate est, layer;
    const std::int64_t es = static_cast<std::int64_t>(dtype_size(o.dtype));
    nn::add_encoder_block_memory(layer, nn::EncoderBlockOptions{.d_model = o.d_model, .num_heads = o.num_heads,
                                                                .d_ff = o.d_ff, .dtype = o.dtype});
    est.add({o.vocab_size, o.d_model}, 1, es).add({o.max_len, o.d_model}, 1, es).add({o.d_model, o.num_classes}, 1, es);
    est.add(layer.scale(o.num_layers))
        .check("TinyTextClassifier (vocab_size " + std::to_string(o.vocab_size) + ", d_model " +
               std::to_string(o.d_model) + ", d_ff " + std::to_string(o.d_ff) + ", " + std::to_string(o.num_layers) +
               " layers, max_len " + std::to_string(o.max_len) + ")");
  }
  // Registration order = the PyTorch model's: embedding, encoder, classifier (pos_encoding has no state).
  embedding = register_module("embedding", std::make_shared<nn::Embedding>(nn::EmbeddingOptions{
                                               .num_embeddings = o.vocab_size, .embedding_dim = o.d_model, .dtype = o.dtype}));
  pos_encoding = std::make_shared<nn::SinusoidalPositionalEncoding>(
      nn::SinusoidalPositionalEncodingOptions{.d_model = o.d_model, .max_len = o.max_len, .dtype = o.dtype});
  encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(nn::EncoderOptions{
                                           .num_layers = o.num_layers,
                                           .layer = {.d_model = o.d_model,
                                                     .num_heads = o.num_heads,
                                                     .d_ff = o.d_ff,
                                                     .dropout = o.dropout,
                                                     .activation = nn::Activation::ReLU,
                                                     .norm_first = false,
                                                     .layer_norm_eps = o.layer_norm_eps,
                                                     .dtype = o.dtype},
                                           .final_norm = false}));
  classifier = register_module("classifier", std::make_shared<nn::Linear>(nn::LinearOptions{
                                                 .in_features = o.d_model, .out_features = o.num_classes, .dtype = o.dtype}));
}

namespace {

// The last post-norm encoder block evaluated for position 0 only: x [B, L, E] -> [B, 1, E].
// The classifier reads nothing but x[:, 0, :] of the last layer, and in that layer
// position 0 depends on every key/value but on no other query row, so
//   q = w_q(x[:, :1]); k = w_k(x); v = w_v(x); a = w_o(merge(sdpa(q, k, v)))
//   h = norm1(x[:, :1] + drop(a)); out = norm2(h + drop(ffn(h)))
// is the same function as block(x)[:, :1] at ~1/3 of the cost (K and V stay full width).
// Dropout masks are drawn for the rows computed only, so a run is reproducible but
// its masks differ from a full-width evaluation (those rows never reach the output).
Tensor last_block_first_position(const nn::TransformerEncoderBlock& b, const Tensor& x) {
  const nn::MultiHeadAttention& mha = *b.self_attn;
  const double p = b.options().dropout;
  const bool training = b.is_training();
  const Tensor x0 = x.narrow(1, 0, 1);  // [B, 1, E]
  const Tensor q = mha.split_heads(mha.w_q->forward(x0));  // [B, H, 1, D]
  const Tensor k = mha.split_heads(mha.w_k->forward(x));   // [B, H, L, D]
  const Tensor v = mha.split_heads(mha.w_v->forward(x));   // [B, H, L, D]
  const Tensor a = mha.attend(q, k, v, Mask(), false).output;  // [B, 1, E]
  const Tensor h = b.norm1->forward(add(x0, dropout(a, p, training)));
  return b.norm2->forward(add(h, dropout(b.ffn->forward(h), p, training)));
}

}  // namespace

Tensor TinyTextClassifier::forward(const Tensor& tokens, std::vector<Tensor>* attn_weights) const {
  if (tokens.dim() != 2)
    throw ShapeError("TinyTextClassifier: tokens must be [B, L], got " + tokens.shape_str());
  Tensor x = pos_encoding->forward(embedding->forward(tokens));  // [B, L, E]
  const auto& layers = encoder->layers;
  if (attn_weights || layers.empty() || layers.back()->options().norm_first) {
    x = encoder->forward(x, Mask(), attn_weights);  // every layer in full: [B, L, E]
    return classifier->forward(x.select(1, 0));     // pooled [B, E] -> [B, C]
  }
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) x = layers[i]->forward(x);
  x = last_block_first_position(*layers.back(), x);  // [B, 1, E]
  return classifier->forward(x.select(1, 0));         // pooled [B, E] -> [B, C]
}

// ---- the task ----

std::int64_t classify_label(const std::int64_t* t, std::int64_t len) {
  bool has3 = false, has7 = false;
  for (std::int64_t i = 0; i < len; ++i) {
    has3 |= t[i] == 3;
    has7 |= t[i] == 7;
  }
  return has3 && has7 ? 1 : 0;
}

ClassifyData make_classify_data(const ClassifyDataOptions& o, Generator& gen) {
  if (o.num_samples < 0 || o.seq_len < 1 || o.vocab_size < 8)
    throw ValueError("classify data: need num_samples >= 0, seq_len >= 1 and vocab_size >= 8 (tokens 3 and 7), got " +
                     std::to_string(o.num_samples) + ", " + std::to_string(o.seq_len) + ", " + std::to_string(o.vocab_size));
  if (o.balanced && o.seq_len < 2) throw ValueError("classify data: a balanced set needs seq_len >= 2");
  const std::int64_t N = o.num_samples, L = o.seq_len;
  std::vector<std::int64_t> toks(static_cast<std::size_t>(N * L)), labels(static_cast<std::size_t>(N));
  std::vector<std::int64_t> row(static_cast<std::size_t>(L));
  auto draw = [&] {
    for (auto& t : row) t = gen.randint(1, o.vocab_size);
    return classify_label(row.data(), L);
  };
  if (!o.balanced) {
    for (std::int64_t n = 0; n < N; ++n) {
      labels[n] = draw();
      std::copy(row.begin(), row.end(), toks.begin() + n * L);
    }
  } else {
    // Rejection sampling: rows keep the uniform distribution conditioned on their label.
    const std::int64_t want_pos = N / 2, want_neg = N - N / 2;
    std::int64_t pos = 0, neg = 0, n = 0;
    while (n < N) {
      const std::int64_t y = draw();
      if (y == 1 ? pos >= want_pos : neg >= want_neg) continue;
      (y == 1 ? pos : neg)++;
      labels[n] = y;
      std::copy(row.begin(), row.end(), toks.begin() + n * L);
      ++n;
    }
    // Fisher-Yates shuffle so the label order carries no information.
    for (std::int64_t i = N - 1; i > 0; --i) {
      const std::int64_t j = gen.randint(0, i + 1);
      std::swap(labels[i], labels[j]);
      std::swap_ranges(toks.begin() + i * L, toks.begin() + (i + 1) * L, toks.begin() + j * L);
    }
  }
  return {Tensor::from_vector(toks, {N, L}), Tensor::from_vector(labels, {N})};
}

double accuracy(const Tensor& logits, const Tensor& labels) {
  if (logits.dim() != 2 || labels.dim() != 1 || logits.size(0) != labels.size(0))
    throw ShapeError("accuracy: logits must be [N, C] and labels [N], got " + logits.shape_str() + " and " +
                     labels.shape_str());
  const std::int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return 0.0;
  const auto l = logits.detach().to_vector<double>();
  const auto y = labels.to_vector<std::int64_t>();
  std::int64_t ok = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    std::int64_t best = 0;
    for (std::int64_t c = 1; c < C; ++c)
      if (l[n * C + c] > l[n * C + best]) best = c;  // first maximum, as torch.argmax
    ok += best == y[n];
  }
  return static_cast<double>(ok) / static_cast<double>(N);
}

double majority_baseline(const Tensor& labels) {
  const auto y = labels.to_vector<std::int64_t>();
  if (y.empty()) return 0.0;
  std::map<std::int64_t, std::int64_t> count;
  for (auto v : y) count[v]++;
  std::int64_t best = 0;
  for (const auto& [k, c] : count) best = std::max(best, c);
  return static_cast<double>(best) / static_cast<double>(y.size());
}

// ---- attention maps ----

std::vector<AttentionMap> classifier_attention_maps(const io::Checkpoint& ckpt, const std::string& input) {
  const ClassifierOptions o = classifier_config_from_json(ckpt.config_json);
  check_classifier_config_fits(o, ckpt.model);
  std::vector<std::int64_t> ids;
  {
    std::istringstream in(input);
    std::string tok;
    while (in >> tok) {
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(tok, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != tok.size())
        throw ValueError("classifier input: expected space-separated token ids, got '" + tok + "'");
      if (v < 0 || v >= o.vocab_size)
        throw ValueError("classifier input: token id " + tok + " is outside [0, " + std::to_string(o.vocab_size) + ")");
      ids.push_back(v);
    }
  }
  if (ids.empty()) throw ValueError("classifier input: no token ids (expected e.g. \"3 5 7 1 2 9 4 8\")");
  if (static_cast<std::int64_t>(ids.size()) > o.max_len)
    throw ValueError("classifier input: " + std::to_string(ids.size()) + " tokens, more than max_len " +
                     std::to_string(o.max_len));
  const auto made = [&] {
    nn::SkipInitGuard skip;  // every parameter is loaded next: no random initialisation
    return std::make_unique<TinyTextClassifier>(o);
  }();
  TinyTextClassifier& model = *made;
  model.load_state_dict(ckpt.model);
  model.eval();
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> w;
  const std::int64_t L = static_cast<std::int64_t>(ids.size());
  model.forward(Tensor::from_vector(ids, {1, L}), &w);
  std::vector<std::string> labels;
  for (auto id : ids) labels.push_back("t" + std::to_string(id));
  std::vector<AttentionMap> maps;
  for (std::size_t i = 0; i < w.size(); ++i) {
    AttentionMap m;
    m.name = "encoder.layers." + std::to_string(i) + ".self_attn";
    m.kind = "self";
    m.layer = static_cast<int>(i);
    m.weights = w[i].select(0, 0).to(DType::F32).contiguous();  // [H, L, L]
    m.query_tokens = labels;
    m.key_tokens = labels;
    maps.push_back(std::move(m));
  }
  return maps;
}

}  // namespace qkv::models
