// Row conversion between float32 and the GGML block types (kernels/quant.h), bit for bit as
// gguf-py's gguf.quants (numpy, float32 arithmetic) computes it.
//
// What "bit for bit" takes:
//  - The same float32 operations in the same order, each rounded: no fused multiply-add (this
//    file is compiled with contraction off, below). Dequantization would survive contraction
//    (every scale x quant product there is exact, so fma(d, q, m) rounds like d*q + m), but
//    quantization would not (x * id + 8.5 is rounded twice in numpy).
//  - Half conversions as numpy's (quant_internal.h): round to nearest even, NaN payloads kept
//    and not quieted.
//  - NaN payloads through arithmetic: x86 returns the first operand's NaN (quieted) when both
//    operands are NaN. A subtraction keeps its order, but the compiler may swap the operands of
//    an addition, so the one addition of a NaN-able pair (d*q + m of Q4_1 / Q5_1) picks the
//    first operand explicitly (add_nan_first). numpy itself is not consistent there (its loops
//    for short arrays return the second operand's NaN), which the test allows for.
//  - Float -> integer casts of numpy's float32 -> uint8/int8 on x86 (cvttss2si, then the low
//    byte): a NaN or out-of-range value gives 0 instead of undefined behaviour.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "qkv/core/error.h"
#include "qkv/kernels/quant.h"
#include "quant_internal.h"
#include "quant_kquants.h"

// After the includes: only this file's own arithmetic is affected.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace qkv::kernels {
namespace {

using detail::f16_to_f32;
using detail::f32_to_f16;
using detail::load_f16;
using detail::load_u16;
using detail::load_u32;
using i64 = std::int64_t;
using u8 = std::uint8_t;

float quiet(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  b |= 0x00400000u;
  std::memcpy(&x, &b, 4);
  return x;
}

// a + b with x86's NaN rule whatever order the compiler emits the addition in.
inline float add_nan_first(float a, float b) { return std::isnan(a) ? quiet(a) : a + b; }

void store_f16(u8* p, float x) {
  const std::uint16_t h = f32_to_f16(x);
  std::memcpy(p, &h, 2);
}

// numpy's float32 -> integer cast on x86: truncation through a 32-bit cvttss2si (NaN and values
// out of int32 range give INT32_MIN), then the low byte.
inline std::uint8_t low_byte_of_cvtt(float v) {
  std::int32_t i;
  if (std::isnan(v) || v >= 2147483648.0f || v < -2147483648.0f)
    i = INT32_MIN;
  else
    i = static_cast<std::int32_t>(v);
  return static_cast<std::uint8_t>(static_cast<std::uint32_t>(i) & 0xFFu);
}

// ---- dequantization, one block: src -> y[block] ----

void deq_q8_0(const u8* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;  // x * d
}

void deq_q4_0(const u8* b, float* y) {
  const float d = load_f16(b);
  const u8* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void deq_q4_1(const u8* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const u8* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = add_nan_first(d * static_cast<float>(qs[j] & 0x0F), m);
    y[j + 16] = add_nan_first(d * static_cast<float>(qs[j] >> 4), m);
  }
}

void deq_q5_0(const u8* b, float* y) {
  const float d = load_f16(b);
  const std::uint32_t qh = load_u32(b + 2);
  const u8* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + 16] = d * static_cast<float>(hi - 16);
  }
}

void deq_q5_1(const u8* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const std::uint32_t qh = load_u32(b + 4);
  const u8* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = add_nan_first(d * static_cast<float>(lo), m);
    y[j + 16] = add_nan_first(d * static_cast<float>(hi), m);
  }
}

// Q4_K / Q5_K: sub-block j of 32 has scale d * sc_j and offset dmin * m_j (both rounded once, as
// gguf-py's `d * sc` and `dmin * m`); w = scale * q - offset.
void deq_q4_k(const u8* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const u8* scales = b + 4;
  const u8* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    detail::k4_scale_min(scales, j, sc, m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    const u8* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) y[32 * j + l] = ds * static_cast<float>((q[l] >> shift) & 0x0F) - dm;
  }
}

void deq_q5_k(const u8* b, float* y) {
  const float d = load_f16(b), dmin = load_f16(b + 2);
  const u8* scales = b + 4;
  const u8* qh = b + 16;
  const u8* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    detail::k4_scale_min(scales, j, sc, m);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    const u8* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0x0F) | (((qh[l] >> j) & 1) << 4);
      y[32 * j + l] = ds * static_cast<float>(v) - dm;
    }
  }
}

