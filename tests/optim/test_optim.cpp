// Optimisers: update rules, non-finite gradients, clipping, state round trip.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/qkv.h"

namespace qkv {
namespace {

TEST(Optim, AdamFirstStepMovesByLr) {
  // After one Adam step each coordinate moves by ~lr * sign(g).
  Tensor p = Tensor::from_vector(std::vector<double>{1.0, -2.0}, {2});
  p.requires_grad_();
  optim::Adam opt(std::vector<Tensor>{p}, {.lr = 0.1});
  sum(mul(p, Tensor::from_vector(std::vector<double>{3.0, -0.5}, {2}))).backward();
  opt.step();
  EXPECT_NEAR(p.at({0}), 0.9, 1e-7);
  EXPECT_NEAR(p.at({1}), -1.9, 1e-7);
}

TEST(Optim, SgdMomentum) {
  Tensor p = Tensor::from_vector(std::vector<double>{1.0}, {1});
  p.requires_grad_();
  optim::SGD opt(std::vector<Tensor>{p}, {.lr = 0.1, .momentum = 0.9});
  for (int i = 0; i < 2; ++i) {
    opt.zero_grad();
    sum(mul(p, 2.0)).backward();
    opt.step();
  }
  // buf1 = 2 -> p = 0.8; buf2 = 0.9*2 + 2 = 3.8 -> p = 0.42
  EXPECT_NEAR(p.item(), 0.42, 1e-12);
}

TEST(Optim, NonFiniteGradientChangesNothing) {
  Tensor p = Tensor::from_vector(std::vector<double>{1.0, 2.0}, {2});
  p.requires_grad_();
  optim::Adam opt(std::vector<Tensor>{p}, {.lr = 0.1});
  sum(p).backward();
  opt.step();
  const auto before = p.to_vector<double>();
  const auto state_before = opt.state();
  p.zero_grad();
  p.set_grad(Tensor::from_vector(std::vector<double>{NAN, 1.0}, {2}));
  try {
    opt.step();
    FAIL();
  } catch (const NumericError& e) {
    EXPECT_NE(std::string(e.what()).find("step 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(p.to_vector<double>(), before);
  EXPECT_EQ(opt.steps(), 1);
  auto state_after = opt.state();
  ASSERT_EQ(state_after.size(), state_before.size());
  for (std::size_t i = 0; i < state_after.size(); ++i)
    EXPECT_EQ(state_after[i].second.to_vector<double>(), state_before[i].second.to_vector<double>());
}

TEST(Optim, ClipGradNorm) {
  Tensor a = Tensor::zeros({2}, DType::F64), b = Tensor::zeros({1}, DType::F64);
  a.requires_grad_();
  b.requires_grad_();
  a.set_grad(Tensor::from_vector(std::vector<double>{3.0, 0.0}, {2}));
  b.set_grad(Tensor::from_vector(std::vector<double>{4.0}, {1}));
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm({a, b}, 1.0), 5.0);
  EXPECT_NEAR(a.grad().at({0}), 0.6, 1e-6);
  EXPECT_NEAR(b.grad().at({0}), 0.8, 1e-6);
  b.set_grad(Tensor::from_vector(std::vector<double>{INFINITY}, {1}));
  EXPECT_THROW(optim::clip_grad_norm({a, b}, 1.0), NumericError);
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm({a, b}, 1.0, optim::NonFinite::Skip)));
}

TEST(Optim, StateRoundTripGivesIdenticalContinuation) {
  auto make = [] {
    Tensor p = Tensor::from_vector(std::vector<double>{0.5, -1.5, 2.0}, {3});
    p.requires_grad_();
    return p;
  };
  auto grad_step = [](optim::Optimizer& o, const Tensor& p) {
    o.zero_grad();
    sum(square(p)).backward();
    o.step();
  };
  Tensor p1 = make();
  optim::AdamW o1(std::vector<Tensor>{p1}, {.lr = 0.05, .weight_decay = 0.1});
  for (int i = 0; i < 3; ++i) grad_step(o1, p1);
  Tensor p2 = p1.detach().clone();
  p2.requires_grad_();
  optim::AdamW o2(std::vector<Tensor>{p2}, {.lr = 0.05, .weight_decay = 0.1});
  o2.load_state(o1.state());
  for (int i = 0; i < 3; ++i) {
    grad_step(o1, p1);
    grad_step(o2, p2);
  }
  EXPECT_EQ(p1.to_vector<double>(), p2.to_vector<double>());
}

TEST(Optim, InvalidOptions) {
  Tensor p = Tensor::zeros({1});
  p.requires_grad_();
  EXPECT_THROW(optim::Adam(std::vector<Tensor>{p}, {.lr = -1}), ValueError);
  EXPECT_THROW(optim::Adam(std::vector<Tensor>{p}, {.beta1 = 1.0}), ValueError);
  EXPECT_THROW(optim::SGD(std::vector<Tensor>{p}, {.nesterov = true}), ValueError);
}

}  // namespace
}  // namespace qkv
