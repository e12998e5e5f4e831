// Row softmax and log-softmax (see include/qkv/kernels/softmax.h): AVX2 + FMA versions and their naive twins.
#include "qkv/kernels/softmax.h"

#include <cmath>
#include <limits>

#include "qkv/kernels/cpu.h"
#include "qkv/kernels/fast_exp.h"

namespace qkv::kernels {

namespace {

// Fills row y[0..n) for a row that contains NaN (-> NaN) or whose maximum is -inf (-> 0).
template <class T>
void fill_degenerate_row(T* y, std::int64_t n, bool nan) {
  const T fill = nan ? std::numeric_limits<T>::quiet_NaN() : T(0);
  for (std::int64_t i = 0; i < n; ++i) y[i] = fill;
}
// The same for log-softmax: NaN, or -inf for a fully masked row.
template <class T>
void fill_degenerate_log_row(T* y, std::int64_t n, bool nan) {
  const T fill = nan ? std::numeric_limits<T>::quiet_NaN() : -std::numeric_limits<T>::infinity();
  for (std::int64_t i = 0; i < n; ++i) y[i] = fill;
}

// Row maximum (-inf for an empty or all -inf row) and whether the row holds a NaN, one pass:
// the naive twins' scan; row_max_avx2 below is its vector form.
template <class T>
T row_max(const T* xr, std::int64_t n, bool* nan_out) {
  T m = -std::numeric_limits<T>::infinity();
  bool nan = false;
  for (std::int64_t i = 0; i < n; ++i) {
    if (xr[i] > m) m = xr[i];
    nan |= xr[i] != xr[i];
  }
  *nan_out = nan;
  return m;
}

// Row maximum and whether the row holds a NaN, in one pass (unordered compare flags NaN lanes).
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,fma"))) float row_max_avx2(const float* xr, std::int64_t n, bool* nan_out) {
  const std::int64_t nv = n / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), vnan = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nv; i += 8) {
    const __m256 v = _mm256_loadu_ps(xr + i);
    vmax = _mm256_max_ps(vmax, v);
    vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, vmax);
  float m = -std::numeric_limits<float>::infinity();
  for (float l : lanes) m = l > m ? l : m;
  bool nan = _mm256_movemask_ps(vnan) != 0;
  for (std::int64_t i = nv; i < n; ++i) {
    if (xr[i] > m) m = xr[i];
    nan |= xr[i] != xr[i];
  }
  *nan_out = nan;
  return m;
}
#endif

}  // namespace

template <class T>
void softmax_rows_ref(T* y, const T* x, std::int64_t rows, std::int64_t n) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    bool nan = false;
    const T m = row_max(xr, n, &nan);
    if (nan || m == kNegInf) {
      fill_degenerate_row(yr, n, nan);
      continue;
    }
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      yr[i] = std::exp(xr[i] - m);
      s += yr[i];
    }
    const T inv = static_cast<T>(1.0 / s);
    for (std::int64_t i = 0; i < n; ++i) yr[i] *= inv;
  }
}
template void softmax_rows_ref<float>(float*, const float*, std::int64_t, std::int64_t);
template void softmax_rows_ref<double>(double*, const double*, std::int64_t, std::int64_t);

// y = x - max - log(sum(exp(x - max))); NaN rows: NaN; fully masked rows: -inf.
template <class T>
void log_softmax_rows_ref(T* y, const T* x, std::int64_t rows, std::int64_t n) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    bool nan = false;
    const T m = row_max(xr, n, &nan);
    if (nan || m == kNegInf) {
      fill_degenerate_log_row(yr, n, nan);
      continue;
    }
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(xr[i] - m));
    const T lse = static_cast<T>(std::log(s));
    for (std::int64_t i = 0; i < n; ++i) yr[i] = xr[i] - m - lse;
  }
}
template void log_softmax_rows_ref<float>(float*, const float*, std::int64_t, std::int64_t);
template void log_softmax_rows_ref<double>(double*, const double*, std::int64_t, std::int64_t);

template <class T>
void softmax_backward_rows_ref(T* dx, const T* g, const T* y, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    T* dr = dx + r * n;
    double dot = 0;
    for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(gr[i]) * static_cast<double>(yr[i]);
    const T d = static_cast<T>(dot);
    for (std::int64_t i = 0; i < n; ++i) dr[i] = yr[i] * (gr[i] - d);
  }
}
template void softmax_backward_rows_ref<float>(float*, const float*, const float*, std::int64_t, std::int64_t);
template void softmax_backward_rows_ref<double>(double*, const double*, const double*, std::int64_t, std::int64_t);

