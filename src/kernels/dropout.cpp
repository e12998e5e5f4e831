// Vectorised dropout masks (see include/qkv/kernels/dropout.h). The scalar loop is the
// definition; the AVX2 version computes the same 32-bit hashes eight at a time and is
// checked bitwise against it in tests/core/test_dropout_mask.cpp.
#include "qkv/kernels/dropout.h"

#include <algorithm>
#include <cmath>

#include "qkv/kernels/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qkv::kernels {
namespace {

constexpr std::uint32_t kWeyl = 0x9E3779B9u;

// Calls seg(i0, i1, key, w0) for consecutive segments [i0, i1) of [0, n) whose counters
// c0 + i share their high 32 bits; w0 = key + low32(c0 + i0) * kWeyl is the first
// element's pre-hash value (the next ones add kWeyl each).
template <class Seg>
void for_each_segment(std::uint64_t seed, std::uint64_t c0, std::int64_t n, Seg seg) {
  std::int64_t i = 0;
  while (i < n) {
    const std::uint64_t c = c0 + static_cast<std::uint64_t>(i);
    const std::uint64_t room = (std::uint64_t{1} << 32) - (c & 0xFFFFFFFFull);  // counters left under this key
    const std::int64_t end = static_cast<std::int64_t>(std::min<std::uint64_t>(static_cast<std::uint64_t>(n - i), room)) + i;
    const std::uint32_t key = dropout_key(seed, c >> 32);
    seg(i, end, key, key + static_cast<std::uint32_t>(c) * kWeyl);
    i = end;
  }
}

// Calls out(i, dropped) for i in [i0, i1) of one segment, in order.
template <class Out>
void scalar_segment(std::int64_t i0, std::int64_t i1, std::uint32_t w0, std::uint64_t threshold, Out out) {
  std::uint32_t w = w0;
  for (std::int64_t i = i0; i < i1; ++i, w += kWeyl) out(i, fmix32(w) < threshold);
}

#if defined(__x86_64__) || defined(__i386__)
#define QKV_AVX2 __attribute__((target("avx2"), always_inline)) inline

// Lanes all ones where the element is dropped: fmix32(w) < threshold (unsigned; threshold
// below 2^32 here), as a signed compare after flipping the sign bits.
QKV_AVX2 __m256i dropped8(__m256i w, __m256i thr_flipped) {
  __m256i h = _mm256_xor_si256(w, _mm256_srli_epi32(w, 16));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0x85EBCA6Bu)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 13));
  h = _mm256_mullo_epi32(h, _mm256_set1_epi32(static_cast<int>(0xC2B2AE35u)));
  h = _mm256_xor_si256(h, _mm256_srli_epi32(h, 16));
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  return _mm256_cmpgt_epi32(thr_flipped, _mm256_xor_si256(h, sign));
}

// Runs emit8(i, dropped lanes) over whole vectors of a segment and emit1(i, dropped) over its
// tail; threshold < 2^32.
template <class Emit8, class Emit1>
QKV_AVX2 void segment_avx2(std::int64_t i0, std::int64_t i1, std::uint32_t w0, std::uint64_t threshold, Emit8 emit8,
                           Emit1 emit1) {
  const __m256i thr = _mm256_set1_epi32(static_cast<int>(static_cast<std::uint32_t>(threshold) ^ 0x80000000u));
  const __m256i step = _mm256_set1_epi32(static_cast<int>(8u * kWeyl));
  __m256i w = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(w0)),
                               _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                  _mm256_set1_epi32(static_cast<int>(kWeyl))));
  std::int64_t i = i0;
  for (; i + 8 <= i1; i += 8, w = _mm256_add_epi32(w, step)) emit8(i, dropped8(w, thr));
  scalar_segment(i, i1, w0 + static_cast<std::uint32_t>(i - i0) * kWeyl, threshold, emit1);
}

__attribute__((target("avx2"))) void multipliers_avx2(float* mul, std::uint64_t seed, std::uint64_t c0,
                                                      std::int64_t n, std::uint64_t threshold, float keep_scale) {
  const __m256 vkeep = _mm256_set1_ps(keep_scale);
  for_each_segment(seed, c0, n, [&](std::int64_t i0, std::int64_t i1, std::uint32_t, std::uint32_t w0) {
    segment_avx2(
        i0, i1, w0, threshold,
        [&](std::int64_t i, __m256i d) { _mm256_storeu_ps(mul + i, _mm256_andnot_ps(_mm256_castsi256_ps(d), vkeep)); },
        [&](std::int64_t i, bool dropped) { mul[i] = dropped ? 0.f : keep_scale; });
  });
}

__attribute__((target("avx2"))) void keep_avx2(std::uint8_t* keep, std::uint64_t seed, std::uint64_t c0,
                                               std::int64_t n, std::uint64_t threshold) {
  for_each_segment(seed, c0, n, [&](std::int64_t i0, std::int64_t i1, std::uint32_t, std::uint32_t w0) {
    segment_avx2(
        i0, i1, w0, threshold,
        [&](std::int64_t i, __m256i d) {
          const int bits = _mm256_movemask_ps(_mm256_castsi256_ps(d));
          for (int k = 0; k < 8; ++k) keep[i + k] = static_cast<std::uint8_t>(((bits >> k) & 1) ^ 1);
        },
        [&](std::int64_t i, bool dropped) { keep[i] = dropped ? 0 : 1; });
  });
}
#undef QKV_AVX2
#endif

// The scalar definition (also every path's answer when p rounds to 1: threshold 2^32).
template <class Out>
void scalar_all(std::uint64_t seed, std::uint64_t c0, std::int64_t n, std::uint64_t threshold, Out out) {
  for_each_segment(seed, c0, n, [&](std::int64_t i0, std::int64_t i1, std::uint32_t, std::uint32_t w0) {
    scalar_segment(i0, i1, w0, threshold, out);
  });
}

bool use_avx2(std::uint64_t threshold) { return active_isa() >= Isa::Avx2 && threshold <= 0xFFFFFFFFull; }

}  // namespace

std::uint64_t dropout_threshold(double p) { return static_cast<std::uint64_t>(std::ceil(p * 0x1.0p32)); }

void dropout_keep_mask(std::uint8_t* keep, std::uint64_t seed, std::uint64_t c0, std::int64_t n,
                       std::uint64_t threshold) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_avx2(threshold)) return keep_avx2(keep, seed, c0, n, threshold);
#endif
  scalar_all(seed, c0, n, threshold, [&](std::int64_t i, bool dropped) { keep[i] = dropped ? 0 : 1; });
}

void dropout_multipliers(float* mul, std::uint64_t seed, std::uint64_t c0, std::int64_t n, std::uint64_t threshold,
                         float keep_scale) {
#if defined(__x86_64__) || defined(__i386__)
  if (use_avx2(threshold)) return multipliers_avx2(mul, seed, c0, n, threshold, keep_scale);
#endif
  scalar_all(seed, c0, n, threshold, [&](std::int64_t i, bool dropped) { mul[i] = dropped ? 0.f : keep_scale; });
}

}  // namespace qkv::kernels
