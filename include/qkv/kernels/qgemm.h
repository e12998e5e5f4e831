// Matrix products with weights stored in a GGML block type (kernels/quant.h), read in place:
//   C [M, N] = A [M, K] @ W^T          W: N rows of K values, each row row_bytes bytes
// (W as a GGUF tensor of dims [K, N], or a PyTorch nn.Linear weight [out = N, in = K]).
//
// Shape contract (letters are GEMM's: M rows of activations, N output features, K input features):
//   A  [M, K] float32, row stride lda >= K
//   W  QMatrix: N rows of K values of `type`, row r at data + r * row_bytes,
//      row_bytes >= qtype_row_bytes(type, K) (K a multiple of the type's block: 32 or 256)
//   C  [M, N] float32, row stride ldc >= N; must not overlap A or W
// M, N or K may be 0 (K == 0: the product is 0).
//
// No float copy of W is made. Two paths, chosen by M alone (so by nothing that depends on the
// thread count), unless options.rows_alone asks for the decode path:
//  - decode (M <= qgemm_decode_max_m()): every block of W is streamed from memory once,
//    dequantized in registers and multiplied into all M rows; threads split the N rows of W.
//  - prefill (larger M): panels of W are dequantized into a per-thread float sliver (nr x kc, in
//    L1/L2) that the float32 GEMM's register-tiled micro-kernel consumes (kernels/gemm.h).
// The default (activations = F32) multiplies float32 activations by the exact dequantized
// weights (bitwise dequantize_row's values) with float32 accumulation, so the result differs
// from dequantize-then-sgemm only by the order of summation. K is never split across threads:
// results are bitwise identical for any thread count (for a given ISA and path).
//
// activations = Q8 (optional: faster on integer dot-product hardware, less accurate): every
// row of A is quantized per 32 values as llama.cpp's Q8_0 (quantize_activations_q8), W is unpacked
// panel by panel into integer codes (w = s * code + o per scale block of 32, or 16 for Q2_K, Q3_K
// and Q6_K), and each scale block contributes s * d_a * (codes . q_a) + o * d_a * sum(q_a), with
// AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddubsw) or plain integer loops. It applies to the block types
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4) above the decode
// path's rows, and to every M (a decode row too, rows_alone too) for the types qgemm_q8_every_m
// names: those the ISA unpacks with vectors (AVX2 and AVX-512 VNNI: Q4_0, Q4_1, Q5_0, Q8_0, Q4_K,
// Q6_K, and IQ4_NL and MXFP4, whose nibbles pick their 16 values with one byte shuffle), where the
// integer products beat the exact decode path even for one row. (MXFP4's codes are int8 on AVX2 and
// value + 12 with the offset -12 s where the kernel takes uint8 (AVX-512 VNNI, plain loops): the
// offset overflows to -inf for exponents >= 253, where weights of +-8 and +-12 are infinite too,
// the same on every path of the ISA.) Every element
// of the Q8 path depends only on K and its two rows (each row of A is quantized alone, K is never
// split), so its rows are independent of each other as rows_alone asks. F32, F16 and BF16 weights,
// and the other types at M <= qgemm_decode_max_m() or rows_alone, take the exact path.
//
// Epilogue: as sgemm_ex's (bias, activation, residual; kernels/gemm.h), each element finished
// as the unfused ops would. accumulate = true adds the product into C instead (C += A @ W^T; the
// epilogue must be empty then).
// Thread safety: any number of threads may call these at once (workspaces are thread_local).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "qkv/kernels/gemm.h"
#include "qkv/kernels/quant.h"

