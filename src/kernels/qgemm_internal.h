// Private to the quantized-weight products (kernels/qgemm.h): the kernels each ISA provides
// (qgemm_scalar.cpp, qgemm_avx2.cpp, qgemm_avx512.cpp; their bodies in qgemm_impl.h and
// qgemm_q8_impl.h) and the block format of quantized activations.
#pragma once
#include <cstdint>

#include "qkv/kernels/gemm.h"
#include "qkv/kernels/quant.h"

namespace qkv::kernels::detail {

using u8 = std::uint8_t;
using i64 = std::int64_t;

// Rows of A at most that take the decode path.
inline constexpr i64 kQDecodeMaxM = 8;

// One block of 32 activations quantized for the Q8 path: int8 quants q, their scale d, and
// sum = the sum of q (llama.cpp's Q8_0 rounding: d = amax / 127, q = round-half-even(a * 127 /
// amax), all 0 when amax == 0).
struct Q8Act {
  float d;
  std::int32_t sum;
  std::int8_t q[32];
};
static_assert(sizeof(Q8Act) == 40, "Q8Act is 40 bytes");

// The most rows of A per call of a Q8 micro-kernel (q8_tile).
inline constexpr int kQ8MaxRows = 6;

struct QGemmKernels {
  // Decode: for m < M (<= kQDecodeMaxM) and n in [n0, n1): dot = A row m . W row n (K values),
  // C[m*ldc + n] = dot, or += dot when accumulate. Each element's arithmetic depends only on K
  // and its two rows.
  void (*dot_rows)(QType t, i64 M, i64 K, const float* A, i64 lda, const u8* W, i64 row_bytes, i64 n0, i64 n1,
                   float* C, i64 ldc, bool accumulate) = nullptr;
  // W rows [r0, r0+nr), values [k0, k0+kc) -> out (row stride ldo), bitwise dequantize_row's
  // values. k0 is a multiple of the type's block (32 for F32/F16/BF16); kc too unless k0+kc = K.
  void (*dequant_rows)(QType t, const u8* W, i64 row_bytes, i64 r0, i64 nr, i64 k0, i64 kc, float* out,
                       i64 ldo) = nullptr;
  // Q8 path (qgemm_q8.cpp): a panel of np columns of W packed as
  //   wq  [K/4][np][4] u8 codes (column j's 4 codes of k-quad q at wq + (q*np + j)*4)
  //   ws, wo  [K/sb][np] floats: w = ws * code + wo on scale block (sb = 32, or 16 for Q2_K, Q3_K, Q6_K)
  // and mr (<= kQ8MaxRows) quantized rows of A (row m at A + m * lda blocks) with, per scale block,
  // asc[m*ldas + 2*b] = d of its activation block and asc[m*ldas + 2*b + 1] = d * (sum of its q):
  //   out[m*ldo + j] = sum over scale blocks b of ws*d*(codes . q) + wo*(d * sum q).
  // signed_codes: the codes are int8 (those of the types whose codes span 8 bits, Q8_0, IQ4_NL,
  // IQ4_XS and MXFP4, when q8_signed: AVX2's vpmaddubsw would saturate on value + 128), else uint8.
  int q8_np = 0, q8_mr = 0;
  bool q8_signed = false;
  // resume: out already holds the sums of the scale blocks before these (an earlier stretch of K),
  // which go on from there exactly as one call over all of them would (float accumulation in the
  // same order), else they start from 0.
  void (*q8_tile)(int mr, i64 nsb, int sb, bool signed_codes, const u8* wq, const float* ws, const float* wo,
                  const Q8Act* A, i64 lda, const float* asc, i64 ldas, float* out, i64 ldo, bool resume) = nullptr;
  // A vectorised packer of a full panel (q8_np rows of W from W, rb apart) for the types in
  // q8_pack_types (bits qtype_bit(t)): blocks [b0, b0 + nb) of the rows, in the layout qgemm_q8.cpp's
  // scalar packer writes for all of K (bitwise, signed Q8_0 codes where q8_signed; offsets
  // relative to block b0). pf, when not null: the next panel's bytes, prefetched alongside (as many
  // bytes per block as the panel's block of rows).
  // With it, the Q8 path is cheap enough to take every M of those types (a decode row too): see
  // qgemm_q8_every_m.
  void (*q8_pack)(QType t, const u8* W, i64 rb, i64 b0, i64 nb, u8* wq, float* ws, float* wo, const u8* pf) = nullptr;
  // One row of A against a full panel (q8_np rows of W, rb apart) of a type in q8_pack_types, all
  // K (nblk blocks) straight from the blocks as stored: bitwise q8_tile's out for mr = 1 on the
  // panel q8_pack writes (the same integer sums, the same float operations in the same order),
  // without writing the panel. pf as q8_pack's (the next panel's bytes, or null). Or null.
  void (*q8_row)(QType t, const u8* W, i64 rb, i64 nblk, const Q8Act* A, const float* asc, float* out,
                 const u8* pf) = nullptr;
  // q8_row on the decode layout (qgemm_repack_rows8): P at the panel's first group of 8 rows (the
  // others follow it: q8_np / 8 groups), bitwise q8_row's out; or null (then `rows8` is not read).
  void (*q8_row8)(QType t, const u8* P, i64 nblk, const Q8Act* A, const float* asc, float* out) = nullptr;
  // qgemm_repack_rows8's groups [g0, g1) of W (nblk blocks per row, rb bytes apart) with vectors,
  // bitwise the scalar copy; or null.
  void (*q8_repack8)(QType t, const u8* W, i64 rb, i64 nblk, i64 g0, i64 g1, u8* out) = nullptr;
  // q8_pack on the decode layout: the panel's blocks [b0, b0 + nb) (of nblk) from P as q8_row8's,
  // bitwise q8_pack's panel; or null.
  void (*q8_pack8)(QType t, const u8* P, i64 nblk, i64 b0, i64 nb, u8* wq, float* ws, float* wo) = nullptr;
  // quantize_q8 with vectors (bitwise its result), or null.
  void (*q8_quantize)(const float* a, i64 K, Q8Act* out) = nullptr;
  std::uint64_t q8_pack_types = 0;
};

// (64 bits: the type ids go up to MXFP4's 39.)
constexpr std::uint64_t qtype_bit(QType t) { return std::uint64_t{1} << static_cast<std::uint32_t>(t); }

// Null members when the ISA is not compiled in.
QGemmKernels qgemm_kernels_scalar();
QGemmKernels qgemm_kernels_avx2();
QGemmKernels qgemm_kernels_avx512();

// The Q8 path's activation quantizer (qgemm_q8.cpp; the reference uses it too): a [K] (K % 32
// == 0) -> K/32 blocks.
void quantize_q8(const float* a, i64 K, Q8Act* out);

// The Q8 path for M > kQDecodeMaxM (qgemm_q8.cpp): C (=|+=) A @ W^T through the ISA's q8_tile,
// then the epilogue; part >= 0 as qgemm_part. W's type is a block type.
struct QGemmQ8Args {
  i64 M;
  const float* A;
  i64 lda;
  QType type;
  const u8* W;
  i64 N, K, row_bytes;
  float* C;
  i64 ldc;
  const Q8Act* aq = nullptr;  // A already quantized (M * K/32 blocks), or null: quantize it here
  const u8* rows8 = nullptr;  // W's decode layout (QMatrix::rows8), or null
};
void qgemm_q8_run(const QGemmKernels& ks, const QGemmQ8Args& a, bool accumulate, const GemmEpilogue& e, bool threaded,
                  int part, int parts);

}  // namespace qkv::kernels::detail
