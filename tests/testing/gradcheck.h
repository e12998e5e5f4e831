// Finite-difference gradient check in float64 (REFERENCES.md R3: eps 1e-6,
// atol 1e-5, rtol 1e-3). loss = sum(f(inputs) * R) for a fixed random R, so
// every output element is checked, not only their sum.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "qkv/qkv.h"

namespace qkv::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Compares x.grad() with central differences of eval() over every element of x
// (x is perturbed in place and restored).
inline ::testing::AssertionResult compare_fd(const std::string& name, const Tensor& x,
                                             const std::function<double()>& eval, double eps, double atol,
                                             double rtol) {
  Tensor ga = x.grad();
  std::vector<double> analytic =
      ga.defined() ? ga.to_vector<double>() : std::vector<double>(static_cast<std::size_t>(x.numel()), 0.0);
  double* p = x.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double orig = p[i];
    p[i] = orig + eps;
    const double lp = eval();
    p[i] = orig - eps;
    const double lm = eval();
    p[i] = orig;
    const double numeric = (lp - lm) / (2 * eps);
    const double a = analytic[static_cast<std::size_t>(i)];
    if (!(std::fabs(a - numeric) <= atol + rtol * std::fabs(numeric)))
      return ::testing::AssertionFailure() << name << " " << x.shape_str() << " element " << i << ": analytic " << a
                                           << " vs numeric " << numeric;
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult gradcheck(const Fn& f, std::vector<Tensor> inputs, double eps = 1e-6,
                                            double atol = 1e-5, double rtol = 1e-3, std::uint64_t seed = 7) {
  for (auto& x : inputs) {
    if (x.dtype() != DType::F64) return ::testing::AssertionFailure() << "gradcheck needs float64 inputs";
    x = x.detach().clone();
    x.requires_grad_(true);
  }
  Tensor out = f(inputs);
  Generator g(seed);
  Tensor R = Tensor::randn(out.shape(), &g, DType::F64);
  Tensor loss = sum(mul(out, R));
  loss.backward();
  auto eval = [&]() {
    autograd::NoGradGuard ng;
    return sum(mul(f(inputs), R)).item();
  };
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    auto r = compare_fd("input " + std::to_string(k), inputs[k], eval, eps, atol, rtol);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

inline Tensor rand64(const Shape& s, std::uint64_t seed) {
  Generator g(seed);
  return Tensor::randn(s, &g, DType::F64);
}

}  // namespace qkv::testing

namespace qkv::testing {

// Gradient check of a module as a whole: the inputs and every parameter.
// `module` must already be float64; f computes the output from the inputs.
inline ::testing::AssertionResult gradcheck_module(nn::Module& module, const Fn& f, std::vector<Tensor> inputs,
                                                   double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3) {
  for (auto& x : inputs) {
    x = x.detach().clone();
    x.requires_grad_(true);
  }
  module.zero_grad();
  Tensor out = f(inputs);
  Generator g(11);
  Tensor R = Tensor::randn(out.shape(), &g, DType::F64);
  sum(mul(out, R)).backward();
  auto eval = [&]() {
    autograd::NoGradGuard ng;
    return sum(mul(f(inputs), R)).item();
  };
  std::vector<std::pair<std::string, Tensor>> all;
  for (std::size_t k = 0; k < inputs.size(); ++k) all.emplace_back("input " + std::to_string(k), inputs[k]);
  for (auto& p : module.named_parameters()) all.push_back(p);
  for (auto& [name, x] : all) {
    auto r = compare_fd(name, x, eval, eps, atol, rtol);
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace qkv::testing
