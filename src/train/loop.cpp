#include "qkv/train/loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/ops/ops.h"

namespace qkv::train {

double Schedule::at(std::int64_t step, std::int64_t total) const {
  if (warmup > 0 && step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (!decay) return lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total - warmup));
  const double p = std::clamp(static_cast<double>(step - warmup) / span, 0.0, 1.0);
  const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  return lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine);
}

double metric(const Metrics& m, const std::string& name) {
  for (const auto& [n, v] : m)
    if (n == name) return v;
  throw ValueError("train: the evaluation has no metric '" + name + "'");
}

// ---------------------------------------------------------------- StateReader

FormatError StateReader::bad(const std::string& what) const { return FormatError(src_ + ": " + what); }

const std::string& StateReader::meta(const std::string& key) const {
  const auto it = c_.metadata.find(key);
  if (it == c_.metadata.end()) throw bad("checkpoint has no metadata '" + key + "'");
  return it->second;
}

std::uint64_t StateReader::meta_u64(const std::string& key) const {
  return io::parse_metadata_u64(meta(key), src_ + ": metadata '" + key + "'");
}

double StateReader::meta_double(const std::string& key) const {
  const std::string& s = meta(key);
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size() || !std::isfinite(v)) throw bad("checkpoint metadata '" + key + "' is not a number: '" + s + "'");
  return v;
}

const Tensor& StateReader::tensor(const std::string& name, DType dt, std::int64_t rank) const {
  const auto it = c_.extra.find(name);
  if (it == c_.extra.end()) throw bad("checkpoint has no tensor 'extra." + name + "'");
  if (it->second.dtype() != dt || it->second.dim() != rank)
    throw bad("checkpoint tensor 'extra." + name + "' is " + dtype_name(it->second.dtype()) + " " +
              it->second.shape_str() + ", expected " + dtype_name(dt) + " of rank " + std::to_string(rank));
  return it->second;
}

// ---------------------------------------------------------------- Loop

namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "request_stop() is called from a signal handler");

void validate(const LoopOptions& o) {
  auto fail = [](const std::string& m) { throw ValueError("train: " + m); };
  if (o.total_steps < 1) fail("total steps must be >= 1, got " + std::to_string(o.total_steps));
  if (o.grad_accum < 1) fail("gradient accumulation must be >= 1, got " + std::to_string(o.grad_accum));
  if (o.eval_every < 0) fail("eval_every must be >= 0, got " + std::to_string(o.eval_every));
  if (!std::isfinite(o.clip_norm)) fail("clip norm must be finite");
  const Schedule& s = o.schedule;
  if (!(s.lr >= 0) || !std::isfinite(s.lr)) fail("learning rate must be a finite number >= 0");
  if (s.warmup < 0) fail("warmup must be >= 0, got " + std::to_string(s.warmup));
  if (!(s.min_lr_ratio >= 0 && s.min_lr_ratio <= 1)) fail("min lr ratio must be in [0, 1]");
}

std::string step_of(std::int64_t step, std::int64_t total) {
  return "step " + std::to_string(step) + " of " + std::to_string(total);
}

}  // namespace

void request_stop() { g_stop.store(true, std::memory_order_relaxed); }
bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }
void clear_stop_request() { g_stop.store(false, std::memory_order_relaxed); }

Loop::Loop(nn::Module& model, optim::Optimizer& optimizer, Task& task, const LoopOptions& o)
    : model_(model), opt_(optimizer), task_(task), o_(o), params_(model.parameters()) {
  validate(o_);
}

bool Loop::one_step(double* loss) {
  const std::int64_t K = o_.grad_accum;
  const std::string where = step_of(step_ + 1, o_.total_steps);
  // A step that fails or is skipped leaves the optimiser exactly as it was, its lr included.
  struct RestoreLr {
    optim::Optimizer& opt;
    double lr;
    bool keep = false;
    ~RestoreLr() {
      if (!keep) opt.set_lr(lr);
    }
  } restore{opt_, opt_.lr()};
  opt_.set_lr(o_.schedule.at(step_, o_.total_steps));
  opt_.zero_grad();
  double sum = 0;
  for (std::int64_t k = 0; k < K; ++k) {
    Tensor l = task_.loss(step_, k);
    const double lv = l.item();
    if (!std::isfinite(lv)) {
      opt_.zero_grad();
      if (o_.on_nonfinite == NonFiniteStep::Error)
        throw NumericError("train: " + where + ": the loss is " + std::to_string(lv) +
                           "; no parameter or optimiser state was changed");
      return false;
    }
    sum += lv;
    if (K == 1) l.backward();
    else mul(l, 1.0 / static_cast<double>(K)).backward();
  }
  *loss = sum / static_cast<double>(K);
  // The global gradient norm is always computed: it is the non-finite check (and the clip).
  const double max_norm = o_.clip_norm > 0 ? o_.clip_norm : std::numeric_limits<double>::infinity();
  const double norm = optim::clip_grad_norm(params_, max_norm, optim::NonFinite::Skip);
  if (!std::isfinite(norm)) {
    opt_.zero_grad();
    if (o_.on_nonfinite == NonFiniteStep::Error)
      throw NumericError("train: " + where + ": the gradient norm is " + std::to_string(norm) +
                         "; no parameter or optimiser state was changed");
    return false;
  }
  opt_.step();
  restore.keep = true;
  return true;
}

