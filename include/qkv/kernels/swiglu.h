// SwiGLU, the gated feed-forward activation of the Llama family (Shazeer 2020, "GLU Variants
// Improve Transformer"):  y = silu(g) * u,  silu(g) = g * sigmoid(g) = g / (1 + exp(-g)).
// Backward: dg = dy * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dy * silu(g).
//
// silu(-inf) = -0 and silu(+inf) = +inf (the limits); NaN stays NaN.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// y, g, u: n contiguous (y may equal g or u). Not threaded. AVX-512 and AVX2 compute exp with
// their own vectors (within ~2 float ulps of std::exp; every element the same arithmetic wherever
// it sits in the array, so a split of the array over threads changes no bit); the scalar path
// uses std::exp.
void swiglu_forward_f32(float* y, const float* g, const float* u, std::int64_t n);
// Naive twins in T = float or double, computed in double.
template <class T>
void swiglu_forward_ref(T* y, const T* g, const T* u, std::int64_t n);
template <class T>
void swiglu_backward_ref(T* dg, T* du, const T* dy, const T* g, const T* u, std::int64_t n);

}  // namespace qkv::kernels
