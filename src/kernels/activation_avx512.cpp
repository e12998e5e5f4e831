// GELU erf form, forward, AVX-512F in float: 16 lanes, four times the lanes of the AVX2 path
// (which works in double on 4-lane halves). It runs in BERT's feed-forward layer, fused into the
// GEMM epilogue, where the double path took ~30% of the layer's product time at batch 32.
//
//   y = x Phi(x);  Phi(-a) = exp(-a^2/2) t Q(t),  t = 1 / (1 + a/4),  a = |x| clamped to 16
//
// the same decomposition as the AVX2 path (activation.cpp) with a float-sized fit:
//   Q     degree 9 in t on [0.2, 1] (mpmath chebyfit of Phi(-a) exp(a^2/2) / t; max relative
//         error 1.4e-8, a quarter of a float ulp), Horner with FMA;
//   exp   Cody-Waite: k = round(w log2 e), r = w - k ln2 (ln2 split in two so k ln2_hi is
//         exact), Cephes' degree-5 expf polynomial (~1 ulp), then scalef(p, k) (exact 2^k,
//         graceful underflow into denormals);
//   a^2   computed as hi + lo with an FMA, exp(-a^2/2) = exp(-hi/2) (1 - lo/2): rounding a^2
//         alone would cost |a^2/2| x 2^-24 relative (8 ulp at a = 4).
// Negative x: y = (x t Q) g multiplies the small factor last, so y stays normal as long as the
// true value is (down to x ~ -13.1). Measured over every 509th float in [-20, 20] against the
// exact float64 reference (tests/core/test_gelu_kernel.cpp): see GeluKernel.Avx512FloatPath.
// Infinities, NaN and -0 behave as in the AVX2 path (gelu(-inf) = -0, NaN stays NaN).
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
namespace qkv::kernels::detail {
namespace {

// Q(t), kQ[i] multiplies t^i (tests/reference/fit_gelu_float.py prints these).
constexpr float kQ[10] = {0.09974522512879712f,  0.09953766812737957f,  0.09519514796003485f, 0.07325946316625148f,
                          0.08364302837394368f,  0.017246211840828366f, 0.024172474022358136f, 0.05403641868481296f,
                          -0.06349129013611807f, 0.016655655876114842f};

// exp(w) for w in [-128, 0] (w = -hi/2 with hi <= 256).
inline __m512 exp_ps(__m512 w) {
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(w, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), w);  // k * ln2_hi is exact
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.f)));  // 1 + r + r^2 P(r)
  return _mm512_scalef_ps(p, k);
}

inline __m512 gelu_erf_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.f);
  const __m512 lo16 = _mm512_max_ps(_mm512_set1_ps(-16.f), x);  // NaN kept (second operand)
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(16.f), lo16);
  const __m512 a = _mm512_abs_ps(xc);
  // d + de = 1 + a/4 exactly (TwoSum; a/4 is exact), t = fl(1/d), rt = 1 - t d exactly.
  const __m512 s = _mm512_mul_ps(a, _mm512_set1_ps(0.25f));
  const __m512 d = _mm512_add_ps(one, s);
  const __m512 bv = _mm512_sub_ps(d, one);
  const __m512 de = _mm512_add_ps(_mm512_sub_ps(one, _mm512_sub_ps(d, bv)), _mm512_sub_ps(s, bv));
  const __m512 t = _mm512_div_ps(one, d);
  const __m512 rt = _mm512_fnmadd_ps(t, d, one);
  __m512 q = _mm512_set1_ps(kQ[9]);
  for (int i = 8; i >= 0; --i) q = _mm512_fmadd_ps(q, t, _mm512_set1_ps(kQ[i]));
  // R = t Q(t) at the rounded t; the exact t is t + t (rt - de t) (first order), and
  // dR/dt = (a R - 1/sqrt(2 pi)) (-4 / t^2) (R = Phi(-a) exp(a^2/2), dR/da = a R - 1/sqrt(2 pi)),
  // so R(exact t) = R - 4 (a R - 1/sqrt(2 pi)) (rt - de t) d. Without it the rounding of t, which
  // R amplifies up to 3x, cost ~6 ulp.
  __m512 tq = _mm512_mul_ps(t, q);
  const __m512 slope = _mm512_fmsub_ps(a, tq, _mm512_set1_ps(0.3989422804014327f));
  const __m512 dt = _mm512_mul_ps(_mm512_fnmadd_ps(de, t, rt), d);
  tq = _mm512_fnmadd_ps(_mm512_mul_ps(slope, _mm512_set1_ps(4.f)), dt, tq);
  const __m512 hi = _mm512_mul_ps(a, a);
  const __m512 lo = _mm512_fmsub_ps(a, a, hi);
  __m512 g = exp_ps(_mm512_mul_ps(hi, _mm512_set1_ps(-0.5f)));
  g = _mm512_fnmadd_ps(_mm512_mul_ps(g, _mm512_set1_ps(0.5f)), lo, g);  // g (1 - lo/2)
  // x >= 0: x (1 - tq g);  x < 0 (and -0): (x tq) g.
  const __m512 pos = _mm512_mul_ps(x, _mm512_fnmadd_ps(tq, g, one));
  const __m512 neg = _mm512_mul_ps(_mm512_mul_ps(lo16, tq), g);
  const __mmask16 nonneg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ);
  return _mm512_mask_blend_ps(nonneg, neg, pos);
}

}  // namespace

bool gelu_erf_forward_avx512_available() { return true; }

// Rows of n values (row strides ldy, ldx). Four vectors at a time: one vector's chain (division,
// Horner, exp) is long, and a GEMM epilogue hands over only a 14 x 32 tile, so independent
// vectors must be in flight together to fill the pipes.
void gelu_erf_forward_avx512(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                             std::int64_t n) {
  const std::int64_t nv = n / 16;  // full vectors per row
  const std::int64_t total = rows * nv;
  std::int64_t v = 0;
  for (; v + 4 <= total; v += 4) {
    const float* src[4];
    float* dst[4];
    for (int u = 0; u < 4; ++u) {
      const std::int64_t r = (v + u) / nv, c = (v + u) % nv * 16;
      src[u] = x + r * ldx + c;
      dst[u] = y + r * ldy + c;
    }
    const __m512 r0 = gelu_erf_ps(_mm512_loadu_ps(src[0])), r1 = gelu_erf_ps(_mm512_loadu_ps(src[1]));
    const __m512 r2 = gelu_erf_ps(_mm512_loadu_ps(src[2])), r3 = gelu_erf_ps(_mm512_loadu_ps(src[3]));
    _mm512_storeu_ps(dst[0], r0);
    _mm512_storeu_ps(dst[1], r1);
    _mm512_storeu_ps(dst[2], r2);
    _mm512_storeu_ps(dst[3], r3);
  }
  for (; v < total; ++v) {
    const std::int64_t r = v / nv, c = v % nv * 16;
    _mm512_storeu_ps(y + r * ldy + c, gelu_erf_ps(_mm512_loadu_ps(x + r * ldx + c)));
  }
  if (nv * 16 < n) {
    // Each row's tail through the same vector code (a value's result does not depend on its position).
    const std::int64_t c0 = nv * 16, m = n - c0;
    for (std::int64_t r = 0; r < rows; ++r) {
      alignas(64) float buf[16] = {};
      for (std::int64_t j = 0; j < m; ++j) buf[j] = x[r * ldx + c0 + j];
      _mm512_store_ps(buf, gelu_erf_ps(_mm512_load_ps(buf)));
      for (std::int64_t j = 0; j < m; ++j) y[r * ldy + c0 + j] = buf[j];
    }
  }
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
