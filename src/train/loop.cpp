#include "qkv/train/loop.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "grad_exchange.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/ops/ops.h"
#include "qkv/train/distributed.h"

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

// A step that fails or is skipped leaves the optimiser exactly as it was, its lr included.
struct RestoreLr {
  optim::Optimizer& opt;
  double lr;
  bool keep = false;
  ~RestoreLr() {
    if (!keep) opt.set_lr(lr);
  }
};

// Puts the default generator back as it was (on = false: does nothing).
struct KeepGenerator {
  bool on;
  Generator saved = default_generator();
  ~KeepGenerator() {
    if (on) default_generator() = saved;
  }
};

// The dropout stream of micro-batch k of step s when a step has several: a pure function
// of the default generator's state at the step's start, so any rank can draw it.
Generator micro_generator(const Generator& base, std::int64_t step, std::int64_t K, std::int64_t k) {
  const std::uint64_t stream = mix64(base.seed() ^ 0x6d6963726f626174ull) ^ mix64(base.offset());
  return Generator(random_bits(stream, static_cast<std::uint64_t>(step * K + k)));
}

// Rank 0's metrics on every rank.
void share_metrics(Metrics& m, std::int64_t step) {
  std::string bytes;
  if (world().root())
    for (const auto& [name, v] : m) {
      bytes += name;
      bytes.push_back('\0');
      bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
  world().broadcast(bytes, "rank 0's evaluation after step " + std::to_string(step));
  if (world().root()) return;
  m.clear();
  for (std::size_t at = 0; at < bytes.size();) {
    const std::size_t end = bytes.find('\0', at);
    if (end == std::string::npos || bytes.size() - end - 1 < sizeof(double))
      throw DistributedError("train: a malformed evaluation from rank 0", false);
    double v = 0;
    std::memcpy(&v, bytes.data() + end + 1, sizeof v);
    m.emplace_back(bytes.substr(at, end - at), v);
    at = end + 1 + sizeof v;
  }
}

}  // namespace

void request_stop() { g_stop.store(true, std::memory_order_relaxed); }
bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }
void clear_stop_request() { g_stop.store(false, std::memory_order_relaxed); }

bool stop_requested_by_any_rank(const std::string& where) {
  World& w = world();
  if (!w.distributed()) return stop_requested();
  for (const std::string& r : w.allgather(stop_requested() ? "1" : "0", "the ranks' stop requests " + where))
    if (r == "1") {
      request_stop();
      return true;
    }
  return false;
}

Loop::Loop(nn::Module& model, optim::Optimizer& optimizer, Task& task, const LoopOptions& o)
    : model_(model), opt_(optimizer), task_(task), o_(o), params_(model.parameters()) {
  validate(o_);
  World& w = world();
  ranks_ = w.size();
  rank_ = w.rank();
  if (o_.grad_accum > 1 || ranks_ > 1)
    ex_ = std::make_unique<detail::GradExchange>(params_, w.comm(), o_.grad_accum, w.bucket_bytes(),
                                                 w.options().overlap);
}

Loop::~Loop() = default;

double Loop::wait_s() const { return ex_ ? ex_->waited_s() : 0.0; }
std::int64_t Loop::bytes_sent_per_step() const { return ex_ && ranks_ > 1 ? ex_->bytes_sent_per_step() : 0; }

bool Loop::nonfinite(const std::string& what, double value) {
  opt_.zero_grad();
  if (o_.on_nonfinite == NonFiniteStep::Error)
    throw NumericError("train: " + step_of(step_ + 1, o_.total_steps) + ": " + what + " is " + std::to_string(value) +
                       "; no parameter or optimiser state was changed");
  return false;
}

bool Loop::one_step(double* loss) {
  if (ex_) return fold_step(loss);
  RestoreLr restore{opt_, opt_.lr()};
  opt_.set_lr(o_.schedule.at(step_, o_.total_steps));
  opt_.zero_grad();
  Tensor l = task_.loss(step_, 0);
  const double lv = l.item();
  if (!std::isfinite(lv)) return nonfinite("the loss", lv);
  l.backward();
  *loss = lv;
  // The global gradient norm is always computed: it is the non-finite check (and the clip).
  const double max_norm = o_.clip_norm > 0 ? o_.clip_norm : std::numeric_limits<double>::infinity();
  const double norm = optim::clip_grad_norm(params_, max_norm, optim::NonFinite::Skip);
  if (!std::isfinite(norm)) return nonfinite("the gradient norm", norm);
  opt_.step();
  restore.keep = true;
  return true;
}

