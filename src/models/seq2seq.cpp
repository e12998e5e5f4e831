// Seq2Seq encoder-decoder, its toy tasks, training, greedy decoding and
// attention maps. See include/qkv/models/seq2seq.h for the token layout.
#include "qkv/models/seq2seq.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <set>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/infer/generate.h"
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

// A count that may be astronomically large (from a hostile config), printed as an integer or like 1.2e+18.
std::string general_count(double v) {
  if (v < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
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

namespace {

// Reads the typed fields of a JSON object for the from_json() functions; every
// error is a ValueError starting with `what` and naming the field.
class JsonFields {
 public:
  JsonFields(const std::string& text, std::string what, const std::set<std::string>& known) : what_(std::move(what)) {
    try {
      j_ = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      throw ValueError(what_ + ": not valid JSON: " + e.what());
    }
    if (!j_.is_object()) throw ValueError(what_ + ": expected a JSON object");
    for (const auto& [k, v] : j_.items())
      if (!known.count(k)) throw ValueError(what_ + ": unknown field '" + k + "'");
  }
  void get(const char* key, std::int64_t* out, std::int64_t lo) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_number_integer()) fail(key, "must be an integer");
    *out = j_[key].get<std::int64_t>();
    if (*out < lo) fail(key, "must be >= " + std::to_string(lo) + ", got " + std::to_string(*out));
  }
  void get(const char* key, std::uint64_t* out) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_number_unsigned()) fail(key, "must be a non-negative integer");
    *out = j_[key].get<std::uint64_t>();
  }
  void get(const char* key, double* out) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_number()) fail(key, "must be a number");
    *out = j_[key].get<double>();
  }
  void get(const char* key, bool* out) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_boolean()) fail(key, "must be true or false");
    *out = j_[key].get<bool>();
  }
  // The string field `key` (or `fallback` if absent).
  std::string get_string(const char* key, const std::string& fallback) const {
    if (!j_.contains(key)) return fallback;
    if (!j_[key].is_string()) fail(key, "must be a string");
    return j_[key].get<std::string>();
  }
  [[noreturn]] void fail(const char* key, const std::string& why) const {
    throw ValueError(what_ + ": '" + key + "' " + why);
  }

 private:
  nlohmann::json j_;
  std::string what_;
};

}  // namespace

Seq2SeqOptions Seq2SeqOptions::from_json(const std::string& text) {
  const JsonFields f(text, "seq2seq config",
                     {"vocab_size", "d_model", "num_heads", "num_encoder_layers", "num_decoder_layers", "d_ff",
                      "dropout", "max_positions", "norm_first", "learned_positions", "activation"});
  Seq2SeqOptions o;
  f.get("vocab_size", &o.vocab_size, 1);
  f.get("d_model", &o.d_model, 1);
  f.get("num_heads", &o.num_heads, 1);
  f.get("num_encoder_layers", &o.num_encoder_layers, 0);
  f.get("num_decoder_layers", &o.num_decoder_layers, 0);
  f.get("d_ff", &o.d_ff, 1);
  f.get("max_positions", &o.max_positions, 1);
  f.get("norm_first", &o.norm_first);
  f.get("learned_positions", &o.learned_positions);
  f.get("dropout", &o.dropout);
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) f.fail("dropout", "must be in [0, 1)");
  const std::string a = f.get_string("activation", nn::activation_name(o.activation));
  if (a == "relu") o.activation = nn::Activation::ReLU;
  else if (a == "gelu") o.activation = nn::Activation::GELU;
  else if (a == "gelu_tanh") o.activation = nn::Activation::GELUTanh;
  else f.fail("activation", "must be \"relu\", \"gelu\" or \"gelu_tanh\"");
  return o;
}

