// The vectorised row log-softmax (kernels/softmax.h) against a float64 log-softmax and its
// naive twin over awkward row lengths, unaligned rows, a large common offset, -inf entries,
// fully masked rows, NaN rows and +inf rows; the cross-entropy backward rows against theirs;
// every ISA path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/softmax.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::Isa;
constexpr float kInf = std::numeric_limits<float>::infinity();

using qkv::testing::IsaGuard;

// log_softmax of float inputs, in double (NaN for NaN or +inf rows, -inf for masked rows).
std::vector<double> log_softmax64(const float* x, std::int64_t n) {
  double m = -INFINITY;
  bool nan = false;
  for (std::int64_t i = 0; i < n; ++i) {
    m = std::max(m, static_cast<double>(x[i]));
    nan |= std::isnan(x[i]);
  }
  if (nan || m == INFINITY) return std::vector<double>(static_cast<std::size_t>(n), NAN);
  if (m == -INFINITY) return std::vector<double>(static_cast<std::size_t>(n), -INFINITY);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
  std::vector<double> y(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) y[static_cast<std::size_t>(i)] = (x[i] - m) - std::log(s);
  return y;
}

// Rows: 0 random; 1 random with every third entry -inf; 2 fully masked; 3 a NaN; 4 random
// plus 1000 (a large common offset); 5 a +inf; 6 all zeros.
constexpr std::int64_t kRows = 7;
void fill_rows(float* x, std::int64_t n, double scale, qkv::Generator& g) {
  for (std::int64_t i = 0; i < kRows * n; ++i) x[i] = static_cast<float>(g.normal() * scale);
  for (std::int64_t i = 0; i < n; i += 3) x[n + i] = -kInf;
  for (std::int64_t i = 0; i < n; ++i) x[2 * n + i] = -kInf;
  x[3 * n + n / 2] = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t i = 0; i < n; ++i) x[4 * n + i] += 1000.f;
  x[5 * n + n / 2] = kInf;
  for (std::int64_t i = 0; i < n; ++i) x[6 * n + i] = 0.f;
}

