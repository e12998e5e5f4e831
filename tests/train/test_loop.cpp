// train::Loop: the schedule, gradient accumulation, clipping, non-finite steps
// (error and skip leave parameters and optimiser state bitwise unchanged) and a
// resume through save_state / load_state that is bitwise identical.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "qkv/qkv.h"
#include "qkv/train/loop.h"

namespace qkv {
namespace {

using train::Loop;
using train::LoopOptions;
using train::Metrics;

// A linear regression y = x w + b over a fixed random data set; micro-batch k of step s
// takes rows [(s * K + k) * n, ... + n) modulo the data, so K micro-batches of n rows
// cover exactly the rows of one batch of K * n rows.
struct Regression : nn::Module {
  Tensor w, b;
  Regression() {
    Generator g(5);
    w = register_parameter("w", Tensor::randn({4, 1}, &g));
    b = register_parameter("b", Tensor::zeros({1}));
  }
};

class RegressionTask : public train::Task {
 public:
  RegressionTask(Regression& m, std::int64_t rows, std::int64_t K) : m_(m), rows_(rows), K_(K) {
    Generator g(9);
    x_ = Tensor::randn({64, 4}, &g);
    y_ = Tensor::randn({64, 1}, &g);
  }
  Tensor loss(std::int64_t step, std::int64_t micro) override {
    ++calls;
    if (step == nan_at_step && micro == nan_at_micro) return Tensor::scalar(std::nan(""));
    const std::int64_t start = ((step * K_ + micro) * rows_) % 64;
    const Tensor xb = x_.narrow(0, start, rows_), yb = y_.narrow(0, start, rows_);
    Tensor l = mean(mul(sub(add(matmul(xb, m_.w), m_.b), yb), sub(add(matmul(xb, m_.w), m_.b), yb)));
    if (step == inf_grad_at_step) l = add(l, mul(sum(sqrt(mul(m_.b, 0.0))), 1.0));  // d sqrt(0) = inf, value finite
    return l;
  }
  std::int64_t items_per_micro() const override { return rows_; }
  Metrics evaluate(std::int64_t step) override {
    evaluated.push_back(step);
    return {{"w0", m_.w.to_vector<float>()[0]}};
  }
  std::int64_t nan_at_step = -1, nan_at_micro = 0, inf_grad_at_step = -1, calls = 0;
  std::vector<std::int64_t> evaluated;

 private:
  Regression& m_;
  Tensor x_, y_;
  std::int64_t rows_, K_;
};

std::vector<float> params_of(const nn::Module& m) {
  std::vector<float> out;
  for (const auto& p : m.parameters())
    for (float v : p.to_vector<float>()) out.push_back(v);
  return out;
}

std::vector<float> state_of(const optim::Optimizer& o) {
  std::vector<float> out;
  for (const auto& [n, t] : o.state())
    for (double v : t.to_vector<double>()) out.push_back(static_cast<float>(v));
  return out;
}

TEST(TrainSchedule, WarmupThenCosineToTheFloor) {
  const train::Schedule s{.lr = 1.0, .warmup = 4, .min_lr_ratio = 0.1};
  EXPECT_DOUBLE_EQ(s.at(0, 14), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3, 14), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4, 14), 1.0);                                         // cosine starts at the peak
  EXPECT_NEAR(s.at(9, 14), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-15);  // halfway
  EXPECT_DOUBLE_EQ(s.at(14, 14), 0.1);
  EXPECT_DOUBLE_EQ(s.at(100, 14), 0.1);
  const train::Schedule flat{.lr = 2.0, .warmup = 2, .decay = false};
  EXPECT_DOUBLE_EQ(flat.at(0, 10), 1.0);
  EXPECT_DOUBLE_EQ(flat.at(9, 10), 2.0);
}

