// Layer normalisation rows (see include/qkv/kernels/layer_norm.h): AVX2 + FMA version and its
// naive twin.
#include "qkv/kernels/layer_norm.h"

#include <cmath>

#include "qkv/kernels/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qkv::kernels {

template <class T>
void layer_norm_rows_ref(T* y, double* mean, double* rstd, const T* x, const T* w, const T* b, std::int64_t rows,
                         std::int64_t n, double eps) {
  const double dn = static_cast<double>(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    T* yr = y + r * n;
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(xr[i]);
    double mu = s / dn;
    // Correction pass: for rows far from 0 (e.g. 1e6 + 1e-3 noise) the plain sum rounds by
    // ~1e-9, which every (x - mu) would inherit; x - mu is exact there.
    double c = 0;
    for (std::int64_t i = 0; i < n; ++i) c += static_cast<double>(xr[i]) - mu;
    mu += c / dn;
    double v = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(xr[i]) - mu;
      v += d * d;
    }
    const double rs = 1.0 / std::sqrt(v / dn + eps);
    mean[r] = mu;
    rstd[r] = rs;
    for (std::int64_t i = 0; i < n; ++i) {
      const double xh = (static_cast<double>(xr[i]) - mu) * rs;
      yr[i] = static_cast<T>(xh * (w ? static_cast<double>(w[i]) : 1.0) + (b ? static_cast<double>(b[i]) : 0.0));
    }
  }
}
template void layer_norm_rows_ref<float>(float*, double*, double*, const float*, const float*, const float*,
                                         std::int64_t, std::int64_t, double);
template void layer_norm_rows_ref<double>(double*, double*, double*, const double*, const double*, const double*,
                                          std::int64_t, std::int64_t, double);

template <class T>
void layer_norm_backward_rows_ref(T* dx, double* dw, double* db, const T* g, const T* x, const T* w,
                                  const double* mean, const double* rstd, std::int64_t rows, std::int64_t n) {
  const double dn = static_cast<double>(n);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    const double mu = mean[r], rs = rstd[r];
    double s1 = 0, s2 = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double xh = (static_cast<double>(xr[i]) - mu) * rs;
      const double gv = static_cast<double>(gr[i]);
      const double gw = w ? gv * static_cast<double>(w[i]) : gv;
      s1 += gw;
      s2 += gw * xh;
      if (dw) dw[i] += gv * xh;
      if (db) db[i] += gv;
    }
    if (!dx) continue;
    const double m1 = s1 / dn, m2 = s2 / dn;
    T* dxr = dx + r * n;
    for (std::int64_t i = 0; i < n; ++i) {
      const double xh = (static_cast<double>(xr[i]) - mu) * rs;
      const double gv = static_cast<double>(gr[i]);
      const double gw = w ? gv * static_cast<double>(w[i]) : gv;
      dxr[i] = static_cast<T>(rs * (gw - m1 - xh * m2));
    }
  }
}
template void layer_norm_backward_rows_ref<float>(float*, double*, double*, const float*, const float*, const float*,
                                                  const double*, const double*, std::int64_t, std::int64_t);
template void layer_norm_backward_rows_ref<double>(double*, double*, double*, const double*, const double*,
                                                   const double*, const double*, const double*, std::int64_t,
                                                   std::int64_t);

#if defined(__x86_64__) || defined(__i386__)
namespace {

#define QKV_AVX2 __attribute__((target("avx2,fma")))

// Four floats at p widened to double.
QKV_AVX2 inline __m256d load4(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }

QKV_AVX2 inline double hsum(__m256d v) {
  double part[4];
  _mm256_storeu_pd(part, v);
  return (part[0] + part[1]) + (part[2] + part[3]);
}

// Every loop below walks a row in 4-wide double vectors over [0, n4) and finishes [n4, n)
// one element at a time, in that order, so a row's result never depends on where it sits.
QKV_AVX2 void layer_norm_rows_avx2(float* y, double* mean, double* rstd, const float* x, const float* w,
                                   const float* b, std::int64_t rows, std::int64_t n, double eps) {
  const double dn = static_cast<double>(n), inv_n = 1.0 / dn;  // products, not divisions, on each row's chain
  const std::int64_t n4 = n / 4 * 4;
  const __m256d one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    __m256d a0 = zero, a1 = zero;
    std::int64_t i = 0;
    for (; i + 8 <= n4; i += 8) {
      a0 = _mm256_add_pd(a0, load4(xr + i));
      a1 = _mm256_add_pd(a1, load4(xr + i + 4));
    }
    if (i < n4) a0 = _mm256_add_pd(a0, load4(xr + i));
    double s = hsum(_mm256_add_pd(a0, a1));
    for (i = n4; i < n; ++i) s += static_cast<double>(xr[i]);
    const double mu0 = s * inv_n;
    // One pass gives both the correction c = sum(x - mu0) and q = sum((x - mu0)^2); about the
    // corrected mean mu = mu0 + c/n the squared deviations sum to q - c^2/n.
    const __m256d vmu0 = _mm256_set1_pd(mu0);
    __m256d c0 = zero, q0 = zero, c1 = zero, q1 = zero;
    for (i = 0; i + 8 <= n4; i += 8) {
      const __m256d d0 = _mm256_sub_pd(load4(xr + i), vmu0), d1 = _mm256_sub_pd(load4(xr + i + 4), vmu0);
      c0 = _mm256_add_pd(c0, d0);
      q0 = _mm256_fmadd_pd(d0, d0, q0);
      c1 = _mm256_add_pd(c1, d1);
      q1 = _mm256_fmadd_pd(d1, d1, q1);
    }
    if (i < n4) {
      const __m256d d0 = _mm256_sub_pd(load4(xr + i), vmu0);
      c0 = _mm256_add_pd(c0, d0);
      q0 = _mm256_fmadd_pd(d0, d0, q0);
    }
    double c = hsum(_mm256_add_pd(c0, c1)), q = hsum(_mm256_add_pd(q0, q1));
    for (i = n4; i < n; ++i) {
      const double d = static_cast<double>(xr[i]) - mu0;
      c += d;
      q += d * d;
    }
    const double mu = mu0 + c * inv_n;
    const double ssd = q - c * c * inv_n;  // >= 0 up to rounding
    const double var = (ssd > 0.0 ? ssd : 0.0) * inv_n;
    const double rs = 1.0 / std::sqrt(var + eps);
    mean[r] = mu;
    rstd[r] = rs;
    const __m256d vmu = _mm256_set1_pd(mu), vrs = _mm256_set1_pd(rs);
    for (i = 0; i < n4; i += 4) {
      const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(load4(xr + i), vmu), vrs);
      const __m256d wv = w ? load4(w + i) : one, bv = b ? load4(b + i) : zero;
      _mm_storeu_ps(yr + i, _mm256_cvtpd_ps(_mm256_fmadd_pd(xh, wv, bv)));
    }
    for (i = n4; i < n; ++i) {
      const double xh = (static_cast<double>(xr[i]) - mu) * rs;
      yr[i] = static_cast<float>(xh * (w ? static_cast<double>(w[i]) : 1.0) + (b ? static_cast<double>(b[i]) : 0.0));
    }
  }
}

