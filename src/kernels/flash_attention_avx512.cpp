// AVX-512 flash attention kernels (the template body is flash_attention_impl.h):
// 16-float vectors, 12 x 32 register micro-kernel (24 accumulators of 32 zmm).
// Compiled with #pragma GCC target, so it builds with QKV_NATIVE=OFF; only
// called when the CPU has AVX-512F/BW/VL/DQ (dispatch in flash_attention.cpp).
// The same GCC 12 false positive (PR 105593) also comes as a plain -Wuninitialized on the
// intrinsics' `__m512 __Y = __Y;` once micro_exp inlines them; that check reads the state at the
// intrinsics header, so it is silenced before the includes (this file holds only kernel code).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include "flash_attention_prelude.h"

#if defined(QKV_FLASH_AVX512_EMULATED)
// Test-only build (tests/kernels/attention.cmake): the same code on SIMDe's portable AVX-512
// (included by fast_exp.h), so CPUs without AVX-512 can check it. On an AVX-512 CPU SIMDe calls
// the native intrinsics, with GCC 12's false -Wmaybe-uninitialized (PR 105593) as below.
#define QKV_FLASH_HAVE_AVX512 1
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// (clang ignores GCC's target pragma, so it builds these only when it targets AVX-512 already.)
#elif (defined(__x86_64__) || defined(__i386__)) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)))
#define QKV_FLASH_HAVE_AVX512 1
#define QKV_FLASH_AVX512_PRAGMA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip a false
// -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#ifdef QKV_FLASH_HAVE_AVX512
#include "transpose_avx512.h"

namespace qkv::kernels::flash {
namespace {

#define QKV_INL __attribute__((always_inline)) static inline
struct IsaAvx512 {
  using V = __m512;
  static constexpr int W = 16, MR = 12, NV = 2;
  static constexpr std::int64_t kFwdQ = 96, kFwdK = 128, kBwdQ = 48, kBwdK = 96;
  QKV_INL V zero() { return _mm512_setzero_ps(); }
  QKV_INL V set1(float x) { return _mm512_set1_ps(x); }
  QKV_INL V load(const float* p) { return _mm512_loadu_ps(p); }
  QKV_INL void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  QKV_INL V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  QKV_INL V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  QKV_INL V add(V a, V b) { return _mm512_add_ps(a, b); }
  QKV_INL V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  QKV_INL V max(V a, V b) { return _mm512_max_ps(a, b); }
  // Halves to 256 bits, then as AVX2 (SIMDe has no _mm512_reduce_*).
  QKV_INL __m256 high_half(V a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }
  QKV_INL float hmax(V a) {
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(a), high_half(a));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  QKV_INL float hsum(V a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), high_half(a));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
  QKV_INL V exp2(V t) { return fastexp::exp2_avx512(t); }
  // 16 IEEE halves widened to floats.
  QKV_INL V load_half(const std::uint16_t* p) {
#if defined(QKV_FLASH_AVX512_EMULATED)
    // SIMDe has no vcvtph2ps for 512 bits (and a CPU without AVX-512 none): the exact scalar widening.
    alignas(64) float f[16];
    for (int i = 0; i < 16; ++i) f[i] = qkv::kernels::f16_to_f32(p[i]);
    return _mm512_load_ps(f);
#else
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#endif
  }
  // Lane k = the sum of a[k]'s 16 lanes (16 dot products reduced at once: 30 shuffles and 15 adds
  // instead of 16 x 4 shuffles and adds). A tree over halves: after three levels, 128-bit block c
  // lane k holds a[4k + c]'s sum, so a is read in that transposed order.
  QKV_INL V hsum_lanes(const V* a) {
    V t[8], u[4];
    for (int i = 0; i < 8; ++i) {  // i -> inputs x = a[perm(2i)], y = a[perm(2i + 1)], perm(4k + c) = 4c + k
      const int m0 = 2 * i, m1 = 2 * i + 1;
      const V x = a[(m0 % 4) * 4 + m0 / 4], y = a[(m1 % 4) * 4 + m1 / 4];
      t[i] = _mm512_add_ps(QKV_SHUFFLE_F32X4(x, y, 0x44), QKV_SHUFFLE_F32X4(x, y, 0xEE));
    }
    for (int i = 0; i < 4; ++i)
      u[i] = _mm512_add_ps(QKV_SHUFFLE_F32X4(t[2 * i], t[2 * i + 1], 0x88),
                           QKV_SHUFFLE_F32X4(t[2 * i], t[2 * i + 1], 0xDD));
    const V v0 = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x44), _mm512_shuffle_ps(u[0], u[1], 0xEE));
    const V v1 = _mm512_add_ps(_mm512_shuffle_ps(u[2], u[3], 0x44), _mm512_shuffle_ps(u[2], u[3], 0xEE));
    return _mm512_add_ps(_mm512_shuffle_ps(v0, v1, 0x88), _mm512_shuffle_ps(v0, v1, 0xDD));
  }
  // dst[d * dst_ld + j] = src[j * src_ld + d] for j, d < 16, through registers (transpose16),
  // for the key panels of S = Q K^T, where the element-by-element transpose cost as much as the
  // short heads' products.
  QKV_INL void transpose(float* dst, std::int64_t dst_ld, const float* src, std::int64_t src_ld) {
    __m512 r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * src_ld);
    transpose16(r);
    for (int d = 0; d < 16; ++d) _mm512_storeu_ps(dst + d * dst_ld, r[d]);
  }
};
#undef QKV_INL

}  // namespace
}  // namespace qkv::kernels::flash

#include "flash_attention_impl.h"
#include "attention_rows_impl.h"
#include "decode_attention_impl.h"

namespace qkv::kernels::flash {

void forward_avx512(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Engine<IsaAvx512>::forward(O, LSE, Q, K, V, p);
}
void backward_avx512(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                     const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Engine<IsaAvx512>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_avx512() { return Engine<IsaAvx512>::tiles(); }
void rows_forward_avx512(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Rows<IsaAvx512>::forward(O, LSE, Q, K, V, p);
}
void rows_backward_avx512(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                         const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Rows<IsaAvx512>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
void decode_forward_avx512(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p, Team* tm,
                    float* scratch) {
  Decode<IsaAvx512>::forward(O, Q, K, V, p, tm, scratch);
}
void decode_forward_f16_avx512(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                               const DecodeParams& p, Team* tm, float* scratch) {
  Decode<IsaAvx512, std::uint16_t>::forward(O, Q, K, V, p, tm, scratch);
}

}  // namespace qkv::kernels::flash

#ifdef QKV_FLASH_AVX512_PRAGMA
#pragma GCC pop_options
#endif
#else  // not x86, or clang not targeting this ISA: the dispatcher never selects it here; keep the symbols.
namespace qkv::kernels::flash {
void forward_avx512(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  forward_scalar(O, LSE, Q, K, V, p);
}
void backward_avx512(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                     const float* V, const float* O, const float* LSE, const AttnParams& p) {
  backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_avx512() { return tiles_scalar(); }
void rows_forward_avx512(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  rows_forward_scalar(O, LSE, Q, K, V, p);
}
void rows_backward_avx512(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                         const float* V, const float* O, const float* LSE, const AttnParams& p) {
  rows_backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
void decode_forward_avx512(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p, Team* tm,
                    float* scratch) {
  decode_forward_scalar(O, Q, K, V, p, tm, scratch);
}
void decode_forward_f16_avx512(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                               const DecodeParams& p, Team* tm, float* scratch) {
  decode_forward_f16_scalar(O, Q, K, V, p, tm, scratch);
}
}  // namespace qkv::kernels::flash
#endif
