// AVX-512 Gated DeltaNet kernels (the template body is gated_delta_impl.h): 16-float vectors,
// 4 x 4 register tiles (16 accumulators of 32 zmm). Compiled with #pragma GCC target, so it
// builds with QKV_NATIVE=OFF; only called when the CPU has AVX-512F/BW/VL/DQ (dispatch in
// gated_delta.cpp).
#include "gated_delta_internal.h"

#if defined(QKV_GDN_AVX512_EMULATED)
// Test-only build (tests/kernels/gated_delta.cmake): the same code on SIMDe's portable AVX-512,
// so CPUs without AVX-512 can check it.
#define QKV_GDN_HAVE_AVX512 1
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
// (clang ignores GCC's target pragma, so it builds these only when it targets AVX-512 already.)
#elif (defined(__x86_64__) || defined(__i386__)) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)))
#define QKV_GDN_HAVE_AVX512 1
#define QKV_GDN_AVX512_PRAGMA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip a false
// -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#ifdef QKV_GDN_HAVE_AVX512
namespace qkv::kernels::gdn {
namespace {

#define QKV_INL __attribute__((always_inline)) static inline
struct IsaAvx512 {
  using V = __m512;
  static constexpr int W = 16, MR = 4, NB = 4, RB = 8;
  QKV_INL V zero() { return _mm512_setzero_ps(); }
  QKV_INL V set1(float x) { return _mm512_set1_ps(x); }
  QKV_INL V load(const float* p) { return _mm512_loadu_ps(p); }
  QKV_INL void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  QKV_INL V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  QKV_INL V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  QKV_INL V sub(V a, V b) { return _mm512_sub_ps(a, b); }
};
#undef QKV_INL

}  // namespace
}  // namespace qkv::kernels::gdn

#include "gated_delta_impl.h"

namespace qkv::kernels::gdn {

void recurrent_avx512(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  Kernels<IsaAvx512>::recurrent(o, state, q, k, v, g, beta, p, h0, h1);
}
void chunked_avx512(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  Kernels<IsaAvx512>::chunked(o, state, q, k, v, g, beta, p, h0, h1);
}
void conv_silu_avx512(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                      std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0,
                      std::int64_t c1) {
  Kernels<IsaAvx512>::conv_silu(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
}

}  // namespace qkv::kernels::gdn

#ifdef QKV_GDN_AVX512_PRAGMA
#pragma GCC pop_options
#endif
#else  // not x86, or clang not targeting this ISA: the dispatcher never selects it here; keep the symbols.
namespace qkv::kernels::gdn {
void recurrent_avx512(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  recurrent_scalar(o, state, q, k, v, g, beta, p, h0, h1);
}
void chunked_avx512(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  chunked_scalar(o, state, q, k, v, g, beta, p, h0, h1);
}
void conv_silu_avx512(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                      std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0,
                      std::int64_t c1) {
  conv_silu_scalar(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
}
}  // namespace qkv::kernels::gdn
#endif