TEST(TrainLoop, EvaluatesEveryNStepsAndAtTheEnd) {
  Regression m;
  RegressionTask task(m, 8, 1);
  optim::SGD opt(m.named_parameters(), {.lr = 0.1});
  Loop loop(m, opt, task, {.total_steps = 7, .eval_every = 3, .schedule = {.lr = 0.1}});
  std::vector<std::int64_t> reported;
  EXPECT_TRUE(loop.run({.on_report = [&](const train::Report& r) { reported.push_back(r.step); }}));
  EXPECT_EQ(task.evaluated, (std::vector<std::int64_t>{3, 6, 7}));
  EXPECT_EQ(reported, (std::vector<std::int64_t>{3, 6, 7}));
  EXPECT_EQ(opt.steps(), 7);
  EXPECT_FALSE(m.is_training());
}

TEST(TrainLoop, AccumulationEqualsOneLargeBatch) {
  // K = 4 micro-batches of 4 rows == one batch of 16 rows (mean of equal-size means), within R1.
  Regression a, b;
  RegressionTask ta(a, 16, 1), tb(b, 4, 4);
  optim::AdamW oa(a.named_parameters(), {.lr = 0.05}), ob(b.named_parameters(), {.lr = 0.05});
  Loop la(a, oa, ta, {.total_steps = 5, .clip_norm = 0.5, .schedule = {.lr = 0.05, .warmup = 2}});
  Loop lb(b, ob, tb, {.total_steps = 5, .grad_accum = 4, .clip_norm = 0.5, .schedule = {.lr = 0.05, .warmup = 2}});
  la.run();
  lb.run();
  EXPECT_EQ(tb.calls, 4 * 5);
  const auto pa = params_of(a), pb = params_of(b);
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_NEAR(pa[i], pb[i], 1e-5 + 1e-4 * std::fabs(pa[i])) << i;
  EXPECT_NEAR(la.reports().back().train_loss, lb.reports().back().train_loss, 1e-5);
}

// With K > 1 the step's gradient is the fold ((G_0 + G_1) + G_2) of each micro-batch's
// gradient computed alone (what N data-parallel ranks reproduce bitwise), not the running
// sum of every contribution: w gets two contributions per micro-batch (the loss uses it
// twice), so the two orders differ in the last bits.
TEST(TrainLoop, AccumulatedGradientIsTheFoldOfEachMicroBatchsOwnGradient) {
  constexpr std::int64_t K = 3;
  Regression m, ref;
  RegressionTask task(m, 4, K), tref(ref, 4, K);
  optim::SGD opt(m.named_parameters(), {.lr = 0.0});  // the gradient stays readable after the step
  Loop loop(m, opt, task, {.total_steps = 1, .grad_accum = K, .schedule = {.lr = 0.0}});
  loop.run();
  std::vector<std::vector<float>> fold;
  for (std::int64_t k = 0; k < K; ++k) {
    for (const auto& p : ref.parameters()) p.zero_grad();
    mul(tref.loss(0, k), 1.0 / K).backward();
    std::size_t i = 0;
    for (const auto& p : ref.parameters()) {
      const std::vector<float> g = p.grad().to_vector<float>();
      if (k == 0) fold.push_back(g);
      else
        for (std::size_t e = 0; e < g.size(); ++e) fold[i][e] = fold[i][e] + g[e];
      ++i;
    }
  }
  std::size_t i = 0;
  for (const auto& p : m.parameters()) EXPECT_EQ(p.grad().to_vector<float>(), fold[i++]) << i;  // bitwise
}

