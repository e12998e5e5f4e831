// IEEE half precision (binary16) <-> float32: one value at a time exactly as numpy converts
// (round to nearest even, overflow to inf, NaN kept a NaN), and whole rows with the CPU's
// conversion instructions (F16C / AVX-512) where it has them. The float16 KV cache
// (infer/kv_cache.h) stores its keys and values this way.
//
//   std::uint16_t h = kernels::f32_to_f16(0.1f);       // 0x2e66
//   float x = kernels::f16_to_f32(h);                   // 0.0999755859375f, exactly
//   kernels::float_to_half_rows(src, dst, n);           // n values, the same bits as f32_to_f16
#pragma once
#include <cstdint>
#include <cstring>

namespace qkv::kernels {

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

// Every half value is exact in float.
inline float half_to_float(std::uint16_t h) { return f16_to_f32(h); }

// y[i] = f32_to_f16(x[i]) for i < n (a NaN stays a NaN of the same sign; its payload may differ
// from f32_to_f16's, the instructions quiet it). Vectorised on AVX-512 and AVX2 with F16C.
void float_to_half_rows(const float* x, std::uint16_t* y, std::int64_t n);
// y[i] = f16_to_f32(x[i]) for i < n (NaNs as above).
void half_to_float_rows(const std::uint16_t* x, float* y, std::int64_t n);

}  // namespace qkv::kernels
