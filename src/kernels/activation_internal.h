// Private to the GELU kernels: the AVX-512 float path of the erf form (activation_avx512.cpp),
// which activation.cpp dispatches to when active_isa() == Avx512.
#pragma once
#include <cstdint>

namespace qkv::kernels::detail {

// False when the compiler could not build the AVX-512 code.
bool gelu_erf_forward_avx512_available();
// y = x Phi(x) over rows x n floats, row strides ldy and ldx (y may equal x).
void gelu_erf_forward_avx512(float* y, std::int64_t ldy, const float* x, std::int64_t ldx, std::int64_t rows,
                             std::int64_t n);

}  // namespace qkv::kernels::detail
