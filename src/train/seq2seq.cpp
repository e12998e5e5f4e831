// qkv train seq2seq's run on train::Loop (see qkv/train/seq2seq.h).
#include "qkv/train/seq2seq.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <set>

#include <nlohmann/json.hpp>

#include "../io/json_fields.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"

namespace qkv::train {

using io::JsonFields;
using models::kSeq2SeqNumDigits;
using models::Seq2Seq;
using models::Seq2SeqDataOptions;
using models::Seq2SeqExample;
using models::Seq2SeqOptions;
using models::seq2seq_target;
using models::seq2seq_task_name;

std::string Seq2SeqTrainOptions::to_json() const {
  const nlohmann::ordered_json j = {
      {"task", seq2seq_task_name(data.task)}, {"min_len", data.min_len},         {"max_len", data.max_len},
      {"train_size", data.train_size},         {"test_size", data.test_size},     {"data_seed", data.seed},
      {"epochs", epochs},                      {"steps", steps},                  {"batch", batch},
      {"grad_accum", grad_accum},
      {"lr", lr},                              {"warmup_steps", warmup_steps},    {"min_lr_ratio", min_lr_ratio},
      {"weight_decay", weight_decay},          {"clip_norm", clip_norm},          {"target_acc", target_acc},
      {"evals_per_epoch", evals_per_epoch},    {"seed", seed}};
  return j.dump();  // nlohmann prints the shortest decimal that reads back as the same double
}

Seq2SeqTrainOptions Seq2SeqTrainOptions::from_json(const std::string& text) {
  const JsonFields f(text, "seq2seq training config",
                     {"task", "min_len", "max_len", "train_size", "test_size", "data_seed", "epochs", "steps",
                      "batch", "grad_accum", "lr", "warmup_steps", "min_lr_ratio", "weight_decay", "clip_norm", "target_acc",
                      "evals_per_epoch", "seed"});
  Seq2SeqTrainOptions o;
  o.data.task = models::parse_seq2seq_task(f.get_string("task", seq2seq_task_name(o.data.task)));
  f.get("min_len", &o.data.min_len, 1);
  f.get("max_len", &o.data.max_len, 1);
  f.get("train_size", &o.data.train_size, 1);
  f.get("test_size", &o.data.test_size, 0);
  f.get("data_seed", &o.data.seed);
  f.get("epochs", &o.epochs, 0);
  f.get("steps", &o.steps, 0);
  f.get("batch", &o.batch, 1);
  f.get("grad_accum", &o.grad_accum, 1);  // absent in runs saved before it existed: 1
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


double seq2seq_lr_at(const Seq2SeqTrainOptions& o, std::int64_t step, std::int64_t total) {
  return Schedule{.lr = o.lr, .warmup = o.warmup_steps, .min_lr_ratio = o.min_lr_ratio}.at(step, total);
}

namespace {

// Optimiser steps per epoch: the shuffled training set in steps of batch x K examples, the
// last step's examples shared by its K micro-batches; a last step with fewer than K examples
// is left out of that epoch (a micro-batch is never empty).
std::int64_t steps_per_epoch(std::int64_t n, std::int64_t batch, std::int64_t K) {
  const std::int64_t per_step = batch * K;
  return n / per_step + (n % per_step >= K ? 1 : 0);
}

void validate_run(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o) {
  if (o.batch < 1) throw ValueError("train seq2seq: batch must be >= 1");
  if (o.grad_accum < 1) throw ValueError("train seq2seq: grad_accum must be >= 1");
  if (o.batch > std::numeric_limits<std::int64_t>::max() / o.grad_accum)
    throw ValueError("train seq2seq: batch x grad_accum overflows");
  if (o.data.train_size < o.grad_accum)
    throw ValueError("train seq2seq: the training set (" + std::to_string(o.data.train_size) +
                     " examples) is smaller than the micro-batches of one step (" + std::to_string(o.grad_accum) + ")");
  if (o.epochs < 1 && o.steps < 1) throw ValueError("train seq2seq: need epochs >= 1 or steps >= 1");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) throw ValueError("train seq2seq: lr must be a finite number > 0");
  for (const auto& [name, v] : {std::pair<const char*, double>{"min_lr_ratio", o.min_lr_ratio},
                                {"weight_decay", o.weight_decay}, {"clip_norm", o.clip_norm},
                                {"target_acc", o.target_acc}})
    if (!std::isfinite(v)) throw ValueError(std::string("train seq2seq: ") + name + " must be finite, got " + std::to_string(v));
  if (o.data.max_len >= mo.max_positions)  // max_len + 1 > max_positions, without overflowing
    throw ValueError("train seq2seq: max_len " + std::to_string(o.data.max_len) + " needs max_len + 1 positions, more than " +
                     "the model's max_positions " + std::to_string(mo.max_positions));
  // The counts a run multiplies (from flags or a checkpoint's train_config) must not overflow.
  if (o.data.train_size > 0 && o.steps < 1) {
    const std::int64_t per_epoch = steps_per_epoch(o.data.train_size, o.batch, o.grad_accum);
    if (o.epochs > std::numeric_limits<std::int64_t>::max() / per_epoch)
      throw ValueError("train seq2seq: epochs " + std::to_string(o.epochs) + " x " + std::to_string(per_epoch) +
                       " steps per epoch overflows a 64-bit step count");
  }
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

// The `which` ("train" / "test") set: rows of digits 0..9 then -1, lengths within
// [min_len, max_len], every target the task's target of its input.
std::vector<Seq2SeqExample> read_examples(const StateReader& rd, const std::string& which, std::int64_t rows,
                                        const Seq2SeqDataOptions& d) {
  const Tensor& in = rd.tensor(which + "_inputs", DType::I64, 2);
  const Tensor& tg = rd.tensor(which + "_targets", DType::I64, 2);
  const Shape want{rows, d.max_len};
  if (in.shape() != want || tg.shape() != want)
    throw rd.bad("checkpoint tensors 'extra." + which + "_inputs' " + in.shape_str() + " and 'extra." + which +
                 "_targets' " + tg.shape_str() + " should both be " + shape_str(want) + " (" + which +
                 " size by max_len)");
  const auto iv = in.to_vector<std::int64_t>(), tv = tg.to_vector<std::int64_t>();
  std::vector<Seq2SeqExample> ex(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::string where = "checkpoint tensor 'extra." + which + "_inputs' row " + std::to_string(r);
    for (std::int64_t k = 0; k < d.max_len; ++k) {
      const std::int64_t v = iv[static_cast<std::size_t>(r * d.max_len + k)];
      if (v == -1) break;
      if (v < 0 || v >= kSeq2SeqNumDigits) throw rd.bad(where + " holds " + std::to_string(v) + ", not a digit 0..9");
      ex[r].input.push_back(v);
    }
    const auto len = static_cast<std::int64_t>(ex[r].input.size());
    if (len < d.min_len) throw rd.bad(where + " has " + std::to_string(len) + " digits, fewer than min_len");
    for (std::int64_t k = len; k < d.max_len; ++k)
      if (iv[static_cast<std::size_t>(r * d.max_len + k)] != -1) throw rd.bad(where + " has digits after its end (-1)");
    ex[r].target = seq2seq_target(d.task, ex[r].input);
    for (std::int64_t k = 0; k < d.max_len; ++k)
      if (tv[static_cast<std::size_t>(r * d.max_len + k)] != (k < len ? ex[r].target[k] : -1))
        throw rd.bad("checkpoint tensor 'extra." + which + "_targets' row " + std::to_string(r) + " is not the " +
                     seq2seq_task_name(d.task) + " of its input");
  }
  return ex;
}

}  // namespace

// The digit-string task as the loop sees it: an epoch's batches in a shuffled order
// (Fisher-Yates at every epoch start, from its own generator), greedy exact accuracy
// on the held-out set and on a fixed sample of the training set.
class Seq2SeqTask : public Task {
 public:
  Seq2SeqTask(Seq2Seq& model, const models::Seq2SeqData& data, const std::vector<Seq2SeqExample>& probe,
              const Seq2SeqTrainOptions& o, std::int64_t per_epoch)
      : m_(model), data_(data), probe_(probe), o_(o), per_epoch_(per_epoch), gen_(shuffle_generator(o.seed)) {
    const auto n = static_cast<std::int64_t>(data_.train.size());
    order_.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) order_[i] = i;
  }
  // Micro-batch k of K of the step at position pos of its epoch: its share of the step's
  // examples order[pos*B*K, min(n, (pos+1)*B*K)) (exactly B each but in a short last step).
  Tensor loss(std::int64_t step, std::int64_t micro) override {
    const auto n = static_cast<std::int64_t>(data_.train.size());
    const std::int64_t pos = step % per_epoch_, K = o_.grad_accum;
    if (pos == 0 && step != shuffled_step_) {  // Fisher-Yates shuffle at every epoch start, once
      for (std::int64_t i = 0; i < n; ++i) order_[i] = i;
      for (std::int64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[gen_.randint(0, i + 1)]);
      shuffled_step_ = step;
    }
    const std::int64_t start = pos * o_.batch * K, m = std::min(n, start + o_.batch * K) - start;
    std::vector<Seq2SeqExample> ex;
    for (std::int64_t i = start + micro * m / K; i < start + (micro + 1) * m / K; ++i) ex.push_back(data_.train[order_[i]]);
    return m_.loss(models::make_seq2seq_batch(ex));
  }
  std::int64_t items_per_micro() const override { return o_.batch; }
  Metrics evaluate(std::int64_t) override {
    const double exact = models::seq2seq_exact_accuracy(m_, data_.test);
    const double train = models::seq2seq_exact_accuracy(m_, probe_);
    return {{"exact_acc", exact}, {"train_acc", train}};
  }
  bool stop_after(const Report& r) override { return o_.target_acc > 0 && metric(r.metrics, "exact_acc") >= o_.target_acc; }
  void save_state(TaskState& st) const override {
    const std::int64_t w = o_.data.max_len;
    st.tensors = {{"train_inputs", examples_tensor(data_.train, false, w)},
                  {"train_targets", examples_tensor(data_.train, true, w)},
                  {"test_inputs", examples_tensor(data_.test, false, w)},
                  {"test_targets", examples_tensor(data_.test, true, w)},
                  {"order", Tensor::from_vector(order_, {static_cast<std::int64_t>(order_.size())})}};
    st.metadata = {{"train_config", o_.to_json()},
                   {"shuffle_rng_seed", std::to_string(gen_.seed())},
                   {"shuffle_rng_offset", std::to_string(gen_.offset())},
                   {"task", seq2seq_task_name(o_.data.task)},
                   {"min_len", std::to_string(o_.data.min_len)},
                   {"max_len", std::to_string(o_.data.max_len)},
                   {"seed", std::to_string(o_.seed)}};
  }
  void load_state(const StateReader& r) override {
    const Tensor& order = r.tensor("order", DType::I64, 1);
    std::vector<std::int64_t> v = order.to_vector<std::int64_t>();
    std::vector<bool> seen(data_.train.size(), false);
    bool permutation = v.size() == data_.train.size();
    for (std::size_t i = 0; permutation && i < v.size(); ++i) {
      permutation = v[i] >= 0 && v[i] < static_cast<std::int64_t>(seen.size()) && !seen[v[i]];
      if (permutation) seen[v[i]] = true;
    }
    if (!permutation)
      throw r.bad("checkpoint tensor 'extra.order' " + order.shape_str() + " is not a permutation of the " +
                  std::to_string(data_.train.size()) + " training examples");
    Generator g(r.meta_u64("shuffle_rng_seed"));
    g.set_offset(r.meta_u64("shuffle_rng_offset"));
    order_ = std::move(v);
    gen_ = g;
  }

 private:
  Seq2Seq& m_;
  const models::Seq2SeqData& data_;
  const std::vector<Seq2SeqExample>& probe_;
  Seq2SeqTrainOptions o_;
  std::int64_t per_epoch_;
  Generator gen_;
  std::vector<std::int64_t> order_;
  std::int64_t shuffled_step_ = -1;  // the epoch start whose shuffle is done
};

MemoryEstimate seq2seq_training_memory(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o) {
  const std::int64_t C = mo.d_model, F = mo.d_ff, T = o.data.max_len + 2;
  MemoryEstimate params;
  params.add({3 * mo.vocab_size + mo.max_positions, C});
  params.add({mo.num_encoder_layers, 4 * C + 2 * F + 10, C}).add({mo.num_decoder_layers, 8 * C + 2 * F + 12, C});
  MemoryEstimate e = params.scale(4);
  e.add({o.data.train_size + o.data.test_size, T}, 6, 8);  // examples, their tensors and the distinctness set
  e.add({o.batch, T, mo.num_encoder_layers, 10 * C + 2 * F}).add({o.batch, T, mo.num_decoder_layers, 14 * C + 2 * F});
  e.add({o.batch, T, C}, 8).add({o.batch, T, mo.vocab_size}, 3);
  return e;
}

Seq2SeqTrainer::Seq2SeqTrainer(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o) : opt_(o) {
  validate_run(mo, o);
  try {
    seq2seq_training_memory(mo, o).check(
        "train seq2seq (" + std::to_string(o.data.train_size) + " + " + std::to_string(o.data.test_size) +
        " sequences of up to " + std::to_string(o.data.max_len) + " digits, batch " + std::to_string(o.batch) +
        "; d_model " + std::to_string(mo.d_model) + ", d_ff " + std::to_string(mo.d_ff) + ", " +
        std::to_string(mo.num_encoder_layers) + "+" + std::to_string(mo.num_decoder_layers) + " layers)");
  } catch (const ResourceError& e) {
    throw ResourceError(std::string(e.what()) + "; lower --train-size, --max-len, --batch or the model's size");
  }
  data_ = models::make_seq2seq_data(o.data);
  manual_seed(o.seed);  // parameter initialisation, then dropout
  model_ = std::make_shared<Seq2Seq>(mo);
  init_run();
}

Seq2SeqTrainer::~Seq2SeqTrainer() = default;

Seq2SeqTrainer::Seq2SeqTrainer(const io::Checkpoint& c, const std::string& source) {
  // Building the model draws from the default generator; a rejected checkpoint leaves it as it was.
  struct RestoreOnThrow {
    Generator saved = default_generator();
    bool done = false;
    ~RestoreOnThrow() {
      if (!done) default_generator() = saved;
    }
  } restore;
  const StateReader r(c, source);
  if (c.model_type != "seq2seq")
    throw r.bad("checkpoint holds a '" + c.model_type + "' model, not a seq2seq training run");
  if (!c.metadata.count("train_config"))
    throw r.bad("checkpoint has no metadata 'train_config', so it holds no resumable seq2seq training run (it "
                "still works for heatmaps)");
  Seq2SeqOptions mo;
  try {
    mo = Seq2SeqOptions::from_json(c.config_json);
    opt_ = Seq2SeqTrainOptions::from_json(r.meta("train_config"));
    validate_run(mo, opt_);
    models::check_seq2seq_config_fits(mo, c.model);
  } catch (const ValueError& e) {
    throw r.bad(e.what());
  }
  if (!c.has_rng) throw r.bad("checkpoint has no RNG state (metadata 'rng_seed', 'rng_offset'); cannot resume bitwise");
  data_.train = read_examples(r, "train", opt_.data.train_size, opt_.data);
  data_.test = read_examples(r, "test", opt_.data.test_size, opt_.data);
  model_ = [&] {
    nn::SkipInitGuard skip;  // every parameter is loaded next: no random initialisation
    return std::make_shared<Seq2Seq>(mo);
  }();
  init_run();
  try {
    model_->load_state_dict(c.model);
  } catch (const Error& e) {
    throw r.bad(e.what());
  }
  loop_->load_state(r);  // optimiser, counters, the task's order and generator, the default generator
  restore.done = true;
}

void Seq2SeqTrainer::init_run() {
  const auto n = static_cast<std::int64_t>(data_.train.size());
  per_epoch_ = train::steps_per_epoch(n, opt_.batch, opt_.grad_accum);
  if (per_epoch_ < 1)
    throw ValueError("train seq2seq: " + std::to_string(n) + " training examples cannot fill the " +
                     std::to_string(opt_.grad_accum) + " micro-batches of a step");
  total_ = opt_.steps > 0 ? opt_.steps : per_epoch_ * opt_.epochs;
  const std::int64_t eval_every = std::max<std::int64_t>(1, per_epoch_ / std::max<std::int64_t>(1, opt_.evals_per_epoch));
  // A fixed sample of training examples for train_acc, as large as the held-out set.
  train_probe_.assign(data_.train.begin(),
                      data_.train.begin() + std::min<std::int64_t>(n, std::max<std::int64_t>(1, opt_.data.test_size)));
  optim_ = std::make_unique<optim::AdamW>(model_->named_parameters(),
                                          optim::AdamOptions{.lr = opt_.lr, .weight_decay = opt_.weight_decay});
  task_ = std::make_unique<Seq2SeqTask>(*model_, data_, train_probe_, opt_, per_epoch_);
  loop_ = std::make_unique<Loop>(
      *model_, *optim_, *task_,
      LoopOptions{.total_steps = total_,
                  .grad_accum = opt_.grad_accum,
                  .clip_norm = opt_.clip_norm,
                  .eval_every = eval_every,
                  .schedule = {.lr = opt_.lr, .warmup = opt_.warmup_steps, .min_lr_ratio = opt_.min_lr_ratio}});
}

bool Seq2SeqTrainer::train(const Seq2SeqTrainCallbacks& cb, std::int64_t stop_after_epoch) {
  LoopCallbacks lc;
  lc.on_report = [&](const Report& r) {
    Seq2SeqReport rep;
    rep.step = r.step;
    rep.epoch = (r.step + per_epoch_ - 1) / per_epoch_;
    rep.loss = r.train_loss;
    rep.lr = r.lr;
    rep.exact_acc = metric(r.metrics, "exact_acc");
    rep.train_acc = metric(r.metrics, "train_acc");
    rep.elapsed_s = r.elapsed_s;
    reports_.push_back(rep);
    if (cb.on_report) cb.on_report(rep);
  };
  lc.on_step = [&](std::int64_t step, std::int64_t total, double loss) {
    if (cb.on_step) cb.on_step(step, total, loss);
    if (step % per_epoch_ == 0 && cb.on_epoch_end) cb.on_epoch_end(step / per_epoch_);
  };
  return loop_->run(lc, stop_after_epoch > 0 ? stop_after_epoch * per_epoch_ : 0);
}

void Seq2SeqTrainer::save(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  io::SaveCheckpointArgs a;
  a.model = model_.get();
  a.model_type = "seq2seq";
  a.config_json = model_->options().to_json();
  loop_->save_state(a);
  a.metadata.emplace("epoch", std::to_string(epochs_done()));
  for (const auto& [k, v] : metadata)
    if (!a.metadata.emplace(k, v).second)
      throw ValueError("Seq2SeqTrainer::save: metadata key '" + k + "' is the trainer's own");
  io::save_checkpoint(path, a);
}

Seq2SeqTrainResult train_seq2seq(const Seq2SeqOptions& mo, const Seq2SeqTrainOptions& o,
                                 const Seq2SeqTrainCallbacks& cb) {
  Seq2SeqTrainer t(mo, o);
  t.train(cb);
  return {t.model(), t.data(), t.reports(), t.step()};
}

}  // namespace qkv::train