template <class T>
void log_softmax_backward_rows_ref(T* dx, const T* g, const T* y, std::int64_t rows, std::int64_t n) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* yr = y + r * n;
    T* dr = dx + r * n;
    bool nan = false;
    if (n > 0 && row_max(yr, n, &nan) == kNegInf && !nan) {  // fully masked row
      for (std::int64_t i = 0; i < n; ++i) dr[i] = T(0);
      continue;
    }
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += gr[i];
    const T st = static_cast<T>(s);
    for (std::int64_t i = 0; i < n; ++i) dr[i] = gr[i] - std::exp(yr[i]) * st;
  }
}
template void log_softmax_backward_rows_ref<float>(float*, const float*, const float*, std::int64_t, std::int64_t);
template void log_softmax_backward_rows_ref<double>(double*, const double*, const double*, std::int64_t,
                                                    std::int64_t);

// loss_r = -(1-ls) logp[t_r] - ls/n sum_i logp[i]  ->  dlogits_r = (exp(logp_r) - (1-ls) onehot(t_r) - ls/n) * scale
template <class T>
void cross_entropy_backward_rows_ref(T* dlogits, const T* logp, const std::int64_t* targets, std::int64_t rows,
                                     std::int64_t n, double scale, double label_smoothing, std::int64_t ignore_index) {
  const double ls = label_smoothing;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* d = dlogits + r * n;
    const T* lp = logp + r * n;
    for (std::int64_t i = 0; i < n; ++i) {
      if (targets[r] == ignore_index) {
        d[i] = T(0);
        continue;
      }
      const double target = (i == targets[r] ? 1.0 - ls : 0.0) + ls / static_cast<double>(n);
      d[i] = static_cast<T>((std::exp(static_cast<double>(lp[i])) - target) * scale);
    }
  }
}
template void cross_entropy_backward_rows_ref<float>(float*, const float*, const std::int64_t*, std::int64_t,
                                                     std::int64_t, double, double, std::int64_t);
template void cross_entropy_backward_rows_ref<double>(double*, const double*, const std::int64_t*, std::int64_t,
                                                      std::int64_t, double, double, std::int64_t);

// m, lse as log_softmax_rows_ref computes them (its y = (x - m) - lse).
template <class T>
void log_softmax_stats_rows_ref(T* m, T* lse, const T* x, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    bool nan = false;
    const T mr = row_max(xr, n, &nan);
    if (nan || mr == -std::numeric_limits<T>::infinity()) {
      m[r] = nan ? std::numeric_limits<T>::quiet_NaN() : mr;
      lse[r] = T(0);
      continue;
    }
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(xr[i] - mr));
    m[r] = mr;
    lse[r] = static_cast<T>(std::log(s));
  }
}
template void log_softmax_stats_rows_ref<float>(float*, float*, const float*, std::int64_t, std::int64_t);
template void log_softmax_stats_rows_ref<double>(double*, double*, const double*, std::int64_t, std::int64_t);

// cross_entropy_backward_rows_ref on logp = (x - m) - lse (-inf for a fully masked row).
template <class T>
void cross_entropy_backward_logits_rows_ref(T* dlogits, const T* x, const T* m, const T* lse,
                                            const std::int64_t* targets, std::int64_t rows, std::int64_t n,
                                            double scale, double label_smoothing, std::int64_t ignore_index) {
  const double ls = label_smoothing;
  for (std::int64_t r = 0; r < rows; ++r) {
    T* d = dlogits + r * n;
    const T* xr = x + r * n;
    const bool masked = m[r] == -std::numeric_limits<T>::infinity();
    for (std::int64_t i = 0; i < n; ++i) {
      if (targets[r] == ignore_index) {
        d[i] = T(0);
        continue;
      }
      const T lp = masked ? -std::numeric_limits<T>::infinity() : xr[i] - m[r] - lse[r];
      const double target = (i == targets[r] ? 1.0 - ls : 0.0) + ls / static_cast<double>(n);
      d[i] = static_cast<T>((std::exp(static_cast<double>(lp)) - target) * scale);
    }
  }
}
template void cross_entropy_backward_logits_rows_ref<float>(float*, const float*, const float*, const float*,
                                                            const std::int64_t*, std::int64_t, std::int64_t, double,
                                                            double, std::int64_t);
template void cross_entropy_backward_logits_rows_ref<double>(double*, const double*, const double*, const double*,
                                                             const std::int64_t*, std::int64_t, std::int64_t, double,
                                                             double, std::int64_t);