std::string Seq2SeqTrainOptions::to_json() const {
  const nlohmann::ordered_json j = {
      {"task", seq2seq_task_name(data.task)}, {"min_len", data.min_len},         {"max_len", data.max_len},
      {"train_size", data.train_size},         {"test_size", data.test_size},     {"data_seed", data.seed},
      {"epochs", epochs},                      {"steps", steps},                  {"batch", batch},
      {"lr", lr},                              {"warmup_steps", warmup_steps},    {"min_lr_ratio", min_lr_ratio},
      {"weight_decay", weight_decay},          {"clip_norm", clip_norm},          {"target_acc", target_acc},
      {"evals_per_epoch", evals_per_epoch},    {"seed", seed}};
  return j.dump();  // nlohmann prints the shortest decimal that reads back as the same double
}

Seq2SeqTrainOptions Seq2SeqTrainOptions::from_json(const std::string& text) {
  const JsonFields f(text, "seq2seq training config",
                     {"task", "min_len", "max_len", "train_size", "test_size", "data_seed", "epochs", "steps",
                      "batch", "lr", "warmup_steps", "min_lr_ratio", "weight_decay", "clip_norm", "target_acc",
                      "evals_per_epoch", "seed"});
  Seq2SeqTrainOptions o;
  o.data.task = parse_seq2seq_task(f.get_string("task", seq2seq_task_name(o.data.task)));
  f.get("min_len", &o.data.min_len, 1);
  f.get("max_len", &o.data.max_len, 1);
  f.get("train_size", &o.data.train_size, 1);
  f.get("test_size", &o.data.test_size, 0);
  f.get("data_seed", &o.data.seed);
  f.get("epochs", &o.epochs, 0);
  f.get("steps", &o.steps, 0);
  f.get("batch", &o.batch, 1);
  f.get("lr", &o.lr);
  f.get("warmup_steps", &o.warmup_steps, 0);
  f.get("min_lr_ratio", &o.min_lr_ratio);
  f.get("weight_decay", &o.weight_decay);
  f.get("clip_norm", &o.clip_norm);
  f.get("target_acc", &o.target_acc);
  f.get("evals_per_epoch", &o.evals_per_epoch, 1);
  f.get("seed", &o.seed);
  return o;
}

// ---------------------------------------------------------------- model

Seq2Seq::Seq2Seq(const Seq2SeqOptions& o) : opt_(o) {
  if (o.d_model % o.num_heads != 0)
    throw ValueError("Seq2Seq: d_model " + std::to_string(o.d_model) + " is not divisible by num_heads " +
                     std::to_string(o.num_heads));
  {
    MemoryEstimate est, enc, dec;
    const nn::EncoderBlockOptions b{.d_model = o.d_model, .num_heads = o.num_heads, .d_ff = o.d_ff};
    nn::add_encoder_block_memory(enc, b);
    nn::add_decoder_block_memory(dec, b);
    est.add({o.vocab_size, o.d_model}, 3).add({o.max_positions, o.d_model}).add({o.vocab_size});
    est.add(enc.scale(o.num_encoder_layers)).add(dec.scale(o.num_decoder_layers));
    est.check("Seq2Seq (vocab_size " + std::to_string(o.vocab_size) + ", d_model " + std::to_string(o.d_model) +
              ", d_ff " + std::to_string(o.d_ff) + ", " + std::to_string(o.num_encoder_layers) + "+" +
              std::to_string(o.num_decoder_layers) + " layers, max_positions " + std::to_string(o.max_positions) + ")");
  }
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
  const Seq2SeqDecoderLM lm(*this, src);
  const std::vector<std::vector<std::int64_t>> bos(static_cast<std::size_t>(src.size(0)), {kSeq2SeqBos});
  const auto results = infer::generate(lm, bos, {.max_new_tokens = max_new_tokens, .eos_id = kSeq2SeqEos});
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& r : results) {
    out.push_back(r.new_ids);
    if (r.reason == infer::StopReason::Eos)
      out.back().pop_back();  // the final <eos>
    else
      out.back().push_back(-1);  // never produced <eos>: marked so callers can tell
  }
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

