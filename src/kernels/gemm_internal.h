// Private to the GEMM kernels: argument checks, the micro-kernel table each
// ISA file provides, and the blocking parameters that go with it.
#pragma once
#include <cstdint>
#include <string>

#include "qkv/core/error.h"
#include "qkv/kernels/gemm.h"

namespace qkv::kernels::detail {

// Throws ValueError naming `op` when a size is negative or a leading dimension
// is below its minimum (row-major: lda >= columns of A as stored, ...).
inline void check_gemm_args(const char* op, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
                            std::int64_t K, std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  auto fail = [&](const std::string& what) {
    throw ValueError(std::string(op) + ": " + what + " (M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                     ", K=" + std::to_string(K) + ", trans_a=" + (trans_a ? "1" : "0") +
                     ", trans_b=" + (trans_b ? "1" : "0") + ", lda=" + std::to_string(lda) +
                     ", ldb=" + std::to_string(ldb) + ", ldc=" + std::to_string(ldc) + ")");
  };
  if (M < 0 || N < 0 || K < 0) fail("sizes must be >= 0");
  if (lda < (trans_a ? M : K)) fail(trans_a ? "lda must be >= M for A^T stored [K,M]" : "lda must be >= K for A [M,K]");
  if (ldb < (trans_b ? K : N)) fail(trans_b ? "ldb must be >= K for B^T stored [N,K]" : "ldb must be >= N for B [K,N]");
  if (ldc < N) fail("ldc must be >= N");
}

// Skinny products with B stored as rows (gemm_skinny.cpp): C = alpha * A @ B^T + beta * C
// for M <= kSkinnyMaxM, each element a dot product whose bits depend only on K and its two
// rows. Available when the compiler can emit AVX2 (used only when active_isa() >= Avx2).
inline constexpr std::int64_t kSkinnyMaxM = 24;  // measured: faster than packing B up to here (M = 16: 1.4 vs 2.2 ms, 2304x768)
// The AVX-512 twin (16 lanes) runs when active_isa() == Avx512.
bool sgemm_skinny_nt_available();
void sgemm_skinny_nt(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A, std::int64_t lda,
                     const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc, bool threaded);
bool sgemm_skinny_nt_avx512_available();
void sgemm_skinny_nt_avx512(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
                            std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc,
                            bool threaded);

// Micro-kernel: one full mr x nr tile of C over kc steps of k,
//   C[i*ldc + j] = alpha * sum_k a(i,k) * b(k,j) + beta * C[i*ldc + j]   (beta == 0: C not read)
//   b(k,j) = b[k*rs_b + j], j < nr contiguous (a packed B sliver has rs_b = nr)
//   a(i,k) = a[k*mr + i]            for the packed kernel (a packed A sliver)
//          = a[i*rs_a + k*cs_a]     for the strided kernel (A read in place)
// Products are accumulated from zero in k order, one fused multiply-add per
// step on the SIMD paths, then scaled: the result depends only on kc and the data.
template <class T>
using GemmUkr = void (*)(std::int64_t kc, const T* a, std::int64_t rs_a, std::int64_t cs_a, const T* b,
                         std::int64_t rs_b, T alpha, T beta, T* c, std::int64_t ldc);

// Optional fast packing of R rows of a row-major matrix (row stride ld) into
// the interleaved layout out[k*R + i] = src[i*ld + k], k < kc: A stored [M,K]
// into an A sliver (R = mr) and B stored [N,K] into a B sliver (R = nr).
// out must have 8 elements of slack past out[kc*R].
template <class T>
using GemmInterleave = void (*)(const T* src, std::int64_t ld, std::int64_t kc, T* out);

template <class T>
struct GemmKernelSet {
  int mr = 0;            // register tile rows (C rows per micro-kernel call)
  int nr = 0;            // register tile columns (a multiple of the vector width)
  std::int64_t kc = 0;   // K block: a packed B sliver kc x nr stays in L1
  std::int64_t mc = 0;   // M block (multiple of mr): the packed A block mc x kc stays in L2
  std::int64_t nc = 0;   // N block (multiple of nr): the packed B panel kc x nc stays in L3
  GemmUkr<T> packed_a = nullptr;
  GemmUkr<T> strided_a = nullptr;
  // rows_a[m]: the packed kernel for the first m < mr rows of a packed sliver (null: the full
  // kernel on the zero-padded sliver, through a scratch tile).
  GemmUkr<T> rows_a[16] = {};
  GemmInterleave<T> interleave_mr = nullptr;  // R = mr (null: portable loop)
  GemmInterleave<T> interleave_nr = nullptr;  // R = nr (null: portable loop)
};

// Each returns a set with null kernels when the ISA is not compiled in.
GemmKernelSet<float> sgemm_kernels_scalar();
GemmKernelSet<double> dgemm_kernels_scalar();
GemmKernelSet<float> sgemm_kernels_avx2();
GemmKernelSet<double> dgemm_kernels_avx2();
GemmKernelSet<float> sgemm_kernels_avx512();
GemmKernelSet<double> dgemm_kernels_avx512();

// ---- B produced on demand (kernels/qgemm.cpp: a quantized weight dequantized panel by panel) ----

// op(B) = S^T for a matrix S [N, K] that is never stored as floats: rows(ctx, r0, nr, k0, kc, out,
// ldo) writes S rows [r0, r0+nr) x columns [k0, k0+kc) to out (row stride ldo). The GEMM asks
// for at most nr (micro-kernel) rows at a time and packs them as it packs a transposed B, so
// the float copy is one sliver per thread. Every K block starts at a multiple of k_align (the
// quantization block) and, as always, depends only on K.
struct BRowSource {
  void (*rows)(const void* ctx, std::int64_t r0, std::int64_t nr, std::int64_t k0, std::int64_t kc, float* out,
               std::int64_t ldo) = nullptr;
  const void* ctx = nullptr;
  std::int64_t k_align = 1;
};

// C [M, N] (row stride ldc) = epilogue(A [M, K] (row stride lda) @ S^T + beta * C), S from src;
// beta is 0 or 1 (1 with an empty epilogue only). part < 0: the whole product, forked when
// threaded; part >= 0: the tiles a call on `parts` threads gives thread `part`, on the calling
// thread (as sgemm_packed_part). Bitwise the same for any thread count or parts.
void sgemm_rows_source(std::int64_t M, std::int64_t N, std::int64_t K, const float* A, std::int64_t lda,
                       const BRowSource& src, float beta, float* C, std::int64_t ldc, const GemmEpilogue& epilogue,
                       bool threaded, int part = -1, int parts = 1);

// The epilogue of sgemm_ex on rows [r0, r0+mb) x columns [c0, c0+nb) of C, c pointing at (r0, c0)
// (bias at column c0, residual at (r0, c0)): for kernels that finish C themselves.
void apply_gemm_epilogue(const GemmEpilogue& e, float* c, std::int64_t ldc, std::int64_t r0, std::int64_t c0,
                         std::int64_t mb, std::int64_t nb);

}  // namespace qkv::kernels::detail
