// Seq2Seq encoder-decoder, its toy tasks, training, greedy decoding and
// attention maps. See include/qkv/models/seq2seq.h for the token layout.
#include "qkv/models/seq2seq.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/models/attention_maps.h"
#include "qkv/ops/ops.h"
#include "qkv/optim/optimizer.h"

namespace qkv::models {

// ---------------------------------------------------------------- tokens, tasks

std::string seq2seq_token_label(std::int64_t id) {
  if (id == kSeq2SeqPad) return "<pad>";
  if (id == kSeq2SeqBos) return "<bos>";
  if (id == kSeq2SeqEos) return "<eos>";
  if (id >= kSeq2SeqFirstDigit && id < kSeq2SeqVocab) return std::to_string(id - kSeq2SeqFirstDigit);
  return "<unk:" + std::to_string(id) + ">";
}

const char* seq2seq_task_name(Seq2SeqTask t) {
  switch (t) {
    case Seq2SeqTask::Reverse: return "reverse";
    case Seq2SeqTask::Copy: return "copy";
    case Seq2SeqTask::Sort: return "sort";
  }
  return "?";
}

Seq2SeqTask parse_seq2seq_task(const std::string& s) {
  if (s == "reverse") return Seq2SeqTask::Reverse;
  if (s == "copy") return Seq2SeqTask::Copy;
  if (s == "sort") return Seq2SeqTask::Sort;
  throw ValueError("seq2seq: unknown task '" + s + "' (tasks: reverse, copy, sort)");
}

std::vector<std::int64_t> seq2seq_target(Seq2SeqTask task, const std::vector<std::int64_t>& input) {
  std::vector<std::int64_t> t = input;
  if (task == Seq2SeqTask::Reverse) std::reverse(t.begin(), t.end());
  if (task == Seq2SeqTask::Sort) std::sort(t.begin(), t.end());
  return t;
}

namespace {

std::vector<std::int64_t> random_digits(Generator& gen, std::int64_t len) {
  std::vector<std::int64_t> d(static_cast<std::size_t>(len));
  for (auto& v : d) v = gen.randint(0, kSeq2SeqNumDigits);
  return d;
}

// 10^len capped (only compared against small counts).
std::int64_t sequences_of_length(std::int64_t len) {
  std::int64_t n = 1;
  for (std::int64_t i = 0; i < len && n < (std::int64_t{1} << 40); ++i) n *= kSeq2SeqNumDigits;
  return n;
}

}  // namespace

Seq2SeqData make_seq2seq_data(const Seq2SeqDataOptions& o) {
  if (o.min_len < 1 || o.max_len < o.min_len)
    throw ValueError("seq2seq data: need 1 <= min_len <= max_len, got min_len " + std::to_string(o.min_len) +
                     ", max_len " + std::to_string(o.max_len));
  if (o.train_size < 1 || o.test_size < 0)
    throw ValueError("seq2seq data: need train_size >= 1 and test_size >= 0");
  Generator gen(mix64(o.seed ^ 0x5e95e9ull));
  std::set<std::vector<std::int64_t>> held_out;
  std::vector<std::int64_t> per_len(static_cast<std::size_t>(o.max_len + 1), 0);
  Seq2SeqData d;
  // Held-out set: distinct sequences, at most a tenth of any length's sequences.
  std::int64_t capacity = 0;
  for (std::int64_t l = o.min_len; l <= o.max_len; ++l) capacity += sequences_of_length(l) / 10;
  if (o.test_size > capacity)
    throw ValueError("seq2seq data: test_size " + std::to_string(o.test_size) + " is more than a tenth of the " +
                     "sequences of lengths " + std::to_string(o.min_len) + ".." + std::to_string(o.max_len));
  while (static_cast<std::int64_t>(d.test.size()) < o.test_size) {
    const std::int64_t len = gen.randint(o.min_len, o.max_len + 1);
    if (per_len[len] >= sequences_of_length(len) / 10) continue;
    auto in = random_digits(gen, len);
    if (!held_out.insert(in).second) continue;
    ++per_len[len];
    d.test.push_back({in, seq2seq_target(o.task, in)});
  }
  d.train.reserve(static_cast<std::size_t>(o.train_size));
  while (static_cast<std::int64_t>(d.train.size()) < o.train_size) {
    auto in = random_digits(gen, gen.randint(o.min_len, o.max_len + 1));
    if (held_out.count(in)) continue;
    d.train.push_back({in, seq2seq_target(o.task, in)});
  }
  return d;
}

Tensor make_seq2seq_source(const std::vector<std::vector<std::int64_t>>& inputs) {
  if (inputs.empty()) throw ValueError("seq2seq: empty batch");
  std::size_t S = 0;
  for (const auto& in : inputs) S = std::max(S, in.size() + 1);
  const std::int64_t B = static_cast<std::int64_t>(inputs.size());
  std::vector<std::int64_t> src(inputs.size() * S, kSeq2SeqPad);
  for (std::size_t b = 0; b < inputs.size(); ++b) {
    for (std::size_t i = 0; i < inputs[b].size(); ++i) {
      const std::int64_t v = inputs[b][i];
      if (v < 0 || v >= kSeq2SeqNumDigits) throw ValueError("seq2seq: digit out of range: " + std::to_string(v));
      src[b * S + i] = kSeq2SeqFirstDigit + v;
    }
    src[b * S + inputs[b].size()] = kSeq2SeqEos;
  }
  return Tensor::from_vector(src, {B, static_cast<std::int64_t>(S)});
}

Seq2SeqBatch make_seq2seq_batch(const std::vector<Seq2SeqExample>& ex) {
  std::vector<std::vector<std::int64_t>> inputs;
  std::size_t T = 0;
  for (const auto& e : ex) {
    inputs.push_back(e.input);
    T = std::max(T, e.target.size() + 1);
  }
  Seq2SeqBatch b;
  b.src = make_seq2seq_source(inputs);
  std::vector<std::int64_t> tin(ex.size() * T, kSeq2SeqPad), tout(ex.size() * T, -100);
  for (std::size_t r = 0; r < ex.size(); ++r) {
    const auto& t = ex[r].target;
    tin[r * T] = kSeq2SeqBos;
    for (std::size_t i = 0; i < t.size(); ++i) {
      tin[r * T + i + 1] = kSeq2SeqFirstDigit + t[i];
      tout[r * T + i] = kSeq2SeqFirstDigit + t[i];
    }
    tout[r * T + t.size()] = kSeq2SeqEos;
  }
  const Shape shape{static_cast<std::int64_t>(ex.size()), static_cast<std::int64_t>(T)};
  b.tgt_in = Tensor::from_vector(tin, shape);
  b.tgt_out = Tensor::from_vector(tout, shape);
  return b;
}

// ---------------------------------------------------------------- options JSON

std::string Seq2SeqOptions::to_json() const {
  nlohmann::json j = {{"vocab_size", vocab_size},
                      {"d_model", d_model},
                      {"num_heads", num_heads},
                      {"num_encoder_layers", num_encoder_layers},
                      {"num_decoder_layers", num_decoder_layers},
                      {"d_ff", d_ff},
                      {"dropout", dropout},
                      {"max_positions", max_positions},
                      {"norm_first", norm_first},
                      {"learned_positions", learned_positions},
                      {"activation", nn::activation_name(activation)}};
  return j.dump();
}

Seq2SeqOptions Seq2SeqOptions::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw ValueError(std::string("seq2seq config: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw ValueError("seq2seq config: expected a JSON object");
  Seq2SeqOptions o;
  auto get_int = [&](const char* key, std::int64_t* out, std::int64_t lo) {
    if (!j.contains(key)) return;
    if (!j[key].is_number_integer()) throw ValueError(std::string("seq2seq config: '") + key + "' must be an integer");
    *out = j[key].get<std::int64_t>();
    if (*out < lo)
      throw ValueError(std::string("seq2seq config: '") + key + "' must be >= " + std::to_string(lo) + ", got " +
                       std::to_string(*out));
  };
  auto get_bool = [&](const char* key, bool* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_boolean()) throw ValueError(std::string("seq2seq config: '") + key + "' must be true or false");
    *out = j[key].get<bool>();
  };
  for (const auto& [k, v] : j.items()) {
    static const std::set<std::string> known = {"vocab_size", "d_model", "num_heads", "num_encoder_layers",
                                                "num_decoder_layers", "d_ff", "dropout", "max_positions",
                                                "norm_first", "learned_positions", "activation"};
    if (!known.count(k)) throw ValueError("seq2seq config: unknown field '" + k + "'");
  }
  get_int("vocab_size", &o.vocab_size, 1);
  get_int("d_model", &o.d_model, 1);
  get_int("num_heads", &o.num_heads, 1);
  get_int("num_encoder_layers", &o.num_encoder_layers, 0);
  get_int("num_decoder_layers", &o.num_decoder_layers, 0);
  get_int("d_ff", &o.d_ff, 1);
  get_int("max_positions", &o.max_positions, 1);
  get_bool("norm_first", &o.norm_first);
  get_bool("learned_positions", &o.learned_positions);
  if (j.contains("dropout")) {
    if (!j["dropout"].is_number()) throw ValueError("seq2seq config: 'dropout' must be a number");
    o.dropout = j["dropout"].get<double>();
    if (!(o.dropout >= 0.0 && o.dropout < 1.0)) throw ValueError("seq2seq config: 'dropout' must be in [0, 1)");
  }
  if (j.contains("activation")) {
    const std::string a = j["activation"].is_string() ? j["activation"].get<std::string>() : "";
    if (a == "relu") o.activation = nn::Activation::ReLU;
    else if (a == "gelu") o.activation = nn::Activation::GELU;
    else if (a == "gelu_tanh") o.activation = nn::Activation::GELUTanh;
    else throw ValueError("seq2seq config: 'activation' must be \"relu\", \"gelu\" or \"gelu_tanh\"");
  }
  return o;
}

// ---------------------------------------------------------------- model

Seq2Seq::Seq2Seq(const Seq2SeqOptions& o) : opt_(o) {
  if (o.d_model % o.num_heads != 0)
    throw ValueError("Seq2Seq: d_model " + std::to_string(o.d_model) + " is not divisible by num_heads " +
                     std::to_string(o.num_heads));
  src_embed = register_module("src_embed", std::make_shared<nn::Embedding>(nn::EmbeddingOptions{
                                               .num_embeddings = o.vocab_size, .embedding_dim = o.d_model,
                                               .padding_idx = kSeq2SeqPad}));
  tgt_embed = register_module("tgt_embed", std::make_shared<nn::Embedding>(nn::EmbeddingOptions{
                                               .num_embeddings = o.vocab_size, .embedding_dim = o.d_model,
                                               .padding_idx = kSeq2SeqPad}));
  if (o.learned_positions)
    pos = register_module("pos", std::make_shared<nn::LearnedPositionalEncoding>(nn::LearnedPositionalEncodingOptions{
                                     .max_len = o.max_positions, .d_model = o.d_model}));
  else
    sin_pos = register_module("pos", std::make_shared<nn::SinusoidalPositionalEncoding>(
                                             nn::SinusoidalPositionalEncodingOptions{.d_model = o.d_model,
                                                                                     .max_len = o.max_positions}));
  const nn::EncoderBlockOptions block{.d_model = o.d_model,
                                      .num_heads = o.num_heads,
                                      .d_ff = o.d_ff,
                                      .dropout = o.dropout,
                                      .activation = o.activation,
                                      .norm_first = o.norm_first};
  encoder = register_module("encoder", std::make_shared<nn::TransformerEncoder>(nn::EncoderOptions{
                                           .num_layers = o.num_encoder_layers, .layer = block, .final_norm = o.norm_first}));
  decoder = register_module("decoder", std::make_shared<nn::TransformerDecoder>(nn::DecoderOptions{
                                           .num_layers = o.num_decoder_layers, .layer = block, .final_norm = o.norm_first}));
  generator = register_module("generator", std::make_shared<nn::Linear>(nn::LinearOptions{
                                               .in_features = o.d_model, .out_features = o.vocab_size}));
}

Tensor Seq2Seq::add_positions(const Tensor& x) const {
  if (x.size(1) > opt_.max_positions)
    throw ValueError("Seq2Seq: sequence of " + std::to_string(x.size(1)) + " tokens is longer than max_positions " +
                     std::to_string(opt_.max_positions));
  return pos ? pos->forward(x) : sin_pos->forward(x);
}

Tensor Seq2Seq::encode(const Tensor& src, std::vector<Tensor>* self_weights) const {
  // src [B, S] -> x [B, S, E] -> memory [B, S, E]
  return encoder->forward(add_positions(src_embed->forward(src)), Mask::padding(src, kSeq2SeqPad), self_weights);
}

Tensor Seq2Seq::decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src, std::vector<Tensor>* self_weights,
                       std::vector<Tensor>* cross_weights) const {
  // tgt_in [B, T] -> y [B, T, E] -> logits [B, T, V]
  Tensor y = decoder->forward(add_positions(tgt_embed->forward(tgt_in)), memory, Mask::causal(),
                              Mask::padding(src, kSeq2SeqPad), self_weights, cross_weights);
  return generator->forward(y);
}

