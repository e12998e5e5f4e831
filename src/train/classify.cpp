// qkv train classify's run on train::Loop (see qkv/train/classify.h).
#include "qkv/train/classify.h"

#include <cmath>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/ops/ops.h"

namespace qkv::train {
namespace {

constexpr std::uint64_t kDataStream = 0x6461746173656564ull;  // "dataseed": data use a stream apart from init/dropout

std::string general17(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

// Full batch: every step's loss is over the whole training set.
class ClassifyTask : public Task {
 public:
  ClassifyTask(const models::TinyTextClassifier& m, const models::ClassifyData& train, const models::ClassifyData& val,
               std::int64_t K)
      : m_(m), train_(train), val_(val), K_(K) {}
  Tensor loss(std::int64_t, std::int64_t micro) override {
    if (K_ == 1) return cross_entropy(m_.forward(train_.tokens), train_.labels);
    const std::int64_t n = train_.tokens.size(0), lo = micro * n / K_, hi = (micro + 1) * n / K_;
    return cross_entropy(m_.forward(train_.tokens.narrow(0, lo, hi - lo)), train_.labels.narrow(0, lo, hi - lo));
  }
  std::int64_t items_per_micro() const override { return train_.tokens.size(0) / K_; }
  void on_step_loss(std::int64_t, double loss) override { last_ = loss; }
  Metrics evaluate(std::int64_t) override {
    autograd::NoGradGuard no_grad;
    const double tr = models::accuracy(m_.forward(train_.tokens), train_.labels);
    const double va = models::accuracy(m_.forward(val_.tokens), val_.labels);
    return {{"loss", last_}, {"train_acc", tr}, {"val_acc", va}};
  }

 private:
  const models::TinyTextClassifier& m_;
  const models::ClassifyData& train_;
  const models::ClassifyData& val_;
  std::int64_t K_;
  double last_ = std::nan("");  // the last step's loss
};

MemoryEstimate classify_training_memory(const ClassifyRunOptions& o) {
  const models::ClassifierOptions& m = o.model;
  const std::int64_t val = o.val_size > 0 ? o.val_size : o.balanced ? 200 : 50;
  const std::int64_t L = 8;  // tokens per sequence (models::make_classify_data)
  MemoryEstimate params;
  params.add({m.vocab_size + m.max_len + m.num_classes, m.d_model});
  params.add({m.num_layers, 4 * m.d_model + 2 * m.d_ff + 10, m.d_model});
  MemoryEstimate e = params.scale(4);
  e.add({o.train_size + val, L + 1}, 2, 8);  // the data (tokens and labels)
  e.add({o.train_size, L, m.num_layers, 10 * m.d_model + 2 * m.d_ff}).add({o.train_size, L, m.d_model}, 8);
  return e;
}

ClassifyTrainer::ClassifyTrainer(const ClassifyRunOptions& o) : o_(o) {
  if (o_.epochs < 1) throw ValueError("train classify: --epochs must be >= 1, got " + std::to_string(o_.epochs));
  if (o_.model.d_model % o_.model.num_heads != 0)
    throw ValueError("train classify: --d-model " + std::to_string(o_.model.d_model) + " is not divisible by --heads " +
                     std::to_string(o_.model.num_heads));
  if (o_.grad_accum < 1 || o_.grad_accum > o_.train_size)
    throw ValueError("train classify: the micro-batches per step (--grad-accum over all ranks) must be in [1, the " +
                     std::to_string(o_.train_size) + " training sequences], got " + std::to_string(o_.grad_accum));
  if (o_.val_size <= 0) o_.val_size = o_.balanced ? 200 : 50;
  try {
    classify_training_memory(o_).check(
        "train classify (" + std::to_string(o_.train_size) + " training sequences, full batch; d_model " +
        std::to_string(o_.model.d_model) + ", d_ff " + std::to_string(o_.model.d_ff) + ", " +
        std::to_string(o_.model.num_layers) + " layers)");
  } catch (const ResourceError& e) {
    throw ResourceError(std::string(e.what()) + "; lower --train-size or the model's size");
  }
  data_seed_ = o_.seed ^ kDataStream;
  Generator data_gen(data_seed_);
  train_ = models::make_classify_data({.num_samples = o_.train_size, .balanced = o_.balanced}, data_gen);
  val_ = models::make_classify_data({.num_samples = o_.val_size, .balanced = o_.balanced}, data_gen);
  manual_seed(o_.seed);  // parameter init, then dropout masks
  model_ = std::make_unique<models::TinyTextClassifier>(o_.model);
  opt_ = std::make_unique<optim::Adam>(model_->named_parameters(), optim::AdamOptions{.lr = o_.lr});
  init_run();
}

ClassifyTrainer::ClassifyTrainer(const io::Checkpoint& c, const std::string& f, std::int64_t epochs,
                                 std::int64_t eval_every) {
  const StateReader r(c, f);
  auto not_ours = [&](const std::string& why) {
    return FormatError(f + ": not a 'qkv train classify' checkpoint (" + why + ")");
  };
  const auto task = c.metadata.find("task");
  if (c.model_type != "classifier" || task == c.metadata.end() || task->second != "classify")
    throw not_ours("model_type '" + c.model_type + "'");
  for (const char* k : {"epoch", "seed", "data_seed", "balanced", "step"})
    if (!c.metadata.count(k)) throw not_ours(std::string("no metadata '") + k + "'");
  if (!c.has_rng) throw FormatError(f + ": checkpoint has no RNG state; cannot resume bitwise");
  o_.model = models::classifier_config_from_json(c.config_json);
  models::check_classifier_config_fits(o_.model, c.model);
  o_.seed = r.meta_u64("seed");
  data_seed_ = r.meta_u64("data_seed");
  o_.balanced = r.meta("balanced") == "true";
  train_ = {r.tensor("train_tokens", DType::I64, 2), r.tensor("train_labels", DType::I64, 1)};
  val_ = {r.tensor("val_tokens", DType::I64, 2), r.tensor("val_labels", DType::I64, 1)};
  o_.train_size = train_.tokens.size(0);
  o_.val_size = val_.tokens.size(0);
  // Absent in runs saved before it existed: one micro-batch.
  o_.grad_accum = c.metadata.count("grad_accum") ? static_cast<std::int64_t>(r.meta_u64("grad_accum")) : 1;
  if (o_.grad_accum < 1 || o_.grad_accum > o_.train_size)
    throw r.bad("checkpoint metadata 'grad_accum' " + std::to_string(o_.grad_accum) + " is not in [1, " +
                std::to_string(o_.train_size) + "]");
  const auto done = static_cast<std::int64_t>(r.meta_u64("step"));
  if (done >= epochs)
    throw ValueError("train classify: " + f + " is already at epoch " + std::to_string(done) +
                     "; pass --epochs greater than that to train further (--epochs is the total)");
  o_.epochs = epochs;
  o_.eval_every = eval_every;
  model_ = std::make_unique<models::TinyTextClassifier>(o_.model);
  model_->load_state_dict(c.model);
  opt_ = std::make_unique<optim::Adam>(model_->named_parameters(), optim::AdamOptions{});
  opt_->load_state(c.optimizer);  // its lr is the run's
  o_.lr = opt_->lr();
  init_run();
  loop_->load_state(r);
}

ClassifyTrainer::~ClassifyTrainer() = default;

void ClassifyTrainer::init_run() {
  task_ = std::make_unique<ClassifyTask>(*model_, train_, val_, o_.grad_accum);
  loop_ = std::make_unique<Loop>(*model_, *opt_, *task_,
                                 LoopOptions{.total_steps = o_.epochs,
                                             .grad_accum = o_.grad_accum,
                                             .eval_every = o_.eval_every,
                                             .schedule = {.lr = o_.lr, .decay = false}});
}

bool ClassifyTrainer::train(const std::function<void(const ClassifyReport&)>& on_report,
                            const std::function<void(std::int64_t, double)>& on_epoch) {
  LoopCallbacks cb;
  cb.on_report = [&](const Report& r) {
    if (on_report)
      on_report({.epoch = r.step,
                 .loss = metric(r.metrics, "loss"),
                 .train_acc = metric(r.metrics, "train_acc"),
                 .val_acc = metric(r.metrics, "val_acc")});
  };
  cb.on_step = [&](std::int64_t step, std::int64_t, double loss) {
    if (on_epoch) on_epoch(step, loss);
  };
  try {
    return loop_->run(cb);
  } catch (const NumericError& e) {
    // The loop counts steps; here each step is one full-batch epoch.
    std::string m = e.what();
    const std::string pre = "train: step ";
    if (m.rfind(pre, 0) == 0) m = "epoch " + m.substr(pre.size());
    throw NumericError("train classify (lr " + general17(o_.lr) + "): " + m);
  }
}

void ClassifyTrainer::save(const std::string& path) const {
  io::SaveCheckpointArgs a;
  a.model = model_.get();
  a.model_type = "classifier";
  a.config_json = models::classifier_config_to_json(o_.model);
  loop_->save_state(a);
  a.extra.insert({{"train_tokens", train_.tokens}, {"train_labels", train_.labels},
                  {"val_tokens", val_.tokens},     {"val_labels", val_.labels}});
  a.metadata.insert({{"task", "classify"},
                     {"epoch", std::to_string(loop_->step())},
                     {"seed", std::to_string(o_.seed)},
                     {"data_seed", std::to_string(data_seed_)},
                     {"balanced", o_.balanced ? "true" : "false"},
                     {"train_size", std::to_string(o_.train_size)},
                     {"val_size", std::to_string(o_.val_size)},
                     {"grad_accum", std::to_string(o_.grad_accum)},
                     {"optimizer", "Adam"},
                     {"lr", general17(o_.lr)}});
  io::save_checkpoint(path, a);
}

}  // namespace qkv::train
