// AVX-512 flash attention kernels (the template body is flash_attention_impl.h):
// 16-float vectors, 12 x 32 register micro-kernel (24 accumulators of 32 zmm).
// Compiled with #pragma GCC target, so it builds with QKV_NATIVE=OFF; only
// called when the CPU has AVX-512F/BW/VL/DQ (dispatch in flash_attention.cpp).
#include "flash_attention_prelude.h"

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip a false
// -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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
  QKV_INL float hmax(V a) { return _mm512_reduce_max_ps(a); }
  QKV_INL float hsum(V a) { return _mm512_reduce_add_ps(a); }
  QKV_INL V exp2(V t) { return fastexp::exp2_avx512(t); }
};
#undef QKV_INL

}  // namespace
}  // namespace qkv::kernels::flash

#include "flash_attention_impl.h"

namespace qkv::kernels::flash {

void forward_avx512(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Engine<IsaAvx512>::forward(O, LSE, Q, K, V, p);
}
void backward_avx512(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                     const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Engine<IsaAvx512>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_avx512() { return Engine<IsaAvx512>::tiles(); }

}  // namespace qkv::kernels::flash

#pragma GCC pop_options
#else  // not x86: the dispatcher never selects this ISA; keep the symbols.
namespace qkv::kernels::flash {
void forward_avx512(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  forward_scalar(O, LSE, Q, K, V, p);
}
void backward_avx512(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                     const float* V, const float* O, const float* LSE, const AttnParams& p) {
  backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_avx512() { return tiles_scalar(); }
}  // namespace qkv::kernels::flash
#endif
