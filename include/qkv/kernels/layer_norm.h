// Layer normalisation over contiguous rows, forward and backward, vectorised.
//
// Forward, per row r of n values:
//   mu_r   = mean(x_r)                        (double; then one correction pass: mu += mean(x - mu))
//   rstd_r = 1 / sqrt(mean((x_r - mu_r)^2) + eps)
//   y_r    = (x_r - mu_r) * rstd_r * w + b     (w, b optional: null means 1 and 0)
// Backward, with xh = (x - mu) * rstd and gw = g * w:
//   dx = rstd * (gw - mean(gw) - xh * mean(gw * xh)),  dw += sum_rows g * xh,  db += sum_rows g
//
// Statistics and row sums are kept in double (two-pass mean, never E[x^2] - E[x]^2), so a
// row like 1e6 + 1e-3 noise normalises as well as one centred at 0. The AVX2 path differs
// from the naive twin only in summation order (<= a few float ulps in y and dx); the naive
// twin is the portable fallback and the float64 implementation.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y, x: rows x n contiguous; mean, rstd: one double per row (saved for backward).
void layer_norm_rows_f32(float* y, double* mean, double* rstd, const float* x, const float* w, const float* b,
                         std::int64_t rows, std::int64_t n, double eps);
template <class T>
void layer_norm_rows_ref(T* y, double* mean, double* rstd, const T* x, const T* w, const T* b, std::int64_t rows,
                         std::int64_t n, double eps);

// dx (may be null: not wanted) for `rows` rows; dw, db (n doubles each, may be null) are
// accumulated into (+=) in row order. Not threaded (callers split rows and add partials in a
// fixed order).
void layer_norm_backward_rows_f32(float* dx, double* dw, double* db, const float* g, const float* x, const float* w,
                                  const double* mean, const double* rstd, std::int64_t rows, std::int64_t n);
template <class T>
void layer_norm_backward_rows_ref(T* dx, double* dw, double* db, const T* g, const T* x, const T* w,
                                  const double* mean, const double* rstd, std::int64_t rows, std::int64_t n);

}  // namespace qkv::kernels