namespace {

// A config read from a file is checked against the values the file holds before
// the model is built, so a hostile config cannot make it allocate much more than
// the file's own size: the weight matrices (embeddings, generator, attention
// projections, feed-forward) are a lower bound of what load_state_dict will
// require, and the sinusoidal table (not saved) must stay small beside them.
void check_config_fits(const Seq2SeqOptions& o, const nn::StateDict& sd) {
  double have = 0;
  for (const auto& [n, t] : sd) have += static_cast<double>(t.numel());
  const double d = static_cast<double>(o.d_model), f = static_cast<double>(o.d_ff);
  const double need = 3 * static_cast<double>(o.vocab_size) * d +
                      static_cast<double>(o.num_encoder_layers) * (4 * d * d + 2 * d * f) +
                      static_cast<double>(o.num_decoder_layers) * (8 * d * d + 2 * d * f) +
                      (o.learned_positions ? static_cast<double>(o.max_positions) * d : 0.0);
  if (need > have)
    throw ValueError("seq2seq: the checkpoint's config describes a model of at least " + general_count(need) +
                     " parameters, but its tensors hold only " + general_count(have) + " values");
  if (!o.learned_positions && static_cast<double>(o.max_positions) * d > have + (1 << 20))
    throw ValueError("seq2seq: the checkpoint's config asks for a positional table of " +
                     std::to_string(o.max_positions) + " x " + std::to_string(o.d_model) +
                     ", far larger than its model (" + general_count(have) + " values)");
}

void validate_run(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o) {
  if (o.batch < 1) throw ValueError("train seq2seq: batch must be >= 1");
  if (o.epochs < 1 && o.steps < 1) throw ValueError("train seq2seq: need epochs >= 1 or steps >= 1");
  if (!(o.lr > 0)) throw ValueError("train seq2seq: lr must be > 0");
  if (o.data.max_len + 1 > mo.max_positions)
    throw ValueError("train seq2seq: max_len + 1 = " + std::to_string(o.data.max_len + 1) +
                     " exceeds the model's max_positions " + std::to_string(mo.max_positions));
}

Generator shuffle_generator(std::uint64_t seed) { return Generator(mix64(seed ^ 0x5b0ff1e)); }

// Examples as one I64 [N, width] tensor of digits (inputs or targets), -1 after the end of each row.
Tensor examples_tensor(const std::vector<Seq2SeqExample>& ex, bool targets, std::int64_t width) {
  std::vector<std::int64_t> v(ex.size() * static_cast<std::size_t>(width), -1);
  for (std::size_t r = 0; r < ex.size(); ++r) {
    const auto& d = targets ? ex[r].target : ex[r].input;
    std::copy(d.begin(), d.end(), v.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(width)));
  }
  return Tensor::from_vector(v, {static_cast<std::int64_t>(ex.size()), width});
}

