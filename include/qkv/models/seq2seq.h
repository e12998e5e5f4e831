// Seq2Seq: an encoder-decoder Transformer (decoder blocks with cross-attention)
// and the toy sequence tasks it is trained on (reverse, copy, sort of digit
// strings), with teacher-forced training, greedy decoding and exact-sequence
// accuracy on a held-out set disjoint from the training set.
//
// Tokens: <pad> = 0, <bos> = 1, <eos> = 2, digits 0..9 = 3..12 (vocab 13).
//   source          d_1 .. d_L <eos> <pad>...            [B, S]   S = max L + 1
//   decoder input   <bos> t_1 .. t_L <pad>...             [B, T]   T = max L + 1
//   decoder target  t_1 .. t_L <eos> -100...              [B, T]   (-100 = ignore_index)
// Encoder self-attention and decoder cross-attention block <pad> keys
// (Mask::padding); decoder self-attention is causal, so real positions never
// see the trailing pads.
//
// Parameter names (dotted, PyTorch style): src_embed.weight, tgt_embed.weight,
// [pos.pe.weight if learned], encoder.layers.{i}.self_attn.w_q.weight, ...,
// decoder.layers.{i}.cross_attn.w_k.weight, ..., generator.weight/bias.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/infer/causal_lm.h"
#include "qkv/io/checkpoint.h"
#include "qkv/nn/positional.h"
#include "qkv/nn/transformer.h"
#include "qkv/optim/optimizer.h"

namespace qkv::models {

// ---- tokens ----
inline constexpr std::int64_t kSeq2SeqPad = 0, kSeq2SeqBos = 1, kSeq2SeqEos = 2, kSeq2SeqFirstDigit = 3;
inline constexpr std::int64_t kSeq2SeqNumDigits = 10;
inline constexpr std::int64_t kSeq2SeqVocab = kSeq2SeqFirstDigit + kSeq2SeqNumDigits;  // 13
// "<pad>", "<bos>", "<eos>", "0".."9"; "<unk:N>" otherwise.
std::string seq2seq_token_label(std::int64_t id);

// ---- tasks and data ----
enum class Seq2SeqTask { Reverse, Copy, Sort };
const char* seq2seq_task_name(Seq2SeqTask t);
// "reverse" | "copy" | "sort", else ValueError listing them.
Seq2SeqTask parse_seq2seq_task(const std::string& s);

// One example as digit values 0..9 (not token ids).
struct Seq2SeqExample {
  std::vector<std::int64_t> input, target;
};
// reverse: input reversed; copy: input; sort: ascending.
std::vector<std::int64_t> seq2seq_target(Seq2SeqTask task, const std::vector<std::int64_t>& input);

struct Seq2SeqDataOptions {
  Seq2SeqTask task = Seq2SeqTask::Reverse;
  std::int64_t min_len = 1;
  std::int64_t max_len = 10;
  std::int64_t train_size = 10000;
  std::int64_t test_size = 1000;
  std::uint64_t seed = 0;
};

// A training set and a held-out set: lengths uniform in [min_len, max_len],
// digits uniform. The held-out set is drawn first and every training sequence
// that appears in it is redrawn, so the two are disjoint (the held-out set
// takes at most a tenth of all sequences of any one length, so every length
// still appears in training). Sequences inside a set may repeat.
struct Seq2SeqData {
  std::vector<Seq2SeqExample> train, test;
};
Seq2SeqData make_seq2seq_data(const Seq2SeqDataOptions& o);

// Token-id tensors for a batch of examples (see the layout at the top).
struct Seq2SeqBatch {
  Tensor src;      // I64 [B, S]
  Tensor tgt_in;   // I64 [B, T]
  Tensor tgt_out;  // I64 [B, T], -100 at padding
};
Seq2SeqBatch make_seq2seq_batch(const std::vector<Seq2SeqExample>& examples);
// Source ids only (digits + <eos>, padded): I64 [B, S].
Tensor make_seq2seq_source(const std::vector<std::vector<std::int64_t>>& inputs);

// ---- model ----
struct Seq2SeqOptions {
  std::int64_t vocab_size = kSeq2SeqVocab;
  std::int64_t d_model = 64;
  std::int64_t num_heads = 4;
  std::int64_t num_encoder_layers = 2;
  std::int64_t num_decoder_layers = 2;
  std::int64_t d_ff = 128;
  double dropout = 0.0;
  std::int64_t max_positions = 32;   // positional table length; sequences (+1 special) must fit
  bool norm_first = true;            // pre-norm blocks with a final LayerNorm per stack
  bool learned_positions = false;    // false: sinusoidal table; true: `pos.pe.weight`
  nn::Activation activation = nn::Activation::ReLU;

