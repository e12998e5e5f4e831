// AVX2 + FMA flash attention kernels (the template body is flash_attention_impl.h):
// 8-float vectors, 6 x 16 register micro-kernel (12 accumulators of 16 ymm).
// Compiled with #pragma GCC target, so it builds with QKV_NATIVE=OFF; only
// called when the CPU has AVX2 and FMA (dispatch in flash_attention.cpp).
#include "flash_attention_prelude.h"

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

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
};
#undef QKV_INL

}  // namespace
}  // namespace qkv::kernels::flash

#include "flash_attention_impl.h"
#include "attention_rows_impl.h"

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

}  // namespace qkv::kernels::flash

#pragma GCC pop_options
#else  // not x86: the dispatcher never selects this ISA; keep the symbols.
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
}  // namespace qkv::kernels::flash
#endif
