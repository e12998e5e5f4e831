// One training loop for every model (docs/design.md, train/): the learning-rate
// schedule, gradient accumulation, clipping, the optimiser step, the evaluation
// cadence, non-finite handling, progress reporting and the run's state for
// checkpoints. A model takes part through a small Task: the loss of one
// micro-batch, an evaluation, and whatever data state it must keep for an exact
// resume. The classifier, seq2seq and language-model trainers all run on it.
//
//   per optimiser step s (0-based) of total_steps:
//     lr = schedule.at(s); zero_grad
//     for micro k in 0..K-1:  l_k = task.loss(s, k); backward(l_k / K)   (K = grad_accum; K = 1: l_0 itself)
//     loss = mean_k l_k; non-finite loss or gradient -> NumericError naming the step, or the step skipped
//     clip the global gradient norm to clip_norm (if > 0); optimiser step
//     after every eval_every-th step and after the last: task.evaluate -> Report
//
// K > 1, or N > 1 data-parallel ranks (train/distributed.h): each micro-batch's gradient
// G_k is computed alone (gradients cleared before its backward) and the step's gradient is
// the fold ((G_0 + G_1) + ...) + G_{K-1} in micro-batch order (grad_exchange.h). Micro-batch
// k runs on rank k mod N, so N ranks with K / N micro-batches each give bitwise the result
// of one process with K (same --threads per process); K must be a multiple of N. Dropout
// then draws micro-batch k's masks from its own stream (seeded from the default generator,
// the step and k), which the step leaves unchanged. Rank 0 alone evaluates; the other
// ranks receive its metrics, so every rank makes the same Report and stop decision.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/io/checkpoint.h"
#include "qkv/nn/module.h"
#include "qkv/optim/optimizer.h"

namespace qkv::train {

// Learning rate at optimiser step `step` (0-based) of a run of `total` steps:
// linear warmup lr * (step + 1) / warmup for the first `warmup` steps, then a
// cosine from lr down to lr * min_lr_ratio at the last step (decay = false:
// constant lr after the warmup).
struct Schedule {
  double lr = 1e-3;
  std::int64_t warmup = 0;
  double min_lr_ratio = 0.0;
  bool decay = true;
  double at(std::int64_t step, std::int64_t total) const;
};

// Named evaluation results in the order the task reports them ("val_loss", ...).
using Metrics = std::vector<std::pair<std::string, double>>;
// Value of `name` in m; ValueError naming it if absent.
double metric(const Metrics& m, const std::string& name);

// What the loop reports after an evaluation.
struct Report {
  std::int64_t step = 0;        // optimiser steps done (1-based count)
  std::int64_t total_steps = 0;
  double train_loss = 0;        // mean micro-batch loss over the steps since the previous report
  double lr = 0;                // of the last step
  double elapsed_s = 0;         // training time of the run so far (including before a resume)
  double items_per_s = 0;       // task items (tokens, examples) per second since the previous report
  std::int64_t skipped_steps = 0;  // non-finite steps skipped so far (NonFinite::Skip)
  double wait_s = 0;            // time blocked on other ranks since the previous report (data-parallel)
  Metrics metrics;              // task.evaluate()
};

// State a task keeps in a checkpoint beside the loop's own (tensors go under
// "extra.", strings into the metadata).
struct TaskState {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads named entries of a checkpoint with errors that start with its source
// (the file name) and name the entry.
class StateReader {
 public:
  StateReader(const io::Checkpoint& c, std::string source) : c_(c), src_(std::move(source)) {}
  FormatError bad(const std::string& what) const;
  const std::string& meta(const std::string& key) const;
  std::uint64_t meta_u64(const std::string& key) const;
  double meta_double(const std::string& key) const;
  // "extra.<name>" with the given dtype and rank.
  const Tensor& tensor(const std::string& name, DType dt, std::int64_t rank) const;
  const io::Checkpoint& checkpoint() const { return c_; }
  const std::string& source() const { return src_; }

