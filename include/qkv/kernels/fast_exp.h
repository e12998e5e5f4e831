// Fast base-2 exponential for the softmax inside the attention kernels.
//
// exp2(t) = 2^n * 2^f with n = round(t), f = t - n in [-1/2, 1/2] (exact in
// floating point, so no Cody-Waite split is needed for base 2), and
// 2^f ~= 1 + f*(c1 + f*(c2 + ... + f*c6)): a degree-6 near-minimax
// (Chebyshev-fit) polynomial whose constant term is exactly 1 so exp2(0) == 1.
// 2^n is built as the float with exponent field n + 127 and multiplied in.
//
// Accuracy (measured against double exp2 over [-126, 127]): AVX2/AVX-512 (FMA
// Horner) max 0.83 ulp, relative error < 7e-8; the portable scalar version
// (no FMA) max 1.13 ulp; tests/kernels/test_attention.cpp checks both. The
// kernels evaluate exp(x) as exp2(x * log2 e), which adds the rounding of that
// product: |x| * 2^-24 relative, negligible where P = exp(s - max) matters.
// Range: t is clamped to [-127, 128]; results below ~2^-126.5 (including
// t = -inf) are exactly 0 (no denormals), t >= 127.5 gives +inf, NaN stays NaN.
//
// Each ISA variant carries its own target attribute, so this header can be
// included by code compiled for any baseline.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(QKV_FLASH_AVX512_EMULATED)
// Test-only build (tests/kernels/attention.cmake): AVX-512 on SIMDe's portable intrinsics, so a
// CPU without AVX-512 can run that code; no AVX-512 target attribute then.
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define QKV_FAST_EXP_X86 1
#define QKV_FAST_EXP_AVX512_TARGET
#elif defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QKV_FAST_EXP_X86 1
#define QKV_FAST_EXP_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#endif

namespace qkv::kernels::fastexp {

// 2^f = 1 + f*(kC1 + f*(kC2 + f*(kC3 + f*(kC4 + f*(kC5 + f*kC6))))) on [-1/2, 1/2].
inline constexpr float kC1 = 0x1.62e4303p-1f;   // 0.6931471880
inline constexpr float kC2 = 0x1.ebfbe01p-3f;   // 0.2402265076
inline constexpr float kC3 = 0x1.c6af6cep-5f;   // 0.0555035711
inline constexpr float kC4 = 0x1.3b2a530p-7f;   // 0.0096180826
inline constexpr float kC5 = 0x1.5f08902p-10f;  // 0.0013390863
inline constexpr float kC6 = 0x1.441389ep-13f;  // 0.0001545316
inline constexpr float kLog2e = 1.44269504088896341f;

// Portable scalar version (no FMA assumed).
inline float exp2_scalar(float t) {
  if (t != t) return t;  // NaN
  t = t < -127.f ? -127.f : t;
  t = t > 128.f ? 128.f : t;
  // Round to nearest: adding 1.5*2^23 pushes the fraction out of the mantissa.
  const float r = (t + 0x1.8p23f) - 0x1.8p23f;
  const float f = t - r;
  float p = kC6;
  p = p * f + kC5;
  p = p * f + kC4;
  p = p * f + kC3;
  p = p * f + kC2;
  p = p * f + kC1;
  p = p * f + 1.0f;
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(r) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

#ifdef QKV_FAST_EXP_X86
__attribute__((target("avx2,fma"), always_inline)) inline __m256 exp2_avx2(__m256 t) {
  // max/min return their second operand when either is NaN: NaN propagates.
  t = _mm256_max_ps(_mm256_set1_ps(-127.f), t);
  t = _mm256_min_ps(_mm256_set1_ps(128.f), t);
  // y = t + (1.5*2^23 + 127) rounds t to an integer n held in y's low mantissa bits as n + 127,
  // so y << 23 is the bit pattern of 2^n (0 for n = -127, +inf for n = 128).
  const __m256 magic = _mm256_set1_ps(0x1.8p23f + 127.f);
  const __m256 y = _mm256_add_ps(t, magic);
  const __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(y, magic));
  __m256 p = _mm256_set1_ps(kC6);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kC5));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kC4));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kC3));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kC2));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kC1));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(y), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Natural log of x in [1, 2^24] (what a softmax row sum l >= 1 can be), for the LSE of many
// rows at once: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1),
// |s| <= 0.1716, by its odd series to s^11 (truncation < 1e-9 relative). Measured against
// double log on [1, 2^24]: max 1.97 ulp, just above 1 where the two roundings of s reach
// log m ~ 2s (tests/kernels/test_attention.cpp, FastExp.LogOfRowSums). Outside that range
// (0, denormals, inf, NaN) the result is unspecified: callers use std::log there.
__attribute__((target("avx2,fma"), always_inline)) inline __m256 log_avx2(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127));
  __m256 m = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x3F800000)));
  // m in [1, 2): fold [sqrt 2, 2) to [sqrt(1/2), 1) with e + 1.
  const __m256 big = _mm256_cmp_ps(m, _mm256_set1_ps(1.41421356f), _CMP_GE_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, _mm256_set1_ps(0.5f)), big);
  e = _mm256_sub_epi32(e, _mm256_castps_si256(big));  // big lanes are all ones = -1
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 s = _mm256_div_ps(_mm256_sub_ps(m, one), _mm256_add_ps(m, one));
  const __m256 z = _mm256_mul_ps(s, s);
  __m256 p = _mm256_set1_ps(1.f / 11);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.f / 9));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.f / 7));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.f / 5));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.f / 3));
  p = _mm256_mul_ps(p, z);  // log m = 2s + 2s z p
  const __m256 two_s = _mm256_add_ps(s, s);
  const __m256 logm = _mm256_fmadd_ps(two_s, p, two_s);
  // e ln2 in two parts so the sum stays exact to ~1 ulp for large e.
  const __m256 ef = _mm256_cvtepi32_ps(e);
  return _mm256_fmadd_ps(ef, _mm256_set1_ps(0.693145752f),
                         _mm256_fmadd_ps(ef, _mm256_set1_ps(1.42860677e-06f), logm));
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip a false
// -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
QKV_FAST_EXP_AVX512_TARGET __attribute__((always_inline)) inline __m512 exp2_avx512(__m512 t) {
  t = _mm512_max_ps(_mm512_set1_ps(-127.f), t);
  t = _mm512_min_ps(_mm512_set1_ps(128.f), t);
  const __m512 magic = _mm512_set1_ps(0x1.8p23f + 127.f);  // see exp2_avx2
  const __m512 y = _mm512_add_ps(t, magic);
  const __m512 f = _mm512_sub_ps(t, _mm512_sub_ps(y, magic));
  __m512 p = _mm512_set1_ps(kC6);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC5));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC4));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC3));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC2));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kC1));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(y), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// Array forms (n a multiple of 8 / 16), for tests and callers without the ISA enabled.
__attribute__((target("avx2,fma"))) inline void exp2_array_avx2(float* y, const float* t, std::int64_t n) {
  for (std::int64_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp2_avx2(_mm256_loadu_ps(t + i)));
}
__attribute__((target("avx2,fma"))) inline void log_array_avx2(float* y, const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, log_avx2(_mm256_loadu_ps(x + i)));
}
QKV_FAST_EXP_AVX512_TARGET inline void exp2_array_avx512(float* y, const float* t, std::int64_t n) {
  for (std::int64_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp2_avx512(_mm512_loadu_ps(t + i)));
}
#pragma GCC diagnostic pop
#endif

}  // namespace qkv::kernels::fastexp
