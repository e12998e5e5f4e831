// The register-tiled GEMM micro-kernel, written once over a small SIMD
// "vector traits" type V (see gemm_avx512.cpp, gemm_avx2.cpp, gemm_scalar.cpp):
//   V::T scalar type, V::R register type, V::W lanes,
//   zero(), load(p), store(p, r), bcast(p), set1(x), mul(a, b), fma(a, b, c) = a*b + c.
// Each ISA file includes this header after its `#pragma GCC target`, so the
// instantiations are compiled for that ISA; everything here has internal
// linkage (anonymous namespace) so no instantiation is shared across ISAs.
//
// Shape contract (see GemmUkr in gemm_internal.h):
//   a   packed: [kc][AS] (a[k*AS + i], AS = MR unless given: a sliver of AS rows of which
//       the kernel computes the first MR, for the edge of a packed block);  strided: a[i*rs_a + k*cs_a]
//   b   [kc] rows of NV*W contiguous values, row stride rs_b
//   c   [MR, NV*W], row stride ldc
#pragma once
#include <cstdint>
#include <utility>

namespace {

template <class V, int MR, int NV, bool kPackedA, int AS = MR>
void gemm_ukernel(std::int64_t kc, const typename V::T* a, std::int64_t rs_a, std::int64_t cs_a,
                  const typename V::T* b, std::int64_t rs_b, typename V::T alpha, typename V::T beta,
                  typename V::T* c, std::int64_t ldc) {
  using T = typename V::T;
  using R = typename V::R;
  constexpr int W = V::W;
  if constexpr (kPackedA) {
    rs_a = 1;
    cs_a = AS;
  }
  // Warm the C tile while the k loop runs (its rows are ldc apart).
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    __builtin_prefetch(c + i * ldc, 1, 3);
    __builtin_prefetch(c + i * ldc + NV * W - 1, 1, 3);
  }
  R acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V::zero();

#pragma GCC unroll 4
  for (std::int64_t k = 0; k < kc; ++k) {
    R bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = V::load(b + j * W);
    if constexpr (kPackedA) __builtin_prefetch(a + 8 * AS, 0, 3);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const R ai = V::bcast(a + (kPackedA ? i : i * rs_a));
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(ai, bv[j], acc[i][j]);
    }
    a += cs_a;
    b += rs_b;
  }

  const R va = V::set1(alpha);
  if (beta == T(0)) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) V::store(c + i * ldc + j * W, V::mul(va, acc[i][j]));
  } else {
    const R vb = V::set1(beta);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        T* p = c + i * ldc + j * W;
        V::store(p, V::fma(vb, V::load(p), V::mul(va, acc[i][j])));
      }
  }
}

// table[m] = the packed-A kernel computing the first m rows (1 <= m < MR) of an MR-row sliver:
// the rows past the edge of a block are not computed (each row's bits do not depend on MR).
template <class V, int MR, int NV, int... Ms>
void fill_row_kernels(void (**table)(std::int64_t, const typename V::T*, std::int64_t, std::int64_t,
                                     const typename V::T*, std::int64_t, typename V::T, typename V::T,
                                     typename V::T*, std::int64_t),
                      std::integer_sequence<int, Ms...>) {
  ((table[Ms + 1] = &gemm_ukernel<V, Ms + 1, NV, true, MR>), ...);
}

}  // namespace
