// Vectorised dropout masks (see include/qkv/kernels/dropout.h). The scalar loop is the
// definition; the AVX2 version computes the same splitmix64 hashes four at a time and is
// checked bitwise against it in tests/kernels/test_dropout_mask.cpp.
#include "qkv/kernels/dropout.h"

#include <cmath>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qkv::kernels {
namespace {

// Calls out(i, dropped) for i < n, in order.
template <class Out>
void scalar_bits(std::uint64_t seed, std::uint64_t c0, std::int64_t i0, std::int64_t n, std::uint64_t threshold,
                 Out out) {
  for (std::int64_t i = i0; i < n; ++i)
    out(i, (random_bits(seed, c0 + static_cast<std::uint64_t>(i)) >> 11) < threshold);
}

#if defined(__x86_64__) || defined(__i386__)
#define QKV_AVX2 __attribute__((target("avx2"), always_inline)) inline

// a * b mod 2^64 per 64-bit lane, b a constant split into 32-bit halves.
QKV_AVX2 __m256i mul64(__m256i a, std::uint64_t b) {
  const __m256i blo = _mm256_set1_epi64x(static_cast<long long>(b & 0xffffffffu));
  const __m256i bhi = _mm256_set1_epi64x(static_cast<long long>(b >> 32));
  const __m256i lo = _mm256_mul_epu32(a, blo);                       // alo * blo (64-bit)
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), blo),  // ahi * blo
                                         _mm256_mul_epu32(a, bhi));                       // alo * bhi
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}
// mix64 (core/rng.h) per lane.
QKV_AVX2 __m256i mix64x4(__m256i z) {
  z = _mm256_add_epi64(z, _mm256_set1_epi64x(static_cast<long long>(0x9E3779B97F4A7C15ull)));
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xBF58476D1CE4E5B9ull);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94D049BB133111EBull);
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

// Lanes all ones where counter c (per 64-bit lane) is dropped: (random_bits >> 11) < threshold,
// with random_bits(seed, c) = mix64(mix64(seed) ^ (c * 0xD1B54A32D192ED03)). Both sides are
// below 2^63, so the signed compare is exact.
// ck holds c * 0xD1B54A32D192ED03 per lane (callers step it by adding 4 * the constant).
QKV_AVX2 __m256i dropped4(__m256i ck, __m256i smix, __m256i thr) {
  const __m256i z = mix64x4(_mm256_xor_si256(smix, ck));
  return _mm256_cmpgt_epi64(thr, _mm256_srli_epi64(z, 11));
}
constexpr std::uint64_t kCounterMul = 0xD1B54A32D192ED03ull;
// Lane k: (c0 + k) * kCounterMul (mod 2^64), and the step 4 * kCounterMul.
QKV_AVX2 __m256i counter_products(std::uint64_t c0) {
  return _mm256_setr_epi64x(static_cast<long long>(c0 * kCounterMul), static_cast<long long>((c0 + 1) * kCounterMul),
                            static_cast<long long>((c0 + 2) * kCounterMul), static_cast<long long>((c0 + 3) * kCounterMul));
}

__attribute__((target("avx2"))) void multipliers_avx2(float* mul, std::uint64_t seed, std::uint64_t c0,
                                                      std::int64_t n, std::uint64_t threshold, float keep_scale) {
  const __m256i smix = _mm256_set1_epi64x(static_cast<long long>(mix64(seed)));
  const __m256i thr = _mm256_set1_epi64x(static_cast<long long>(threshold));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(4 * kCounterMul));
  const __m256i narrow = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m128 vkeep = _mm_set1_ps(keep_scale);
  __m256i c = counter_products(c0);
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4, c = _mm256_add_epi64(c, step)) {
    const __m128i d = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(dropped4(c, smix, thr), narrow));
    _mm_storeu_ps(mul + i, _mm_andnot_ps(_mm_castsi128_ps(d), vkeep));
  }
  scalar_bits(seed, c0, i, n, threshold, [&](std::int64_t k, bool dropped) { mul[k] = dropped ? 0.f : keep_scale; });
}

__attribute__((target("avx2"))) void keep_avx2(std::uint8_t* keep, std::uint64_t seed, std::uint64_t c0,
                                               std::int64_t n, std::uint64_t threshold) {
  const __m256i smix = _mm256_set1_epi64x(static_cast<long long>(mix64(seed)));
  const __m256i thr = _mm256_set1_epi64x(static_cast<long long>(threshold));
  const __m256i step = _mm256_set1_epi64x(static_cast<long long>(4 * kCounterMul));
  __m256i c = counter_products(c0);
  std::int64_t i = 0;
  for (; i + 4 <= n; i += 4, c = _mm256_add_epi64(c, step)) {
    const int bits = _mm256_movemask_pd(_mm256_castsi256_pd(dropped4(c, smix, thr)));
    for (int k = 0; k < 4; ++k) keep[i + k] = static_cast<std::uint8_t>(((bits >> k) & 1) ^ 1);
  }
  scalar_bits(seed, c0, i, n, threshold, [&](std::int64_t k, bool dropped) { keep[k] = dropped ? 0 : 1; });
}
#undef QKV_AVX2
#endif

bool use_avx2() { return active_isa() >= Isa::Avx2; }

}  // namespace

std::uint64_t dropout_threshold(double p) { return static_cast<std::uint64_t>(std::ceil(p * 0x1.0p53)); }

void dropout_keep_mask(std::uint8_t* keep, std::uint64_t seed, std::uint64_t c0, std::int64_t n,
                       std::uint64_t threshold) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_avx2()) return keep_avx2(keep, seed, c0, n, threshold);
#endif
  scalar_bits(seed, c0, 0, n, threshold, [&](std::int64_t i, bool dropped) { keep[i] = dropped ? 0 : 1; });
}

void dropout_multipliers(float* mul, std::uint64_t seed, std::uint64_t c0, std::int64_t n, std::uint64_t threshold,
                         float keep_scale) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_avx2()) return multipliers_avx2(mul, seed, c0, n, threshold, keep_scale);
#endif
  scalar_bits(seed, c0, 0, n, threshold, [&](std::int64_t i, bool dropped) { mul[i] = dropped ? 0.f : keep_scale; });
}

}  // namespace qkv::kernels