  // A JSON object with the fields above (activation as "relu"/"gelu"/"gelu_tanh").
  std::string to_json() const;
  // Missing fields keep their defaults; an unknown field, a wrong type or an
  // invalid value is a ValueError naming it.
  static Seq2SeqOptions from_json(const std::string& json);
  bool operator==(const Seq2SeqOptions&) const = default;
};

class Seq2Seq : public nn::Module {
 public:
  explicit Seq2Seq(const Seq2SeqOptions& o);

  // src I64 [B, S] -> memory [B, S, E]. weights: per layer [B, H, S, S].
  Tensor encode(const Tensor& src, std::vector<Tensor>* self_weights = nullptr) const;
  // tgt_in I64 [B, T], memory [B, S, E], src I64 [B, S] (for its padding mask) -> logits [B, T, V].
  Tensor decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src,
                std::vector<Tensor>* self_weights = nullptr, std::vector<Tensor>* cross_weights = nullptr) const;
  // Teacher-forced logits [B, T, V].
  Tensor forward(const Tensor& src, const Tensor& tgt_in) const;
  // Mean cross-entropy over non-padding target positions (rank 0).
  Tensor loss(const Seq2SeqBatch& batch) const;

  // Greedy decoding (no gradient; uses the current train/eval mode, so call
  // eval() first): starts from <bos>, appends the argmax token, stops a row at
  // <eos> or after max_new_tokens. Returns each row's token ids without <bos>
  // and without the final <eos> (a row that never produced <eos> ends with -1).
  // Runs infer::generate over Seq2SeqDecoderLM: one decoder step per token
  // through the KV cache.
  std::vector<std::vector<std::int64_t>> greedy_decode(const Tensor& src, std::int64_t max_new_tokens) const;

  const Seq2SeqOptions& options() const { return opt_; }

  std::shared_ptr<nn::Embedding> src_embed, tgt_embed;
  std::shared_ptr<nn::SinusoidalPositionalEncoding> sin_pos;  // not a parameter; null if learned
  std::shared_ptr<nn::LearnedPositionalEncoding> pos;         // null unless learned_positions
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::TransformerDecoder> decoder;
  std::shared_ptr<nn::Linear> generator;

 private:
  Tensor add_positions(const Tensor& x) const;
  Seq2SeqOptions opt_;
};

// The decoder of a Seq2Seq over one batch of sources as generation sees it
// (infer::CausalLM): the memory is encoded once at construction; each step runs the
// decoder's self-attention through the KV cache (new positions continue each
// sequence) and cross-attention over the memory with the sources' padding masked.
// Logits are the generator's. Keeps references: `model` and `src` must outlive it.
class Seq2SeqDecoderLM : public infer::CausalLM {
 public:
  // src I64 [B, S]
  Seq2SeqDecoderLM(const Seq2Seq& model, const Tensor& src);
  std::int64_t vocab_size() const override;
  std::int64_t max_positions() const override;
  infer::KVCacheOptions cache_options(std::int64_t batch, std::int64_t max_len) const override;
  Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                        bool all_logits = false) const override;

 private:
  const Seq2Seq& m_;
  Tensor src_, memory_;
};