#if defined(__x86_64__) || defined(__i386__)
namespace {

__attribute__((target("avx2,fma"))) void softmax_rows_avx2(float* y, const float* x, std::int64_t rows,
                                                         std::int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t nv = n / 8 * 8;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    bool nan = false;
    const float m = row_max_avx2(xr, n, &nan);
    if (nan || m == kNegInf) {
      fill_degenerate_row(yr, n, nan);
      continue;
    }
    // e = exp(x - m) = exp2(x log2e - m log2e); sums in double.
    const __m256 l2e = _mm256_set1_ps(fastexp::kLog2e), off = _mm256_set1_ps(-m * fastexp::kLog2e);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 e = fastexp::exp2_avx2(_mm256_fmadd_ps(_mm256_loadu_ps(xr + i), l2e, off));
      _mm256_storeu_ps(yr + i, e);
      s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
      s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double part[4];
    _mm256_storeu_pd(part, _mm256_add_pd(s0, s1));
    double s = (part[0] + part[1]) + (part[2] + part[3]);
    for (std::int64_t i = nv; i < n; ++i) {
      yr[i] = fastexp::exp2_scalar(xr[i] * fastexp::kLog2e - m * fastexp::kLog2e);
      s += yr[i];
    }
    const __m256 inv = _mm256_set1_ps(static_cast<float>(1.0 / s));
    for (std::int64_t i = 0; i < nv; i += 8) _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(yr + i), inv));
    for (std::int64_t i = nv; i < n; ++i) yr[i] *= static_cast<float>(1.0 / s);
  }
}

// s = sum exp(x - m) = sum exp2((x - m) log2 e), in double. x - m is rounded as in the twin
// (not x log2 e - m log2 e: the rounding of a large m log2 e would scale every term alike,
// which softmax's division cancels but log(s) keeps); rounding (x - m) log2 e then moves a
// term by at most |x - m| 2^-24 relative, nothing for the terms near m that dominate s.
// Shared by log-softmax and the fused cross-entropy's statistics, which must agree bitwise.
__attribute__((target("avx2,fma"))) double sum_exp_shifted_avx2(const float* xr, std::int64_t n, float m) {
  const std::int64_t nv = n / 8 * 8;
  const __m256 vm = _mm256_set1_ps(m), l2e = _mm256_set1_ps(fastexp::kLog2e);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
  for (std::int64_t i = 0; i < nv; i += 8) {
    const __m256 e = fastexp::exp2_avx2(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + i), vm), l2e));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double part[4];
  _mm256_storeu_pd(part, _mm256_add_pd(s0, s1));
  double s = (part[0] + part[1]) + (part[2] + part[3]);
  for (std::int64_t i = nv; i < n; ++i) s += fastexp::exp2_scalar((xr[i] - m) * fastexp::kLog2e);
  return s;
}

__attribute__((target("avx2,fma"))) void log_softmax_rows_avx2(float* y, const float* x, std::int64_t rows,
                                                             std::int64_t n) {
  const std::int64_t nv = n / 8 * 8;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    bool nan = false;
    const float m = row_max_avx2(xr, n, &nan);
    if (nan || m == -std::numeric_limits<float>::infinity()) {
      fill_degenerate_log_row(yr, n, nan);
      continue;
    }
    const double s = sum_exp_shifted_avx2(xr, n, m);
    const __m256 vm = _mm256_set1_ps(m);
    // y = (x - m) - lse, rounded as in the twin.
    const float lse = static_cast<float>(std::log(s));
    const __m256 vlse = _mm256_set1_ps(lse);
    for (std::int64_t i = 0; i < nv; i += 8)
      _mm256_storeu_ps(yr + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + i), vm), vlse));
    for (std::int64_t i = nv; i < n; ++i) yr[i] = xr[i] - m - lse;
  }
}

__attribute__((target("avx2,fma"))) void cross_entropy_backward_rows_avx2(float* dlogits, const float* logp,
                                                                        const std::int64_t* targets, std::int64_t rows,
                                                                        std::int64_t n, double scale, double ls,
                                                                        std::int64_t ignore_index) {
  const std::int64_t nv = n / 8 * 8;
  const float smooth = static_cast<float>(ls / static_cast<double>(n)), sc = static_cast<float>(scale);
  const __m256 vsmooth = _mm256_set1_ps(smooth), vsc = _mm256_set1_ps(sc), l2e = _mm256_set1_ps(fastexp::kLog2e);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* d = dlogits + r * n;
    const float* lp = logp + r * n;
    if (targets[r] == ignore_index) {
      for (std::int64_t i = 0; i < n; ++i) d[i] = 0.f;
      continue;
    }
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 p = fastexp::exp2_avx2(_mm256_mul_ps(_mm256_loadu_ps(lp + i), l2e));
      _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_sub_ps(p, vsmooth), vsc));
    }
    for (std::int64_t i = nv; i < n; ++i) d[i] = (fastexp::exp2_scalar(lp[i] * fastexp::kLog2e) - smooth) * sc;
    const std::int64_t t = targets[r];
    d[t] = static_cast<float>((std::exp(static_cast<double>(lp[t])) - (1.0 - ls + ls / static_cast<double>(n))) * scale);
  }
}

