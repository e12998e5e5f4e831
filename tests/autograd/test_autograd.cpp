// Autograd engine: accumulation, shared subgraphs, NoGradGuard, misuse errors.
#include <gtest/gtest.h>

#include <map>

#include "qkv/qkv.h"

namespace qkv {
namespace {

TEST(Autograd, SimpleChainAndAccumulation) {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3});
  x.requires_grad_();
  Tensor y = sum(mul(x, x));  // dy/dx = 2x
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 4, 6}));
  sum(x).backward();  // gradients accumulate
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 5, 7}));
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
}

// The leaf-ready hook (data-parallel training starts a gradient's exchange from it): once
// per reached leaf per backward, after the leaf's last contribution (a leaf used twice gets
// its second one before); never for a leaf the graph does not reach; only while the guard
// lives.
TEST(Autograd, LeafReadyHookFiresOncePerLeafAfterItsLastContribution) {
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  Tensor b = Tensor::from_vector(std::vector<double>{3, 4}, {2}).requires_grad_();
  Tensor c = Tensor::from_vector(std::vector<double>{5, 6}, {2}).requires_grad_();
  Tensor unused = Tensor::from_vector(std::vector<double>{7}, {1}).requires_grad_();
  std::vector<std::pair<const TensorImpl*, std::vector<double>>> seen;
  {
    const autograd::LeafReadyGuard guard([&](const std::shared_ptr<TensorImpl>& leaf) {
      const Tensor g = Tensor(leaf).grad();
      seen.emplace_back(leaf.get(), g.defined() ? g.to_vector<double>() : std::vector<double>{});
    });
    // a twice (a*b, then + a); c through a product with 0 (its gradient is zeros).
    Tensor y = sum(add(mul(a, b), a));
    y = add(y, mul(sum(c), 0.0));
    y.backward();
  }
  ASSERT_EQ(seen.size(), 3u);
  std::map<const TensorImpl*, std::vector<double>> by_leaf(seen.begin(), seen.end());
  EXPECT_EQ(by_leaf.size(), 3u);  // once each
  EXPECT_EQ(by_leaf.at(a.impl()), (std::vector<double>{4, 5}));  // b + 1: both contributions in
  EXPECT_EQ(by_leaf.at(b.impl()), (std::vector<double>{1, 2}));
  EXPECT_EQ(by_leaf.at(c.impl()), (std::vector<double>{0, 0}));
  EXPECT_FALSE(by_leaf.count(unused.impl()));
  // Without the guard, nothing is called.
  a.zero_grad();
  sum(a).backward();
  EXPECT_EQ(seen.size(), 3u);
}

// A leaf's gradient never aliases a tensor someone else holds: the caller's grad_in (leaf
// root), or a gradient an identity-like backward passed on (view, reshape). A kernel's fresh
// output is adopted without a copy, and still owned by the leaf alone.
TEST(Autograd, LeafGradientsNeverAliasOtherTensors) {
  {
    Tensor x = Tensor::zeros({2, 3}).requires_grad_();
    Tensor g = Tensor::ones({2, 3});
    x.backward(g);
    g.data<float>()[0] = 42.f;
    EXPECT_EQ(x.grad().to_vector<float>()[0], 1.f);
  }
  {
    Tensor x = Tensor::zeros({2, 3}).requires_grad_();
    Tensor y = x.reshape({3, 2});
    Tensor g = Tensor::full({3, 2}, 2.0);
    y.backward(g);
    g.data<float>()[0] = 42.f;
    EXPECT_EQ(x.grad().to_vector<float>()[0], 2.f);
  }
  {
    Tensor x = Tensor::ones({4}).requires_grad_();
    Tensor y = mul(x, 3.0);  // backward makes a fresh tensor: adopted
    y.backward(Tensor::ones({4}));
    Tensor again = mul(x, 3.0);
    again.backward(Tensor::ones({4}));  // accumulates: 3 + 3
    for (float v : x.grad().to_vector<float>()) EXPECT_EQ(v, 6.f);
  }
}

TEST(Autograd, DiamondGraph) {
  Tensor x = Tensor::from_vector(std::vector<double>{2.0}, {1});
  x.requires_grad_();
  Tensor a = mul(x, 3.0);
  Tensor b = add(a, a);          // a used twice
  Tensor c = mul(b, a);          // 6x * 3x = 18 x^2
  sum(c).backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 36.0 * 2.0);
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::ones({2});
  x.requires_grad_();
  Tensor y;
  {
    autograd::NoGradGuard ng;
    y = mul(x, 2.0);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
  EXPECT_THROW(y.backward(Tensor::ones({2})), AutogradError);
}

TEST(Autograd, BackwardOnNonScalarNeedsGrad) {
  Tensor x = Tensor::ones({2, 3});
  x.requires_grad_();
  Tensor y = mul(x, 2.0);
  try {
    y.backward();
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("scalar"), std::string::npos) << e.what();
  }
  y.backward(Tensor::full({2, 3}, 0.5));
  EXPECT_EQ(x.grad().at({1, 2}), 1.0);
  EXPECT_THROW(y.backward(Tensor::ones({3})), AutogradError);
}

TEST(Autograd, SecondBackwardThroughFreedGraphThrows) {
  Tensor x = Tensor::ones({3});
  x.requires_grad_();
  Tensor y = sum(exp(x));
  y.backward();
  try {
    y.backward();
    FAIL();
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
  Tensor z = sum(exp(x));
  z.backward({}, /*retain_graph=*/true);
  z.backward();  // fine once retained
}

TEST(Autograd, BackwardOnTensorWithoutGradThrows) {
  Tensor x = Tensor::ones({1});
  EXPECT_THROW(sum(x).backward(), AutogradError);
  EXPECT_THROW(Tensor::ones({1}, DType::I64).requires_grad_(), TypeError);
  Tensor y = mul(Tensor::ones({1}).requires_grad_(), 2.0);
  EXPECT_THROW(y.requires_grad_(), AutogradError);  // not a leaf
}

TEST(Autograd, DetachStopsGradient) {
  Tensor x = Tensor::ones({2}, DType::F64);
  x.requires_grad_();
  Tensor y = add(mul(x, 2.0), mul(x.detach(), 5.0));
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Autograd, GradientsFlowThroughViews) {
  Tensor x = Tensor::arange(6, DType::F64).view({2, 3}).detach();
  x.requires_grad_();
  Tensor y = sum(mul(x.transpose(0, 1).narrow(0, 1, 2), 2.0));
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 2, 2, 0, 2, 2}));
}

TEST(Autograd, LeafGradDoesNotAliasOtherGradients) {
  Tensor a = Tensor::ones({2}), b = Tensor::ones({2});
  a.requires_grad_();
  b.requires_grad_();
  sum(add(a, b)).backward();
  a.grad().fill_(9.0);
  EXPECT_EQ(b.grad().at({0}), 1.0);
}

}  // namespace
}  // namespace qkv