 private:
  const io::Checkpoint& c_;
  std::string src_;
};

class Task {
 public:
  virtual ~Task() = default;
  // Loss (rank 0, autograd on) of micro-batch `micro` of optimiser step `step` (micro in
  // 0..grad_accum-1, grad_accum being the global count). Called in increasing (step, micro)
  // order, once each, model in train mode; rank r of N data-parallel ranks is asked only for
  // its micro-batches, micro = r, r + N, ...
  virtual Tensor loss(std::int64_t step, std::int64_t micro) = 0;
  // Items (tokens, examples) in one micro-batch, for the throughput; 0 if not counted.
  virtual std::int64_t items_per_micro() const { return 0; }
  // After every step that was not skipped: the step's mean loss over all micro-batches
  // (of every rank), before the evaluation of that step.
  virtual void on_step_loss(std::int64_t /*step*/, double /*loss*/) {}
  // Evaluation after `step` steps (the loop puts the model in eval mode around it); with
  // data-parallel ranks, called on rank 0 only.
  virtual Metrics evaluate(std::int64_t step) = 0;
  // True to end the run after this report (a target reached).
  virtual bool stop_after(const Report&) { return false; }
  virtual void save_state(TaskState&) const {}
  // Restores what save_state wrote (throw r.bad(...) on a malformed entry).
  virtual void load_state(const StateReader&) {}
};

enum class NonFiniteStep { Error, Skip };

struct LoopOptions {
  std::int64_t total_steps = 1;  // optimiser steps of the whole run (fixes the schedule)
  std::int64_t grad_accum = 1;   // micro-batches per optimiser step
  double clip_norm = 0.0;        // <= 0: no clipping
  std::int64_t eval_every = 0;   // evaluate after every N steps and after the last; 0: after the last only
  Schedule schedule;
  // Error: a non-finite loss or gradient throws NumericError naming the step, before any
  // parameter or optimiser state changes. Skip: that step leaves them unchanged and the run goes on.
  NonFiniteStep on_nonfinite = NonFiniteStep::Error;
};

struct LoopCallbacks {
  // After every evaluation (model in eval mode), before on_step of the same step.
  std::function<void(const Report&)> on_report;
  // After every optimiser step (the loop's state is complete: a checkpoint may be saved here).
  std::function<void(std::int64_t step, std::int64_t total, double loss)> on_step;
};

// Ctrl-C: a process-wide request to stop (async-signal-safe to make: one lock-free atomic
// store) that Loop::run honours once the step it is in is complete, after its on_step:
// run() returns with finished() false and the state complete for a save. In a data-parallel
// job the ranks decide together (a signal may reach only some of them): every rank stops
// after the same step if any rank was asked to.
void request_stop();
bool stop_requested();
void clear_stop_request();
// stop_requested() on any rank of world() (train/distributed.h), which then becomes this
// rank's request too. A collective: every rank calls it at the same point (`where` names it
// in a timeout's message). With one process: stop_requested().
bool stop_requested_by_any_rank(const std::string& where);

// Drives `task` over `model` with `optimizer`; keeps references to all three.
// Uses the process-wide default generator (dropout), whose state it saves and
// restores: one loop at a time per process.
namespace detail {
class GradExchange;
}

class Loop {
 public:
  // Joins the data-parallel ranks of world() (train/distributed.h) if there are several.
  Loop(nn::Module& model, optim::Optimizer& optimizer, Task& task, const LoopOptions& o);
  ~Loop();

  // Trains until finished(), a stop request (request_stop) or, if stop_at_step > 0, until
  // that many steps are done.
  // Leaves the model in eval mode. Returns finished().
  bool run(const LoopCallbacks& cb = {}, std::int64_t stop_at_step = 0);

  // The run's state for a checkpoint: fills args.optimizer, args.rng, the loop's
  // metadata (step, total_steps, finished, loss_count, skipped_steps, elapsed_s,
  // items) and tensors (extra.loss_sum), and the task's state. Clashing keys are a ValueError.
  void save_state(io::SaveCheckpointArgs& args) const;
  // Restores the optimiser, the default generator, the loop's counters and the task's
  // state from a checkpoint written through save_state. The run's length must be the
  // saved one when the schedule decays over it; a constant schedule may be extended. FormatError via r.bad() on a
  // missing or inconsistent entry.
  void load_state(const StateReader& r);

  bool finished() const { return step_ >= o_.total_steps || stopped_; }
  std::int64_t step() const { return step_; }
  std::int64_t total_steps() const { return o_.total_steps; }
  double elapsed_s() const { return elapsed_s_; }
  std::int64_t skipped_steps() const { return skipped_; }
  const LoopOptions& options() const { return o_; }
  const std::vector<Report>& reports() const { return reports_; }  // made by this object's run() calls
  // Data-parallel ranks taking part (1: this process alone), the time this rank has been
  // blocked on the others, and the gradient bytes it sends per step (0 with one rank).
  std::int64_t ranks() const { return ranks_; }
  double wait_s() const;
  std::int64_t bytes_sent_per_step() const;

 private:
  bool one_step(double* loss);  // false: skipped (non-finite)
  bool fold_step(double* loss);  // one_step with K > 1 or several ranks
  bool nonfinite(const std::string& what, double value);  // false (Skip) or NumericError
  void check_ranks_agree();
  nn::Module& model_;
  optim::Optimizer& opt_;
  Task& task_;
  LoopOptions o_;
  std::vector<Tensor> params_;
  std::int64_t ranks_ = 1, rank_ = 0;
  std::unique_ptr<detail::GradExchange> ex_;  // K > 1 or several ranks
  bool checked_ = false;
  std::int64_t step_ = 0, loss_n_ = 0, skipped_ = 0, items_ = 0;
  double loss_sum_ = 0, elapsed_s_ = 0;
  bool stopped_ = false;
  std::vector<Report> reports_;
};

}  // namespace qkv::train