// log_softmax_rows_avx2's m and lse, without writing y.
__attribute__((target("avx2,fma"))) void log_softmax_stats_rows_avx2(float* m, float* lse, const float* x,
                                                                   std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    bool nan = false;
    const float mr = row_max_avx2(xr, n, &nan);
    if (nan || mr == -std::numeric_limits<float>::infinity()) {
      m[r] = nan ? std::numeric_limits<float>::quiet_NaN() : mr;
      lse[r] = 0.f;
      continue;
    }
    const double s = sum_exp_shifted_avx2(xr, n, mr);
    m[r] = mr;
    lse[r] = static_cast<float>(std::log(s));
  }
}

// cross_entropy_backward_rows_avx2 on logp = (x - m) - lse computed in registers (bitwise the
// values log_softmax_rows_avx2 stores). Each element is read before it is written: d may be x.
__attribute__((target("avx2,fma"))) void cross_entropy_backward_logits_rows_avx2(
    float* dlogits, const float* x, const float* m, const float* lse, const std::int64_t* targets, std::int64_t rows,
    std::int64_t n, double scale, double ls, std::int64_t ignore_index) {
  const std::int64_t nv = n / 8 * 8;
  const float smooth = static_cast<float>(ls / static_cast<double>(n)), sc = static_cast<float>(scale);
  const __m256 vsmooth = _mm256_set1_ps(smooth), vsc = _mm256_set1_ps(sc), l2e = _mm256_set1_ps(fastexp::kLog2e);
  for (std::int64_t r = 0; r < rows; ++r) {
    float* d = dlogits + r * n;
    const float* xr = x + r * n;
    if (targets[r] == ignore_index) {
      for (std::int64_t i = 0; i < n; ++i) d[i] = 0.f;
      continue;
    }
    const std::int64_t t = targets[r];
    if (m[r] == -std::numeric_limits<float>::infinity()) {  // fully masked: logp -inf, exp 0
      for (std::int64_t i = 0; i < n; ++i) d[i] = (0.f - smooth) * sc;
      d[t] = static_cast<float>((0.0 - (1.0 - ls + ls / static_cast<double>(n))) * scale);
      continue;
    }
    const float mr = m[r], lr = lse[r];
    const float lpt = xr[t] - mr - lr;  // read before the row is overwritten
    const __m256 vm = _mm256_set1_ps(mr), vl = _mm256_set1_ps(lr);
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 lp = _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + i), vm), vl);
      const __m256 p = fastexp::exp2_avx2(_mm256_mul_ps(lp, l2e));
      _mm256_storeu_ps(d + i, _mm256_mul_ps(_mm256_sub_ps(p, vsmooth), vsc));
    }
    for (std::int64_t i = nv; i < n; ++i)
      d[i] = (fastexp::exp2_scalar((xr[i] - mr - lr) * fastexp::kLog2e) - smooth) * sc;
    d[t] = static_cast<float>((std::exp(static_cast<double>(lpt)) - (1.0 - ls + ls / static_cast<double>(n))) * scale);
  }
}

// dot = sum g y in double with exact products (four double lanes, two chains); dx = y (g - dot)
// rounded as the twin rounds it (a subtraction, then a product: no fused multiply-add).
__attribute__((target("avx2,fma"))) void softmax_backward_rows_avx2(float* dx, const float* g, const float* y,
                                                                  std::int64_t rows, std::int64_t n) {
  const std::int64_t nv = n / 8 * 8;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * n;
    const float* yr = y + r * n;
    float* dr = dx + r * n;
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 gv = _mm256_loadu_ps(gr + i), yv = _mm256_loadu_ps(yr + i);
      s0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(gv)), _mm256_cvtps_pd(_mm256_castps256_ps128(yv)), s0);
      s1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(gv, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(yv, 1)),
                           s1);
    }
    double part[4];
    _mm256_storeu_pd(part, _mm256_add_pd(s0, s1));
    double dot = (part[0] + part[1]) + (part[2] + part[3]);
    for (std::int64_t i = nv; i < n; ++i) dot += static_cast<double>(gr[i]) * static_cast<double>(yr[i]);
    const float d = static_cast<float>(dot);
    const __m256 vd = _mm256_set1_ps(d);
    for (std::int64_t i = 0; i < nv; i += 8)
      _mm256_storeu_ps(dr + i, _mm256_mul_ps(_mm256_loadu_ps(yr + i), _mm256_sub_ps(_mm256_loadu_ps(gr + i), vd)));
    for (std::int64_t i = nv; i < n; ++i) dr[i] = yr[i] * (gr[i] - d);
  }
}