// Micro-batch k of step s draws dropout from its own stream (any rank can draw it): the
// draws differ between micro-batches and steps, repeat in another run, and leave the
// default generator where it was.
TEST(TrainLoop, MicroBatchesDrawFromTheirOwnStreamsAndLeaveTheDefaultGenerator) {
  struct Drawing : RegressionTask {
    using RegressionTask::RegressionTask;
    Tensor loss(std::int64_t step, std::int64_t micro) override {
      draws.push_back(default_generator().uniform());
      return RegressionTask::loss(step, micro);
    }
    std::vector<double> draws;
  };
  auto run = [](std::int64_t K) {
    manual_seed(77);
    Regression m;
    Drawing t(m, 4, K);
    optim::SGD o(m.named_parameters(), {.lr = 0.01});
    Loop l(m, o, t, {.total_steps = 2, .grad_accum = K, .schedule = {.lr = 0.01}});
    const std::uint64_t before = default_generator().offset();
    l.run();
    EXPECT_EQ(default_generator().offset(), before);
    return t.draws;
  };
  const std::vector<double> a = run(2), b = run(2);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a, b);
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = i + 1; j < a.size(); ++j) EXPECT_NE(a[i], a[j]) << i << " " << j;
}

TEST(TrainLoop, NonFiniteLossStopsNamingTheStepAndChangesNothing) {
  Regression m;
  RegressionTask task(m, 8, 1);
  task.nan_at_step = 3;  // 0-based: the 4th step
  optim::AdamW opt(m.named_parameters(), {.lr = 0.05});
  Loop loop(m, opt, task, {.total_steps = 6, .schedule = {.lr = 0.05}});
  EXPECT_FALSE(loop.run({}, 3));
  const auto p0 = params_of(m), s0 = state_of(opt);
  try {
    loop.run();
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("step 4 of 6"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("loss is nan"), std::string::npos) << e.what();
  }
  EXPECT_EQ(params_of(m), p0);  // bitwise
  EXPECT_EQ(state_of(opt), s0);
  EXPECT_EQ(opt.steps(), 3);
}

TEST(TrainLoop, NonFiniteGradientStopsAndChangesNothing) {
  Regression m;
  RegressionTask task(m, 8, 1);
  task.inf_grad_at_step = 2;
  optim::AdamW opt(m.named_parameters(), {.lr = 0.05});
  Loop loop(m, opt, task, {.total_steps = 6, .clip_norm = 1.0, .schedule = {.lr = 0.05}});
  loop.run({}, 2);
  const auto p0 = params_of(m), s0 = state_of(opt);
  EXPECT_THROW(loop.run(), NumericError);
  EXPECT_EQ(params_of(m), p0);
  EXPECT_EQ(state_of(opt), s0);
}

TEST(TrainLoop, NonFiniteLossOfALaterMicroBatchStopsAndChangesNothing) {
  Regression m;
  RegressionTask task(m, 4, 3);
  optim::AdamW opt(m.named_parameters(), {.lr = 0.05});
  Loop loop(m, opt, task, {.total_steps = 4, .grad_accum = 3, .schedule = {.lr = 0.05}});
  loop.run({}, 2);
  const auto p0 = params_of(m), s0 = state_of(opt);
  task.nan_at_step = 2;
  task.nan_at_micro = 2;  // the last micro-batch of the step, after two backward passes
  try {
    loop.run();
    FAIL() << "no error";
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("step 3 of 4: the loss is nan"), std::string::npos) << e.what();
  }
  EXPECT_EQ(params_of(m), p0);
  EXPECT_EQ(state_of(opt), s0);
}

TEST(TrainLoop, SkipModeSkipsTheStepAndGoesOn) {
  Regression m;
  RegressionTask task(m, 8, 1);
  task.nan_at_step = 2;
  optim::AdamW opt(m.named_parameters(), {.lr = 0.05});
  Loop loop(m, opt, task, {.total_steps = 5, .schedule = {.lr = 0.05}, .on_nonfinite = train::NonFiniteStep::Skip});
  loop.run({}, 2);
  const auto p0 = params_of(m), s0 = state_of(opt);
  loop.run({}, 3);  // the skipped step
  EXPECT_EQ(params_of(m), p0);
  EXPECT_EQ(state_of(opt), s0);
  EXPECT_EQ(loop.skipped_steps(), 1);
  EXPECT_TRUE(loop.run());
  EXPECT_EQ(opt.steps(), 4);
  EXPECT_EQ(loop.step(), 5);
  EXPECT_EQ(loop.reports().back().skipped_steps, 1);
}

