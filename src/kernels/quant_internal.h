// Private to the quantized-block kernels (quant.cpp, qgemm*.cpp): half-precision conversions as
// numpy does them, the block structs of kernels/quant.h, and the k-quant scale unpacking.
#pragma once
#include <cstdint>
#include <cstring>

#include "qkv/kernels/half.h"

namespace qkv::kernels::detail {

// Half conversions (numpy's, bitwise): kernels/half.h.
using ::qkv::kernels::f16_bits_to_f32_bits;
using ::qkv::kernels::f16_to_f32;
using ::qkv::kernels::f32_bits_to_f16_bits;
using ::qkv::kernels::f32_to_f16;

inline float bf16_to_f32(std::uint16_t h) {
  const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Little-endian loads from unaligned block bytes.
inline std::uint16_t load_u16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline std::uint32_t load_u32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline float load_f16(const std::uint8_t* p) { return f16_to_f32(load_u16(p)); }

// MXFP4's block scale: 2^(e - 128), half the E8M0 exponent's 2^(e - 127) (the codes' values are
// doubled), as ggml's GGML_E8M0_TO_FP32_HALF builds its bits: subnormal 2^-128 and 2^-127 for
// e = 0 and 1, exponent field e - 1 above (e = 255, E8M0's NaN, is 2^127).
inline float e8m0_half(std::uint8_t e) {
  const std::uint32_t b = e < 2 ? std::uint32_t{0x00200000} << e : static_cast<std::uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Byte offsets inside the blocks (kernels/quant.h).
namespace blk {
inline constexpr int kQ8_0 = 34, kQ4_0 = 18, kQ4_1 = 20, kQ5_0 = 22, kQ5_1 = 24;
inline constexpr int kQ4_K = 144, kQ5_K = 176, kQ6_K = 210;
// Q4_K / Q5_K: d @0, dmin @2, scales[12] @4, then (Q5_K) qh[32] @16, qs[128] @16 or @48.
// Q6_K: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208.
}  // namespace blk

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block (ggml's get_scale_min_k4).
inline void k4_scale_min(const std::uint8_t* scales, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

}  // namespace qkv::kernels::detail