// Q6_K: weight 128h + r (r < 128) has low bits (ql[64h + r%64] >> 4*(r/64)) & 15 and high bits
// (qh[32h + r%32] >> 2*(r/32)) & 3; q = low | high << 4, minus 32; scale d * scales[i/16].
void deq_q6_k(const u8* b, float* y) {
  const u8* ql = b;
  const u8* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  float ds[16];
  for (int s = 0; s < 16; ++s) ds[s] = d * static_cast<float>(sc[s]);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, r = i % 128;
    const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
    const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
    y[i] = ds[i / 16] * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

// Q2_K: sub-block j (16 weights) has scale d * (sc_j & 15) and offset dmin * (sc_j >> 4), each
// rounded once as gguf-py's `d * (scales & 0xF)` and `dmin * (scales >> 4)`; w = scale * q - offset
// with q = (qs[32h + l] >> 2s) & 3 for weight 128h + 32s + l.
void deq_q2_k(const u8* b, float* y) {
  const u8* sc = b;
  const u8* qs = b + 16;
  const float d = load_f16(b + 80), dmin = load_f16(b + 82);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = (i % 128) / 32, l = i % 32, j = i / 16;
    const float dl = d * static_cast<float>(sc[j] & 0x0F), ml = dmin * static_cast<float>(sc[j] >> 4);
    y[i] = dl * static_cast<float>((qs[32 * h + l] >> (2 * s)) & 3) - ml;
  }
}

// The 6-bit scale of sub-block j (0..15) of a Q3_K block, minus 32 (gguf-py's lscales / hscales).
inline int q3_k_scale(const u8* scales, int j) {
  const int lo = j < 8 ? scales[j] & 0x0F : scales[j - 8] >> 4;
  const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Q3_K: w = (d * scale_j) * q, q = (2 low bits) - 4 when the weight's hmask bit is clear.
void deq_q3_k(const u8* b, float* y) {
  const u8* hmask = b;
  const u8* qs = b + 32;
  const u8* scales = b + 96;
  const float d = load_f16(b + 108);
  for (int i = 0; i < 256; ++i) {
    const int h = i / 128, s = (i % 128) / 32, l = i % 32;
    const float dl = d * static_cast<float>(q3_k_scale(scales, i / 16));
    const int q = ((qs[32 * h + l] >> (2 * s)) & 3) - (((hmask[l] >> (i / 32)) & 1) ? 0 : 4);
    y[i] = dl * static_cast<float>(q);
  }
}

// IQ4_NL: w = d * kIQ4NL[nibble] (low nibbles weights 0..15, high nibbles 16..31).
void deq_iq4_nl(const u8* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIQ4NL[b[2 + j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kIQ4NL[b[2 + j] >> 4]);
  }
}

// MXFP4: w = d * kMXFP4[nibble], d = 2^(e - 128) (exact: a power of two times a small integer).
void deq_mxfp4(const u8* b, float* y) {
  const float d = detail::e8m0_half(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kMXFP4[b[1 + j] & 0x0F]);
    y[j + 16] = d * static_cast<float>(kMXFP4[b[1 + j] >> 4]);
  }
}

