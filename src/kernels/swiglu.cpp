// SwiGLU kernels (see kernels/swiglu.h).
#include "qkv/kernels/swiglu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "qkv/kernels/cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QKV_SWIGLU_X86 1
#endif

namespace qkv::kernels {
namespace {

// 1 / (1 + exp(-g)) in double: exact limits at +-inf (exp(-inf) = 0, exp(inf) = inf -> 0).
inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

void swiglu_scalar(float* y, const float* g, const float* u, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    // float: g / (1 + exp(-g)) as PyTorch's CPU silu, then the product with u
    const float gi = g[i];
    const float s = gi / (1.0f + std::exp(-gi));
    y[i] = (std::isinf(gi) && gi < 0 ? -0.0f : s) * u[i];
  }
}

#ifdef QKV_SWIGLU_X86
// The vector versions (AVX-512, 16 lanes; AVX2, 8 lanes; the same operations in the same order,
// so the same bits): silu(g) u = g / (1 + exp(-g)) u as the scalar loop, with exp(x) computed as
// 2^n e^r: n = round(x log2 e), r = x - n ln 2 in two FMAs (Cody-Waite, ln 2 split in a high part
// exact in 16 bits and the rest), e^r by its Taylor series to degree 7 (|r| <= ln2 / 2: truncation
// < 6e-9), and 2^n applied as two halves so n = -150 .. 128 needs no special case (below: 0 or
// a denormal; 128: inf). Within ~2 float ulps of std::exp; x is clamped to [-104, 89], where
// exp is 0 or inf in float anyway. NaN g gives NaN; g = -inf gives -0 (as the scalar loop).
constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860682030941723212e-6f, kLog2E = 1.44269504088896341f;

__attribute__((target("avx512f,avx512dq,fma"))) inline __m512 exp_avx512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(89.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-kLn2Lo), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_cvtps_epi32(n), h = _mm512_srai_epi32(ni, 1), l = _mm512_sub_epi32(ni, h);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(l, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
}

__attribute__((target("avx512f,avx512dq,fma"))) inline __m512 swiglu16(__m512 g, __m512 u) {
  const __m512 e = exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), g));
  __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __mmask16 neg_inf = _mm512_cmp_ps_mask(g, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
  s = _mm512_mask_mov_ps(s, neg_inf, _mm512_set1_ps(-0.0f));
  return _mm512_mul_ps(s, u);
}

__attribute__((target("avx512f,avx512dq,fma"))) void swiglu_avx512(float* y, const float* g, const float* u,
                                                                     std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, swiglu16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
  if (i < n) {  // the tail through the same lanes (masked), so every element gets the same arithmetic
    const __mmask16 k = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, k, swiglu16(_mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_ps(k, u + i)));
  }
}

__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(89.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n), h = _mm256_srai_epi32(ni, 1), l = _mm256_sub_epi32(ni, h);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(l, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

__attribute__((target("avx2,fma"))) inline __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
  __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 neg_inf = _mm256_cmp_ps(g, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
  s = _mm256_blendv_ps(s, _mm256_set1_ps(-0.0f), neg_inf);
  return _mm256_mul_ps(s, u);
}

__attribute__((target("avx2,fma"))) void swiglu_avx2(float* y, const float* g, const float* u, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i < n) {  // the tail through the same lanes, so every element gets the same arithmetic
    alignas(32) float gt[8] = {}, ut[8] = {}, yt[8];
    std::memcpy(gt, g + i, static_cast<std::size_t>(n - i) * sizeof(float));
    std::memcpy(ut, u + i, static_cast<std::size_t>(n - i) * sizeof(float));
    _mm256_store_ps(yt, swiglu8(_mm256_load_ps(gt), _mm256_load_ps(ut)));
    std::memcpy(y + i, yt, static_cast<std::size_t>(n - i) * sizeof(float));
  }
}
#endif

}  // namespace

void swiglu_forward_f32(float* y, const float* g, const float* u, std::int64_t n) {
#ifdef QKV_SWIGLU_X86
  switch (active_isa()) {
    case Isa::Avx512: return swiglu_avx512(y, g, u, n);
    case Isa::Avx2: return swiglu_avx2(y, g, u, n);
    case Isa::Scalar: break;
  }
#endif
  swiglu_scalar(y, g, u, n);
}

template <class T>
void swiglu_forward_ref(T* y, const T* g, const T* u, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    const double s = std::isinf(gi) ? (gi > 0 ? gi : -0.0) : gi * sigmoid(gi);
    y[i] = static_cast<T>(s * static_cast<double>(u[i]));
  }
}

template <class T>
void swiglu_backward_ref(T* dg, T* du, const T* dy, const T* g, const T* u, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]), ui = static_cast<double>(u[i]), d = static_cast<double>(dy[i]);
    const double sg = sigmoid(gi);
    const double silu = std::isinf(gi) ? (gi > 0 ? gi : -0.0) : gi * sg;
    // d silu / dg = sg + g sg (1 - sg) = sg (1 + g (1 - sg)); its limits are 1 (+inf) and 0 (-inf)
    const double dsilu = std::isinf(gi) ? (gi > 0 ? 1.0 : 0.0) : sg * (1.0 + gi * (1.0 - sg));
    if (dg) dg[i] = static_cast<T>(d * ui * dsilu);
    if (du) du[i] = static_cast<T>(d * silu);
  }
}

template void swiglu_forward_ref<float>(float*, const float*, const float*, std::int64_t);
template void swiglu_forward_ref<double>(double*, const double*, const double*, std::int64_t);
template void swiglu_backward_ref<float>(float*, float*, const float*, const float*, const float*, std::int64_t);
template void swiglu_backward_ref<double>(double*, double*, const double*, const double*, const double*, std::int64_t);

}  // namespace qkv::kernels
