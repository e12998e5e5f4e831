// Elementwise ops with NumPy broadcasting, forward and backward.
// Shapes: out = broadcast(a.shape, b.shape); unary ops keep the shape.
#pragma once
#include "qkv/core/tensor.h"

namespace qkv {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);   // scale
Tensor scale(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);

enum class GeluApprox { None, Tanh };  // None: x*Phi(x) with erf (BERT); Tanh: GPT-2's approximation
Tensor gelu(const Tensor& a, GeluApprox approximate = GeluApprox::None);

// Bool (or any dtype, nonzero = true) mask broadcastable to x: out = mask ? value : x.
// Gradient flows to x where not filled.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Elementwise comparisons (no gradient): Bool results.
Tensor eq(const Tensor& a, double v);
Tensor ne(const Tensor& a, double v);
Tensor logical_not(const Tensor& a);
Tensor logical_and(const Tensor& a, const Tensor& b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }
inline Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
inline Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
inline Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace qkv
