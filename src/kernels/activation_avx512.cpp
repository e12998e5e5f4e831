// GELU erf form, forward, AVX-512F in float: 16 lanes, four times the lanes of the double path
// (activation.cpp, which works on 4-lane halves). It runs in BERT's feed-forward layer, fused
// into the GEMM epilogue, where the double path took ~30% of the layer's product time at batch
// 32. The algorithm and its accuracy: gelu_float_impl.h (shared with the AVX2 float path, the
// same bits).
//
// Compiled with a target pragma (or on SIMDe in the emulated test build, like gemm_avx512.cpp);
// used only when active_isa() == Avx512.
#include <cstdint>

#include "activation_internal.h"

#if defined(QKV_ACT_AVX512_EMULATED)
#define QKV_ACT_HAVE_AVX512 1
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
// (clang ignores GCC's target pragma, so it builds these only when it targets AVX-512 already.)
#elif defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)))
#define QKV_ACT_HAVE_AVX512 1
#define QKV_ACT_AVX512_PRAGMA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip a false
// -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#ifdef QKV_ACT_HAVE_AVX512
// After the target pragma: the template is compiled for AVX-512 where it is instantiated.
#include "gelu_float_impl.h"

namespace qkv::kernels::detail {
namespace {

#define QKV_INL __attribute__((always_inline)) static inline
struct G512 {
  using V = __m512;
  static constexpr int W = 16;
  QKV_INL V set1(float a) { return _mm512_set1_ps(a); }
  QKV_INL V load(const float* p) { return _mm512_loadu_ps(p); }
  QKV_INL void store(float* p, V a) { _mm512_storeu_ps(p, a); }
  QKV_INL V add(V a, V b) { return _mm512_add_ps(a, b); }
  QKV_INL V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  QKV_INL V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  QKV_INL V div(V a, V b) { return _mm512_div_ps(a, b); }
  QKV_INL V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  QKV_INL V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  QKV_INL V fmsub(V a, V b, V c) { return _mm512_fmsub_ps(a, b, c); }
  QKV_INL V max(V a, V b) { return _mm512_max_ps(a, b); }
  QKV_INL V min(V a, V b) { return _mm512_min_ps(a, b); }
  QKV_INL V abs(V a) { return _mm512_abs_ps(a); }
  QKV_INL V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  QKV_INL V scale2(V p, V k) { return _mm512_scalef_ps(p, k); }
  QKV_INL V pick_pos(V x, V neg, V pos) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), neg, pos);
  }
};
#undef QKV_INL

}  // namespace

bool gelu_erf_forward_avx512_available() { return true; }

void gelu_erf_forward_avx512(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                             std::int64_t n) {
  gelu_float::forward_rows<G512>(y, ldy, x, ldx, rows, n);
}

}  // namespace qkv::kernels::detail

#ifdef QKV_ACT_AVX512_PRAGMA
#pragma GCC pop_options
#endif

#else  // no AVX-512 compiler support

namespace qkv::kernels::detail {
bool gelu_erf_forward_avx512_available() { return false; }
void gelu_erf_forward_avx512(float*, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t) {}
}  // namespace qkv::kernels::detail

#endif