// Greedy-decodes every example (in batches of `batch`, model in eval mode for
// the call) and returns the fraction whose output equals the target exactly
// (same length, same digits, <eos> produced). predictions (optional) receives
// the decoded digit values per example.
double seq2seq_exact_accuracy(Seq2Seq& model, const std::vector<Seq2SeqExample>& examples, std::int64_t batch = 500,
                              std::vector<std::vector<std::int64_t>>* predictions = nullptr);

// ---- training ----
struct Seq2SeqTrainOptions {
  Seq2SeqDataOptions data;
  std::int64_t epochs = 3;         // passes over data.train
  std::int64_t steps = 0;          // > 0: stop after this many optimiser steps (epochs extended as needed)
  std::int64_t batch = 64;
  double lr = 2e-3;                // peak learning rate (AdamW)
  std::int64_t warmup_steps = 150; // linear warmup, then cosine decay to lr * min_lr_ratio
  double min_lr_ratio = 0.05;
  double weight_decay = 0.01;
  double clip_norm = 1.0;          // <= 0: no clipping
  double target_acc = 0.0;         // > 0: stop after an evaluation reaching it
  std::int64_t evals_per_epoch = 1;
  std::uint64_t seed = 0;          // model init, data and shuffling

  // A flat JSON object with the fields above (the data options as "task",
  // "min_len", ..., "data_seed"); doubles round-trip exactly.
  std::string to_json() const;
  // Missing fields keep their defaults; an unknown field, a wrong type or an
  // invalid value is a ValueError naming it.
  static Seq2SeqTrainOptions from_json(const std::string& json);
};

struct Seq2SeqReport {
  std::int64_t epoch = 0;       // 1-based; fractional epochs are reported at the step
  std::int64_t step = 0;
  double loss = 0;              // mean training loss since the previous report
  double train_acc = 0;         // exact accuracy on (up to) test_size training examples
  double exact_acc = 0;         // exact accuracy on the held-out set
  double lr = 0;
  double elapsed_s = 0;
};

struct Seq2SeqTrainResult {
  std::shared_ptr<Seq2Seq> model;
  Seq2SeqData data;
  std::vector<Seq2SeqReport> reports;
  std::int64_t steps = 0;
};

// Per step, in this order: on_report (if the step ends with an evaluation),
// on_step, on_epoch_end (if the step completes an epoch). The trainer may be
// saved from on_step and on_epoch_end: the step is complete then.
struct Seq2SeqTrainCallbacks {
  std::function<void(const Seq2SeqReport&)> on_report;                                   // after every evaluation
  std::function<void(std::int64_t step, std::int64_t total_steps, double loss)> on_step;  // after every step
  std::function<void(std::int64_t epoch)> on_epoch_end;                                  // epoch is 1-based
};

// One training run (AdamW, teacher forcing, warmup + cosine learning rate over
// the whole run, greedy exact accuracy evals_per_epoch times per epoch and at
// the end) that can be saved at any point between two steps and resumed in
// another process bitwise-identically to an uninterrupted run with the same
// thread count.
//
// The checkpoint written by save() is an io checkpoint (model_type "seq2seq",
// so `qkv heatmap` reads it) that also holds everything the rest of the run
// depends on:
//   optim.*                      the AdamW state (step, lr, exp_avg.*, exp_avg_sq.*)
//   rng_seed, rng_offset         the default generator (dropout masks)
//   extra.{train,test}_inputs    I64 [N, max_len] digits, -1 after the end of a row
//   extra.{train,test}_targets   likewise (the data, not redrawn on resume)
//   extra.order                  I64 [N] this epoch's shuffled order of the training set
//   extra.loss_sum               F64 [] training loss summed since the last evaluation
//   metadata train_config        Seq2SeqTrainOptions::to_json() (fixes the schedule's length)
//            step, total_steps, epoch, finished, loss_count,
//            shuffle_rng_seed, shuffle_rng_offset, elapsed_s
//            task, min_len, max_len, seed (for readers of the file)
// The default generator is process-wide, so one trainer at a time per process.
class Seq2SeqTrainer {
 public:
  // A new run: draws the data from o.data, then manual_seed(o.seed) and
  // initialises the model. ValueError on invalid options.
  Seq2SeqTrainer(const Seq2SeqOptions& model_opt, const Seq2SeqTrainOptions& o);
  // Continues the run saved in `ckpt` (by save()) and restores the default
  // generator. `source` (the file name) starts every error message: a
  // FormatError names the missing or inconsistent entry, and leaves the
  // default generator as it was.
  Seq2SeqTrainer(const io::Checkpoint& ckpt, const std::string& source);

