// Private to quant.cpp: the quantizers of the 256-weight k-quants and the IQ4 types
// (quant_kquants.cpp, bitwise ggml's).
#pragma once
#include <cstdint>

#include "qkv/kernels/quant.h"

namespace qkv::kernels::detail {

// One block: x [block] float32 (finite) -> b [block_bytes].
using KQuantizer = void (*)(const float* x, std::uint8_t* b);
// The quantizer of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL or IQ4_XS; null for another type.
KQuantizer kquantizer(QType t);

}  // namespace qkv::kernels::detail