Tensor Seq2Seq::forward(const Tensor& src, const Tensor& tgt_in) const {
  return decode(tgt_in, encode(src), src);
}

Tensor Seq2Seq::loss(const Seq2SeqBatch& b) const {
  Tensor logits = forward(b.src, b.tgt_in);  // [B, T, V]
  const std::int64_t n = logits.size(0) * logits.size(1);
  return cross_entropy(logits.reshape({n, opt_.vocab_size}), b.tgt_out.reshape({n}),
                       CrossEntropyOptions{.ignore_index = -100});
}

std::vector<std::vector<std::int64_t>> Seq2Seq::greedy_decode(const Tensor& src, std::int64_t max_new_tokens) const {
  autograd::NoGradGuard no_grad;
  const std::int64_t B = src.size(0);
  const Tensor memory = encode(src);
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(B));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  std::vector<std::int64_t> prefix(static_cast<std::size_t>(B), kSeq2SeqBos);  // [B, t] row-major
  std::int64_t t = 1;
  for (std::int64_t step = 0; step < max_new_tokens; ++step) {
    const Tensor logits = decode(Tensor::from_vector(prefix, {B, t}), memory, src);  // [B, t, V]
    const std::vector<std::int64_t> next = argmax(logits.select(1, t - 1), -1).to_vector<std::int64_t>();
    std::vector<std::int64_t> grown(static_cast<std::size_t>(B * (t + 1)));
    bool all_done = true;
    for (std::int64_t b = 0; b < B; ++b) {
      std::copy_n(prefix.begin() + b * t, t, grown.begin() + b * (t + 1));
      std::int64_t tok = done[b] ? kSeq2SeqPad : next[b];
      if (!done[b]) {
        if (tok == kSeq2SeqEos) done[b] = true;
        else out[b].push_back(tok);
      }
      grown[b * (t + 1) + t] = tok;
      all_done = all_done && done[b];
    }
    prefix.swap(grown);
    ++t;
    if (all_done) break;
  }
  // Rows that never produced <eos> are marked by a trailing -1 so callers can tell.
  for (std::int64_t b = 0; b < B; ++b)
    if (!done[b]) out[b].push_back(-1);
  return out;
}