bool Loop::run(const LoopCallbacks& cb, std::int64_t stop_at_step) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const double before = elapsed_s_;
  auto elapsed = [&] { return before + std::chrono::duration<double>(clock::now() - t0).count(); };
  double report_time = elapsed_s_;
  std::int64_t report_items = 0;
  model_.train();
  while (!finished() && !(stop_at_step > 0 && step_ >= stop_at_step)) {
    double lv = 0;
    const bool done = one_step(&lv);
    ++step_;
    if (done) {
      loss_sum_ += lv;
      ++loss_n_;
    } else {
      ++skipped_;
    }
    const std::int64_t items = task_.items_per_micro() * o_.grad_accum;
    items_ += items;
    report_items += items;
    elapsed_s_ = elapsed();
    const bool eval_now = (o_.eval_every > 0 && step_ % o_.eval_every == 0) || step_ == o_.total_steps;
    if (eval_now) {
      Report rep;
      rep.step = step_;
      rep.total_steps = o_.total_steps;
      rep.train_loss = loss_n_ > 0 ? loss_sum_ / static_cast<double>(loss_n_) : std::nan("");
      rep.lr = opt_.lr();
      const double span = elapsed_s_ - report_time;
      rep.items_per_s = span > 0 ? static_cast<double>(report_items) / span : 0.0;
      rep.skipped_steps = skipped_;
      model_.eval();  // for the evaluation and on_report (a sample, a save)
      rep.metrics = task_.evaluate(step_);
      rep.elapsed_s = elapsed_s_ = elapsed();
      loss_sum_ = 0;
      loss_n_ = 0;
      stopped_ = task_.stop_after(rep);
      reports_.push_back(rep);
      if (cb.on_report) cb.on_report(rep);
      model_.train();
      report_time = elapsed();  // the callback's time is not training time of the next span
      report_items = 0;
    }
    if (cb.on_step) cb.on_step(step_, o_.total_steps, lv);
    if (stop_requested()) break;
  }
  model_.eval();
  return finished();
}

void Loop::save_state(io::SaveCheckpointArgs& a) const {
  a.optimizer = &opt_;
  a.rng = &default_generator();
  TaskState ts;
  task_.save_state(ts);
  ts.tensors.emplace("loss_sum", Tensor::scalar(loss_sum_, DType::F64));
  const std::pair<const char*, std::string> own[] = {
      {"step", std::to_string(step_)},
      {"total_steps", std::to_string(o_.total_steps)},
      {"finished", finished() ? "true" : "false"},
      {"loss_count", std::to_string(loss_n_)},
      {"skipped_steps", std::to_string(skipped_)},
      {"items", std::to_string(items_)},
      {"elapsed_s", std::to_string(elapsed_s_)}};
  for (const auto& [k, v] : own)
    if (!ts.metadata.emplace(k, v).second)
      throw ValueError(std::string("train: the task's state uses the loop's metadata key '") + k + "'");
  for (auto& [k, v] : ts.metadata)
    if (!a.metadata.emplace(k, v).second) throw ValueError("train: checkpoint metadata key '" + k + "' is set twice");
  for (auto& [k, v] : ts.tensors)
    if (!a.extra.emplace(k, v).second) throw ValueError("train: checkpoint tensor 'extra." + k + "' is set twice");
}

void Loop::load_state(const StateReader& r) {
  const io::Checkpoint& c = r.checkpoint();
  if (!c.has_rng) throw r.bad("checkpoint has no RNG state (metadata 'rng_seed', 'rng_offset'); cannot resume bitwise");
  const auto step = static_cast<std::int64_t>(r.meta_u64("step"));
  const auto total = static_cast<std::int64_t>(r.meta_u64("total_steps"));
  // A decaying schedule spans the whole run, so its length is fixed; a constant one may be extended.
  const bool length_ok = o_.schedule.decay ? total == o_.total_steps : step <= o_.total_steps;
  if (!length_ok || step > total)
    throw r.bad("checkpoint metadata 'step' " + std::to_string(step) + " of 'total_steps' " + std::to_string(total) +
                " does not fit its training config (" + std::to_string(o_.total_steps) + " steps)");
  const std::string& fin = r.meta("finished");
  if (fin != "true" && fin != "false") throw r.bad("checkpoint metadata 'finished' is '" + fin + "', not true/false");
  // Written by every version of the loop except the first (seq2seq runs saved before it had them).
  auto optional_u64 = [&](const char* key) -> std::int64_t {
    return c.metadata.count(key) ? static_cast<std::int64_t>(r.meta_u64(key)) : 0;
  };
  const std::int64_t skipped = optional_u64("skipped_steps"), items = optional_u64("items");
  const auto loss_n = static_cast<std::int64_t>(r.meta_u64("loss_count"));
  const double loss_sum = r.tensor("loss_sum", DType::F64, 0).item();
  const double elapsed = r.meta_double("elapsed_s");
  if (skipped > step) throw r.bad("checkpoint metadata 'skipped_steps' exceeds 'step'");
  try {
    opt_.load_state(c.optimizer);
  } catch (const Error& e) {
    throw r.bad(e.what());
  }
  if (opt_.steps() != step - skipped)
    throw r.bad("checkpoint's optimiser state is at step " + std::to_string(opt_.steps()) + ", the run at step " +
                std::to_string(step) + (skipped ? " with " + std::to_string(skipped) + " skipped" : ""));
  task_.load_state(r);
  step_ = step;
  stopped_ = fin == "true" && step < total;
  skipped_ = skipped;
  items_ = items;
  loss_n_ = loss_n;
  loss_sum_ = loss_sum;
  elapsed_s_ = elapsed;
  default_generator().manual_seed(c.rng_seed);  // dropout continues where the saved run was
  default_generator().set_offset(c.rng_offset);
}

}  // namespace qkv::train
