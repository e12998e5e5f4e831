// Shared helpers for the PyTorch parity tests (tests/nn/test_parity_*.cpp).
//
// Every case loads one fixture written by tests/reference/make_fixtures.py
// (see tests/reference/fixture_index.md), runs the qkv op or module on in.*,
// compares out.*, builds loss = sum_X sum(out.X * grad_out.X), runs backward
// and compares grad.in.* and grad.param.*. Each case runs twice:
//   F64: everything float64, tight tolerance (kF64Tol).
//   F32: inputs and parameters cast to float32, compared against the float64
//        reference with REFERENCES.md R2 (kF32Tol) unless a case says otherwise.
//
// Set QKV_PARITY_MEASURE=1 to print the measured max error of every comparison
// (that is how the tolerance comments in the test files were measured).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/qkv.h"
#include "testing/fixture.h"

namespace qkv::parity {

struct Tol {
  double rtol;
  double atol;
};

// fixture_index.md: float64 path |got - want| <= 1e-10 + 1e-9*|want|.
inline constexpr Tol kF64Tol{1e-9, 1e-10};
// REFERENCES.md R2: fp32 vs float64 reference, atol 1e-5, rtol 5e-6.
inline constexpr Tol kF32Tol{5e-6, 1e-5};

inline Tol default_tol(DType dt) { return dt == DType::F64 ? kF64Tol : kF32Tol; }

inline const char* dtype_label(DType dt) { return dt == DType::F64 ? "F64" : "F32"; }

inline bool measuring() {
  static const bool on = [] {
    const char* e = std::getenv("QKV_PARITY_MEASURE");
    return e != nullptr && *e != '\0' && *e != '0';
  }();
  return on;
}

// Elementwise |got - want| <= atol + rtol*|want|; non-finite values must match
// exactly (R4). The message names the worst element, both values and the
// measured max abs error.
inline ::testing::AssertionResult close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  if (!got.defined()) return ::testing::AssertionFailure() << what << ": result is undefined";
  if (!want.defined()) return ::testing::AssertionFailure() << what << ": reference is undefined";
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << what << ": shape " << got.shape_str() << " vs reference "
                                         << want.shape_str();
  const std::vector<double> g = got.to_vector<double>();
  const std::vector<double> w = want.to_vector<double>();
  double max_abs = 0.0, worst_ratio = 0.0;
  std::size_t worst = 0, bad = 0;
  std::string nonfinite;
  for (std::size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i]) || !std::isfinite(w[i])) {
      const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i];
      if (!same && nonfinite.empty()) {
        std::ostringstream os;
        os << " non-finite mismatch at flat index " << i << ": got " << g[i] << ", want " << w[i] << ";";
        nonfinite = os.str();
      }
      if (!same) ++bad;
      continue;
    }
    const double d = std::fabs(g[i] - w[i]);
    const double ratio = d / (tol.atol + tol.rtol * std::fabs(w[i]));
    if (d > max_abs) max_abs = d;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
    if (ratio > 1.0) ++bad;
  }
  if (measuring())
    std::printf("[measure] %-60s max|diff| %.3e  worst/allowed %.3f\n", what.c_str(), max_abs, worst_ratio);
  if (bad == 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << what << ": " << bad << " of " << g.size() << " elements out of tolerance (rtol " << tol.rtol << ", atol "
     << tol.atol << ");" << nonfinite << " max |diff| = " << max_abs;
  if (!g.empty()) os << "; worst at flat index " << worst << ": got " << g[worst] << ", want " << w[worst];
  return ::testing::AssertionFailure() << os.str();
}

// Every element exactly 0.0 (not -0 vs 0 sensitive; NaN fails).
inline ::testing::AssertionResult all_exact_zero(const Tensor& t, const std::string& what) {
  if (!t.defined()) return ::testing::AssertionFailure() << what << ": undefined";
  const auto v = t.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!(v[i] == 0.0)) return ::testing::AssertionFailure() << what << ": element " << i << " is " << v[i] << ", not exactly 0";
  return ::testing::AssertionSuccess();
}

struct Fixture {
  std::string name;
  io::LoadedTensors t;
  nlohmann::json cfg;

  const Tensor& at(const std::string& n) const { return t.at(n); }
  bool has(const std::string& n) const { return t.contains(n); }

  // A fresh tensor of dtype dt holding the fixture's values (never aliasing
  // the fixture); floating tensors become leaves that require grad if asked.
  Tensor input(const std::string& n, DType dt, bool requires_grad = true) const {
    const Tensor& src = at(n);
    if (!is_floating(src.dtype())) return src.clone();
    Tensor x = src.to(dt).clone().detach();
    if (requires_grad) x.requires_grad_(true);
    return x;
  }
  // Integer / bool tensors as stored.
  Tensor raw(const std::string& n) const { return at(n); }

