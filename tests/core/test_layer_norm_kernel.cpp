// The vectorised layer-norm rows (kernels/layer_norm.h), forward and backward, against a
// float64 formula over awkward row lengths, rows far from zero, constant rows, with and
// without weight and bias; every ISA path, and the naive twin in float64.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/layer_norm.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::Isa;

using qkv::testing::IsaGuard;

std::vector<Isa> isas() { return qkv::testing::isas_up_to(Isa::Avx2); }

// Row r of the test input: kind 0 = N(0, 1) * 3, 1 = 1e4 + N(0, 1e-2) (far from zero),
// 2 = constant (variance 0: y = b), 3 = N(0, 1e-3).
std::vector<float> make_rows(qkv::Generator& g, std::int64_t rows, std::int64_t n) {
  std::vector<float> x(static_cast<std::size_t>(rows * n));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) {
      const double z = g.normal();
      double v = 0;
      switch (r % 4) {
        case 0: v = 3 * z; break;
        case 1: v = 1e4 + 1e-2 * z; break;
        case 2: v = -2.5; break;
        default: v = 1e-3 * z; break;
      }
      x[static_cast<std::size_t>(r * n + i)] = static_cast<float>(v);
    }
  return x;
}

struct Stats {
  double mu, rs;
};
Stats stats64(const float* x, std::int64_t n, double eps) {
  long double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += x[i];
  const long double mu = s / n;
  long double v = 0;
  for (std::int64_t i = 0; i < n; ++i) v += (x[i] - mu) * (x[i] - mu);
  return {static_cast<double>(mu), static_cast<double>(1.0L / std::sqrt(v / n + eps))};
}

TEST(LayerNormKernel, ForwardMatchesFloat64OverAwkwardRows) {
  IsaGuard ig;
  qkv::Generator g(11);
  const double eps = 1e-5;
  for (Isa isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (std::int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000}) {
      for (int affine = 0; affine < 2; ++affine) {
        const std::int64_t rows = 8;
        const auto x = make_rows(g, rows, n);
        std::vector<float> w(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
        for (auto& v : w) v = static_cast<float>(1 + 0.5 * g.normal());
        for (auto& v : b) v = static_cast<float>(0.5 * g.normal());
        std::vector<float> y(x.size(), -7.f);
        std::vector<double> mean(rows), rstd(rows);
        qkv::kernels::layer_norm_rows_f32(y.data(), mean.data(), rstd.data(), x.data(), affine ? w.data() : nullptr,
                                          affine ? b.data() : nullptr, rows, n, eps);
        for (std::int64_t r = 0; r < rows; ++r) {
          const float* xr = x.data() + r * n;
          const Stats st = stats64(xr, n, eps);
          EXPECT_NEAR(mean[r], st.mu, 1e-12 * (1 + std::fabs(st.mu))) << qkv::kernels::isa_name(isa) << " n " << n;
          EXPECT_NEAR(rstd[r], st.rs, 1e-9 * st.rs) << qkv::kernels::isa_name(isa) << " n " << n << " row " << r;
          for (std::int64_t i = 0; i < n; ++i) {
            const double xh = (xr[i] - st.mu) * st.rs;
            const double want = affine ? xh * w[i] + b[i] : xh;
            ASSERT_NEAR(y[static_cast<std::size_t>(r * n + i)], want, 1e-6 * (1 + std::fabs(want)))
                << qkv::kernels::isa_name(isa) << " n " << n << " row " << r << " i " << i << " affine " << affine;
          }
        }
      }
    }
  }
}

