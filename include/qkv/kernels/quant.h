// Quantized block types (GGML / GGUF): the tensor types of llama.cpp's model files, their
// block layouts, and row conversion to and from float32.
//
// A row of n values of a block type is n / block consecutive blocks (n must be a multiple of
// the block). Weights per block and bytes per block (REFERENCES: ggml-common.h):
//   F32   1   4    F16   1   2    BF16   1   2
//   Q8_0  32  34   { f16 d; i8 q[32]; }                          w = d * q
//   Q4_0  32  18   { f16 d; u8 q[16]; }                          w = d * (nibble - 8)
//   Q4_1  32  20   { f16 d, m; u8 q[16]; }                       w = d * nibble + m
//   Q5_0  32  22   { f16 d; u8 qh[4]; u8 q[16]; }                w = d * (nibble | hbit << 4) - 16 d
//   Q5_1  32  24   { f16 d, m; u8 qh[4]; u8 q[16]; }             w = d * (nibble | hbit << 4) + m
//   Q4_K  256 144  { f16 d, dmin; u8 scales[12]; u8 q[128]; }    8 sub-blocks of 32, 6-bit scale/min
//   Q5_K  256 176  { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 q[128]; }
//   Q6_K  256 210  { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }   16 sub-blocks of 16
//   Q2_K  256 84   { u8 scales[16]; u8 qs[64]; f16 d, dmin; }    16 sub-blocks of 16, 4-bit scale/min
//                  w = d * (sc & 15) * q - dmin * (sc >> 4), q 2 bits
//   Q3_K  256 110  { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }   16 sub-blocks of 16
//                  w = d * (6-bit scale - 32) * (q - (hmask bit ? 0 : 4)), q 2 bits
//   IQ4_NL 32 18   { f16 d; u8 q[16]; }                          w = d * kIQ4NL[nibble]
//   IQ4_XS 256 136 { f16 d; u16 scales_h; u8 scales_l[4]; u8 q[128]; }  8 sub-blocks of 32
//                  w = d * (6-bit scale - 32) * kIQ4NL[nibble]
//   MXFP4  32 17   { u8 e; u8 q[16]; }                           w = kMXFP4[nibble] * 2^(e - 128)
//                  (e an E8M0 exponent; kMXFP4 the FP4 E2M1 values doubled, so the scale is
//                  halved: ggml's GGML_E8M0_TO_FP32_HALF, a subnormal float for e < 2)
// (In Q2_K / Q3_K weight 128h + 32s + l has the 2 bits (qs[32h + l] >> 2s) & 3, and Q3_K's high
// bit is bit (128h + 32s + l) / 32 of hmask[l]. In IQ4_XS sub-block j's 32 weights are laid out as
// an IQ4_NL block's 32 nibbles, at q + 16 j.)
// In the 32-weight 4/5-bit blocks the low nibbles of q[0..16) are weights 0..15 and the high
// nibbles weights 16..31 (bit j of qh, read as a little-endian u32, is weight j's fifth bit).
//
// dequantize_row gives bitwise the values of gguf-py's gguf.quants.dequantize (float32
// arithmetic in its order, no fused multiply-add); quantize_row gives bitwise gguf-py's
// gguf.quants.quantize for the types it supports, and ggml's quantizers for the others.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qkv::kernels {

// The GGML type ids (their numeric values are the file format's).
enum class QType : std::uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,
};

struct QTypeTraits {
  QType type;
  const char* name;          // GGML's spelling: "F32", "Q4_K", ...
  std::int64_t block;        // weights per block
  std::int64_t block_bytes;  // bytes per block
};

// The 16 values of the non-linear 4-bit types (IQ4_NL, IQ4_XS): ggml's kvalues_iq4nl.
inline constexpr std::int8_t kIQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
// The 16 values of MXFP4's codes: the FP4 E2M1 numbers (sign bit 3; 0, 0.5, 1, 1.5, 2, 3, 4, 6)
// doubled, ggml's kvalues_mxfp4 (code 8, E2M1's -0, is 0).
inline constexpr std::int8_t kMXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// The traits of a type id read from a file, or nullopt when qkv does not compute with it (ids of
// GGML types qkv does not support, such as IQ2_XXS or NVFP4, included: see ggml_type_block).
std::optional<QTypeTraits> qtype_traits(std::uint32_t id);
QTypeTraits qtype_traits(QType t);
const char* qtype_name(QType t);
// Case-insensitive "f32", "q4_k", ...; nullopt if unknown.
std::optional<QType> qtype_from_name(std::string_view name);
// GGML's name of any type id, known to qkv or not ("IQ2_XXS" for 16, "type 99" if unassigned).
std::string ggml_type_name(std::uint32_t id);
// Name, weights per block and bytes per block of any GGML type id (ggml's type traits: IQ2_XXS
// 256 66, MXFP4 32 17, ...), whether qkv computes with it or not, so a file of any GGML type can be
// laid out and listed; nullopt for an id GGML has not assigned.
struct GgmlBlock {
  const char* name;
  std::int64_t block, block_bytes;
};
std::optional<GgmlBlock> ggml_type_block(std::uint32_t id);
// The types qkv computes with, as "F32, F16, Q4_0, ..." (for messages).
std::string computable_types_list();

// Bytes of a row of n values; ValueError if n is negative or not a multiple of the block.
std::int64_t qtype_row_bytes(QType t, std::int64_t n);

// src: the bytes of a row of n values of type t (any alignment) -> dst [n] float32.
void dequantize_row(QType t, const void* src, float* dst, std::int64_t n);
// src [n] float32 -> dst: qtype_row_bytes(t, n) bytes, every type. The k-quants (Q2_K .. Q6_K)
// and the IQ4 types give bitwise what ggml writes for them without an importance matrix (what
// llama-quantize writes; their inputs must be finite); the others bitwise gguf-py's (which equal
// ggml's on finite values; MXFP4 both, ggml's quantize_row_mxfp4_ref).
void quantize_row(QType t, const float* src, void* dst, std::int64_t n);

// Hugging Face's MXFP4 checkpoints (gpt-oss: `*_blocks` uint8 [..., G, 16] and `*_scales` uint8
// [..., G]) -> ggml's MXFP4 blocks, as llama.cpp's converter repacks them:
//   blocks [n_blocks][16]: byte i holds weight 2i (low nibble) and 2i + 1 (high nibble), codes in
//                          kMXFP4's order (the E2M1 bit patterns)
//   scales [n_blocks]:     E8M0 exponents s, w = E2M1(code) * 2^(s - 127)
//   out    n_blocks * 17 bytes of MXFP4 blocks: e = s, the nibbles reordered (weights 0..15 low,
//          16..31 high)
// so dequantize_row(MXFP4, out) gives transformers' dequantization of the pair (E2M1 * 2^(s-127)
// = kMXFP4 * 2^(s-128)), except that E2M1's -0 (code 8) reads as +0.
void mxfp4_blocks_from_hf(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t n_blocks, void* out);

}  // namespace qkv::kernels