// Bounds, against float64 and against the twin: 1e-7 + 2^-22 |y|. The roundings of x - m,
// log(sum) and the final subtraction add up to 2.5 * 2^-24 |y| (|x - m| and log(sum) are at
// most |y|); the fast exp2's 0.83 ulp moves log(sum) by < 1e-7. Twin and kernel round
// log(sum) to float apart by up to an ulp. Measured maxima are recorded as test properties.
TEST(LogSoftmaxKernel, MatchesFloat64AndTwinOverAwkwardRows) {
  IsaGuard ig;
  std::vector<Isa> isas{Isa::Scalar};
  if (qkv::kernels::detected_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  qkv::Generator g(11);
  for (Isa isa : isas) {
    qkv::kernels::set_isa(isa);
    double worst64 = 0, worst_twin = 0;
    for (std::int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257, 1000}) {
      for (double scale : {1.0, 30.0, 1e-3}) {
        const std::int64_t off = (n + static_cast<std::int64_t>(scale)) % 8;  // unaligned rows
        std::vector<float> bx(static_cast<std::size_t>(kRows * n + 8)), by(bx.size(), -7.f), bt(bx.size());
        float *x = bx.data() + off, *y = by.data() + off, *twin = bt.data() + off;
        fill_rows(x, n, scale, g);
        qkv::kernels::log_softmax_rows_f32(y, x, kRows, n);
        qkv::kernels::log_softmax_rows_ref<float>(twin, x, kRows, n);
        for (std::int64_t r = 0; r < kRows; ++r) {
          const auto want = log_softmax64(x + r * n, n);
          for (std::int64_t i = 0; i < n; ++i) {
            const std::string at = std::string(qkv::kernels::isa_name(isa)) + " n " + std::to_string(n) + " scale " +
                                   std::to_string(scale) + " row " + std::to_string(r) + " i " + std::to_string(i);
            const float v = y[r * n + i], t = twin[r * n + i];
            const double w = want[static_cast<std::size_t>(i)];
            if (std::isnan(w)) {
              ASSERT_TRUE(std::isnan(v)) << at;
              ASSERT_TRUE(std::isnan(t)) << at;
            } else if (std::isinf(w)) {
              ASSERT_EQ(v, w) << at;
              ASSERT_EQ(t, w) << at;
            } else {
              const double e64 = std::fabs(v - w), etw = std::fabs(v - t);
              ASSERT_LE(e64, 1e-7 + 0x1p-22 * std::fabs(w)) << at << " got " << v << " want " << w;
              ASSERT_LE(etw, 1e-7 + 0x1p-22 * std::fabs(t)) << at << " got " << v << " twin " << t;
              worst64 = std::max(worst64, e64 / (1e-7 + 0x1p-22 * std::fabs(w)));
              worst_twin = std::max(worst_twin, etw / (1e-7 + 0x1p-22 * std::fabs(t)));
            }
          }
        }
        // Nothing outside the rows written.
        for (std::int64_t i = 0; i < off; ++i) ASSERT_EQ(by[static_cast<std::size_t>(i)], -7.f);
        for (std::size_t i = static_cast<std::size_t>(off + kRows * n); i < by.size(); ++i) ASSERT_EQ(by[i], -7.f);
        // In place gives the same values.
        std::vector<float> xi(x, x + kRows * n);
        qkv::kernels::log_softmax_rows_f32(xi.data(), xi.data(), kRows, n);
        for (std::int64_t i = 0; i < kRows * n; ++i) {
          const float a = xi[static_cast<std::size_t>(i)], b = y[i];
          ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "in place, n " << n << " i " << i;
        }
        // softmax gives NaN for the +inf row too (inf - inf), as its header says.
        std::vector<float> sm(static_cast<std::size_t>(n));
        qkv::kernels::softmax_rows_f32(sm.data(), x + 5 * n, 1, n);
        for (float v : sm) ASSERT_TRUE(std::isnan(v)) << "softmax +inf row, n " << n;
      }
    }
    RecordProperty(std::string(qkv::kernels::isa_name(isa)) + "_worst_share_of_float64_bound", std::to_string(worst64));
    RecordProperty(std::string(qkv::kernels::isa_name(isa)) + "_worst_share_of_twin_bound", std::to_string(worst_twin));
  }
}

// No rows, or rows of length 0, touch nothing.
TEST(LogSoftmaxKernel, EmptyShapes) {
  float x = 1.f, y = -7.f;
  qkv::kernels::log_softmax_rows_f32(&y, &x, 0, 5);
  qkv::kernels::log_softmax_rows_f32(&y, &x, 3, 0);
  EXPECT_EQ(y, -7.f);
}

