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

#include "../io/json_fields.h"
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

using io::JsonFields;

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

// ---------------------------------------------------------------- checkpoint configs

// A config read from a file is checked against the values the file holds before
// the model is built, so a hostile config cannot make it allocate much more than
// the file's own size: the weight matrices (embeddings, generator, attention
// projections, feed-forward) are a lower bound of what load_state_dict will
// require, and the sinusoidal table (not saved) must stay small beside them.
void check_seq2seq_config_fits(const Seq2SeqOptions& o, const nn::StateDict& sd) {
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
  check_seq2seq_config_fits(o, ckpt.model);
  auto m = [&] {
    nn::SkipInitGuard skip;  // every parameter is loaded next: no random initialisation
    return std::make_shared<Seq2Seq>(o);
  }();
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
