// SwiGLU kernels (see kernels/swiglu.h).
#include "qkv/kernels/swiglu.h"

#include <cmath>

namespace qkv::kernels {
namespace {

// 1 / (1 + exp(-g)) in double: exact limits at +-inf (exp(-inf) = 0, exp(inf) = inf -> 0).
inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

}  // namespace

void swiglu_forward_f32(float* y, const float* g, const float* u, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    // float: g / (1 + exp(-g)) as PyTorch's CPU silu, then the product with u
    const float gi = g[i];
    const float s = gi / (1.0f + std::exp(-gi));
    y[i] = (std::isinf(gi) && gi < 0 ? -0.0f : s) * u[i];
  }
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
