// The vectorised softmax and log-softmax backward rows (kernels/softmax.h) against a float64
// formula and their naive twins over awkward row lengths, unaligned rows, zero and -inf
// probabilities, fully masked rows and NaN gradients; in place; every ISA path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/softmax.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::Isa;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::int64_t kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257, 1000};

using qkv::testing::IsaGuard;

std::vector<Isa> isas() { return qkv::testing::isas_up_to(Isa::Avx2); }

bool same(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Rows of x: 0 random; 1 every third -inf; 2 fully masked; 3 scale 30 (near one-hot); 4 random.
// Gradient rows: random, scale 3; row 4 holds a NaN.
constexpr std::int64_t kRows = 5;
void fill(float* x, float* g, std::int64_t n, qkv::Generator& gen) {
  for (std::int64_t i = 0; i < kRows * n; ++i) {
    x[i] = static_cast<float>(gen.normal() * (i / n == 3 ? 30.0 : 1.0));
    g[i] = static_cast<float>(gen.normal() * 3.0);
  }
  for (std::int64_t i = 0; i < n; i += 3) x[n + i] = -kInf;
  for (std::int64_t i = 0; i < n; ++i) x[2 * n + i] = -kInf;
  g[4 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
}

// dx = y (g - sum g y). Bound against float64 and the twin: 2^-22 |y| (|g| + |d|) + 1e-30: the
// twin rounds d, g - d and the product once each; the kernel's double sum runs in another order,
// which can move d by an ulp.
TEST(SoftmaxBackwardKernel, MatchesFloat64AndTwinOverAwkwardRows) {
  IsaGuard guard;
  qkv::Generator gen(23);
  for (Isa isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (std::int64_t n : kLengths) {
      const std::int64_t off = n % 8;
      std::vector<float> x(static_cast<std::size_t>(kRows * n)), y(x.size()), bg(x.size() + 8), bd(bg.size(), -7.f),
          twin(x.size());
      float *g = bg.data() + off, *d = bd.data() + off;
      fill(x.data(), g, n, gen);
      qkv::kernels::softmax_rows_ref<float>(y.data(), x.data(), kRows, n);  // row 2 -> zeros
      qkv::kernels::softmax_backward_rows_f32(d, g, y.data(), kRows, n);
      qkv::kernels::softmax_backward_rows_ref<float>(twin.data(), g, y.data(), kRows, n);
      for (std::int64_t r = 0; r < kRows; ++r) {
        double dot = 0;
        for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(g[r * n + i]) * y[static_cast<std::size_t>(r * n + i)];
        for (std::int64_t i = 0; i < n; ++i) {
          const std::size_t k = static_cast<std::size_t>(r * n + i);
          const std::string at = std::string(qkv::kernels::isa_name(isa)) + " n " + std::to_string(n) + " row " +
                                 std::to_string(r) + " i " + std::to_string(i);
          const double want = y[k] * (g[k] - dot);
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(d[k]) && std::isnan(twin[k])) << at;
            continue;
          }
          const double bound = 0x1p-22 * y[k] * (std::fabs(g[k]) + std::fabs(dot)) + 1e-30;
          ASSERT_LE(std::fabs(d[k] - want), bound) << at << " got " << d[k] << " want " << want;
          ASSERT_LE(std::fabs(d[k] - twin[k]), bound) << at << " got " << d[k] << " twin " << twin[k];
          if (r == 2) {
            ASSERT_EQ(d[k], 0.f) << at;  // masked softmax rows are zeros: no gradient
          }
        }
      }
      for (std::int64_t i = 0; i < off; ++i) ASSERT_EQ(bd[static_cast<std::size_t>(i)], -7.f);
      for (std::size_t i = static_cast<std::size_t>(off + kRows * n); i < bd.size(); ++i) ASSERT_EQ(bd[i], -7.f);
      // In place (dx over g) gives the same values.
      std::vector<float> gi(g, g + kRows * n);
      qkv::kernels::softmax_backward_rows_f32(gi.data(), gi.data(), y.data(), kRows, n);
      for (std::int64_t i = 0; i < kRows * n; ++i) ASSERT_TRUE(same(gi[static_cast<std::size_t>(i)], d[i])) << "in place " << i;
    }
  }
}

