// Row softmax (see include/qkv/kernels/softmax.h): AVX2 + FMA version and its naive twin.
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

}  // namespace

template <class T>
void softmax_rows_ref(T* y, const T* x, std::int64_t rows, std::int64_t n) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    T m = kNegInf;
    bool nan = false;
    for (std::int64_t i = 0; i < n; ++i) {
      if (xr[i] > m) m = xr[i];
      nan |= xr[i] != xr[i];
    }
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

#if defined(__x86_64__) || defined(__i386__)
namespace {

__attribute__((target("avx2,fma"))) void softmax_rows_avx2(float* y, const float* x, std::int64_t rows,
                                                         std::int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::int64_t nv = n / 8 * 8;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    // Max and NaN check in one pass (unordered compare flags NaN lanes).
    __m256 vmax = _mm256_set1_ps(kNegInf), vnan = _mm256_setzero_ps();
    for (std::int64_t i = 0; i < nv; i += 8) {
      const __m256 v = _mm256_loadu_ps(xr + i);
      vmax = _mm256_max_ps(vmax, v);
      vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    float m = kNegInf;
    for (float l : lanes) m = l > m ? l : m;
    bool nan = _mm256_movemask_ps(vnan) != 0;
    for (std::int64_t i = nv; i < n; ++i) {
      if (xr[i] > m) m = xr[i];
      nan |= xr[i] != xr[i];
    }
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

}  // namespace
#endif

void softmax_rows_f32(float* y, const float* x, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return softmax_rows_avx2(y, x, rows, n);
#endif
  softmax_rows_ref<float>(y, x, rows, n);
}

}  // namespace qkv::kernels
