// Skinny fp32 products with B stored as rows: C = alpha * A @ B^T + beta * C for
// M <= kSkinnyMaxM rows of A. This is what a Linear layer computes during
// generation (one to a few new tokens against a weight [out, in]): every row of
// B is streamed from memory once, contiguous, and dotted with the (L1-resident)
// rows of A, so the product runs at memory bandwidth instead of paying for
// packing B (which would read and write every weight once more per token).
//
//   A  [M, K]  row stride lda          (M <= kSkinnyMaxM)
//   B  [N, K]  row stride ldb          (rows of B = columns of C)
//   C  [M, N]  row stride ldc          (beta == 0: not read)
//
// Each C element is one dot product accumulated in 8 lanes over k (lane i takes
// k = i mod 8, a masked load for the tail), then reduced by one fixed tree, so an
// element's bits depend only on K and its two rows: not on M, on which block it
// falls in, or on the thread count.
#include <algorithm>
#include <cstdint>

#include "gemm_internal.h"
#include "qkv/core/parallel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

namespace qkv::kernels::detail {
namespace {

using i64 = std::int64_t;

inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);                   // lanes (0+4, 1+5, 2+6, 3+7)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));          // (0+4+2+6, 1+5+3+7, ..)
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));   // + lane 1
  return _mm_cvtss_f32(s);
}

inline __m256i tail_mask(i64 r) {  // r in [1, 7]: the first r lanes
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), idx);
}

inline void store(float* c, float dot, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * dot : alpha * dot + beta * *c;
}

// MR rows of A against NR rows of B: C[m, n] for m < MR, n < NR. When `next` is set (the
// next NR rows of B), each cache line of those rows is prefetched while this block runs, a
// little ahead of the same k: the hardware prefetcher alone ramps up every short row again
// (measured on GPT-2 small's decode weights, one thread: ~9 -> ~12 GB/s).
template <int MR, int NR>
void block(i64 K, const float* A, i64 lda, const float* B, i64 ldb, float alpha, float beta, float* C, i64 ldc,
           const float* next = nullptr) {
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
  i64 k = 0;
  for (; k + 8 <= K; k += 8) {
    if (next && (k & 15) == 0)
      for (int n = 0; n < NR; ++n) _mm_prefetch(reinterpret_cast<const char*>(next + n * ldb + k + 64), _MM_HINT_T0);
    __m256 a[MR];
    for (int m = 0; m < MR; ++m) a[m] = _mm256_loadu_ps(A + m * lda + k);
    for (int n = 0; n < NR; ++n) {
      const __m256 b = _mm256_loadu_ps(B + n * ldb + k);
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm256_fmadd_ps(a[m], b, acc[m][n]);
    }
  }
  if (k < K) {
    const __m256i mask = tail_mask(K - k);
    __m256 a[MR];
    for (int m = 0; m < MR; ++m) a[m] = _mm256_maskload_ps(A + m * lda + k, mask);
    for (int n = 0; n < NR; ++n) {
      const __m256 b = _mm256_maskload_ps(B + n * ldb + k, mask);
      for (int m = 0; m < MR; ++m) acc[m][n] = _mm256_fmadd_ps(a[m], b, acc[m][n]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) store(C + m * ldc + n, hsum(acc[m][n]), alpha, beta);
}

// Columns [n0, n1) of C for all M rows: B rows in groups of NR (8 for one row of A,
// else 4, reused from L1/L2 by every pair of A rows), then one by one.
template <int NR>
void rows_of_b(i64 M, i64 n0, i64 n1, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float alpha, float beta,
               float* C, i64 ldc) {
  i64 n = n0;
  for (; n + NR <= n1; n += NR) {
    // The first pass over these NR rows of B reads them from memory (and prefetches the next
    // NR); the other passes find them in L1/L2.
    const float* next = n + 2 * NR <= n1 ? B + (n + NR) * ldb : nullptr;
    i64 m = 0;
    if constexpr (NR <= 4)  // 2 x 4 accumulators + 2 rows of A + 1 of B fit the 16 registers
      for (; m + 2 <= M; m += 2, next = nullptr)
        block<2, NR>(K, A + m * lda, lda, B + n * ldb, ldb, alpha, beta, C + m * ldc + n, ldc, next);
    for (; m < M; ++m, next = nullptr)
      block<1, NR>(K, A + m * lda, lda, B + n * ldb, ldb, alpha, beta, C + m * ldc + n, ldc, next);
  }
  for (; n < n1; ++n)
    for (i64 m = 0; m < M; ++m) block<1, 1>(K, A + m * lda, lda, B + n * ldb, ldb, alpha, beta, C + m * ldc + n, ldc);
}

void columns(i64 M, i64 n0, i64 n1, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float alpha, float beta,
             float* C, i64 ldc) {
  if (M == 1)
    rows_of_b<8>(M, n0, n1, K, A, lda, B, ldb, alpha, beta, C, ldc);
  else
    rows_of_b<4>(M, n0, n1, K, A, lda, B, ldb, alpha, beta, C, ldc);
}

}  // namespace

bool sgemm_skinny_nt_available() { return true; }

void sgemm_skinny_nt(i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda, const float* B, i64 ldb, float beta,
                     float* C, i64 ldc, bool threaded) {
  // Blocks of 64 columns: a thread's share of B is contiguous, and a call forks only when
  // each thread streams at least ~256 KiB of B (below that the fork costs more than it saves).
  constexpr i64 kCols = 64;
  const i64 blocks = (N + kCols - 1) / kCols;
  const i64 bytes_per_block = kCols * K * static_cast<i64>(sizeof(float));
  const i64 grain = std::max<i64>(1, (256 * 1024) / std::max<i64>(bytes_per_block, 1));
  auto run = [&](i64 b, i64 e) { columns(M, b * kCols, std::min(N, e * kCols), K, A, lda, B, ldb, alpha, beta, C, ldc); };
  if (threaded)
    parallel_for(0, blocks, grain, run);
  else
    run(0, blocks);
}

}  // namespace qkv::kernels::detail
#pragma GCC pop_options

#else  // no AVX2 code on this compiler / target: the packed path serves every shape

namespace qkv::kernels::detail {
bool sgemm_skinny_nt_available() { return false; }
void sgemm_skinny_nt(std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
                     std::int64_t, float, float*, std::int64_t, bool) {}
}  // namespace qkv::kernels::detail

#endif