// dx = g - exp(y) sum g, 0 on fully masked rows. Bound: 2^-22 (|g| + p |s| (1 + |y|)) + 1e-30
// with p = exp(y), s = sum g: the fast exp2 of the rounded y log2 e is within (0.83 + |y|) 2^-24
// relative of exp(y); then a product and a difference, rounded once each.
TEST(LogSoftmaxBackwardKernel, MatchesFloat64AndTwinOverAwkwardRows) {
  IsaGuard guard;
  qkv::Generator gen(29);
  for (Isa isa : isas()) {
    qkv::kernels::set_isa(isa);
    double worst = 0;
    for (std::int64_t n : kLengths) {
      const std::int64_t off = (n + 3) % 8;
      std::vector<float> x(static_cast<std::size_t>(kRows * n)), by(x.size() + 8), bg(x.size() + 8),
          bd(bg.size(), -7.f), twin(x.size());
      float *y = by.data() + off, *g = bg.data() + off, *d = bd.data() + off;
      fill(x.data(), g, n, gen);
      qkv::kernels::log_softmax_rows_ref<float>(y, x.data(), kRows, n);  // row 2 -> all -inf
      qkv::kernels::log_softmax_backward_rows_f32(d, g, y, kRows, n);
      qkv::kernels::log_softmax_backward_rows_ref<float>(twin.data(), g, y, kRows, n);
      for (std::int64_t r = 0; r < kRows; ++r) {
        double s = 0;
        bool masked = true;  // row 2, and row 1 when n = 1
        for (std::int64_t i = 0; i < n; ++i) s += g[r * n + i], masked &= y[r * n + i] == -kInf;
        ASSERT_TRUE(r != 2 || masked);
        for (std::int64_t i = 0; i < n; ++i) {
          const std::int64_t k = r * n + i;
          const std::string at = std::string(qkv::kernels::isa_name(isa)) + " n " + std::to_string(n) + " row " +
                                 std::to_string(r) + " i " + std::to_string(i);
          const float t = twin[static_cast<std::size_t>(k)];
          if (masked) {  // fully masked: zero gradient, even where g is not zero
            ASSERT_EQ(d[k], 0.f) << at;
            ASSERT_EQ(t, 0.f) << at;
            continue;
          }
          if (y[k] == -kInf && !std::isnan(s)) {  // exp(-inf) = 0 exactly: dx = g
            ASSERT_EQ(d[k], g[k]) << at;
            ASSERT_EQ(t, g[k]) << at;
            continue;
          }
          const double p = std::exp(static_cast<double>(y[k])), want = g[k] - p * s;
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(d[k]) && std::isnan(t)) << at;
            continue;
          }
          const double bound = 0x1p-22 * (std::fabs(g[k]) + p * std::fabs(s) * (1.0 + std::fabs(y[k]))) + 1e-30;
          ASSERT_LE(std::fabs(d[k] - want), bound) << at << " got " << d[k] << " want " << want;
          ASSERT_LE(std::fabs(d[k] - t), bound) << at << " got " << d[k] << " twin " << t;
          worst = std::max(worst, std::fabs(d[k] - want) / bound);
        }
      }
      for (std::int64_t i = 0; i < off; ++i) ASSERT_EQ(bd[static_cast<std::size_t>(i)], -7.f);
      for (std::size_t i = static_cast<std::size_t>(off + kRows * n); i < bd.size(); ++i) ASSERT_EQ(bd[i], -7.f);
      std::vector<float> gi(g, g + kRows * n);
      qkv::kernels::log_softmax_backward_rows_f32(gi.data(), gi.data(), y, kRows, n);
      for (std::int64_t i = 0; i < kRows * n; ++i) ASSERT_TRUE(same(gi[static_cast<std::size_t>(i)], d[i])) << "in place " << i;
    }
    RecordProperty(std::string(qkv::kernels::isa_name(isa)) + "_worst_share_of_bound", std::to_string(worst));
  }
}

// The double twins (what the ops run for float64) against the formulas, and empty shapes.
TEST(SoftmaxBackwardKernel, DoubleTwinsAndEmptyShapes) {
  qkv::Generator gen(31);
  const std::int64_t n = 37;
  std::vector<double> x(n), y(n), ly(n), g(n), d(n), ld(n);
  for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = gen.normal() * 4, g[static_cast<std::size_t>(i)] = gen.normal();
  qkv::kernels::softmax_rows_ref<double>(y.data(), x.data(), 1, n);
  qkv::kernels::log_softmax_rows_ref<double>(ly.data(), x.data(), 1, n);
  qkv::kernels::softmax_backward_rows_ref<double>(d.data(), g.data(), y.data(), 1, n);
  qkv::kernels::log_softmax_backward_rows_ref<double>(ld.data(), g.data(), ly.data(), 1, n);
  double dot = 0, s = 0;
  for (std::int64_t i = 0; i < n; ++i) dot += g[static_cast<std::size_t>(i)] * y[static_cast<std::size_t>(i)], s += g[static_cast<std::size_t>(i)];
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    EXPECT_NEAR(d[i], y[i] * (g[i] - dot), 1e-14);
    EXPECT_NEAR(ld[i], g[i] - std::exp(ly[i]) * s, 1e-13);
  }
  float a = 1.f, b = -7.f;
  qkv::kernels::softmax_backward_rows_f32(&b, &a, &a, 0, 5);
  qkv::kernels::log_softmax_backward_rows_f32(&b, &a, &a, 3, 0);
  EXPECT_EQ(b, -7.f);
}

}  // namespace