bool Loop::fold_step(double* loss) {
  const std::int64_t K = o_.grad_accum, N = ranks_, A = K / N;
  RestoreLr restore{opt_, opt_.lr()};
  opt_.set_lr(o_.schedule.at(step_, o_.total_steps));
  const KeepGenerator keep{true};  // the micro-batches draw from their own streams
  ex_->begin_step(step_);
  std::vector<double> mine;
  for (std::int64_t j = 0; j < A; ++j) {
    const std::int64_t k = j * N + rank_;
    default_generator() = micro_generator(keep.saved, step_, K, k);
    ex_->begin_micro(j);
    Tensor l = task_.loss(step_, k);
    const double lv = l.item();
    mine.push_back(lv);
    if (std::isfinite(lv)) {
      const autograd::LeafReadyGuard hook(ex_->hook());
      mul(l, 1.0 / static_cast<double>(K)).backward();
    } else if (N == 1) {
      return nonfinite("the loss", lv);  // alone: no other rank waits for this step's gradients
    }
    ex_->end_micro();
  }
  const std::vector<double> all = ex_->finish(mine);  // every micro-batch's loss, in order
  double sum = 0;
  for (const double lv : all) {
    if (!std::isfinite(lv)) return nonfinite("the loss", lv);
    sum += lv;
  }
  *loss = sum / static_cast<double>(K);
  const double max_norm = o_.clip_norm > 0 ? o_.clip_norm : std::numeric_limits<double>::infinity();
  const double norm = optim::clip_grad_norm(params_, max_norm, optim::NonFinite::Skip);
  if (!std::isfinite(norm)) return nonfinite("the gradient norm", norm);
  opt_.step();
  restore.keep = true;
  return true;
}

void Loop::check_ranks_agree() {
  world().check_same({{"the step", std::to_string(step_)},
                      {"the number of steps", std::to_string(o_.total_steps)},
                      {"the micro-batches per step (global --grad-accum)", std::to_string(o_.grad_accum)},
                      {"the optimiser's step count", std::to_string(opt_.steps())},
                      {"the weights (digest)", weights_digest(model_)}},
                     "the training run");
}

bool Loop::run(const LoopCallbacks& cb, std::int64_t stop_at_step) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const double before = elapsed_s_;
  auto elapsed = [&] { return before + std::chrono::duration<double>(clock::now() - t0).count(); };
  double report_time = elapsed_s_;
  std::int64_t report_items = 0;
  double report_wait = wait_s();
  if (ranks_ > 1 && !checked_) {
    check_ranks_agree();
    checked_ = true;
  }
  const bool several = ex_ != nullptr;  // several micro-batches: the default generator is the streams' base
  model_.train();
  while (!finished() && !(stop_at_step > 0 && step_ >= stop_at_step)) {
    double lv = 0;
    const bool done = one_step(&lv);
    ++step_;
    if (done) {
      loss_sum_ += lv;
      ++loss_n_;
      task_.on_step_loss(step_, lv);
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
      rep.wait_s = wait_s() - report_wait;
      model_.eval();  // for the evaluation and on_report (a sample, a save)
      {
        const KeepGenerator keep{several};
        if (rank_ == 0) {
          const World::Busy busy(world());  // the other ranks wait meanwhile
          rep.metrics = task_.evaluate(step_);
        }
        if (ranks_ > 1) share_metrics(rep.metrics, step_);
      }
      rep.elapsed_s = elapsed_s_ = elapsed();
      loss_sum_ = 0;
      loss_n_ = 0;
      stopped_ = task_.stop_after(rep);
      reports_.push_back(rep);
      if (cb.on_report) {
        const KeepGenerator keep{several};
        const World::Busy busy(world());
        cb.on_report(rep);
      }
      model_.train();
      report_time = elapsed();  // the callback's time is not training time of the next span
      report_items = 0;
      report_wait = wait_s();
    }
    if (cb.on_step) {
      const KeepGenerator keep{several};
      const World::Busy busy(world());
      cb.on_step(step_, o_.total_steps, lv);
    }
    // Ctrl-C: every rank stops after this same step (the run's last step needs no vote).
    if (!finished() && !(stop_at_step > 0 && step_ >= stop_at_step) &&
        stop_requested_by_any_rank("after step " + std::to_string(step_)))
      break;
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