TEST(LayerNormKernel, BackwardMatchesFloat64OverAwkwardRows) {
  IsaGuard ig;
  qkv::Generator g(12);
  const double eps = 1e-5;
  for (Isa isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (std::int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 1000}) {
      for (int affine = 0; affine < 2; ++affine) {
        const std::int64_t rows = 8;
        const auto x = make_rows(g, rows, n);
        std::vector<float> gy(x.size()), w(static_cast<std::size_t>(n));
        for (auto& v : gy) v = static_cast<float>(g.normal());
        for (auto& v : w) v = static_cast<float>(1 + 0.5 * g.normal());
        std::vector<double> mean(rows), rstd(rows);
        for (std::int64_t r = 0; r < rows; ++r) {
          const Stats st = stats64(x.data() + r * n, n, eps);
          mean[r] = st.mu;
          rstd[r] = st.rs;
        }
        const float* wp = affine ? w.data() : nullptr;
        std::vector<float> dx(x.size(), -7.f);
        std::vector<double> dw(static_cast<std::size_t>(n), 0.25), db(static_cast<std::size_t>(n), -0.5);  // += into
        qkv::kernels::layer_norm_backward_rows_f32(dx.data(), dw.data(), db.data(), gy.data(), x.data(), wp,
                                                   mean.data(), rstd.data(), rows, n);
        std::vector<double> dw64(static_cast<std::size_t>(n), 0.25), db64(static_cast<std::size_t>(n), -0.5);
        for (std::int64_t r = 0; r < rows; ++r) {
          const float* xr = x.data() + r * n;
          const float* gr = gy.data() + r * n;
          double s1 = 0, s2 = 0;
          for (std::int64_t i = 0; i < n; ++i) {
            const double xh = (xr[i] - mean[r]) * rstd[r], gw = gr[i] * (wp ? wp[i] : 1.0);
            s1 += gw;
            s2 += gw * xh;
            dw64[i] += gr[i] * xh;
            db64[i] += gr[i];
          }
          for (std::int64_t i = 0; i < n; ++i) {
            const double xh = (xr[i] - mean[r]) * rstd[r], gw = gr[i] * (wp ? wp[i] : 1.0);
            const double want = rstd[r] * (gw - s1 / n - xh * s2 / n);
            // rstd can be ~300 (rows with spread 1e-3): the scale of dx is rstd * |g|.
            ASSERT_NEAR(dx[static_cast<std::size_t>(r * n + i)], want, 1e-6 * (rstd[r] + std::fabs(want)))
                << qkv::kernels::isa_name(isa) << " n " << n << " row " << r << " i " << i;
          }
        }
        for (std::int64_t i = 0; i < n; ++i) {
          ASSERT_NEAR(dw[i], dw64[i], 1e-9 * (1 + std::fabs(dw64[i]))) << qkv::kernels::isa_name(isa) << " n " << n;
          ASSERT_NEAR(db[i], db64[i], 1e-9 * (1 + std::fabs(db64[i]))) << qkv::kernels::isa_name(isa) << " n " << n;
        }
        // dx may be skipped (only dw, db wanted), and dw, db too.
        std::vector<double> dw2(static_cast<std::size_t>(n), 0.25);
        qkv::kernels::layer_norm_backward_rows_f32(nullptr, dw2.data(), nullptr, gy.data(), x.data(), wp, mean.data(),
                                                   rstd.data(), rows, n);
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(dw2[i], dw[i]) << n;
      }
    }
  }
}

// The float64 twin is what qkv::layer_norm runs for float64 tensors.
TEST(LayerNormKernel, DoubleTwin) {
  qkv::Generator g(13);
  const std::int64_t n = 37, rows = 3;
  std::vector<double> x(rows * n), y(rows * n), mean(rows), rstd(rows);
  for (auto& v : x) v = 1e6 + 1e-3 * g.normal();
  qkv::kernels::layer_norm_rows_ref<double>(y.data(), mean.data(), rstd.data(), x.data(), nullptr, nullptr, rows, n,
                                            1e-20);
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0, q = 0;
    for (std::int64_t i = 0; i < n; ++i) s += y[r * n + i];
    for (std::int64_t i = 0; i < n; ++i) q += y[r * n + i] * y[r * n + i];
    // mu itself rounds by ulp(1e6)/2 ~ 6e-11, i.e. ~6e-8 of the 1e-3 spread.
    EXPECT_NEAR(s / n, 0.0, 2e-7);
    EXPECT_NEAR(q / n, 1.0, 1e-6);
  }
}

}  // namespace