double seq2seq_exact_accuracy(Seq2Seq& model, const std::vector<Seq2SeqExample>& ex, std::int64_t batch,
                              std::vector<std::vector<std::int64_t>>* predictions) {
  if (ex.empty()) return 0.0;
  const bool was_training = model.is_training();
  model.eval();
  if (predictions) predictions->clear();
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < ex.size(); i += static_cast<std::size_t>(batch)) {
    const std::size_t end = std::min(ex.size(), i + static_cast<std::size_t>(batch));
    std::vector<std::vector<std::int64_t>> inputs;
    std::size_t longest = 0;
    for (std::size_t k = i; k < end; ++k) {
      inputs.push_back(ex[k].input);
      longest = std::max(longest, ex[k].target.size());
    }
    const auto out = model.greedy_decode(make_seq2seq_source(inputs), static_cast<std::int64_t>(longest) + 1);
    for (std::size_t k = i; k < end; ++k) {
      std::vector<std::int64_t> digits;
      for (std::int64_t tok : out[k - i]) digits.push_back(tok >= kSeq2SeqFirstDigit ? tok - kSeq2SeqFirstDigit : -1);
      if (digits == ex[k].target) ++correct;
      if (predictions) predictions->push_back(std::move(digits));
    }
  }
  model.train(was_training);
  return static_cast<double>(correct) / static_cast<double>(ex.size());
}