// Reads what a Seq2SeqTrainer checkpoint holds, naming the file and the entry on any problem.
class RunReader {
 public:
  RunReader(const io::Checkpoint& c, const std::string& source) : c_(c), src_(source) {}
  FormatError bad(const std::string& what) const { return FormatError(src_ + ": " + what); }
  const std::string& meta(const std::string& key) const {
    auto it = c_.metadata.find(key);
    if (it == c_.metadata.end())
      throw bad("checkpoint has no metadata '" + key + "', so it holds no resumable seq2seq training run (it "
                "still works for heatmaps)");
    return it->second;
  }
  std::uint64_t meta_u64(const std::string& key) const {
    return io::parse_metadata_u64(meta(key), src_ + ": checkpoint metadata '" + key + "'");
  }
  const Tensor& extra(const std::string& name, DType dt, std::int64_t rank) const {
    auto it = c_.extra.find(name);
    if (it == c_.extra.end()) throw bad("checkpoint has no tensor 'extra." + name + "'");
    if (it->second.dtype() != dt || it->second.dim() != rank)
      throw bad("checkpoint tensor 'extra." + name + "' is " + dtype_name(it->second.dtype()) + " " +
                it->second.shape_str() + ", expected a rank-" + std::to_string(rank) + " " + dtype_name(dt) +
                " tensor");
    return it->second;
  }
  // The `which` ("train" / "test") set: rows of digits 0..9 then -1, lengths within
  // [min_len, max_len], every target the task's target of its input.
  std::vector<Seq2SeqExample> examples(const std::string& which, std::int64_t rows,
                                       const Seq2SeqDataOptions& d) const {
    const Tensor& in = extra(which + "_inputs", DType::I64, 2);
    const Tensor& tg = extra(which + "_targets", DType::I64, 2);
    const Shape want{rows, d.max_len};
    if (in.shape() != want || tg.shape() != want)
      throw bad("checkpoint tensors 'extra." + which + "_inputs' " + in.shape_str() + " and 'extra." + which +
                "_targets' " + tg.shape_str() + " should both be " + shape_str(want) + " (" + which +
                " size by max_len)");
    const auto iv = in.to_vector<std::int64_t>(), tv = tg.to_vector<std::int64_t>();
    std::vector<Seq2SeqExample> ex(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::string where = "checkpoint tensor 'extra." + which + "_inputs' row " + std::to_string(r);
      for (std::int64_t k = 0; k < d.max_len; ++k) {
        const std::int64_t v = iv[static_cast<std::size_t>(r * d.max_len + k)];
        if (v == -1) break;
        if (v < 0 || v >= kSeq2SeqNumDigits) throw bad(where + " holds " + std::to_string(v) + ", not a digit 0..9");
        ex[r].input.push_back(v);
      }
      const auto len = static_cast<std::int64_t>(ex[r].input.size());
      if (len < d.min_len) throw bad(where + " has " + std::to_string(len) + " digits, fewer than min_len");
      for (std::int64_t k = len; k < d.max_len; ++k)
        if (iv[static_cast<std::size_t>(r * d.max_len + k)] != -1) throw bad(where + " has digits after its end (-1)");
      ex[r].target = seq2seq_target(d.task, ex[r].input);
      for (std::int64_t k = 0; k < d.max_len; ++k)
        if (tv[static_cast<std::size_t>(r * d.max_len + k)] != (k < len ? ex[r].target[k] : -1))
          throw bad("checkpoint tensor 'extra." + which + "_targets' row " + std::to_string(r) + " is not the " +
                    seq2seq_task_name(d.task) + " of its input");
    }
    return ex;
  }

 private:
  const io::Checkpoint& c_;
  const std::string& src_;
};

}  // namespace

Seq2SeqTrainer::Seq2SeqTrainer(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o)
    : opt_(o), shuffle_gen_(shuffle_generator(o.seed)) {
  validate_run(mo, o);
  data_ = make_seq2seq_data(o.data);
  manual_seed(o.seed);  // parameter initialisation, then dropout
  model_ = std::make_shared<Seq2Seq>(mo);
  init_run();
}