  // Trains until the run is finished (all steps done, or an evaluation reached
  // target_acc) or, if stop_after_epoch > 0, until that many epochs are
  // complete. Leaves the model in eval mode. Returns finished().
  bool train(const Seq2SeqTrainCallbacks& cb = {}, std::int64_t stop_after_epoch = 0);
  // Writes the checkpoint described above, atomically; `metadata` adds caller
  // entries (they must not clash with the trainer's or the checkpoint's keys).
  void save(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;

  bool finished() const { return step_ >= total_ || target_reached_; }
  std::int64_t step() const { return step_; }              // optimiser steps done
  std::int64_t total_steps() const { return total_; }
  std::int64_t steps_per_epoch() const { return per_epoch_; }
  std::int64_t epochs_done() const { return step_ / per_epoch_; }  // complete epochs
  std::int64_t total_epochs() const { return (total_ + per_epoch_ - 1) / per_epoch_; }
  const std::shared_ptr<Seq2Seq>& model() const { return model_; }
  const Seq2SeqData& data() const { return data_; }
  // The evaluations made by this object's train() calls (not those before a resume).
  const std::vector<Seq2SeqReport>& reports() const { return reports_; }
  const Seq2SeqOptions& model_options() const { return model_->options(); }
  const Seq2SeqTrainOptions& options() const { return opt_; }
  double elapsed_s() const { return elapsed_s_; }  // training time so far, including before a resume

 private:
  void init_run();  // derived sizes, train probe, optimiser (after model_ and data_ exist)

  Seq2SeqTrainOptions opt_;
  Seq2SeqData data_;
  std::vector<Seq2SeqExample> train_probe_;  // train_acc is measured on these
  std::shared_ptr<Seq2Seq> model_;
  std::unique_ptr<optim::AdamW> optim_;
  Generator shuffle_gen_;
  std::vector<std::int64_t> order_;
  std::int64_t per_epoch_ = 1, total_ = 0, eval_every_ = 1, step_ = 0;
  double loss_sum_ = 0;
  std::int64_t loss_n_ = 0;
  bool target_reached_ = false;
  double elapsed_s_ = 0;
  std::vector<Seq2SeqReport> reports_;
};

// A whole run in one call: Seq2SeqTrainer(model_opt, o).train(cb).
Seq2SeqTrainResult train_seq2seq(const Seq2SeqOptions& model_opt, const Seq2SeqTrainOptions& o,
                                 const Seq2SeqTrainCallbacks& cb = {});

// Learning rate at optimiser step `step` (0-based) of `total`.
double seq2seq_lr_at(const Seq2SeqTrainOptions& o, std::int64_t step, std::int64_t total);

// Parses an input like "3 1 4 1 5" or "31415" into digit values; ValueError otherwise.
std::vector<std::int64_t> parse_seq2seq_input(const std::string& s);
// Rebuilds a Seq2Seq from a checkpoint (model_type "seq2seq"); ValueError otherwise.
std::shared_ptr<Seq2Seq> seq2seq_from_checkpoint(const io::Checkpoint& ckpt);

}  // namespace qkv::models
