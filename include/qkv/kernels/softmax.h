// Row softmax and log-softmax over contiguous float rows, vectorised.
//
//   softmax:      y[r][i] = exp(x[r][i] - m_r) / sum_j exp(x[r][j] - m_r),  m_r = max_j x[r][j]
//   log_softmax:  y[r][i] = (x[r][i] - m_r) - log(sum_j exp(x[r][j] - m_r))
//
// A row containing NaN gives NaN everywhere; a row whose maximum is -inf (fully masked)
// gives zeros (softmax) or -inf (log_softmax); a row with +inf gives NaN (inf - inf). The
// AVX2 path computes exp as exp2(x log2 e) with the polynomial of fast_exp.h (max 0.83 ulp)
// and sums in double; the *_ref functions are the naive twins (std::exp, double sums) and
// the portable fallback. log_softmax forms x - m first and scales it by log2 e, so a large
// common offset m costs nothing; only the sum, so log(sum), differs from the twin (< 1e-7).
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y, x: rows x n contiguous (y may equal x). Not threaded (callers split rows).
void softmax_rows_f32(float* y, const float* x, std::int64_t rows, std::int64_t n);
// The naive twin, T = float or double: std::exp, double sums. qkv::softmax runs it for float64.
template <class T>
void softmax_rows_ref(T* y, const T* x, std::int64_t rows, std::int64_t n);

// y, x: rows x n contiguous (y may equal x). Not threaded (callers split rows).
void log_softmax_rows_f32(float* y, const float* x, std::int64_t rows, std::int64_t n);
// The naive twin, T = float or double: std::exp of (x - m) in double, double sums.
template <class T>
void log_softmax_rows_ref(T* y, const T* x, std::int64_t rows, std::int64_t n);

// Backward of softmax rows: dx[r][i] = y[r][i] * (g[r][i] - sum_j g[r][j] y[r][j]), the sum in
// double (exact products). dx, g, y: rows x n contiguous (dx may equal g). Not threaded. The AVX2
// path rounds every element as the twin does; only the order of the double sum differs.
void softmax_backward_rows_f32(float* dx, const float* g, const float* y, std::int64_t rows, std::int64_t n);
template <class T>
void softmax_backward_rows_ref(T* dx, const T* g, const T* y, std::int64_t rows, std::int64_t n);

// Backward of log-softmax rows: dx[r][i] = g[r][i] - exp(y[r][i]) sum_j g[r][j] (the sum in double),
// and 0 for a fully masked row (every y -inf). dx, g, y: rows x n contiguous (dx may equal g). Not
// threaded. The AVX2 path takes exp(y) from fast_exp.h as exp2(y log2 e) (y <= 0: within
// |y| 2^-24 relative of exp(y), which is tiny where |y| is large).
void log_softmax_backward_rows_f32(float* dx, const float* g, const float* y, std::int64_t rows, std::int64_t n);
template <class T>
void log_softmax_backward_rows_ref(T* dx, const T* g, const T* y, std::int64_t rows, std::int64_t n);

// Backward of cross-entropy over log-softmax rows, label smoothing ls, the loss gradient and
// the mean's 1/count folded into scale:
//   dlogits[r][i] = (exp(logp[r][i]) - (i == t_r ? 1 - ls : 0) - ls / n) * scale,
//   and 0 for a row whose target t_r is ignore_index.
// dlogits, logp: rows x n contiguous; targets: rows. The AVX2 path takes exp(logp) from
// fast_exp.h (logp <= 0, so |logp| 2^-24 relative: < 2.2e-8 absolute on exp) and computes the
// target entry, where exp(logp) - 1 may cancel, exactly as the twin does, in double.
void cross_entropy_backward_rows_f32(float* dlogits, const float* logp, const std::int64_t* targets, std::int64_t rows,
                                     std::int64_t n, double scale, double label_smoothing, std::int64_t ignore_index);
// The naive twin, T = float or double: std::exp in double.
template <class T>
void cross_entropy_backward_rows_ref(T* dlogits, const T* logp, const std::int64_t* targets, std::int64_t rows,
                                     std::int64_t n, double scale, double label_smoothing, std::int64_t ignore_index);

// Fused cross-entropy over the logits (no log-softmax tensor): the statistics of log-softmax per
// row, m[r] = the row's maximum and lse[r] = log(sum_i exp(x[r][i] - m[r])) rounded to T, so
// that logp[r][i] = (x[r][i] - m[r]) - lse[r] is exactly what log_softmax_rows_* writes (same
// operations in the same order: the f32 kernel's lse equals log_softmax_rows_f32's, the twin's
// the twin's). A row holding NaN gets m = NaN (every logp NaN); a fully masked row (maximum -inf)
// gets m = -inf and lse = 0 (every logp -inf). m, lse: rows; x: rows x n contiguous. Not threaded.
void log_softmax_stats_rows_f32(float* m, float* lse, const float* x, std::int64_t rows, std::int64_t n);
template <class T>
void log_softmax_stats_rows_ref(T* m, T* lse, const T* x, std::int64_t rows, std::int64_t n);

// Backward of cross-entropy from the logits and their statistics: logp recomputed as above, then
// exactly cross_entropy_backward_rows_* (the f32 kernel is bitwise equal to
// cross_entropy_backward_rows_f32 on log_softmax_rows_f32's output, the twin to the twins').
// dlogits may equal x (in place). A fully masked row's logp is -inf (exp 0).
void cross_entropy_backward_logits_rows_f32(float* dlogits, const float* x, const float* m, const float* lse,
                                            const std::int64_t* targets, std::int64_t rows, std::int64_t n,
                                            double scale, double label_smoothing, std::int64_t ignore_index);
template <class T>
void cross_entropy_backward_logits_rows_ref(T* dlogits, const T* x, const T* m, const T* lse,
                                            const std::int64_t* targets, std::int64_t rows, std::int64_t n,
                                            double scale, double label_smoothing, std::int64_t ignore_index);

}  // namespace qkv::kernels