// Cross-entropy backward rows against the twin (the float64 formula rounded once), with
// ignored rows, label smoothing, confident rows (p near 1) and unaligned rows; every ISA path.
// Bound: |scale| 1e-7 + 2^-22 |d|: exp(logp) is off by < (0.83 + |logp|) 2^-24 relative, i.e.
// < 6e-8 (0.37 + p) absolute; the rest is three float roundings.
TEST(CrossEntropyBackwardKernel, MatchesTwinOverAwkwardRows) {
  IsaGuard ig;
  std::vector<Isa> isas{Isa::Scalar};
  if (qkv::kernels::detected_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  qkv::Generator g(17);
  constexpr std::int64_t kIgnore = -100, rows = 9;
  for (Isa isa : isas) {
    qkv::kernels::set_isa(isa);
    double worst = 0;
    for (std::int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000}) {
      for (double ls : {0.0, 0.1}) {
        for (double scale : {1.0 / 7, -2.5}) {
          const std::int64_t off = (n + (ls > 0)) % 8;
          std::vector<float> logits(static_cast<std::size_t>(rows * n)), blp(logits.size() + 8), bd(blp.size(), -7.f),
              twin(logits.size());
          for (std::int64_t i = 0; i < rows * n; ++i)
            logits[static_cast<std::size_t>(i)] = static_cast<float>(g.normal() * (i < 3 * n ? 1.0 : 12.0));
          float *lp = blp.data() + off, *d = bd.data() + off;
          qkv::kernels::log_softmax_rows_ref<float>(lp, logits.data(), rows, n);
          std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
          for (std::int64_t r = 0; r < rows; ++r) {
            t[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(g.uniform() * static_cast<double>(n)) % n;
            if (r % 4 == 1) t[static_cast<std::size_t>(r)] = kIgnore;
          }
          // Rows 6-8 (scale 12): the target is the argmax, p_t near 1.
          for (std::int64_t r = 6; r < rows; ++r) {
            std::int64_t am = 0;
            for (std::int64_t i = 1; i < n; ++i)
              if (lp[r * n + i] > lp[r * n + am]) am = i;
            t[static_cast<std::size_t>(r)] = am;
          }
          qkv::kernels::cross_entropy_backward_rows_f32(d, lp, t.data(), rows, n, scale, ls, kIgnore);
          qkv::kernels::cross_entropy_backward_rows_ref<float>(twin.data(), lp, t.data(), rows, n, scale, ls, kIgnore);
          for (std::int64_t i = 0; i < rows * n; ++i) {
            const double want = twin[static_cast<std::size_t>(i)];
            const double bound = std::fabs(scale) * 1e-7 + 0x1p-22 * std::fabs(want);
            const double err = std::fabs(d[i] - want);
            ASSERT_LE(err, bound) << qkv::kernels::isa_name(isa) << " n " << n << " ls " << ls << " scale " << scale
                                  << " row " << i / n << " i " << i % n << " got " << d[i] << " want " << want;
            if (t[static_cast<std::size_t>(i / n)] == kIgnore) {
              ASSERT_EQ(d[i], 0.f);
            }
            worst = std::max(worst, err / bound);
          }
          for (std::int64_t i = 0; i < off; ++i) ASSERT_EQ(bd[static_cast<std::size_t>(i)], -7.f);
          for (std::size_t i = static_cast<std::size_t>(off + rows * n); i < bd.size(); ++i) ASSERT_EQ(bd[i], -7.f);
        }
      }
    }
    RecordProperty(std::string(qkv::kernels::isa_name(isa)) + "_worst_share_of_bound", std::to_string(worst));
  }
}

// The fused cross-entropy (row statistics, then the backward from the logits) against the
// unfused one it replaces (log_softmax rows, then the backward from logp): equal bit for bit
// (NaN for NaN) on every kind of row of fill_rows, awkward lengths, unaligned rows, label
// smoothing, ignored rows, for the f32 kernel on every ISA path and for the twins (float and
// double); in place (dlogits = x) equal to out of place.
template <class T>
bool same_bits(T a, T b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <class T>
void check_fused_cross_entropy(bool kernel, const std::string& what) {
  qkv::Generator g(29);
  constexpr std::int64_t kIgnore = -100;
  for (std::int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 33, 100, 1000}) {
    for (double ls : {0.0, 0.1}) {
      const std::int64_t off = n % 8, rows = kRows;
      std::vector<float> xf(static_cast<std::size_t>(rows * n));
      fill_rows(xf.data(), n, 3.0, g);
      std::vector<T> bx(xf.size() + 8), lp(xf.size()), want(xf.size()), got(xf.size()), m(rows), lse(rows);
      T* x = bx.data() + off;
      for (std::size_t i = 0; i < xf.size(); ++i) x[i] = static_cast<T>(xf[i]);
      std::vector<std::int64_t> t(static_cast<std::size_t>(rows));
      for (std::int64_t r = 0; r < rows; ++r)
        t[static_cast<std::size_t>(r)] = r == 4 ? kIgnore : (r * 7 + n / 3) % n;
      const double scale = 1.0 / 3;
      if constexpr (std::is_same_v<T, float>) {
        if (kernel) {
          qkv::kernels::log_softmax_rows_f32(lp.data(), x, rows, n);
          qkv::kernels::cross_entropy_backward_rows_f32(want.data(), lp.data(), t.data(), rows, n, scale, ls, kIgnore);
          qkv::kernels::log_softmax_stats_rows_f32(m.data(), lse.data(), x, rows, n);
          qkv::kernels::cross_entropy_backward_logits_rows_f32(got.data(), x, m.data(), lse.data(), t.data(), rows, n,
                                                               scale, ls, kIgnore);
        }
      }
      if (!kernel) {
        qkv::kernels::log_softmax_rows_ref<T>(lp.data(), x, rows, n);
        qkv::kernels::cross_entropy_backward_rows_ref<T>(want.data(), lp.data(), t.data(), rows, n, scale, ls, kIgnore);
        qkv::kernels::log_softmax_stats_rows_ref<T>(m.data(), lse.data(), x, rows, n);
        qkv::kernels::cross_entropy_backward_logits_rows_ref<T>(got.data(), x, m.data(), lse.data(), t.data(), rows, n,
                                                                scale, ls, kIgnore);
      }
      // logp = (x - m) - lse reproduces the stored log-softmax (masked rows: -inf).
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < n; ++i) {
          const T re = m[r] == -std::numeric_limits<T>::infinity() ? -std::numeric_limits<T>::infinity()
                                                                    : x[r * n + i] - m[r] - lse[r];
          ASSERT_TRUE(same_bits(re, lp[static_cast<std::size_t>(r * n + i)]))
              << what << " n " << n << " row " << r << " i " << i << ": " << re << " vs " << lp[r * n + i];
        }
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(same_bits(got[i], want[i])) << what << " n " << n << " ls " << ls << " row " << i / n << " i "
                                                << i % n << ": fused " << got[i] << " unfused " << want[i];
      // In place: the gradient overwrites the logits.
      if constexpr (std::is_same_v<T, float>) {
        if (kernel)
          qkv::kernels::cross_entropy_backward_logits_rows_f32(x, x, m.data(), lse.data(), t.data(), rows, n, scale,
                                                               ls, kIgnore);
      }
      if (!kernel)
        qkv::kernels::cross_entropy_backward_logits_rows_ref<T>(x, x, m.data(), lse.data(), t.data(), rows, n, scale,
                                                                ls, kIgnore);
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_TRUE(same_bits(x[i], want[i])) << what << " in place, n " << n << " i " << i;
    }
  }
}