// ---------------------------------------------------------------- training

double seq2seq_lr_at(const Seq2SeqTrainOptions& o, std::int64_t step, std::int64_t total) {
  if (o.warmup_steps > 0 && step < o.warmup_steps)
    return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
  const double span = static_cast<double>(std::max<std::int64_t>(1, total - o.warmup_steps));
  const double p = std::clamp(static_cast<double>(step - o.warmup_steps) / span, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

Seq2SeqTrainResult train_seq2seq(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o,
                                 const Seq2SeqTrainCallbacks& cb) {
  if (o.batch < 1) throw ValueError("train seq2seq: batch must be >= 1");
  if (o.epochs < 1 && o.steps < 1) throw ValueError("train seq2seq: need epochs >= 1 or steps >= 1");
  if (!(o.lr > 0)) throw ValueError("train seq2seq: lr must be > 0");
  if (o.data.max_len + 1 > mo.max_positions)
    throw ValueError("train seq2seq: max_len + 1 = " + std::to_string(o.data.max_len + 1) +
                     " exceeds the model's max_positions " + std::to_string(mo.max_positions));
  const auto t0 = std::chrono::steady_clock::now();
  Seq2SeqTrainResult r;
  r.data = make_seq2seq_data(o.data);
  manual_seed(o.seed);  // parameter initialisation and dropout
  r.model = std::make_shared<Seq2Seq>(mo);
  Seq2Seq& model = *r.model;
  model.train();
  optim::AdamW opt(model.named_parameters(), optim::AdamOptions{.lr = o.lr, .weight_decay = o.weight_decay});

  const std::int64_t n = static_cast<std::int64_t>(r.data.train.size());
  const std::int64_t per_epoch = (n + o.batch - 1) / o.batch;
  const std::int64_t total = o.steps > 0 ? o.steps : per_epoch * o.epochs;
  const std::int64_t eval_every = std::max<std::int64_t>(1, per_epoch / std::max<std::int64_t>(1, o.evals_per_epoch));
  // A fixed sample of training examples for train_acc, as large as the held-out set.
  const std::vector<Seq2SeqExample> train_probe(
      r.data.train.begin(), r.data.train.begin() + std::min<std::int64_t>(n, std::max<std::int64_t>(1, o.data.test_size)));

  Generator shuffle_gen(mix64(o.seed ^ 0x5b0ff1e));
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  double loss_sum = 0;
  std::int64_t loss_n = 0;
  const std::vector<Tensor> params = model.parameters();
  for (std::int64_t step = 0; step < total; ++step) {
    const std::int64_t pos = step % per_epoch;
    if (pos == 0) {  // Fisher-Yates shuffle at every epoch start
      for (std::int64_t i = 0; i < n; ++i) order[i] = i;
      for (std::int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[shuffle_gen.randint(0, i + 1)]);
    }
    std::vector<Seq2SeqExample> ex;
    for (std::int64_t i = pos * o.batch; i < std::min(n, (pos + 1) * o.batch); ++i) ex.push_back(r.data.train[order[i]]);
    opt.set_lr(seq2seq_lr_at(o, step, total));
    opt.zero_grad();
    Tensor loss = model.loss(make_seq2seq_batch(ex));
    loss.backward();
    if (o.clip_norm > 0) optim::clip_grad_norm(params, o.clip_norm);
    opt.step();
    const double lv = loss.item();
    loss_sum += lv;
    ++loss_n;
    r.steps = step + 1;
    if (cb.on_step) cb.on_step(step + 1, total, lv);
    const bool last = step + 1 == total;
    if ((step + 1) % eval_every == 0 || last) {
      Seq2SeqReport rep;
      rep.step = step + 1;
      rep.epoch = (step + per_epoch) / per_epoch;
      rep.loss = loss_sum / static_cast<double>(std::max<std::int64_t>(1, loss_n));
      rep.lr = opt.lr();
      rep.exact_acc = seq2seq_exact_accuracy(model, r.data.test);
      rep.train_acc = seq2seq_exact_accuracy(model, train_probe);
      rep.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      loss_sum = 0;
      loss_n = 0;
      r.reports.push_back(rep);
      if (cb.on_report) cb.on_report(rep);
      if (o.target_acc > 0 && rep.exact_acc >= o.target_acc) break;
    }
  }
  model.eval();
  return r;
}

// ---------------------------------------------------------------- checkpoints, attention maps

std::vector<std::int64_t> parse_seq2seq_input(const std::string& s) {
  std::vector<std::int64_t> d;
  for (char c : s) {
    if (c >= '0' && c <= '9') d.push_back(c - '0');
    else if (c != ' ' && c != ',' && c != '\t')
      throw ValueError("seq2seq: input must be digits 0-9 (optionally separated by spaces), got '" + s + "'");
  }
  if (d.empty()) throw ValueError("seq2seq: input has no digits");
  return d;
}

std::shared_ptr<Seq2Seq> seq2seq_from_checkpoint(const io::Checkpoint& ckpt) {
  if (ckpt.model_type != "seq2seq")
    throw ValueError("seq2seq: checkpoint holds a '" + ckpt.model_type + "' model, not 'seq2seq'");
  auto m = std::make_shared<Seq2Seq>(Seq2SeqOptions::from_json(ckpt.config_json));
  m->load_state_dict(ckpt.model);
  m->eval();
  return m;
}

std::vector<AttentionMap> seq2seq_attention_maps(const io::Checkpoint& ckpt, const std::string& input) {
  const auto model = seq2seq_from_checkpoint(ckpt);
  const std::vector<std::int64_t> digits = parse_seq2seq_input(input);
  if (static_cast<std::int64_t>(digits.size()) + 1 > model->options().max_positions)
    throw ValueError("seq2seq: input of " + std::to_string(digits.size()) + " digits is longer than the model allows (" +
                     std::to_string(model->options().max_positions - 1) + ")");
  autograd::NoGradGuard no_grad;
  const Tensor src = make_seq2seq_source({digits});  // [1, S]
  auto out = model->greedy_decode(src, model->options().max_positions - 1)[0];
  if (!out.empty() && out.back() == -1) out.pop_back();  // no <eos>: keep what was produced
  std::vector<std::int64_t> tin{kSeq2SeqBos};
  tin.insert(tin.end(), out.begin(), out.end());
  const std::int64_t T = static_cast<std::int64_t>(tin.size());
  std::vector<Tensor> enc_w, dec_self_w, dec_cross_w;
  const Tensor memory = model->encode(src, &enc_w);
  model->decode(Tensor::from_vector(tin, {1, T}), memory, src, &dec_self_w, &dec_cross_w);

  std::vector<std::string> src_labels, tgt_labels;
  for (std::int64_t id : src.to_vector<std::int64_t>()) src_labels.push_back(seq2seq_token_label(id));
  for (std::int64_t id : tin) tgt_labels.push_back(seq2seq_token_label(id));
  std::vector<AttentionMap> maps;
  auto add = [&](const std::string& stack, const char* kind, const std::vector<Tensor>& ws, const auto& ql,
                 const auto& kl) {
    for (std::size_t i = 0; i < ws.size(); ++i)
      maps.push_back(AttentionMap{.name = stack + ".layers." + std::to_string(i) + "." + kind + "_attn",
                                  .kind = kind,
                                  .layer = static_cast<int>(i),
                                  .weights = ws[i].select(0, 0).contiguous(),  // [H, Lq, Lk]
                                  .query_tokens = ql,
                                  .key_tokens = kl});
  };
  add("encoder", "self", enc_w, src_labels, src_labels);
  add("decoder", "self", dec_self_w, tgt_labels, tgt_labels);
  add("decoder", "cross", dec_cross_w, tgt_labels, src_labels);
  return maps;
}

}  // namespace qkv::models