TEST(TrainLoop, ResumeThroughACheckpointIsBitwise) {
  const LoopOptions lo{.total_steps = 8, .grad_accum = 2, .clip_norm = 0.3, .eval_every = 3,
                       .schedule = {.lr = 0.05, .warmup = 2, .min_lr_ratio = 0.1}};
  Regression whole;
  RegressionTask tw(whole, 4, 2);
  optim::AdamW ow(whole.named_parameters(), {.lr = 0.05});
  Loop lw(whole, ow, tw, lo);
  lw.run();

  const std::string path = ::testing::TempDir() + "/qkv_loop_resume.safetensors";
  {
    Regression first;
    RegressionTask t1(first, 4, 2);
    optim::AdamW o1(first.named_parameters(), {.lr = 0.05});
    Loop l1(first, o1, t1, lo);
    EXPECT_FALSE(l1.run({}, 5));
    io::SaveCheckpointArgs a{.model = &first, .model_type = "regression"};
    l1.save_state(a);
    io::save_checkpoint(path, a);
  }
  Regression second;  // fresh weights, overwritten by the checkpoint
  const io::Checkpoint c = io::load_checkpoint(path);
  second.load_state_dict(c.model);
  RegressionTask t2(second, 4, 2);
  optim::AdamW o2(second.named_parameters(), {.lr = 0.05});
  Loop l2(second, o2, t2, lo);
  l2.load_state(train::StateReader(c, path));
  EXPECT_EQ(l2.step(), 5);
  EXPECT_TRUE(l2.run());
  EXPECT_EQ(params_of(second), params_of(whole));
  EXPECT_EQ(state_of(o2), state_of(ow));
  EXPECT_EQ(l2.reports().back().train_loss, lw.reports().back().train_loss);
}

TEST(TrainLoop, ResumeRejectsAnotherRunLength) {
  Regression m;
  RegressionTask t(m, 4, 1);
  optim::AdamW o(m.named_parameters(), {.lr = 0.05});
  Loop l(m, o, t, {.total_steps = 4, .schedule = {.lr = 0.05}});
  l.run({}, 2);
  const std::string path = ::testing::TempDir() + "/qkv_loop_len.safetensors";
  io::SaveCheckpointArgs a{.model = &m, .model_type = "regression"};
  l.save_state(a);
  io::save_checkpoint(path, a);
  const io::Checkpoint c = io::load_checkpoint(path);
  Loop other(m, o, t, {.total_steps = 9, .schedule = {.lr = 0.05}});
  try {
    other.load_state(train::StateReader(c, path));
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("total_steps"), std::string::npos) << e.what();
  }
}

TEST(TrainLoop, AccumulatedStepsNeedFloat32Parameters) {
  struct Wide : nn::Module {
    Tensor w = register_parameter("w", Tensor::zeros({3}, DType::F64));
  } m;
  Regression r;
  RegressionTask t(r, 4, 1);  // never asked for a loss
  optim::SGD o(m.named_parameters(), {});
  try {
    Loop l(m, o, t, {.total_steps = 3, .grad_accum = 2});
    FAIL() << "no error";
  } catch (const TypeError& e) {
    EXPECT_STREQ(e.what(), "train: data-parallel and accumulated steps need float32 parameters; parameter 0 [3] is float64");
  }
}

TEST(TrainLoop, RejectsInvalidOptions) {
  Regression m;
  RegressionTask t(m, 4, 1);
  optim::SGD o(m.named_parameters(), {});
  EXPECT_THROW(Loop(m, o, t, {.total_steps = 0}), ValueError);
  EXPECT_THROW(Loop(m, o, t, {.total_steps = 3, .grad_accum = 0}), ValueError);
  EXPECT_THROW(Loop(m, o, t, {.total_steps = 3, .schedule = {.lr = -1}}), ValueError);
}

}  // namespace
}  // namespace qkv
