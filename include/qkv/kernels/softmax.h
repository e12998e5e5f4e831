// Row softmax over contiguous float rows, vectorised.
//
//   y[r][i] = exp(x[r][i] - m_r) / sum_j exp(x[r][j] - m_r),  m_r = max_j x[r][j]
//
// A row containing NaN gives NaN everywhere; a row whose maximum is -inf (fully masked)
// gives zeros. The AVX2 path computes exp as exp2(x log2 e) with the polynomial of
// fast_exp.h (max 0.83 ulp) and sums in double; softmax_rows_ref is its naive twin
// (std::exp, double sums) and the portable fallback.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y, x: rows x n contiguous (y may equal x). Not threaded (callers split rows).
void softmax_rows_f32(float* y, const float* x, std::int64_t rows, std::int64_t n);
// The naive twin, T = float or double: std::exp, double sums. qkv::softmax runs it for float64.
template <class T>
void softmax_rows_ref(T* y, const T* x, std::int64_t rows, std::int64_t n);

}  // namespace qkv::kernels
