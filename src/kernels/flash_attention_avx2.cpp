// AVX2 + FMA flash attention kernels (the template body is flash_attention_impl.h):
// 8-float vectors, 6 x 16 register micro-kernel (12 accumulators of 16 ymm).
// Compiled with #pragma GCC target, so it builds with QKV_NATIVE=OFF; only
// called when the CPU has AVX2 and FMA (dispatch in flash_attention.cpp).
#include "flash_attention_prelude.h"

#include <utility>

// (clang ignores GCC's target pragma, so it builds these only when it targets AVX2 already.)
#if (defined(__x86_64__) || defined(__i386__)) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)))
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace qkv::kernels::flash {
namespace {

#define QKV_INL __attribute__((always_inline)) static inline
struct IsaAvx2 {
  using V = __m256;
  static constexpr int W = 8, MR = 6, NV = 2;
  // Forward: 96 query rows x 128 keys per step; backward: 96-key tasks x 48-row steps. Measured
  // (B=4, H=8, L=1024..2048, D=64, one core) against 48..192 x 32..256 and 48..96 x 48..192: the
  // alternatives were within the run-to-run noise (+-10%) of this machine or slower.
  static constexpr std::int64_t kFwdQ = 96, kFwdK = 128, kBwdQ = 48, kBwdK = 96;
  QKV_INL V zero() { return _mm256_setzero_ps(); }
  QKV_INL V set1(float x) { return _mm256_set1_ps(x); }
  QKV_INL V load(const float* p) { return _mm256_loadu_ps(p); }
  QKV_INL void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  QKV_INL V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  QKV_INL V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  QKV_INL V add(V a, V b) { return _mm256_add_ps(a, b); }
  QKV_INL V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  QKV_INL V max(V a, V b) { return _mm256_max_ps(a, b); }
  QKV_INL float hmax(V a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  QKV_INL float hsum(V a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  QKV_INL V exp2(V t) { return fastexp::exp2_avx2(t); }
  // Natural log for x in [1, 2^24] (row sums of a softmax), fast_exp.h.
  QKV_INL V log(V x) { return fastexp::log_avx2(x); }
  // Rows -> lanes (attention_rows_impl.h): out[d] lane r = src[r*st + d] * mul, 8 rows of 4.
  QKV_INL void transpose8x4_in(V* out, const float* src, std::int64_t st, float mul) {
    auto pair = [&](int r) {  // rows r and r + 4 in the two 128-bit halves
      return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(src + r * st)), _mm_loadu_ps(src + (r + 4) * st), 1);
    };
    const __m256 a0 = pair(0), a1 = pair(1), a2 = pair(2), a3 = pair(3);
    const __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    const __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    const __m256 m = _mm256_set1_ps(mul);
    out[0] = _mm256_mul_ps(_mm256_shuffle_ps(t0, t2, 0x44), m);
    out[1] = _mm256_mul_ps(_mm256_shuffle_ps(t0, t2, 0xEE), m);
    out[2] = _mm256_mul_ps(_mm256_shuffle_ps(t1, t3, 0x44), m);
    out[3] = _mm256_mul_ps(_mm256_shuffle_ps(t1, t3, 0xEE), m);
  }
  // out[k] lane r = src[r*st + k] * mul, 8 rows of 8.
  QKV_INL void transpose8x8_in(V* out, const float* src, std::int64_t st, float mul) {
    auto pair = [&](int r) {  // rows r and r + 4, low halves / high halves
      const __m256 x = _mm256_loadu_ps(src + r * st), y = _mm256_loadu_ps(src + (r + 4) * st);
      return std::pair{_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31)};
    };
    const auto [a0, b0] = pair(0);
    const auto [a1, b1] = pair(1);
    const auto [a2, b2] = pair(2);
    const auto [a3, b3] = pair(3);
    // a_r = [row r cols 0-3 | row r+4 cols 0-3], b_r = the same for cols 4-7: two 8x4 transposes.
    const __m256 m = _mm256_set1_ps(mul);
    auto four = [&](__m256 x0, __m256 x1, __m256 x2, __m256 x3, V* o) {
      const __m256 t0 = _mm256_unpacklo_ps(x0, x1), t1 = _mm256_unpackhi_ps(x0, x1);
      const __m256 t2 = _mm256_unpacklo_ps(x2, x3), t3 = _mm256_unpackhi_ps(x2, x3);
      o[0] = _mm256_mul_ps(_mm256_shuffle_ps(t0, t2, 0x44), m);
      o[1] = _mm256_mul_ps(_mm256_shuffle_ps(t0, t2, 0xEE), m);
      o[2] = _mm256_mul_ps(_mm256_shuffle_ps(t1, t3, 0x44), m);
      o[3] = _mm256_mul_ps(_mm256_shuffle_ps(t1, t3, 0xEE), m);
    };
    four(a0, a1, a2, a3, out);
    four(b0, b1, b2, b3, out + 4);
  }
  // out[k] = the lane sum of vector k of the 8 consecutive vectors at v.
  // 8 IEEE halves widened to floats (F16C; the dispatcher checks the CPU has it).
  QKV_INL V load_half(const std::uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // Lane k = the sum of a[k]'s 8 lanes.
  QKV_INL V hsum_lanes(const V* a) {
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
  }
  QKV_INL void hsum8(const float* v, float* out) {
    const __m256 t0 = _mm256_hadd_ps(load(v), load(v + 8)), t1 = _mm256_hadd_ps(load(v + 16), load(v + 24));
    const __m256 t2 = _mm256_hadd_ps(load(v + 32), load(v + 40)), t3 = _mm256_hadd_ps(load(v + 48), load(v + 56));
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    store(out, _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31)));
  }
};
#undef QKV_INL

}  // namespace
}  // namespace qkv::kernels::flash

