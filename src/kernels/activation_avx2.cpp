// GELU erf form, forward, AVX2 + FMA in float: 8 lanes, twice the lanes of the double path
// (activation.cpp, 4-lane halves), the same operations in the same order as the AVX-512 float
// path (gelu_float_impl.h): the same bits. BERT's feed-forward layer calls it in the GEMM
// epilogue, where the double path took ~10% of an all-MiniLM-L6-v2 embedding run at batch 32
// on one core of an AVX2-only AMD EPYC (Zen 2).
//
// Compiled with a target pragma, so it builds with QKV_NATIVE=OFF; used when active_isa() is
// Avx2, or Avx512 in a build without the AVX-512 file (activation.cpp).
#include <cstdint>

#include "activation_internal.h"

// (clang ignores GCC's target pragma, so it builds these only when it targets AVX2 already.)
#if (defined(__x86_64__) || defined(__i386__)) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX2__) && defined(__FMA__)))
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

// After the target pragma: the template is compiled for AVX2 where it is instantiated.
#include "gelu_float_impl.h"

namespace qkv::kernels::detail {
namespace {

#define QKV_INL __attribute__((always_inline)) static inline
struct G256 {
  using V = __m256;
  static constexpr int W = 8;
  QKV_INL V set1(float a) { return _mm256_set1_ps(a); }
  QKV_INL V load(const float* p) { return _mm256_loadu_ps(p); }
  QKV_INL void store(float* p, V a) { _mm256_storeu_ps(p, a); }
  QKV_INL V add(V a, V b) { return _mm256_add_ps(a, b); }
  QKV_INL V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  QKV_INL V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  QKV_INL V div(V a, V b) { return _mm256_div_ps(a, b); }
  QKV_INL V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  QKV_INL V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  QKV_INL V fmsub(V a, V b, V c) { return _mm256_fmsub_ps(a, b, c); }
  QKV_INL V max(V a, V b) { return _mm256_max_ps(a, b); }
  QKV_INL V min(V a, V b) { return _mm256_min_ps(a, b); }
  QKV_INL V abs(V a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.f), a); }
  QKV_INL V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // p 2^k for integral k in [-185, 0] with one rounding, as AVX-512's scalef: 2^k is not a
  // float below 2^-126, so p (in [0.7, 1.5]) is first scaled exactly by 2^(k - k/2) (>= 2^-93,
  // the product normal), then rounded once by the multiply by 2^(k/2).
  QKV_INL V scale2(V p, V k) {
    const __m256i ki = _mm256_cvtps_epi32(k);
    const __m256i k2 = _mm256_srai_epi32(ki, 1), k1 = _mm256_sub_epi32(ki, k2);
    const __m256i bias = _mm256_set1_epi32(127);
    const V f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    const V f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  }
  QKV_INL V pick_pos(V x, V neg, V pos) {
    return _mm256_blendv_ps(neg, pos, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
  }
};
#undef QKV_INL

}  // namespace

bool gelu_erf_forward_avx2_available() { return true; }

void gelu_erf_forward_avx2(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                           std::int64_t n) {
  gelu_float::forward_rows<G256>(y, ldy, x, ldx, rows, n);
}

}  // namespace qkv::kernels::detail

#pragma GCC pop_options

#else  // no AVX2 compiler support

namespace qkv::kernels::detail {
bool gelu_erf_forward_avx2_available() { return false; }
void gelu_erf_forward_avx2(float*, std::int64_t, const float*, std::int64_t, std::int64_t, std::int64_t) {}
}  // namespace qkv::kernels::detail

#endif
