// RMS normalisation over contiguous rows (Zhang & Sennrich 2019, "Root Mean Square Layer
// Normalization"), forward and backward, as the Llama family applies it (REFERENCES: computed
// in float32 by transformers' LlamaRMSNorm).
//
// Forward, per row r of n values:
//   rstd_r = 1 / sqrt(mean(x_r^2) + eps)       (the mean of squares summed in double)
//   y_r    = (x_r * rstd_r) * w                 (w optional: null means 1; two float roundings,
//                                                 in transformers' order)
// Backward, with gw = g * w:
//   dx = rstd * gw - x * rstd^3 * mean(gw * x),  dw += sum_rows g * x * rstd
//
// The float kernel and the naive twin differ only in summation order (a few float ulps).
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y, x: rows x n, row strides ldy and ldx (y may equal x); w: [n] or null; rstd: [rows] or null
// (saved for the backward). Not threaded (callers split the rows).
void rms_norm_rows_f32(float* y, std::int64_t ldy, double* rstd, const float* x, std::int64_t ldx, const float* w,
                       std::int64_t rows, std::int64_t n, double eps);
template <class T>
void rms_norm_rows_ref(T* y, double* rstd, const T* x, const T* w, std::int64_t rows, std::int64_t n, double eps);

// dx (may be null) for `rows` contiguous rows of n; dw (n doubles, may be null) accumulated into
// (+=) in row order. Not threaded.
template <class T>
void rms_norm_backward_rows(T* dx, double* dw, const T* g, const T* x, const T* w, const double* rstd,
                            std::int64_t rows, std::int64_t n);

}  // namespace qkv::kernels
