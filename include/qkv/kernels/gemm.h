// GEMM kernels: C = alpha * op(A) @ op(B) + beta * C, everything row-major.
//
// Shape contract (one line per buffer; letters are GEMM's own, not docs/shapes.md's):
//   A  trans_a=false: [M,K], row stride lda >= K     trans_a=true: [K,M], lda >= M
//   B  trans_b=false: [K,N], row stride ldb >= N     trans_b=true: [N,K], ldb >= K
//   C  [M,N], row stride ldc >= N
// M, N or K may be 0 (K == 0 or alpha == 0: C = beta*C and A, B are not read).
// beta == 0 means C is not read (it may hold NaN or Inf); the result is exact zeros
// plus the product. Sizes < 0 or leading dimensions below the minimum throw ValueError.
//
// sgemm/dgemm pack B panels (KC x NC) and A blocks (MC x KC) into per-thread,
// reused workspaces and run a register-tiled micro-kernel chosen at run time
// (active_isa(): AVX-512, AVX2+FMA or portable scalar). Transposes are absorbed by
// the packing. Small or skinny products read A (and B when not transposed)
// directly instead of packing them. The K dimension is never split across
// threads and its blocking depends only on K, so results are bitwise identical
// from run to run and for any thread count (for a given ISA).
// threaded=false runs on the calling thread only (use it inside parallel_for).
// Thread safety: any number of threads may call these at once (workspaces are thread_local;
// see core/parallel.h for how concurrent calls share the pool), with bitwise the results of
// each call made alone.
#pragma once
#include <cstdint>

namespace qkv::kernels {

void sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc, bool threaded = true);
void dgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
           const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
           std::int64_t ldc, bool threaded = true);

// Strided batch, for b in [0, batch):
//   C + b*stride_c = alpha * op(A + b*stride_a) @ op(B + b*stride_b) + beta * (C + b*stride_c)
// Each product has the contract above. A stride of 0 broadcasts that operand
// (stride_c may be 0 only when batch <= 1). Small products run in parallel over
// the batch, large ones one after another, each threaded.
void sgemm_batched(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                   const float* A, std::int64_t lda, std::int64_t stride_a, const float* B, std::int64_t ldb,
                   std::int64_t stride_b, float beta, float* C, std::int64_t ldc, std::int64_t stride_c,
                   std::int64_t batch);
void dgemm_batched(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
                   const double* A, std::int64_t lda, std::int64_t stride_a, const double* B, std::int64_t ldb,
                   std::int64_t stride_b, double beta, double* C, std::int64_t ldc, std::int64_t stride_c,
                   std::int64_t batch);

// Naive references: triple loop with double (resp. long double) accumulation,
// same contract. Slow; for tests.
void sgemm_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc);
void dgemm_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
               const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
               std::int64_t ldc);

// Register tile of the fp32 micro-kernel for the active ISA: C is computed in
// mr x nr blocks (AVX-512 14x32, AVX2 6x16, scalar 4x16). Fused kernels can use
// it to choose tile sizes that are multiples of the micro-tile.
struct GemmTile {
  int mr;
  int nr;
};
GemmTile sgemm_tile();

}  // namespace qkv::kernels
