// AVX2 + FMA GEMM micro-kernels: fp32 6x16 and fp64 6x8 register tiles
// (12 accumulators + 2 B vectors + 1 broadcast of the 16 ymm registers).
// Compiled for AVX2 with a target pragma so the file builds without
// -march=native; used only when active_isa() >= Avx2.
#include <cstdint>

#include "gemm_internal.h"

// (clang ignores GCC's target pragma, so it builds these only when it targets AVX2 already.)
#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)))
#define QKV_GEMM_HAVE_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#include "gemm_ukernel.h"

namespace {

struct F32x8 {
  using T = float;
  using R = __m256;
  static constexpr int W = 8;
  static inline R zero() { return _mm256_setzero_ps(); }
  static inline R load(const T* p) { return _mm256_loadu_ps(p); }
  static inline void store(T* p, R v) { _mm256_storeu_ps(p, v); }
  static inline R bcast(const T* p) { return _mm256_broadcast_ss(p); }
  static inline R set1(T x) { return _mm256_set1_ps(x); }
  static inline R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static inline R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
};

struct F64x4 {
  using T = double;
  using R = __m256d;
  static constexpr int W = 4;
  static inline R zero() { return _mm256_setzero_pd(); }
  static inline R load(const T* p) { return _mm256_loadu_pd(p); }
  static inline void store(T* p, R v) { _mm256_storeu_pd(p, v); }
  static inline R bcast(const T* p) { return _mm256_broadcast_sd(p); }
  static inline R set1(T x) { return _mm256_set1_pd(x); }
  static inline R mul(R a, R b) { return _mm256_mul_pd(a, b); }
  static inline R fma(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
};

// out[k*R + i] = src[i*ld + k] for i < R, k < kc, through 8x8 register
// transposes (rows past R in a group of 8 read as zero and are not stored;
// 8-wide stores of a 6-wide group overlap the next k and are overwritten).
template <int R>
void interleave_rows(const float* src, std::int64_t ld, std::int64_t kc, float* out) {
  static_assert(R % 8 == 0 || R < 8, "R must be a multiple of 8 or below 8");
  constexpr int G = R < 8 ? R : 8;  // rows per transpose group
  std::int64_t k = 0;
  for (; k + 8 <= kc; k += 8) {
    for (int g = 0; g < R; g += 8) {
      if ((k & 15) == 0)  // one line ahead per row, 4 lines out
        for (int i = 0; i < G; ++i) __builtin_prefetch(src + (g + i) * ld + k + 64, 0, 3);
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = i < G ? _mm256_loadu_ps(src + (g + i) * ld + k) : _mm256_setzero_ps();
      const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
      const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
      const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
      const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
      const __m256 o[8] = {_mm256_permute2f128_ps(u0, u4, 0x20), _mm256_permute2f128_ps(u1, u5, 0x20),
                           _mm256_permute2f128_ps(u2, u6, 0x20), _mm256_permute2f128_ps(u3, u7, 0x20),
                           _mm256_permute2f128_ps(u0, u4, 0x31), _mm256_permute2f128_ps(u1, u5, 0x31),
                           _mm256_permute2f128_ps(u2, u6, 0x31), _mm256_permute2f128_ps(u3, u7, 0x31)};
      for (int kk = 0; kk < 8; ++kk) _mm256_storeu_ps(out + (k + kk) * R + g, o[kk]);
    }
  }
  for (; k < kc; ++k)
    for (int i = 0; i < R; ++i) out[k * R + i] = src[i * ld + k];
}

}  // namespace

#pragma GCC pop_options
#endif

namespace qkv::kernels::detail {

GemmKernelSet<float> sgemm_kernels_avx2() {
  GemmKernelSet<float> s;
#ifdef QKV_GEMM_HAVE_AVX2
  s.mr = 6;
  s.nr = 16;
  s.kc = 256;
  s.mc = 144;
  s.nc = 2048;
  s.packed_a = &gemm_ukernel<F32x8, 6, 2, true>;
  s.strided_a = &gemm_ukernel<F32x8, 6, 2, false>;
  fill_row_kernels<F32x8, 6, 2>(s.rows_a, std::make_integer_sequence<int, 5>{});
  s.interleave_mr = &interleave_rows<6>;
  s.interleave_nr = &interleave_rows<16>;
#endif
  return s;
}

GemmKernelSet<double> dgemm_kernels_avx2() {
  GemmKernelSet<double> s;
#ifdef QKV_GEMM_HAVE_AVX2
  s.mr = 6;
  s.nr = 8;
  s.kc = 256;
  s.mc = 72;
  s.nc = 1024;
  s.packed_a = &gemm_ukernel<F64x4, 6, 2, true>;
  s.strided_a = &gemm_ukernel<F64x4, 6, 2, false>;
#endif
  return s;
}

}  // namespace qkv::kernels::detail
