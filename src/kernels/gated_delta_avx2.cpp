// AVX2 + FMA Gated DeltaNet kernels (the template body is gated_delta_impl.h): 8-float vectors,
// 4 x 2 register tiles (8 accumulators of 16 ymm). Compiled with #pragma GCC target, so it builds
// with QKV_NATIVE=OFF; only called when the CPU has AVX2 and FMA (dispatch in gated_delta.cpp).
#include "gated_delta_internal.h"

// (clang ignores GCC's target pragma, so it builds these only when it targets AVX2 already.)
#if (defined(__x86_64__) || defined(__i386__)) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX2__) && defined(__FMA__)))
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

namespace qkv::kernels::gdn {
namespace {

#define QKV_INL __attribute__((always_inline)) static inline
struct IsaAvx2 {
  using V = __m256;
  static constexpr int W = 8, MR = 4, NB = 2, RB = 4;
  QKV_INL V zero() { return _mm256_setzero_ps(); }
  QKV_INL V set1(float x) { return _mm256_set1_ps(x); }
  QKV_INL V load(const float* p) { return _mm256_loadu_ps(p); }
  QKV_INL void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  QKV_INL V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  QKV_INL V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  QKV_INL V sub(V a, V b) { return _mm256_sub_ps(a, b); }
};
#undef QKV_INL

}  // namespace
}  // namespace qkv::kernels::gdn

#include "gated_delta_impl.h"

namespace qkv::kernels::gdn {

void recurrent_avx2(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  Kernels<IsaAvx2>::recurrent(o, state, q, k, v, g, beta, p, h0, h1);
}
void chunked_avx2(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                  const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  Kernels<IsaAvx2>::chunked(o, state, q, k, v, g, beta, p, h0, h1);
}
void conv_silu_avx2(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n, std::int64_t Cc,
                    const float* w, std::int64_t K, float* state, std::int64_t c0, std::int64_t c1) {
  Kernels<IsaAvx2>::conv_silu(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
}

}  // namespace qkv::kernels::gdn

#pragma GCC pop_options
#else  // not x86, or clang not targeting this ISA: the dispatcher never selects it here; keep the symbols.
namespace qkv::kernels::gdn {
void recurrent_avx2(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  recurrent_scalar(o, state, q, k, v, g, beta, p, h0, h1);
}
void chunked_avx2(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                  const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  chunked_scalar(o, state, q, k, v, g, beta, p, h0, h1);
}
void conv_silu_avx2(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n, std::int64_t Cc,
                    const float* w, std::int64_t K, float* state, std::int64_t c0, std::int64_t c1) {
  conv_silu_scalar(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
}
}  // namespace qkv::kernels::gdn
#endif
