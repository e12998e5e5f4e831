// Body of the skinny fp32 product C = alpha * A @ B^T + beta * C (M <= kSkinnyMaxM rows of A,
// B stored as rows), included once per ISA by gemm_skinny_avx2.cpp and gemm_skinny_avx512.cpp
// with a vector type V:
//   V::R, V::W (floats per vector), V::kMR (rows of A per block, so MR x 4 accumulators + MR
//   rows of A + 1 of B fit the registers), zero(), loadu(p), load_first(p, r) (the first r < W
//   floats, the rest 0, nothing past them read), fma(a, b, c), hsum(v) (one fixed tree).
//
// Every row of B is streamed from memory once, contiguous, and dotted with the rows of A (which
// stay in L1), so the product runs at memory bandwidth instead of paying for packing B (that
// would read and write every weight once more per token). Each C element is one dot product
// accumulated in W lanes over k (lane i takes k = i mod W, the tail loaded partially), then
// reduced by hsum: its bits depend only on K, the ISA and its two rows, not on M, on the block
// it falls in, or on the thread count.
#pragma once
#include <algorithm>
#include <cstdint>

#include "qkv/core/parallel.h"

namespace qkv::kernels::detail::skinny {

using i64 = std::int64_t;

inline void store(float* c, float dot, float alpha, float beta) {
  *c = beta == 0.0f ? alpha * dot : alpha * dot + beta * *c;
}

// MR rows of A against NR rows of B: C[m, n] for m < MR, n < NR. When `next` is set (the next
// NR rows of B), each cache line of those rows is prefetched while this block runs, a little
// ahead of the same k: the hardware prefetcher alone ramps up on every short row again
// (measured on GPT-2 small's decode weights, one thread: ~9 -> ~11.5 GB/s).
template <class V, int MR, int NR>
void block(i64 K, const float* A, i64 lda, const float* B, i64 ldb, float alpha, float beta, float* C, i64 ldc,
           const float* next) {
  using R = typename V::R;
  constexpr int W = V::W;
  R acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) acc[m][n] = V::zero();
  i64 k = 0;
  for (; k + W <= K; k += W) {
    if (next && (k & 15) == 0)
      for (int n = 0; n < NR; ++n) __builtin_prefetch(next + n * ldb + k + 64, 0, 3);
    R a[MR];
    for (int m = 0; m < MR; ++m) a[m] = V::loadu(A + m * lda + k);
    for (int n = 0; n < NR; ++n) {
      const R b = V::loadu(B + n * ldb + k);
      for (int m = 0; m < MR; ++m) acc[m][n] = V::fma(a[m], b, acc[m][n]);
    }
  }
  if (k < K) {
    const i64 r = K - k;
    R a[MR];
    for (int m = 0; m < MR; ++m) a[m] = V::load_first(A + m * lda + k, r);
    for (int n = 0; n < NR; ++n) {
      const R b = V::load_first(B + n * ldb + k, r);
      for (int m = 0; m < MR; ++m) acc[m][n] = V::fma(a[m], b, acc[m][n]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) store(C + m * ldc + n, V::hsum(acc[m][n]), alpha, beta);
}

// Rows [m0, M) of A against NR rows of B, in blocks of V::kMR rows then fewer; only the first
// block streams B from memory (and prefetches the next rows), the others find it in L1/L2.
template <class V, int NR, int MR>
void rows_of_a(i64 m, i64 M, i64 K, const float* A, i64 lda, const float* Bn, i64 ldb, float alpha, float beta,
               float* Cn, i64 ldc, const float* next) {
  for (; m + MR <= M; m += MR, next = nullptr)
    block<V, MR, NR>(K, A + m * lda, lda, Bn, ldb, alpha, beta, Cn + m * ldc, ldc, next);
  if constexpr (MR > 1)
    if (m < M) rows_of_a<V, NR, MR - 1>(m, M, K, A, lda, Bn, ldb, alpha, beta, Cn, ldc, next);
}

// Columns [n0, n1) of C for all M rows: B rows in groups of 8 for one row of A (more rows in
// flight), of 4 otherwise, then one by one.
template <class V>
void columns(i64 M, i64 n0, i64 n1, i64 K, const float* A, i64 lda, const float* B, i64 ldb, float alpha, float beta,
             float* C, i64 ldc) {
  const i64 NR = M == 1 ? 8 : 4;
  i64 n = n0;
  for (; n + NR <= n1; n += NR) {
    const float* next = n + 2 * NR <= n1 ? B + (n + NR) * ldb : nullptr;
    if (M == 1)
      block<V, 1, 8>(K, A, lda, B + n * ldb, ldb, alpha, beta, C + n, ldc, next);
    else
      rows_of_a<V, 4, V::kMR>(0, M, K, A, lda, B + n * ldb, ldb, alpha, beta, C + n, ldc, next);
  }
  for (; n < n1; ++n)
    for (i64 m = 0; m < M; ++m)
      block<V, 1, 1>(K, A + m * lda, lda, B + n * ldb, ldb, alpha, beta, C + m * ldc + n, ldc, nullptr);
}

// Blocks of 64 columns: a thread's share of B is contiguous, and a call forks only when each
// thread streams at least ~256 KiB of B (below that the fork costs more than it saves).
template <class V>
void run(i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda, const float* B, i64 ldb, float beta, float* C,
         i64 ldc, bool threaded) {
  constexpr i64 kCols = 64;
  const i64 blocks = (N + kCols - 1) / kCols;
  const i64 bytes_per_block = kCols * K * static_cast<i64>(sizeof(float));
  const i64 grain = std::max<i64>(1, (256 * 1024) / std::max<i64>(bytes_per_block, 1));
  auto part = [&](i64 b, i64 e) {
    columns<V>(M, b * kCols, std::min(N, e * kCols), K, A, lda, B, ldb, alpha, beta, C, ldc);
  };
  if (threaded)
    parallel_for(0, blocks, grain, part);
  else
    part(0, blocks);
}

}  // namespace qkv::kernels::detail::skinny