TEST(FusedCrossEntropyKernel, EqualsLogSoftmaxThenBackwardBitwise) {
  IsaGuard ig;
  std::vector<Isa> isas{Isa::Scalar};
  if (qkv::kernels::detected_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  for (Isa isa : isas) {
    qkv::kernels::set_isa(isa);
    check_fused_cross_entropy<float>(true, std::string("f32 kernel on ") + qkv::kernels::isa_name(isa));
  }
  check_fused_cross_entropy<float>(false, "float twin");
  check_fused_cross_entropy<double>(false, "double twin");
}

// The double twin (what qkv::log_softmax runs for float64) against the same formula.
TEST(LogSoftmaxKernel, DoubleReference) {
  qkv::Generator g(13);
  const std::int64_t n = 37;
  std::vector<double> x(2 * n), y(2 * n);
  for (auto& v : x) v = g.normal() * 10;
  for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(n + i)] = -INFINITY;
  qkv::kernels::log_softmax_rows_ref<double>(y.data(), x.data(), 2, n);
  double m = -INFINITY, s = 0;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, x[static_cast<std::size_t>(i)]);
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(x[static_cast<std::size_t>(i)] - m);
  for (std::int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(y[static_cast<std::size_t>(i)], x[static_cast<std::size_t>(i)] - m - std::log(s), 1e-13);
  for (std::int64_t i = n; i < 2 * n; ++i) EXPECT_EQ(y[static_cast<std::size_t>(i)], -INFINITY);
}

}  // namespace