#include "flash_attention_impl.h"
#include "attention_rows_impl.h"
#include "decode_attention_impl.h"

namespace qkv::kernels::flash {

void forward_avx2(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Engine<IsaAvx2>::forward(O, LSE, Q, K, V, p);
}
void backward_avx2(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                   const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Engine<IsaAvx2>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_avx2() { return Engine<IsaAvx2>::tiles(); }
void rows_forward_avx2(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Rows<IsaAvx2>::forward(O, LSE, Q, K, V, p);
}
void rows_backward_avx2(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                         const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Rows<IsaAvx2>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
void decode_forward_avx2(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p, Team* tm,
                    float* scratch) {
  Decode<IsaAvx2>::forward(O, Q, K, V, p, tm, scratch);
}
void decode_forward_f16_avx2(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                             const DecodeParams& p, Team* tm, float* scratch) {
  Decode<IsaAvx2, std::uint16_t>::forward(O, Q, K, V, p, tm, scratch);
}

}  // namespace qkv::kernels::flash

#pragma GCC pop_options
#else  // not x86, or clang not targeting this ISA: the dispatcher never selects it here; keep the symbols.
namespace qkv::kernels::flash {
void forward_avx2(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  forward_scalar(O, LSE, Q, K, V, p);
}
void backward_avx2(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                   const float* V, const float* O, const float* LSE, const AttnParams& p) {
  backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_avx2() { return tiles_scalar(); }
void rows_forward_avx2(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  rows_forward_scalar(O, LSE, Q, K, V, p);
}
void rows_backward_avx2(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                         const float* V, const float* O, const float* LSE, const AttnParams& p) {
  rows_backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
void decode_forward_avx2(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p, Team* tm,
                    float* scratch) {
  decode_forward_scalar(O, Q, K, V, p, tm, scratch);
}
void decode_forward_f16_avx2(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                             const DecodeParams& p, Team* tm, float* scratch) {
  decode_forward_f16_scalar(O, Q, K, V, p, tm, scratch);
}
}  // namespace qkv::kernels::flash
#endif
