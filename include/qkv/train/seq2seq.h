// The seq2seq training run (qkv train seq2seq) on the shared train::Loop: the
// digit-string task of models/seq2seq.h as a train::Task (epoch-shuffled batches,
// greedy exact accuracy as the evaluation, a target accuracy as the stop), its
// options and its checkpoint layout.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/memory.h"
#include "qkv/io/checkpoint.h"
#include "qkv/models/seq2seq.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/loop.h"

namespace qkv::train {

class Seq2SeqTask;  // src/train/seq2seq.cpp

struct Seq2SeqTrainOptions {
  models::Seq2SeqDataOptions data;
  std::int64_t epochs = 3;         // passes over data.train
  std::int64_t steps = 0;          // > 0: stop after this many optimiser steps (epochs extended as needed)
  std::int64_t batch = 64;         // examples per micro-batch
  std::int64_t grad_accum = 1;     // K: micro-batches per optimiser step, over all data-parallel ranks
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

// The memory a new run needs at its peak, checked before the data or the model exist: the
// parameters four times over (weights, gradients, AdamW's two moments), the data (inputs,
// targets and the set that keeps them distinct), and what a batch's forward keeps for the
// backward (per token about 10 d_model + 2 d_ff floats per encoder layer, 14 d_model + 2
// d_ff per decoder layer, 8 d_model and 3 x vocab more).
MemoryEstimate seq2seq_training_memory(const models::Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o);

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
  std::shared_ptr<models::Seq2Seq> model;
  models::Seq2SeqData data;
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
//            step, total_steps, epoch, finished, loss_count, skipped_steps, items,
//            shuffle_rng_seed, shuffle_rng_offset, elapsed_s   (the loop's own: train/loop.h)
//            task, min_len, max_len, seed (for readers of the file)
// The default generator is process-wide, so one trainer at a time per process.
class Seq2SeqTrainer {
 public:
  // A new run: draws the data from o.data, then manual_seed(o.seed) and
  // initialises the model. ValueError on invalid options.
  Seq2SeqTrainer(const models::Seq2SeqOptions& model_opt, const Seq2SeqTrainOptions& o);
  // Continues the run saved in `ckpt` (by save()) and restores the default
  // generator. `source` (the file name) starts every error message: a
  // FormatError names the missing or inconsistent entry, and leaves the
  // default generator as it was.
  Seq2SeqTrainer(const io::Checkpoint& ckpt, const std::string& source);
  ~Seq2SeqTrainer();

  // Trains until the run is finished (all steps done, or an evaluation reached
  // target_acc) or, if stop_after_epoch > 0, until that many epochs are
  // complete. Leaves the model in eval mode. Returns finished().
  bool train(const Seq2SeqTrainCallbacks& cb = {}, std::int64_t stop_after_epoch = 0);
  // Writes the checkpoint described above, atomically; `metadata` adds caller
  // entries (they must not clash with the trainer's or the checkpoint's keys).
  void save(const std::string& path, const std::map<std::string, std::string>& metadata = {}) const;

  bool finished() const { return loop_->finished(); }
  std::int64_t step() const { return loop_->step(); }              // optimiser steps done
  std::int64_t total_steps() const { return total_; }
  std::int64_t steps_per_epoch() const { return per_epoch_; }
  std::int64_t epochs_done() const { return step() / per_epoch_; }  // complete epochs
  std::int64_t total_epochs() const { return (total_ + per_epoch_ - 1) / per_epoch_; }
  const std::shared_ptr<models::Seq2Seq>& model() const { return model_; }
  const models::Seq2SeqData& data() const { return data_; }
  // The evaluations made by this object's train() calls (not those before a resume).
  const std::vector<Seq2SeqReport>& reports() const { return reports_; }
  const models::Seq2SeqOptions& model_options() const { return model_->options(); }
  const Seq2SeqTrainOptions& options() const { return opt_; }
  double elapsed_s() const { return loop_->elapsed_s(); }  // training time so far, including before a resume

 private:
  void init_run();  // derived sizes, train probe, optimiser, task and loop (after model_ and data_ exist)

  Seq2SeqTrainOptions opt_;
  models::Seq2SeqData data_;
  std::vector<models::Seq2SeqExample> train_probe_;  // train_acc is measured on these
  std::shared_ptr<models::Seq2Seq> model_;
  std::unique_ptr<optim::AdamW> optim_;
  std::unique_ptr<Seq2SeqTask> task_;
  std::unique_ptr<Loop> loop_;
  std::int64_t per_epoch_ = 1, total_ = 0;
  std::vector<Seq2SeqReport> reports_;
};

// A whole run in one call: Seq2SeqTrainer(model_opt, o).train(cb).
Seq2SeqTrainResult train_seq2seq(const models::Seq2SeqOptions& model_opt, const Seq2SeqTrainOptions& o,
                                 const Seq2SeqTrainCallbacks& cb = {});

// Learning rate at optimiser step `step` (0-based) of `total`.
double seq2seq_lr_at(const Seq2SeqTrainOptions& o, std::int64_t step, std::int64_t total);

}  // namespace qkv::train