QKV_AVX2 void layer_norm_backward_rows_avx2(float* dx, double* dw, double* db, const float* g, const float* x,
                                            const float* w, const double* mean, const double* rstd,
                                            std::int64_t rows, std::int64_t n) {
  const double dn = static_cast<double>(n);
  const std::int64_t n4 = n / 4 * 4;
  const __m256d one = _mm256_set1_pd(1.0), zero = _mm256_setzero_pd();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* gr = g + r * n;
    const float* xr = x + r * n;
    const double mu = mean[r], rs = rstd[r];
    const __m256d vmu = _mm256_set1_pd(mu), vrs = _mm256_set1_pd(rs);
    __m256d s1v = zero, s2v = zero;
    std::int64_t i = 0;
    for (; i < n4; i += 4) {
      const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(load4(xr + i), vmu), vrs);
      const __m256d gv = load4(gr + i);
      const __m256d gw = _mm256_mul_pd(gv, w ? load4(w + i) : one);
      s1v = _mm256_add_pd(s1v, gw);
      s2v = _mm256_fmadd_pd(gw, xh, s2v);
      if (dw) _mm256_storeu_pd(dw + i, _mm256_fmadd_pd(gv, xh, _mm256_loadu_pd(dw + i)));
      if (db) _mm256_storeu_pd(db + i, _mm256_add_pd(gv, _mm256_loadu_pd(db + i)));
    }
    double s1 = hsum(s1v), s2 = hsum(s2v);
    for (i = n4; i < n; ++i) {
      const double xh = (static_cast<double>(xr[i]) - mu) * rs;
      const double gv = static_cast<double>(gr[i]);
      const double gw = w ? gv * static_cast<double>(w[i]) : gv;
      s1 += gw;
      s2 += gw * xh;
      if (dw) dw[i] += gv * xh;
      if (db) db[i] += gv;
    }
    if (!dx) continue;
    const double m1 = s1 / dn, m2 = s2 / dn;
    const __m256d vm1 = _mm256_set1_pd(m1), vm2 = _mm256_set1_pd(m2);
    float* dxr = dx + r * n;
    for (i = 0; i < n4; i += 4) {
      const __m256d xh = _mm256_mul_pd(_mm256_sub_pd(load4(xr + i), vmu), vrs);
      const __m256d gw = _mm256_mul_pd(load4(gr + i), w ? load4(w + i) : one);
      // rs * (gw - m1 - xh * m2)
      const __m256d t = _mm256_fnmadd_pd(xh, vm2, _mm256_sub_pd(gw, vm1));
      _mm_storeu_ps(dxr + i, _mm256_cvtpd_ps(_mm256_mul_pd(vrs, t)));
    }
    for (i = n4; i < n; ++i) {
      const double xh = (static_cast<double>(xr[i]) - mu) * rs;
      const double gv = static_cast<double>(gr[i]);
      const double gw = w ? gv * static_cast<double>(w[i]) : gv;
      dxr[i] = static_cast<float>(rs * (gw - m1 - xh * m2));
    }
  }
}

#undef QKV_AVX2

}  // namespace
#endif

void layer_norm_rows_f32(float* y, double* mean, double* rstd, const float* x, const float* w, const float* b,
                         std::int64_t rows, std::int64_t n, double eps) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return layer_norm_rows_avx2(y, mean, rstd, x, w, b, rows, n, eps);
#endif
  layer_norm_rows_ref<float>(y, mean, rstd, x, w, b, rows, n, eps);
}

void layer_norm_backward_rows_f32(float* dx, double* dw, double* db, const float* g, const float* x, const float* w,
                                  const double* mean, const double* rstd, std::int64_t rows, std::int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return layer_norm_backward_rows_avx2(dx, dw, db, g, x, w, mean, rstd, rows, n);
#endif
  layer_norm_backward_rows_ref<float>(dx, dw, db, g, x, w, mean, rstd, rows, n);
}

}  // namespace qkv::kernels
