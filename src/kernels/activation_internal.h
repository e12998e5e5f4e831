// Private to the GELU kernels: the float paths of the erf form's forward (gelu_float_impl.h, in
// activation_avx512.cpp and activation_avx2.cpp), which activation.cpp dispatches to when
// active_isa() is Avx512 or Avx2.
#pragma once
#include <cstdint>

namespace qkv::kernels::detail {

// False when the compiler could not build the AVX-512 code.
bool gelu_erf_forward_avx512_available();
// y = x Phi(x) over rows x n floats, row strides ldy and ldx (y may equal x).
void gelu_erf_forward_avx512(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                             std::int64_t n);
bool gelu_erf_forward_avx2_available();
void gelu_erf_forward_avx2(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                           std::int64_t n);

}  // namespace qkv::kernels::detail