namespace qkv::kernels {

// A weight matrix of a block type, viewed in place.
struct QMatrix {
  QType type = QType::F32;
  const void* data = nullptr;
  std::int64_t rows = 0;       // N
  std::int64_t cols = 0;       // K, the GGUF row length (dims[0])
  std::int64_t row_bytes = 0;  // >= qtype_row_bytes(type, cols)
  // Optional: qgemm_repack_rows8 of these same rows (dense), which the Q8 path's full 16-row
  // panels (decode rows and prefill panels) read instead of `data` where the CPU's kernels have a
  // reader for it; or null. It must live as long as any copy of this QMatrix is used.
  const void* rows8 = nullptr;
};

// A QMatrix of densely stored rows (row_bytes = qtype_row_bytes(type, cols); ValueError if cols
// is not a multiple of the type's block).
QMatrix qmatrix(QType type, const void* data, std::int64_t rows, std::int64_t cols);

// The decode layout ("rows8") of a Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, IQ4_NL or MXFP4 matrix of
// dense rows: the rows in groups of 8 (the last rows % 8 rows left out: they are read from `data`),
// and per group and block b (K / 32 of them, K / 256 for the k-quants) the 8 rows' blocks as 16
// bytes of their fp16 d (row order; MXFP4: 8 bytes of their exponents), for Q4_1 and Q4_K 16 bytes
// of their fp16 m / dmin, then the blocks' other bytes in order, transposed: their bytes 4q .. 4q +
// 3 of row r at 32 q + 4 r (Q5_0: qh, then the nibbles; Q4_K: the 12 scale bytes, then the
// nibbles; Q6_K: ql, qh, the scales; its d at the end of the block comes first in the layout).
// A decode row reads it from start to end (the hardware prefetcher follows it), where the blocks
// as stored make it read 8 rows at once; qgemm's results are bitwise the same with or without it.
// qgemm_rows8_wanted: the CPU's kernels read the layout (AVX2, and AVX-512 with VNNI), for this type.
bool qgemm_rows8_wanted(QType type);
// Bytes of W's decode layout (rows / 8 * 8 rows of qtype_row_bytes); ValueError for another
// type or rows that are not dense.
std::int64_t qgemm_rows8_bytes(const QMatrix& W);
// Writes W's decode layout to out (qgemm_rows8_bytes(W) bytes), rows [g0 * 8, g1 * 8) of it
// (groups g0 .. g1 - 1, for threads sharing the work); ValueError as qgemm_rows8_bytes.
void qgemm_repack_rows8(const QMatrix& W, void* out, std::int64_t g0, std::int64_t g1);
// Row r of W (r < rows / 8 * 8) as stored (row_bytes bytes), read back from W.rows8 (an embedding
// lookup that need not touch the blocks' pages); ValueError as qgemm_rows8_bytes, for a row
// outside the layout or without one.
void qgemm_rows8_row(const QMatrix& W, std::int64_t r, void* out);

// Rows of A quantized as the Q8 path quantizes them (quantize_rows_q8), for several products
// with the same A (a Llama layer's q, k and v projections; gate and up): QGemmOptions::a_q8.
struct Q8Rows {
  std::int64_t M = 0, K = 0;
  std::vector<std::byte> blocks;  // M * K / 32 blocks of the Q8 path's format
};

// out = the M rows of A [M, K] (row stride lda >= K, K a multiple of 32) quantized per 32 values
// (quantize_activations_q8's values). ValueError for a bad size.
void quantize_rows_q8(std::int64_t M, const float* A, std::int64_t lda, std::int64_t K, Q8Rows& out);

enum class QActivations : std::uint8_t {
  F32,  // exact: float32 activations, exact dequantized weights (the default)
  Q8,   // activations quantized to Q8 per 32 values, integer dot products
};

struct QGemmOptions {
  GemmEpilogue epilogue = {};
  bool accumulate = false;  // C += A @ W^T (epilogue must be empty)
  QActivations activations = QActivations::F32;
  bool threaded = true;     // false: the calling thread only (inside parallel_for)
  // true: the decode path for any M, whose every element depends only on K and its two rows, so
  // each row of C has the bits it has in a product of its own (M = 1). For rows of independent
  // sequences batched together (a continuous-batching decode step), whose results must not
  // depend on what runs beside them; exact activations (Q8 is not used), except for the types
  // of qgemm_q8_every_m, whose Q8 path gives each row its own bits too. Slower than the
  // prefill path for large M.
  bool rows_alone = false;
  // With activations = Q8: A's rows already quantized (quantize_rows_q8 of this A; its M and K
  // must be the product's), so products sharing A quantize it once. The results are bitwise
  // those of quantizing inside; ignored where the exact path runs.
  const Q8Rows* a_q8 = nullptr;
};

// C = epilogue(A @ W^T), or C += A @ W^T. ValueError naming the argument for a bad size or stride,
// an unsupported type, or an epilogue with accumulate.
void qgemm(std::int64_t M, const float* A, std::int64_t lda, const QMatrix& W, float* C, std::int64_t ldc,
           const QGemmOptions& options = {});

// Part `part` of `parts` of qgemm's work, on the calling thread (options.threaded is ignored):
// all parts together write all of C, bitwise as qgemm, for any `parts`. For the members of a
// team (core/parallel.h, parallel_team).
void qgemm_part(std::int64_t M, const float* A, std::int64_t lda, const QMatrix& W, float* C, std::int64_t ldc,
                const QGemmOptions& options, int part, int parts);

// The columns [n0, n1) of C that qgemm_part(M, ..., W, ..., options, part, parts) writes in every
// row, where its path splits C by columns only (the Q8 path and the decode path; they depend on
// M, W's type and shape, the options and the active ISA alone); nullopt where it splits rows too
// (the prefill path). A team member may then finish its own columns (an elementwise op of two
// products' outputs, say) without waiting for the others.
std::optional<std::pair<std::int64_t, std::int64_t>> qgemm_part_columns(std::int64_t M, const QMatrix& W,
                                                                        const QGemmOptions& options, int part,
                                                                        int parts);

// The largest M that takes the decode path (for the active ISA).
std::int64_t qgemm_decode_max_m();

// Whether, on the active ISA, activations = Q8 takes the Q8 path for every M (decode rows and
// rows_alone included) with weights of `type` (see above); false for F32, F16 and BF16.
bool qgemm_q8_every_m(QType type);

// Whether qgemm of M rows with weights of `type` and these options takes the Q8 path (the rule
// above), so a caller knows when quantizing A ahead (quantize_rows_q8, a_q8) is used.
bool qgemm_uses_q8(std::int64_t M, QType type, const QGemmOptions& options);

// Naive twins, same contract, slow (tests):
// qgemm_ref: every row of W through dequantize_row, dot products accumulated in double, then
// the epilogue as sgemm_epilogue_ref (double, one rounding) or C + dot for accumulate.
// With options.activations = Q8 it is the twin of the Q8 path instead: A quantized by
// quantize_activations_q8, exact integer dot products per block, and the block terms summed
// in double.
void qgemm_ref(std::int64_t M, const float* A, std::int64_t lda, const QMatrix& W, float* C, std::int64_t ldc,
               const QGemmOptions& options = {});

// The Q8 activations of the Q8 path, one row of K values (K a multiple of 32) -> K/32 blocks:
// d[b] = amax / 127, q[b*32 + i] = round-half-even(a * (127 / amax)) (0 when amax == 0), sum[b] =
// the sum of the block's q (llama.cpp's AVX quantize_row_q8_0 / q8_1 rounding). A block with a
// NaN or inf gets d = NaN (its products show NaN) and q = 0.
void quantize_activations_q8(const float* a, std::int64_t K, float* d, std::int8_t* q, std::int32_t* sum);

}  // namespace qkv::kernels
