// The vectorised row softmax (kernels/softmax.h) against a float64 softmax over awkward row
// lengths, huge and tiny logits, -inf entries, fully masked rows and NaN rows; every ISA path.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/softmax.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::Isa;
constexpr float kInf = std::numeric_limits<float>::infinity();

using qkv::testing::IsaGuard;

std::vector<double> softmax64(const float* x, std::int64_t n) {
  double m = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, static_cast<double>(x[i]));
  std::vector<double> y(static_cast<std::size_t>(n), 0.0);
  if (m == -INFINITY) return y;
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += y[i] = std::exp(x[i] - m);
  for (auto& v : y) v /= s;
  return y;
}

TEST(SoftmaxKernel, MatchesFloat64OverAwkwardRows) {
  IsaGuard ig;
  std::vector<Isa> isas{Isa::Scalar};
  if (qkv::kernels::detected_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  qkv::Generator g(5);
  for (Isa isa : isas) {
    qkv::kernels::set_isa(isa);
    for (std::int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 257, 1000}) {
      for (double scale : {1.0, 30.0, 1e-3}) {
        const std::int64_t rows = 5;
        std::vector<float> x(static_cast<std::size_t>(rows * n));
        for (auto& v : x) v = static_cast<float>(g.normal() * scale);
        for (std::int64_t i = 0; i < n; i += 3) x[static_cast<std::size_t>(n + i)] = -kInf;      // row 1: masked keys
        for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(2 * n + i)] = -kInf;      // row 2: fully masked
        x[static_cast<std::size_t>(3 * n + n / 2)] = std::numeric_limits<float>::quiet_NaN();  // row 3: NaN
        std::vector<float> y(x.size(), -7.f);
        qkv::kernels::softmax_rows_f32(y.data(), x.data(), rows, n);
        for (std::int64_t r = 0; r < rows; ++r) {
          const float* yr = y.data() + r * n;
          if (r == 3) {
            for (std::int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(yr[i])) << n;
            continue;
          }
          const auto want = softmax64(x.data() + r * n, n);
          double sum = 0;
          for (std::int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(yr[i], want[i], 2e-7 + 4e-7 * want[i])
                << qkv::kernels::isa_name(isa) << " n " << n << " scale " << scale << " row " << r << " i " << i;
            sum += yr[i];
          }
          const bool all_masked = r == 2 || (r == 1 && n == 1);
          if (all_masked) EXPECT_EQ(sum, 0.0);
          else EXPECT_NEAR(sum, 1.0, 1e-6);
        }
      }
    }
  }
}

// The double twin (what qkv::softmax runs for float64) against the same float64 formula.
TEST(SoftmaxKernel, DoubleReference) {
  qkv::Generator g(9);
  const std::int64_t n = 37;
  std::vector<double> x(2 * n), y(2 * n);
  for (auto& v : x) v = g.normal() * 10;
  for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(n + i)] = -INFINITY;
  qkv::kernels::softmax_rows_ref<double>(y.data(), x.data(), 2, n);
  double m = -INFINITY, s = 0;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], std::exp(x[i] - m) / s, 1e-15);
  for (std::int64_t i = n; i < 2 * n; ++i) EXPECT_EQ(y[i], 0.0);
}

}  // namespace