  std::vector<std::string> names_with_prefix(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& [n, _] : t.tensors)
      if (n.rfind(prefix, 0) == 0) out.push_back(n.substr(prefix.size()));
    return out;
  }
  // "param.X" -> {"X": tensor} (float64 as stored; load_state_dict converts).
  nn::StateDict state_dict(const std::string& prefix = "param.") const {
    nn::StateDict sd;
    for (const auto& n : names_with_prefix(prefix)) sd[n] = at(prefix + n);
    return sd;
  }
};

inline Fixture load(const std::string& name) {
  Fixture f;
  f.name = name;
  f.t = qkv::testing::load_fixture(name + ".safetensors");
  f.cfg = nlohmann::json::parse(f.t.metadata.at("config"));
  return f;
}

// loss = sum(out * grad_out) with grad_out cast to out's dtype (no grad).
inline Tensor dot_loss(const Tensor& out, const Fixture& f, const std::string& grad_out_name) {
  return sum(mul(out, f.input(grad_out_name, out.dtype(), /*requires_grad=*/false)));
}

// Compares every parameter's gradient with grad.param.<name>; the fixture and
// the module must have exactly the same parameter names. `tol_for` may give a
// per-parameter tolerance.
inline void expect_param_grads(const nn::Module& m, const Fixture& f, DType dt,
                               const std::function<Tol(const std::string&)>& tol_for, const std::string& tag) {
  const auto params = m.named_parameters();
  std::set<std::string> want_names;
  for (const auto& n : f.names_with_prefix("grad.param.")) want_names.insert(n);
  std::set<std::string> got_names;
  for (const auto& [n, p] : params) {
    got_names.insert(n);
    EXPECT_EQ(p.dtype(), dt) << tag << ": parameter " << n << " has dtype " << dtype_name(p.dtype());
    if (!want_names.count(n)) {
      ADD_FAILURE() << tag << ": module parameter " << n << " has no grad.param." << n << " in " << f.name;
      continue;
    }
    EXPECT_TRUE(close(p.grad(), f.at("grad.param." + n), tol_for(n), tag + " grad.param." + n));
  }
  EXPECT_EQ(got_names, want_names) << tag << ": module parameters and fixture grad.param.* differ";
}

inline void expect_param_grads(const nn::Module& m, const Fixture& f, DType dt, Tol tol, const std::string& tag) {
  expect_param_grads(m, f, dt, [tol](const std::string&) { return tol; }, tag);
}

// Builds a module in float32 (its default), converts it with .to(dt) and loads
// the fixture's param.* (converted to dt by load_state_dict).
template <class M>
void to_and_load(M& m, const Fixture& f, DType dt) {
  m.to(dt);
  m.load_state_dict(f.state_dict("param."));
  for (const auto& [n, p] : m.named_parameters()) {
    ASSERT_EQ(p.dtype(), dt) << f.name << ": parameter " << n;
    ASSERT_TRUE(p.requires_grad()) << f.name << ": parameter " << n;
  }
}

inline nn::Activation activation_from(const std::string& s) {
  if (s == "relu") return nn::Activation::ReLU;
  if (s == "gelu") return nn::Activation::GELU;  // erf form (fixtures: gelu_approximate "none")
  if (s == "gelu_tanh") return nn::Activation::GELUTanh;
  throw std::runtime_error("unknown activation in fixture config: " + s);
}

// The keep pattern a Mask produces for scores of shape ss, as 0/1 over the
// full [..., Lq, Lk] (1 = may attend).
inline std::vector<int> keep_pattern(const Mask& m, const Shape& ss) {
  Tensor bias = m.to_bias(ss, DType::F64, "parity test");
  const auto v = bias.expand(ss).contiguous().to_vector<double>();
  std::vector<int> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = std::isinf(v[i]) && v[i] < 0 ? 0 : 1;
  return out;
}
// A stored bool keep tensor broadcast to ss, as 0/1.
inline std::vector<int> keep_pattern(const Tensor& keep_bool, const Shape& ss) {
  return keep_bool.expand(ss).contiguous().to_vector<int>();
}

// Value-parameterised over the dtype of the run.
class ParityTest : public ::testing::TestWithParam<DType> {
 protected:
  DType dt() const { return GetParam(); }
  Tol tol() const { return default_tol(GetParam()); }
  std::string tag(const std::string& c) const { return c + "/" + dtype_label(GetParam()); }
};

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return dtype_label(info.param); }

}  // namespace qkv::parity

namespace qkv {
// So GoogleTest prints "float32" rather than "1-byte object <00>" for a failing parameter.
inline void PrintTo(DType dt, std::ostream* os) { *os << dtype_name(dt); }
}  // namespace qkv
