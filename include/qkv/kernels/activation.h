// GELU over contiguous float arrays, vectorised, forward and backward.
//
//   erf form (BERT):   y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
//   tanh form (GPT-2): y = 0.5 x (1 + tanh u),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   backward:          dx = dy * dy/dx(x)
//
// Infinities give the limits: gelu(+inf) = +inf, gelu(-inf) = -0, gelu'(+inf) = 1,
// gelu'(-inf) = 0 (the bare formulas, and PyTorch's CPU kernel, give inf * 0 = NaN there);
// NaN stays NaN; gelu(-0) = -0.
//
// Erf form, forward, on AVX2 and AVX-512: in float (8 or 16 lanes, the same bits on both; a
// degree-9 fit of Q and a degree-5 exp), <= 5 ulp (gelu_float_impl.h). The rest (the tanh form,
// every gradient; the erf forward too where the compiler could not build the float path) works
// in double on 4-lane halves and rounds once to float. The double path, erf form:
// Phi(-|x|) = exp(-x^2/2) t Q(t), t = 1 / (1 + |x|/4), Q a degree-10 Chebyshev fit (the
// negative tail keeps its relative accuracy: no 1 + erf cancellation). Tanh form:
// x sigmoid(2u) from exp(-2|u|) only (never overflows). exp(w) = 2^k 2^f with a degree-6 fit.
// Measured over every 64th float in [-20, 20] against float64 references (erfc and sigmoid
// forms, exact in the tails): the double path's forward <= 0.6 ulp; gradient <= 6e-8
// absolute, <= 1.6 ulp where |dy/dx| > 1e-3. The naive twins (gelu_*_ref, the float64
// formulas) are the portable fallback; tests/core/test_gelu_kernel.cpp checks the kernel
// against both.
#pragma once
#include <cstdint>

namespace qkv::kernels {

enum class GeluForm { Erf, Tanh };

// y, x: n contiguous (y may equal x). Not threaded (callers split the range).
void gelu_forward_f32(float* y, const float* x, std::int64_t n, GeluForm form);
// The same on `rows` rows of n values with row strides ldy and ldx (a GEMM epilogue's tile):
// bitwise what gelu_forward_f32 gives row by row.
void gelu_forward_f32_rows(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                           std::int64_t n, GeluForm form);
// dx, dy, x: n contiguous (dx may equal dy or x). dx = dy * gelu'(x).
void gelu_backward_f32(float* dx, const float* dy, const float* x, std::int64_t n, GeluForm form);

// The naive twins: the formulas above in double (std::erf, std::tanh) with the limits at
// |x| > 1e10, where the formulas are exactly x / 0 and 1 / 0 or overflow.
double gelu_ref(double x, GeluForm form);
double gelu_grad_ref(double x, GeluForm form);
// T = float or double, computed in double. qkv::gelu runs these for float64 and strided input.
template <class T>
void gelu_forward_ref(T* y, const T* x, std::int64_t n, GeluForm form);
template <class T>
void gelu_backward_ref(T* dx, const T* dy, const T* x, std::int64_t n, GeluForm form);

}  // namespace qkv::kernels