// s = sum g in double; dx = g - exp(y) s with exp(y) = exp2(y log2 e) (fast_exp.h); fully masked
// rows (max -inf, no NaN) give zeros, as in the twin.
__attribute__((target("avx2,fma"))) void log_softmax_backward_rows_avx2(float* dx, const float* g, const float* y,
                                                                      std::int64_t rows, std::int64_t n) {
  const std::int64_t nv = n / 8 * 8;
  const __m256 l2e = _mm256_set1_ps(fastexp::kLog2e);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * n;
    const float* yr = y + r * n;
    float* dr = dx + r * n;
    bool nan = false;
    if (n > 0 && row_max_avx2(yr, n, &nan) == -std::numeric_limits<float>::infinity() && !nan) {
      for (std::int64_t i = 0; i < n; ++i) dr[i] = 0.f;
      continue;
    }
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 gv = _mm256_loadu_ps(gr + i);
      s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(gv)));
      s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(gv, 1)));
    }
    double part[4];
    _mm256_storeu_pd(part, _mm256_add_pd(s0, s1));
    double s = (part[0] + part[1]) + (part[2] + part[3]);
    for (std::int64_t i = nv; i < n; ++i) s += gr[i];
    const float st = static_cast<float>(s);
    const __m256 vs = _mm256_set1_ps(st);
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 e = fastexp::exp2_avx2(_mm256_mul_ps(_mm256_loadu_ps(yr + i), l2e));
      _mm256_storeu_ps(dr + i, _mm256_sub_ps(_mm256_loadu_ps(gr + i), _mm256_mul_ps(e, vs)));
    }
    for (std::int64_t i = nv; i < n; ++i) dr[i] = gr[i] - fastexp::exp2_scalar(yr[i] * fastexp::kLog2e) * st;
  }
}

}  // namespace
#endif

void softmax_backward_rows_f32(float* dx, const float* g, const float* y, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return softmax_backward_rows_avx2(dx, g, y, rows, n);
#endif
  softmax_backward_rows_ref<float>(dx, g, y, rows, n);
}

void log_softmax_backward_rows_f32(float* dx, const float* g, const float* y, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return log_softmax_backward_rows_avx2(dx, g, y, rows, n);
#endif
  log_softmax_backward_rows_ref<float>(dx, g, y, rows, n);
}

void softmax_rows_f32(float* y, const float* x, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return softmax_rows_avx2(y, x, rows, n);
#endif
  softmax_rows_ref<float>(y, x, rows, n);
}

void log_softmax_rows_f32(float* y, const float* x, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return log_softmax_rows_avx2(y, x, rows, n);
#endif
  log_softmax_rows_ref<float>(y, x, rows, n);
}

void cross_entropy_backward_rows_f32(float* dlogits, const float* logp, const std::int64_t* targets, std::int64_t rows,
                                     std::int64_t n, double scale, double label_smoothing, std::int64_t ignore_index) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2)
    return cross_entropy_backward_rows_avx2(dlogits, logp, targets, rows, n, scale, label_smoothing, ignore_index);
#endif
  cross_entropy_backward_rows_ref<float>(dlogits, logp, targets, rows, n, scale, label_smoothing, ignore_index);
}

void log_softmax_stats_rows_f32(float* m, float* lse, const float* x, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return log_softmax_stats_rows_avx2(m, lse, x, rows, n);
#endif
  log_softmax_stats_rows_ref<float>(m, lse, x, rows, n);
}

void cross_entropy_backward_logits_rows_f32(float* dlogits, const float* x, const float* m, const float* lse,
                                            const std::int64_t* targets, std::int64_t rows, std::int64_t n,
                                            double scale, double label_smoothing, std::int64_t ignore_index) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2)
    return cross_entropy_backward_logits_rows_avx2(dlogits, x, m, lse, targets, rows, n, scale, label_smoothing,
                                                   ignore_index);
#endif
  cross_entropy_backward_logits_rows_ref<float>(dlogits, x, m, lse, targets, rows, n, scale, label_smoothing,
                                                ignore_index);
}

}  // namespace qkv::kernels
