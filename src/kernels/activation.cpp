// GELU (see include/qkv/kernels/activation.h): AVX2 + FMA version and its naive twins.
#include "qkv/kernels/activation.h"

#include <cmath>

#include "qkv/kernels/cpu.h"
#include "activation_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qkv::kernels {

namespace {
constexpr double kBeta = 0.7978845608028654;        // sqrt(2/pi)
constexpr double kKappa = 0.044715;
constexpr double kInvSqrt2Pi = 0.3989422804014327;  // 1/sqrt(2 pi)
// Past this |x| the formulas are exactly their limits (or overflow: x^2 in the tanh gradient).
constexpr double kLimit = 1e10;
}  // namespace

double gelu_ref(double x, GeluForm form) {
  if (std::fabs(x) > kLimit) return x > 0 ? x : -0.0;
  if (form == GeluForm::Erf) return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
  const double u = kBeta * (x + kKappa * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

double gelu_grad_ref(double x, GeluForm form) {
  if (std::fabs(x) > kLimit) return x > 0 ? 1.0 : 0.0;
  if (form == GeluForm::Erf) {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    const double cdf = 0.5 * (1.0 + std::erf(x * M_SQRT1_2));
    const double pdf = std::exp(-0.5 * x * x) * kInvSqrt2Pi;
    return cdf + x * pdf;
  }
  // y = 0.5 x (1 + tanh(u)), u = b (x + k x^3)
  // dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) b (1 + 3 k x^2)
  const double u = kBeta * (x + kKappa * x * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kBeta * (1.0 + 3 * kKappa * x * x);
}

template <class T>
void gelu_forward_ref(T* y, const T* x, std::int64_t n, GeluForm form) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(gelu_ref(x[i], form));
}
template <class T>
void gelu_backward_ref(T* dx, const T* dy, const T* x, std::int64_t n, GeluForm form) {
  for (std::int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>(static_cast<double>(dy[i]) * gelu_grad_ref(x[i], form));
}
template void gelu_forward_ref<float>(float*, const float*, std::int64_t, GeluForm);
template void gelu_forward_ref<double>(double*, const double*, std::int64_t, GeluForm);
template void gelu_backward_ref<float>(float*, const float*, const float*, std::int64_t, GeluForm);
template void gelu_backward_ref<double>(double*, const double*, const double*, std::int64_t, GeluForm);

#if defined(__x86_64__) || defined(__i386__)
namespace {

#define QKV_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

// The vector code works on 4 lanes of double (8 floats as two halves): with 29 spare bits,
// x^2, t = 1 / (1 + |x|/4), the exponent arguments and the products lose nothing that shows
// in float, so the errors are the two fits below (< 5e-9 relative) and the one rounding to
// float. (All in float, rounding 1 + |x|/4 alone loses the low bits of a small |x| and costs
// up to 8 ulp near x = 0; the tanh form's exponent -2|u| needs more than float's 24 bits.)

// Q(t) = Phi(-a) exp(a^2/2) / t for t = 1 / (1 + a/4), a = |x| in [0, 16] (t in [0.2, 1]).
// Degree-10 Chebyshev fit (mpmath chebyfit, max error 4.3e-10; Q >= 0.0997); kQ[i] multiplies
// t^i. Q(1) = 1/2, Q(0) = 1/(4 sqrt(2 pi)).
constexpr double kQ[11] = {
    0.0997266258119413,   0.09995598503244724, 0.09112162829411656, 0.09588899558245442,
    0.004131404902876842, 0.20217207209503743, -0.2646874586493286, 0.35387592541824253,
    -0.26184100672822364, 0.09231998606365963, -0.012664157632671666,
};
// 2^f on [-1/2, 1/2]: degree-6 Chebyshev fit (mpmath chebyfit), max relative error 2.0e-9;
// kE[i] multiplies f^i.
constexpr double kE[7] = {
    1.0, 0.6931472067028326, 0.24022650922288757, 0.05550327226670302, 0.009618056678524637, 0.0013400428177615838,
    0.0001546144469856913,
};

// exp(w) for |w| <= 700: 2^k 2^f with k = round(w log2 e), f = w log2 e - k in [-1/2, 1/2].
// Callers pass |w| <= 320; rounded to float it is a denormal below -87.3 and 0 below -103.9.
QKV_AVX2 __m256d exp_pd(__m256d w) {
  const __m256d t = _mm256_mul_pd(w, _mm256_set1_pd(1.4426950408889634));
  const __m256d k = _mm256_round_pd(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256d f = _mm256_sub_pd(t, k);
  __m256d p = _mm256_set1_pd(kE[6]);
  for (int i = 5; i >= 0; --i) p = _mm256_fmadd_pd(p, f, _mm256_set1_pd(kE[i]));
  // 2^k: the double with exponent field k + 1023.
  const __m256i k64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
  const __m256i e = _mm256_slli_epi64(_mm256_add_epi64(k64, _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

// x clamped to [-16, 16], NaN kept (max/min return their second operand when either is NaN):
// past 16 both forms are exactly x (or -0) in float and the gradients exactly 1 (or 0), and
// the clamp keeps inf out of the arithmetic.
QKV_AVX2 __m256d clamp16(__m256d x) {
  return _mm256_min_pd(_mm256_set1_pd(16.0), _mm256_max_pd(_mm256_set1_pd(-16.0), x));
}
// max(x, -16), NaN kept: the factor x of the forward. Below -16 the result is -0 in float,
// and -inf must not meet the (double, so nonzero) tail: -inf * 1e-138 is -inf.
QKV_AVX2 __m256d floor16(__m256d x) { return _mm256_max_pd(_mm256_set1_pd(-16.0), x); }
QKV_AVX2 __m256d abs_pd(__m256d x) { return _mm256_andnot_pd(_mm256_set1_pd(-0.0), x); }

// Erf form, for xc = clamp16(x): g = exp(-x^2/2) and tq = t Q(t), so that Phi(-|x|) = g tq.
struct ErfParts {
  __m256d a, g, tq;
};
QKV_AVX2 ErfParts erf_parts(__m256d xc) {
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d a = abs_pd(xc);
  const __m256d g = exp_pd(_mm256_mul_pd(_mm256_mul_pd(xc, xc), _mm256_set1_pd(-0.5)));
  const __m256d t = _mm256_div_pd(one, _mm256_fmadd_pd(a, _mm256_set1_pd(0.25), one));
  __m256d q = _mm256_set1_pd(kQ[10]);
  for (int i = 9; i >= 0; --i) q = _mm256_fmadd_pd(q, t, _mm256_set1_pd(kQ[i]));
  return {a, g, _mm256_mul_pd(t, q)};
}

// y = x Phi(x) = x (1 - g tq) for x >= 0, x g tq for x < 0.
QKV_AVX2 __m256d gelu_erf_pd(__m256d x) {
  const ErfParts p = erf_parts(clamp16(x));
  const __m256d e = _mm256_mul_pd(p.g, p.tq);  // Phi(-|x|)
  const __m256d cdf = _mm256_blendv_pd(_mm256_sub_pd(_mm256_set1_pd(1.0), e), e, x);  // sign bit of x picks
  return _mm256_mul_pd(floor16(x), cdf);
}

// y' = Phi(x) + x phi(x). With h = |x| phi(x) - Phi(-|x|) = g (|x| / sqrt(2 pi) - tq):
// x >= 0: 1 - Phi(-x) + x phi(x) = 1 + h;  x < 0: Phi(x) - |x| phi(x) = -h.
QKV_AVX2 __m256d gelu_erf_grad_pd(__m256d x) {
  const ErfParts p = erf_parts(clamp16(x));
  const __m256d h = _mm256_mul_pd(p.g, _mm256_fmsub_pd(p.a, _mm256_set1_pd(kInvSqrt2Pi), p.tq));
  return _mm256_blendv_pd(_mm256_add_pd(_mm256_set1_pd(1.0), h), _mm256_xor_pd(h, _mm256_set1_pd(-0.0)), x);
}

// Tanh form, for xc = clamp16(x): 0.5 (1 + tanh u) = sigmoid(2u) = s. With e = exp(-2|u|) in
// [0, 1] (never overflows) and d = 1 / (1 + e): x >= 0: s = d; x < 0: s = e d; and
// s (1 - s) = e d^2 either way.
struct TanhParts {
  __m256d s, s1s;
};
QKV_AVX2 TanhParts tanh_parts(__m256d xc) {
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d a = abs_pd(xc);
  // -2|u| = -2 b a (1 + k a^2)
  const __m256d e = exp_pd(_mm256_mul_pd(_mm256_mul_pd(a, _mm256_set1_pd(-2 * kBeta)),
                                         _mm256_fmadd_pd(_mm256_mul_pd(a, a), _mm256_set1_pd(kKappa), one)));
  const __m256d d = _mm256_div_pd(one, _mm256_add_pd(one, e));
  const __m256d ed = _mm256_mul_pd(e, d);
  return {_mm256_blendv_pd(d, ed, xc), _mm256_mul_pd(ed, d)};
}

// y = 0.5 x (1 + tanh u) = x s
QKV_AVX2 __m256d gelu_tanh_pd(__m256d x) { return _mm256_mul_pd(floor16(x), tanh_parts(clamp16(x)).s); }

// y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) b (1 + 3 k x^2) = s + 2 b x (1 + 3 k x^2) s (1 - s)
QKV_AVX2 __m256d gelu_tanh_grad_pd(__m256d x) {
  const __m256d xc = clamp16(x);
  const TanhParts p = tanh_parts(xc);
  const __m256d f = _mm256_mul_pd(_mm256_mul_pd(xc, _mm256_set1_pd(2 * kBeta)),
                                  _mm256_fmadd_pd(_mm256_mul_pd(xc, xc), _mm256_set1_pd(3 * kKappa), _mm256_set1_pd(1.0)));
  return _mm256_fmadd_pd(f, p.s1s, p.s);
}

// Applies a 4-lane double function to 8 floats.
template <class F>
QKV_AVX2 __m256 on_halves(__m256 x, F f) {
  const __m128 lo = _mm256_cvtpd_ps(f(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m128 hi = _mm256_cvtpd_ps(f(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  return _mm256_set_m128(hi, lo);
}
// dy * f(x) for 8 floats, the product in double too.
template <class F>
QKV_AVX2 __m256 on_halves(__m256 dy, __m256 x, F f) {
  const __m256d lo =
      _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(dy)), f(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m256d hi =
      _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(dy, 1)), f(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
}

// Lanes [0, rem) set.
QKV_AVX2 __m256i tail_mask(std::int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// y = f(x); the tail goes through the same vector code with masked loads and stores, so a
// value's result does not depend on its position.
template <class F>
QKV_AVX2 void map_avx2(float* y, const float* x, std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, on_halves(_mm256_loadu_ps(x + i), f));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(y + i, m, on_halves(_mm256_maskload_ps(x + i, m), f));
  }
}
// dx = dy * grad(x)
template <class Grad>
QKV_AVX2 void map_grad_avx2(float* dx, const float* dy, const float* x, std::int64_t n, Grad grad) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dx + i, on_halves(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(x + i), grad));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(dx + i, m, on_halves(_mm256_maskload_ps(dy + i, m), _mm256_maskload_ps(x + i, m), grad));
  }
}

struct ErfFwd {
  QKV_AVX2 __m256d operator()(__m256d x) const { return gelu_erf_pd(x); }
};
struct ErfGrad {
  QKV_AVX2 __m256d operator()(__m256d x) const { return gelu_erf_grad_pd(x); }
};
struct TanhFwd {
  QKV_AVX2 __m256d operator()(__m256d x) const { return gelu_tanh_pd(x); }
};
struct TanhGrad {
  QKV_AVX2 __m256d operator()(__m256d x) const { return gelu_tanh_grad_pd(x); }
};

__attribute__((target("avx2,fma"))) void gelu_forward_avx2(float* y, const float* x, std::int64_t n, GeluForm form) {
  if (form == GeluForm::Erf) map_avx2(y, x, n, ErfFwd{});
  else map_avx2(y, x, n, TanhFwd{});
}
__attribute__((target("avx2,fma"))) void gelu_backward_avx2(float* dx, const float* dy, const float* x, std::int64_t n,
                                                          GeluForm form) {
  if (form == GeluForm::Erf) map_grad_avx2(dx, dy, x, n, ErfGrad{});
  else map_grad_avx2(dx, dy, x, n, TanhGrad{});
}

#undef QKV_AVX2

}  // namespace
#endif

namespace {
// The erf form's forward in float (gelu_float_impl.h) where the ISA has it: false otherwise.
bool gelu_erf_float_rows(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                         std::int64_t n) {
  const Isa isa = active_isa();
  if (isa == Isa::Avx512 && detail::gelu_erf_forward_avx512_available()) {
    detail::gelu_erf_forward_avx512(y, ldy, x, ldx, rows, n);
    return true;
  }
  // (On an AVX-512 CPU whose build left out the AVX-512 file, e.g. clang without its flags: the
  // AVX2 float path, the same bits.)
  if (isa >= Isa::Avx2 && detail::gelu_erf_forward_avx2_available()) {
    detail::gelu_erf_forward_avx2(y, ldy, x, ldx, rows, n);
    return true;
  }
  return false;
}
}  // namespace

void gelu_forward_f32(float* y, const float* x, std::int64_t n, GeluForm form) {
  if (form == GeluForm::Erf && gelu_erf_float_rows(y, n, x, n, 1, n)) return;
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return gelu_forward_avx2(y, x, n, form);
#endif
  gelu_forward_ref<float>(y, x, n, form);
}

void gelu_forward_f32_rows(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                           std::int64_t n, GeluForm form) {
  if (form == GeluForm::Erf && gelu_erf_float_rows(y, ldy, x, ldx, rows, n)) return;
  for (std::int64_t r = 0; r < rows; ++r) gelu_forward_f32(y + r * ldy, x + r * ldx, n, form);
}

void gelu_backward_f32(float* dx, const float* dy, const float* x, std::int64_t n, GeluForm form) {
#if defined(__x86_64__) || defined(__i386__)
  if (active_isa() >= Isa::Avx2) return gelu_backward_avx2(dx, dy, x, n, form);
#endif
  gelu_backward_ref<float>(dx, dy, x, n, form);
}

}  // namespace qkv::kernels