Seq2SeqTrainer::Seq2SeqTrainer(const io::Checkpoint& c, const std::string& source) {
  // Building the model draws from the default generator; a rejected checkpoint leaves it as it was.
  struct RestoreOnThrow {
    Generator saved = default_generator();
    bool done = false;
    ~RestoreOnThrow() {
      if (!done) default_generator() = saved;
    }
  } restore;
  const RunReader r(c, source);
  if (c.model_type != "seq2seq")
    throw r.bad("checkpoint holds a '" + c.model_type + "' model, not a seq2seq training run");
  Seq2SeqOptions mo;
  try {
    mo = Seq2SeqOptions::from_json(c.config_json);
    opt_ = Seq2SeqTrainOptions::from_json(r.meta("train_config"));
    validate_run(mo, opt_);
    check_config_fits(mo, c.model);
  } catch (const ValueError& e) {
    throw r.bad(e.what());
  }
  if (!c.has_rng) throw r.bad("checkpoint has no RNG state (metadata 'rng_seed', 'rng_offset'); cannot resume bitwise");
  data_.train = r.examples("train", opt_.data.train_size, opt_.data);
  data_.test = r.examples("test", opt_.data.test_size, opt_.data);
  model_ = std::make_shared<Seq2Seq>(mo);
  init_run();
  try {
    model_->load_state_dict(c.model);
    optim_->load_state(c.optimizer);
  } catch (const Error& e) {
    throw r.bad(e.what());
  }
  step_ = static_cast<std::int64_t>(r.meta_u64("step"));
  const auto total = static_cast<std::int64_t>(r.meta_u64("total_steps"));
  if (total != total_ || step_ > total_)
    throw r.bad("checkpoint metadata 'step' " + std::to_string(step_) + " of 'total_steps' " + std::to_string(total) +
                " does not fit its training config (" + std::to_string(total_) + " steps)");
  if (optim_->steps() != step_)
    throw r.bad("checkpoint's optimiser state is at step " + std::to_string(optim_->steps()) + ", the run at step " +
                std::to_string(step_));
  const std::string& fin = r.meta("finished");
  if (fin != "true" && fin != "false") throw r.bad("checkpoint metadata 'finished' is '" + fin + "', not true/false");
  target_reached_ = fin == "true" && step_ < total_;
  loss_n_ = static_cast<std::int64_t>(r.meta_u64("loss_count"));
  loss_sum_ = r.extra("loss_sum", DType::F64, 0).item();
  const Tensor& order = r.extra("order", DType::I64, 1);
  order_ = order.to_vector<std::int64_t>();
  std::vector<bool> seen(data_.train.size(), false);
  bool permutation = order_.size() == data_.train.size();
  for (std::size_t i = 0; permutation && i < order_.size(); ++i) {
    const std::int64_t v = order_[i];
    permutation = v >= 0 && v < static_cast<std::int64_t>(seen.size()) && !seen[v];
    if (permutation) seen[v] = true;
  }
  if (!permutation)
    throw r.bad("checkpoint tensor 'extra.order' " + order.shape_str() + " is not a permutation of the " +
                std::to_string(data_.train.size()) + " training examples");
  shuffle_gen_ = Generator(r.meta_u64("shuffle_rng_seed"));
  shuffle_gen_.set_offset(r.meta_u64("shuffle_rng_offset"));
  try {
    elapsed_s_ = std::stod(r.meta("elapsed_s"));
  } catch (const std::exception&) {
    throw r.bad("checkpoint metadata 'elapsed_s' is not a number: '" + r.meta("elapsed_s") + "'");
  }
  default_generator().manual_seed(c.rng_seed);  // dropout continues where the saved run was
  default_generator().set_offset(c.rng_offset);
  restore.done = true;
}

void Seq2SeqTrainer::init_run() {
  const auto n = static_cast<std::int64_t>(data_.train.size());
  per_epoch_ = (n + opt_.batch - 1) / opt_.batch;
  total_ = opt_.steps > 0 ? opt_.steps : per_epoch_ * opt_.epochs;
  eval_every_ = std::max<std::int64_t>(1, per_epoch_ / std::max<std::int64_t>(1, opt_.evals_per_epoch));
  // A fixed sample of training examples for train_acc, as large as the held-out set.
  train_probe_.assign(data_.train.begin(),
                      data_.train.begin() + std::min<std::int64_t>(n, std::max<std::int64_t>(1, opt_.data.test_size)));
  order_.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order_[i] = i;
  optim_ = std::make_unique<optim::AdamW>(model_->named_parameters(),
                                          optim::AdamOptions{.lr = opt_.lr, .weight_decay = opt_.weight_decay});
}