// The 6-bit scale of sub-block j (0..7) of an IQ4_XS block, minus 32.
inline int iq4_xs_scale(const u8* b, int j) {
  const int lo = (b[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
  const int hi = (load_u16(b + 2) >> (2 * j)) & 3;
  return (lo | (hi << 4)) - 32;
}

// IQ4_XS: w = (d * scale_j) * kIQ4NL[nibble], sub-block j's nibbles as an IQ4_NL block's at 8 + 16 j.
void deq_iq4_xs(const u8* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(iq4_xs_scale(b, j));
    const u8* q = b + 8 + 16 * j;
    for (int l = 0; l < 16; ++l) {
      y[32 * j + l] = dl * static_cast<float>(kIQ4NL[q[l] & 0x0F]);
      y[32 * j + 16 + l] = dl * static_cast<float>(kIQ4NL[q[l] >> 4]);
    }
  }
}

// ---- quantization, one block of 32: x -> b ----

// Q8_0 (gguf-py = ggml): d = amax / 127, q = round half away from zero (x * (1/d)).
void q_q8_0(const float* x, u8* b) {
  float amax = std::fabs(x[0]);
  for (int j = 1; j < 32 && !std::isnan(amax); ++j) amax = std::fabs(x[j]) > amax || std::isnan(x[j]) ? std::fabs(x[j]) : amax;
  const float d = amax / 127.0f;
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  store_f16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = low_byte_of_cvtt(std::round(x[j] * id));
}

// The first element of largest magnitude, with its sign (numpy's argmax of |x|: the first NaN
// if there is one).
float signed_absmax(const float* x) {
  int best = 0;
  for (int j = 0; j < 32; ++j) {
    if (std::isnan(x[j])) return x[j];
    if (std::fabs(x[j]) > std::fabs(x[best])) best = j;
  }
  return x[best];
}

u8 clip_u8(float v, int hi) {
  const u8 q = low_byte_of_cvtt(v);
  return q > hi ? static_cast<u8>(hi) : q;
}

void pack_nibbles(const u8* q, u8* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<u8>((q[j] & 0x0F) | (q[j + 16] << 4));
}

// qh as a little-endian u32: bit j = bit 4 of q[j].
void pack_high_bits(const u8* q, u8* qh) {
  std::uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}

// Q4_0 / Q5_0: d = (signed absmax) / -half, q = trunc(x * (1/d) + half + 0.5), clipped.
template <int kHalf>
void q_sym(const float* x, u8* d_out, u8* q) {
  const float d = signed_absmax(x) / static_cast<float>(-kHalf);
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  const float off = static_cast<float>(kHalf) + 0.5f;
  for (int j = 0; j < 32; ++j) q[j] = clip_u8(std::trunc(x[j] * id + off), 2 * kHalf - 1);
  store_f16(d_out, d);
}

// Q4_1 / Q5_1: d = (max - min) / (levels - 1), q = trunc((x - min) * (1/d) + 0.5), clipped.
template <int kLevels>
void q_affine(const float* x, u8* dm_out, u8* q) {
  float mx = x[0], mn = x[0];  // numpy's max / min: NaN propagates (the first one met)
  for (int j = 1; j < 32 && !std::isnan(mx); ++j) {
    mx = x[j] > mx || std::isnan(x[j]) ? x[j] : mx;
    mn = x[j] < mn || std::isnan(x[j]) ? x[j] : mn;
  }
  const float d = (mx - mn) / static_cast<float>(kLevels - 1);
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  for (int j = 0; j < 32; ++j) q[j] = clip_u8(std::trunc((x[j] - mn) * id + 0.5f), kLevels - 1);
  store_f16(dm_out, d);
  store_f16(dm_out + 2, mn);
}

void q_q4_0(const float* x, u8* b) {
  u8 q[32];
  q_sym<8>(x, b, q);
  pack_nibbles(q, b + 2);
}
void q_q4_1(const float* x, u8* b) {
  u8 q[32];
  q_affine<16>(x, b, q);
  pack_nibbles(q, b + 4);
}
void q_q5_0(const float* x, u8* b) {
  u8 q[32];
  q_sym<16>(x, b, q);
  pack_high_bits(q, b + 2);
  pack_nibbles(q, b + 6);
}
void q_q5_1(const float* x, u8* b) {
  u8 q[32];
  q_affine<32>(x, b, q);
  pack_high_bits(q, b + 4);
  pack_nibbles(q, b + 8);
}

// MXFP4 (ggml's quantize_row_mxfp4_ref; gguf-py's MXFP4.quantize_blocks on finite values):
// e = floor(log2(amax)) - 2 + 127 (0 for a block of zeros; float arithmetic, then the float ->
// uint8 cast of x86, so an amax below 2^-125 wraps around to e >= 232), each code the first of the
// 16 with the smallest |kMXFP4[i] * d - x|. (NaNs are skipped in amax, as ggml's comparison does.)
void q_mxfp4(const float* x, u8* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  const u8 e = amax > 0.0f ? low_byte_of_cvtt(std::floor(std::log2(amax)) - 2.0f + 127.0f) : 0;
  const float d = detail::e8m0_half(e);
  auto best = [&](float v) {
    int bi = 0;
    float be = std::fabs(static_cast<float>(kMXFP4[0]) * d - v);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(static_cast<float>(kMXFP4[i]) * d - v);
      if (err < be) {
        bi = i;
        be = err;
      }
    }
    return bi;
  };
  b[0] = e;
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<u8>(best(x[j]) | (best(x[j + 16]) << 4));
}

// gguf-py's BF16 (= ggml_compute_fp32_to_bf16): NaN forced quiet (bit 22 set, low half
// dropped), then round to nearest even on the upper 16 bits.
std::uint16_t f32_to_bf16(float x) {
  std::uint32_t n;
  std::memcpy(&n, &x, 4);
  if ((n & 0x7fffffffu) > 0x7f800000u) n = (n & 0xffff0000u) | 0x00400000u;
  return static_cast<std::uint16_t>((static_cast<std::uint64_t>(n) + (0x7fffu + ((n >> 16) & 1u))) >> 16);
}

