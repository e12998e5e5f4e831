// Private to the quantized-block kernels (quant.cpp, qgemm*.cpp): half-precision conversions as
// numpy does them, the block structs of kernels/quant.h, and the k-quant scale unpacking.
#pragma once
#include <cstdint>
#include <cstring>

namespace qkv::kernels::detail {

// IEEE half bits -> float bits, exactly as numpy's npy_halfbits_to_floatbits: every half value
// is exact in float; a NaN keeps its sign and payload (shifted up by 13 bits) and is NOT quieted.
inline std::uint32_t f16_bits_to_f32_bits(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = h & 0x7c00u;
  std::uint32_t sig = h & 0x03ffu;
  if (exp == 0x7c00u) return sign | 0x7f800000u | (sig << 13);          // inf, NaN
  if (exp != 0) return sign | ((static_cast<std::uint32_t>(h & 0x7fffu) + 0x1c000u) << 13);  // normal
  if (sig == 0) return sign;                                              // signed zero
  // Subnormal: normalise (the leading 1 moves to bit 10).
  std::uint32_t e = 0;
  sig <<= 1;
  while ((sig & 0x0400u) == 0) {
    sig <<= 1;
    ++e;
  }
  return sign | ((127u - 15u - e) << 23) | ((sig & 0x03ffu) << 13);
}

inline float f16_to_f32(std::uint16_t h) {
  const std::uint32_t b = f16_bits_to_f32_bits(h);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Float bits -> half bits, exactly as numpy's npy_floatbits_to_halfbits (round to nearest even;
// overflow to +-inf; a NaN keeps its sign and the top 10 bits of its payload, never becoming inf,
// and is not quieted).
inline std::uint16_t f32_bits_to_f16_bits(std::uint32_t f) {
  const std::uint16_t h_sgn = static_cast<std::uint16_t>((f & 0x80000000u) >> 16);
  std::uint32_t f_exp = f & 0x7f800000u;
  if (f_exp >= 0x47800000u) {  // |f| >= 65536, inf or NaN
    if (f_exp == 0x7f800000u) {
      const std::uint32_t f_sig = f & 0x007fffffu;
      if (f_sig != 0) {
        std::uint16_t ret = static_cast<std::uint16_t>(0x7c00u + (f_sig >> 13));
        if (ret == 0x7c00u) ++ret;  // stays a NaN
        return static_cast<std::uint16_t>(h_sgn + ret);
      }
    }
    return static_cast<std::uint16_t>(h_sgn + 0x7c00u);
  }
  if (f_exp <= 0x38000000u) {  // half subnormal or zero
    if (f_exp < 0x33000000u) return h_sgn;
    f_exp >>= 23;
    std::uint32_t f_sig = 0x00800000u + (f & 0x007fffffu);
    f_sig >>= (113 - f_exp);
    // Round half to even: the bits below the half's last bit are exactly 1000...0 (including the
    // up to 11 bits the shift dropped) and that last bit is 0 -> do not round up.
    if ((f_sig & 0x00003fffu) != 0x00001000u || (f & 0x000007ffu)) f_sig += 0x00001000u;
    return static_cast<std::uint16_t>(h_sgn + (f_sig >> 13));
  }
  const std::uint32_t h_exp = (f_exp - 0x38000000u) >> 13;
  std::uint32_t f_sig = f & 0x007fffffu;
  if ((f_sig & 0x00003fffu) != 0x00001000u) f_sig += 0x00001000u;
  // A carry out of the significand bumps the exponent (up to inf), as it should.
  return static_cast<std::uint16_t>(h_sgn + (f_sig >> 13) + h_exp);
}

inline std::uint16_t f32_to_f16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return f32_bits_to_f16_bits(b);
}

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