bool Seq2SeqTrainer::train(const Seq2SeqTrainCallbacks& cb, std::int64_t stop_after_epoch) {
  const auto t0 = std::chrono::steady_clock::now();
  const double elapsed_before = elapsed_s_;
  auto elapsed = [&] {
    return elapsed_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const auto n = static_cast<std::int64_t>(data_.train.size());
  const std::vector<Tensor> params = model_->parameters();
  model_->train();
  while (!finished() && !(stop_after_epoch > 0 && epochs_done() >= stop_after_epoch)) {
    const std::int64_t pos = step_ % per_epoch_;
    if (pos == 0) {  // Fisher-Yates shuffle at every epoch start
      for (std::int64_t i = 0; i < n; ++i) order_[i] = i;
      for (std::int64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[shuffle_gen_.randint(0, i + 1)]);
    }
    std::vector<Seq2SeqExample> ex;
    for (std::int64_t i = pos * opt_.batch; i < std::min(n, (pos + 1) * opt_.batch); ++i)
      ex.push_back(data_.train[order_[i]]);
    optim_->set_lr(seq2seq_lr_at(opt_, step_, total_));
    optim_->zero_grad();
    Tensor loss = model_->loss(make_seq2seq_batch(ex));
    loss.backward();
    if (opt_.clip_norm > 0) optim::clip_grad_norm(params, opt_.clip_norm);
    optim_->step();
    const double lv = loss.item();
    loss_sum_ += lv;
    ++loss_n_;
    ++step_;
    elapsed_s_ = elapsed();
    if (step_ % eval_every_ == 0 || step_ == total_) {
      Seq2SeqReport rep;
      rep.step = step_;
      rep.epoch = (step_ + per_epoch_ - 1) / per_epoch_;
      rep.loss = loss_sum_ / static_cast<double>(std::max<std::int64_t>(1, loss_n_));
      rep.lr = optim_->lr();
      rep.exact_acc = seq2seq_exact_accuracy(*model_, data_.test);
      rep.train_acc = seq2seq_exact_accuracy(*model_, train_probe_);
      elapsed_s_ = rep.elapsed_s = elapsed();
      loss_sum_ = 0;
      loss_n_ = 0;
      target_reached_ = opt_.target_acc > 0 && rep.exact_acc >= opt_.target_acc;
      reports_.push_back(rep);
      if (cb.on_report) cb.on_report(rep);
    }
    if (cb.on_step) cb.on_step(step_, total_, lv);
    if (step_ % per_epoch_ == 0 && cb.on_epoch_end) cb.on_epoch_end(step_ / per_epoch_);
  }
  model_->eval();
  return finished();
}

void Seq2SeqTrainer::save(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  const std::int64_t w = opt_.data.max_len;
  io::SaveCheckpointArgs a;
  a.model = model_.get();
  a.model_type = "seq2seq";
  a.config_json = model_->options().to_json();
  a.optimizer = optim_.get();
  a.rng = &default_generator();
  a.extra = {{"train_inputs", examples_tensor(data_.train, false, w)},
             {"train_targets", examples_tensor(data_.train, true, w)},
             {"test_inputs", examples_tensor(data_.test, false, w)},
             {"test_targets", examples_tensor(data_.test, true, w)},
             {"order", Tensor::from_vector(order_, {static_cast<std::int64_t>(order_.size())})},
             {"loss_sum", Tensor::scalar(loss_sum_, DType::F64)}};
  a.metadata = metadata;
  const std::pair<const char*, std::string> run[] = {
      {"train_config", opt_.to_json()},
      {"step", std::to_string(step_)},
      {"total_steps", std::to_string(total_)},
      {"epoch", std::to_string(epochs_done())},
      {"finished", finished() ? "true" : "false"},
      {"loss_count", std::to_string(loss_n_)},
      {"shuffle_rng_seed", std::to_string(shuffle_gen_.seed())},
      {"shuffle_rng_offset", std::to_string(shuffle_gen_.offset())},
      {"elapsed_s", std::to_string(elapsed_s_)},
      {"task", seq2seq_task_name(opt_.data.task)},
      {"min_len", std::to_string(opt_.data.min_len)},
      {"max_len", std::to_string(opt_.data.max_len)},
      {"seed", std::to_string(opt_.seed)}};
  for (const auto& [k, v] : run)
    if (!a.metadata.emplace(k, v).second)
      throw ValueError(std::string("Seq2SeqTrainer::save: metadata key '") + k + "' is the trainer's own");
  io::save_checkpoint(path, a);
}

Seq2SeqTrainResult train_seq2seq(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o,
                                 const Seq2SeqTrainCallbacks& cb) {
  Seq2SeqTrainer t(mo, o);
  t.train(cb);
  return {t.model(), t.data(), t.reports(), t.step()};
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
  const Seq2SeqOptions o = Seq2SeqOptions::from_json(ckpt.config_json);
  check_config_fits(o, ckpt.model);
  auto m = std::make_shared<Seq2Seq>(o);
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