using BlockFn = void (*)(const u8*, float*);
using QuantFn = void (*)(const float*, u8*);

}  // namespace

void dequantize_row(QType t, const void* src, float* dst, i64 n) {
  const QTypeTraits tr = qtype_traits(t);
  const i64 bytes = qtype_row_bytes(t, n);  // checks n
  const auto* s = static_cast<const u8*>(src);
  switch (t) {
    case QType::F32: std::memcpy(dst, s, static_cast<std::size_t>(bytes)); return;
    case QType::F16:
      for (i64 i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(s + 2 * i));
      return;
    case QType::BF16:
      for (i64 i = 0; i < n; ++i) dst[i] = detail::bf16_to_f32(load_u16(s + 2 * i));
      return;
    default: break;
  }
  BlockFn fn = nullptr;
  switch (t) {
    case QType::Q8_0: fn = deq_q8_0; break;
    case QType::Q4_0: fn = deq_q4_0; break;
    case QType::Q4_1: fn = deq_q4_1; break;
    case QType::Q5_0: fn = deq_q5_0; break;
    case QType::Q5_1: fn = deq_q5_1; break;
    case QType::Q4_K: fn = deq_q4_k; break;
    case QType::Q5_K: fn = deq_q5_k; break;
    case QType::Q6_K: fn = deq_q6_k; break;
    case QType::Q2_K: fn = deq_q2_k; break;
    case QType::Q3_K: fn = deq_q3_k; break;
    case QType::IQ4_NL: fn = deq_iq4_nl; break;
    case QType::IQ4_XS: fn = deq_iq4_xs; break;
    case QType::MXFP4: fn = deq_mxfp4; break;
    default: throw ValueError(std::string("dequantize_row: no dequantization for type ") + tr.name);
  }
  for (i64 b = 0; b < n / tr.block; ++b) fn(s + b * tr.block_bytes, dst + b * tr.block);
}

void quantize_row(QType t, const float* src, void* dst, i64 n) {
  const QTypeTraits tr = qtype_traits(t);
  const i64 bytes = qtype_row_bytes(t, n);  // checks n
  auto* d = static_cast<u8*>(dst);
  switch (t) {
    case QType::F32: std::memcpy(d, src, static_cast<std::size_t>(bytes)); return;
    case QType::F16:
      for (i64 i = 0; i < n; ++i) store_f16(d + 2 * i, src[i]);
      return;
    case QType::BF16:
      for (i64 i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      return;
    default: break;
  }
  QuantFn fn = nullptr;
  switch (t) {
    case QType::Q8_0: fn = q_q8_0; break;
    case QType::Q4_0: fn = q_q4_0; break;
    case QType::Q4_1: fn = q_q4_1; break;
    case QType::Q5_0: fn = q_q5_0; break;
    case QType::Q5_1: fn = q_q5_1; break;
    case QType::MXFP4: fn = q_mxfp4; break;
    default: fn = detail::kquantizer(t); break;
  }
  if (fn == nullptr)
    throw ValueError(std::string("quantize_row: quantization to ") + tr.name + " is not supported");
  for (i64 b = 0; b < n / tr.block; ++b) fn(src + b * tr.block, d + b * tr.block_bytes);
}

// Weight i of a Hugging Face block is nibble i % 2 of byte i / 2; ggml's byte j holds weights j
// (low nibble) and j + 16 (llama.cpp's GptOssModel.transform_nibble_layout). So ggml's byte 2i
// holds the low nibbles of bytes i and i + 8 (weights 2i and 2i + 16), byte 2i + 1 their high ones.
void mxfp4_blocks_from_hf(const std::uint8_t* blocks, const std::uint8_t* scales, i64 n_blocks, void* out) {
  if (n_blocks < 0) throw ValueError("mxfp4_blocks_from_hf: n_blocks must be >= 0, got " + std::to_string(n_blocks));
  auto* o = static_cast<u8*>(out);
  for (i64 b = 0; b < n_blocks; ++b, blocks += 16, o += 17) {
    o[0] = scales[b];
    for (int i = 0; i < 8; ++i) {
      o[1 + 2 * i] = static_cast<u8>((blocks[i] & 0x0F) | ((blocks[8 + i] & 0x0F) << 4));
      o[2 + 2 * i] = static_cast<u8>((blocks[i] >> 4) | (blocks[8 + i] & 0xF0));
    }
  }
}

}  // namespace qkv::kernels
