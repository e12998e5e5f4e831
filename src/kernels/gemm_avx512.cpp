// AVX-512F GEMM micro-kernels: fp32 14x32 and fp64 14x16 register tiles
// (28 accumulators + 2 B vectors + 1 broadcast of the 32 zmm registers).
// Compiled for AVX-512 with a target pragma so the file builds without
// -march=native (QKV_NATIVE=OFF) and on CPUs without AVX-512; used only when
// active_isa() == Avx512.
#include <cstdint>

#include "gemm_internal.h"

#if defined(QKV_GEMM_AVX512_EMULATED)
// Test-only build (tests/kernels/gemm.cmake): the same kernels on SIMDe's
// portable AVX-512, so machines without AVX-512 can still check this file.
#define QKV_GEMM_HAVE_AVX512 1
// On an AVX-512 CPU SIMDe calls the native intrinsics: GCC 12's false -Wmaybe-uninitialized (PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
// (clang ignores GCC's target pragma, so it builds these only when it targets AVX-512 already.)
#elif defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)))
#define QKV_GEMM_HAVE_AVX512 1
#define QKV_GEMM_AVX512_PRAGMA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip a false
// -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13), here in transpose16.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#ifdef QKV_GEMM_HAVE_AVX512
#include "gemm_ukernel.h"
#include "transpose_avx512.h"

namespace {

struct F32x16 {
  using T = float;
  using R = __m512;
  static constexpr int W = 16;
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R load(const T* p) { return _mm512_loadu_ps(p); }
  static inline void store(T* p, R v) { _mm512_storeu_ps(p, v); }
  static inline R bcast(const T* p) { return _mm512_set1_ps(*p); }
  static inline R set1(T x) { return _mm512_set1_ps(x); }
  static inline R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static inline R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
};

struct F64x8 {
  using T = double;
  using R = __m512d;
  static constexpr int W = 8;
  static inline R zero() { return _mm512_setzero_pd(); }
  static inline R load(const T* p) { return _mm512_loadu_pd(p); }
  static inline void store(T* p, R v) { _mm512_storeu_pd(p, v); }
  static inline R bcast(const T* p) { return _mm512_set1_pd(*p); }
  static inline R set1(T x) { return _mm512_set1_pd(x); }
  static inline R mul(R a, R b) { return _mm512_mul_pd(a, b); }
  static inline R fma(R a, R b, R c) { return _mm512_fmadd_pd(a, b, c); }
};

// Packs 14 rows of A (row stride ld) into an A sliver, out[k*14 + i] = src[i*ld + k] for k < kc,
// 16 k at a time through a register transpose (rows 14 and 15 read as zero). Each 16-wide store
// of a 14-float row spills 2 floats into the next row, which the next store overwrites (and the
// last one into the 8 floats of slack the packer leaves).
void interleave_rows14(const float* src, std::int64_t ld, std::int64_t kc, float* out) {
  std::int64_t k = 0;
  for (; k + 16 <= kc; k += 16) {
    __m512 r[16];
    for (int i = 0; i < 14; ++i) r[i] = _mm512_loadu_ps(src + i * ld + k);
    r[14] = r[15] = _mm512_setzero_ps();
    transpose16(r);
    for (int kk = 0; kk < 16; ++kk) _mm512_storeu_ps(out + (k + kk) * 14, r[kk]);
  }
  for (; k < kc; ++k)
    for (int i = 0; i < 14; ++i) out[k * 14 + i] = src[i * ld + k];
}

}  // namespace

#ifdef QKV_GEMM_AVX512_PRAGMA
#pragma GCC pop_options
#endif
#endif

namespace qkv::kernels::detail {

// Blocking for Zen 4/5 and Skylake-X class cores (48 KiB L1d, 1 MiB L2):
// the kc x 32 B sliver is 32 KiB, the 168 x 256 A block 168 KiB.
GemmKernelSet<float> sgemm_kernels_avx512() {
  GemmKernelSet<float> s;
#ifdef QKV_GEMM_HAVE_AVX512
  s.mr = 14;
  s.nr = 32;
  s.kc = 256;
  s.mc = 168;
  s.nc = 2048;
  s.packed_a = &gemm_ukernel<F32x16, 14, 2, true>;
  s.strided_a = &gemm_ukernel<F32x16, 14, 2, false>;
  s.interleave_mr = &interleave_rows14;
  fill_row_kernels<F32x16, 14, 2>(s.rows_a, std::make_integer_sequence<int, 13>{});
#endif
  return s;
}

GemmKernelSet<double> dgemm_kernels_avx512() {
  GemmKernelSet<double> s;
#ifdef QKV_GEMM_HAVE_AVX512
  s.mr = 14;
  s.nr = 16;
  s.kc = 256;
  s.mc = 84;
  s.nc = 1024;
  s.packed_a = &gemm_ukernel<F64x8, 14, 2, true>;
  s.strided_a = &gemm_ukernel<F64x8, 14, 2, false>;
#endif
  return s;
}

}  // namespace qkv::kernels::detail
