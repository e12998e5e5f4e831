// Products with quantized weights (kernels/qgemm.h): argument checks, the choice of path, the
// thread split and the epilogue. The arithmetic is in the ISA files (qgemm_avx512.cpp,
// qgemm_avx2.cpp, qgemm_scalar.cpp) and, for the prefill path, in the float GEMM (gemm.cpp),
// which pulls dequantized slivers of W through a BRowSource.
#include "qkv/kernels/qgemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gemm_internal.h"
#include "qgemm_internal.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"

namespace qkv::kernels {
namespace {

using detail::i64;
using detail::QGemmKernels;
using detail::u8;

// The sets of the ISAs the CPU has (making one may run its instructions: see gemm.cpp's make_set).
QGemmKernels make_set(Isa isa) {
  if (isa > detected_isa()) return {};
  if (isa == Isa::Avx512) return detail::qgemm_kernels_avx512();
  if (isa == Isa::Avx2) return detail::qgemm_kernels_avx2();
  return detail::qgemm_kernels_scalar();
}

const QGemmKernels& kernels() {
  static const QGemmKernels sets[3] = {make_set(Isa::Scalar), make_set(Isa::Avx2), make_set(Isa::Avx512)};
  int i = static_cast<int>(active_isa());
  while (i > 0 && sets[i].dot_rows == nullptr) --i;
  return sets[i];
}

// The Q8 path's kernels: the active ISA's, or the next one down that has them (AVX-512 without
// VNNI runs the AVX2 kernel).
const QGemmKernels& q8_kernels() {
  static const QGemmKernels sets[3] = {make_set(Isa::Scalar), make_set(Isa::Avx2), make_set(Isa::Avx512)};
  int i = static_cast<int>(active_isa());
  while (i > 0 && sets[i].q8_tile == nullptr) --i;
  return sets[i];
}

bool is_block_type(QType t) { return t != QType::F32 && t != QType::F16 && t != QType::BF16; }

// Types whose Q8 path takes every M (the ISA packs their panels with vectors: qgemm_q8_every_m).
bool q8_every_m(QType t) { return (q8_kernels().q8_pack_types & detail::qtype_bit(t)) != 0; }

// Weight bytes each thread of a decode product streams at least before qgemm forks (measured: a
// 553 KB Q4_1 matrix ran at 8 GB/s on one thread, 5 GB/s forked over two; a model's layers
// should run their parts inside one team instead, qgemm_part).
constexpr i64 kMinDecodeBytesPerThread = 2 * 1024 * 1024;
// Rows of W per unit of the decode split (the decode tiles' row group).
constexpr i64 kRowUnit = 4;

std::string shape_text(i64 M, const QMatrix& W, i64 lda, i64 ldc) {
  return "(M=" + std::to_string(M) + ", N=" + std::to_string(W.rows) + ", K=" + std::to_string(W.cols) +
         ", type " + qtype_name(W.type) + ", row_bytes=" + std::to_string(W.row_bytes) +
         ", lda=" + std::to_string(lda) + ", ldc=" + std::to_string(ldc) + ")";
}

void check_args(const char* op, i64 M, const float* A, i64 lda, const QMatrix& W, const float* C, i64 ldc,
                const QGemmOptions& o) {
  const std::string where = std::string(op) + ": ";
  if (!qtype_traits(static_cast<std::uint32_t>(W.type)))
    throw ValueError(where + "unknown weight type id " + std::to_string(static_cast<std::uint32_t>(W.type)));
  auto fail = [&](const std::string& what) { throw ValueError(where + what + " " + shape_text(M, W, lda, ldc)); };
  if (M < 0 || W.rows < 0 || W.cols < 0) fail("sizes must be >= 0");
  const QTypeTraits tr = qtype_traits(W.type);
  if (W.cols % tr.block)
    fail("K must be a multiple of " + std::string(tr.name) + "'s block of " + std::to_string(tr.block));
  if (W.row_bytes < qtype_row_bytes(W.type, W.cols))
    fail("row_bytes must be >= " + std::to_string(qtype_row_bytes(W.type, W.cols)) + ", the bytes of a row");
  if (W.rows8 != nullptr && W.row_bytes != qtype_row_bytes(W.type, W.cols))
    fail("a decode layout (rows8) needs dense rows: row_bytes must be " +
         std::to_string(qtype_row_bytes(W.type, W.cols)));
  if (lda < W.cols) fail("lda must be >= K");
  if (ldc < W.rows) fail("ldc must be >= N");
  if (M > 0 && W.rows > 0 && W.cols > 0 && (A == nullptr || W.data == nullptr))
    fail("A and W must not be null");
  if (M > 0 && W.rows > 0 && C == nullptr) fail("C must not be null");
  if (o.accumulate && !o.epilogue.empty()) fail("accumulate needs an empty epilogue");
  if (o.a_q8 != nullptr &&
      (o.a_q8->M != M || o.a_q8->K != W.cols ||
       o.a_q8->blocks.size() != static_cast<std::size_t>(M * (W.cols / 32)) * sizeof(detail::Q8Act)))
    fail("a_q8 holds " + std::to_string(o.a_q8->M) + " x " + std::to_string(o.a_q8->K) +
         " quantized values, not this product's A");
  if (o.epilogue.residual && o.epilogue.ldr < W.rows)
    fail("the residual's ldr " + std::to_string(o.epilogue.ldr) + " must be >= N");
}

// Rows of W as a row source of the float GEMM: the dequantized slivers of the prefill path.
struct RowsCtx {
  const QGemmKernels* ks;
  const QMatrix* W;
};

void dequant_rows(const void* ctx, i64 r0, i64 nr, i64 k0, i64 kc, float* out, i64 ldo) {
  const auto* c = static_cast<const RowsCtx*>(ctx);
  c->ks->dequant_rows(c->W->type, static_cast<const u8*>(c->W->data), c->W->row_bytes, r0, nr, k0, kc, out, ldo);
}

// Decode: W rows [n0, n1) against all M rows of A, then the epilogue on those columns.
void decode_rows(const QGemmKernels& ks, i64 M, const float* A, i64 lda, const QMatrix& W, float* C, i64 ldc,
                 const QGemmOptions& o, i64 n0, i64 n1) {
  if (n0 >= n1) return;
  const auto* w = static_cast<const u8*>(W.data);
  if (W.cols == 0) {
    if (!o.accumulate)
      for (i64 m = 0; m < M; ++m) std::fill(C + m * ldc + n0, C + m * ldc + n1, 0.0f);
  } else {
    ks.dot_rows(W.type, M, W.cols, A, lda, w, W.row_bytes, n0, n1, C, ldc, o.accumulate);
  }
  if (!o.epilogue.empty()) detail::apply_gemm_epilogue(o.epilogue, C + n0, ldc, 0, n0, M, n1 - n0);
}

void run(const char* op, i64 M, const float* A, i64 lda, const QMatrix& W, float* C, i64 ldc, const QGemmOptions& o,
         int part, int parts) {
  check_args(op, M, A, lda, W, C, ldc, o);
  const i64 N = W.rows, K = W.cols;
  if (M == 0 || N == 0) return;
  const QGemmKernels& ks = kernels();
  if (qgemm_uses_q8(M, W.type, o)) {
    const detail::QGemmQ8Args args{M,          A, lda, W.type, static_cast<const u8*>(W.data), N, K, W.row_bytes, C, ldc,
                                   o.a_q8 ? reinterpret_cast<const detail::Q8Act*>(o.a_q8->blocks.data()) : nullptr,
                                   static_cast<const u8*>(W.rows8)};
    detail::qgemm_q8_run(q8_kernels(), args, o.accumulate, o.epilogue, o.threaded, part, parts);
    return;
  }
  if (M <= detail::kQDecodeMaxM || o.rows_alone) {
    const i64 units = (N + kRowUnit - 1) / kRowUnit;
    auto chunk = [&](i64 b, i64 e) {
      decode_rows(ks, M, A, lda, W, C, ldc, o, b * kRowUnit, std::min(N, e * kRowUnit));
    };
    if (part >= 0) {  // the static split of parallel_for over `parts` threads
      chunk(units * part / parts, units * (part + 1) / parts);
    } else if (o.threaded) {
      const i64 unit_bytes = std::max<i64>(kRowUnit * W.row_bytes, 1);
      parallel_for(0, units, std::max<i64>(1, kMinDecodeBytesPerThread / unit_bytes), chunk);
    } else {
      chunk(0, units);
    }
    return;
  }
  const RowsCtx ctx{&ks, &W};
  detail::BRowSource src;
  src.rows = &dequant_rows;
  src.ctx = &ctx;
  src.k_align = is_block_type(W.type) ? qtype_traits(W.type).block : 32;
  detail::sgemm_rows_source(M, N, K, A, lda, src, o.accumulate ? 1.0f : 0.0f, C, ldc, o.epilogue, o.threaded, part,
                            parts);
}

}  // namespace

QMatrix qmatrix(QType type, const void* data, i64 rows, i64 cols) {
  return QMatrix{type, data, rows, cols, qtype_row_bytes(type, cols)};
}

void qgemm(i64 M, const float* A, i64 lda, const QMatrix& W, float* C, i64 ldc, const QGemmOptions& options) {
  run("qgemm", M, A, lda, W, C, ldc, options, -1, 1);
}

void qgemm_part(i64 M, const float* A, i64 lda, const QMatrix& W, float* C, i64 ldc, const QGemmOptions& options,
                int part, int parts) {
  if (parts < 1 || part < 0 || part >= parts)
    throw ValueError("qgemm_part: part " + std::to_string(part) + " of " + std::to_string(parts) +
                     " is not in [0, parts)");
  run("qgemm_part", M, A, lda, W, C, ldc, options, part, parts);
}

std::int64_t qgemm_decode_max_m() { return detail::kQDecodeMaxM; }

std::optional<std::pair<std::int64_t, std::int64_t>> qgemm_part_columns(i64 M, const QMatrix& W, const QGemmOptions& options,
                                                                        int part, int parts) {
  if (parts < 1 || part < 0 || part >= parts)
    throw ValueError("qgemm_part_columns: part " + std::to_string(part) + " of " + std::to_string(parts) +
                     " is not in [0, parts)");
  const i64 N = W.rows;
  auto split = [&](i64 unit) -> std::pair<i64, i64> {  // run()'s static split of N in units
    const i64 units = (N + unit - 1) / unit;
    return {std::min(N, units * part / parts * unit), std::min(N, units * (part + 1) / parts * unit)};
  };
  if (qgemm_uses_q8(M, W.type, options)) return split(q8_kernels().q8_np);  // qgemm_q8_run's panels
  if (M <= detail::kQDecodeMaxM || options.rows_alone) return split(kRowUnit);
  return std::nullopt;  // the prefill path's tiles split rows too
}

namespace {

// The types with a decode layout, and the fields of their blocks it keeps apart: `fields` scale
// fields of `field_bytes` bytes (fp16 halves, MXFP4's exponent byte) at byte `field_at` of each
// block (first in the layout), the other bytes as 4-byte words.
struct Rows8Format {
  int fields = 0, field_bytes = 2, field_at = 0;
};
std::optional<Rows8Format> rows8_format(QType t) {
  switch (t) {
    case QType::Q4_0:
    case QType::Q8_0:
    case QType::Q5_0:
    case QType::IQ4_NL: return Rows8Format{1, 2, 0};
    case QType::Q4_1:
    case QType::Q4_K: return Rows8Format{2, 2, 0};
    case QType::Q6_K: return Rows8Format{1, 2, 208};
    case QType::MXFP4: return Rows8Format{1, 1, 0};
    default: return std::nullopt;
  }
}

bool rows8_type(QType t) { return rows8_format(t).has_value(); }

void check_rows8(const QMatrix& W, const char* op) {
  if (!rows8_type(W.type))
    throw ValueError(std::string(op) +
                     ": the decode layout is for Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, IQ4_NL and MXFP4, not " +
                     qtype_name(W.type));
  const i64 block = qtype_traits(W.type).block;
  if (W.rows < 0 || W.cols < 0 || W.cols % block || W.row_bytes != qtype_row_bytes(W.type, W.cols) ||
      (W.rows > 0 && W.cols > 0 && W.data == nullptr))
    throw ValueError(std::string(op) + ": needs dense rows (rows=" + std::to_string(W.rows) +
                     ", cols=" + std::to_string(W.cols) + ", row_bytes=" + std::to_string(W.row_bytes) + ")");
}

// A block of the type (its values' bytes), its scale fields (where, how many, how wide) and its code
// words (4 bytes each, from byte code0 of the block, skipping the fields).
struct Rows8Block {
  int bytes, scales, field, field_at, code0, words;
  i64 nblk;  // blocks per row
  explicit Rows8Block(const QMatrix& W)
      : bytes(static_cast<int>(qtype_traits(W.type).block_bytes)),
        scales(rows8_format(W.type)->fields),
        field(rows8_format(W.type)->field_bytes),
        field_at(rows8_format(W.type)->field_at),
        code0(field_at == 0 ? field * scales : 0),
        words((bytes - field * scales) / 4),
        nblk(W.cols / qtype_traits(W.type).block) {}
};

}  // namespace

bool qgemm_rows8_wanted(QType type) { return rows8_type(type) && q8_kernels().q8_row8 != nullptr && q8_every_m(type); }

std::int64_t qgemm_rows8_bytes(const QMatrix& W) {
  check_rows8(W, "qgemm_rows8_bytes");
  return W.rows / 8 * 8 * W.row_bytes;
}

void qgemm_repack_rows8(const QMatrix& W, void* out, i64 g0, i64 g1) {
  check_rows8(W, "qgemm_repack_rows8");
  const i64 groups = W.rows / 8;
  if (g0 < 0 || g1 > groups || g0 > g1)
    throw ValueError("qgemm_repack_rows8: groups [" + std::to_string(g0) + ", " + std::to_string(g1) + ") not in [0, " +
                     std::to_string(groups) + "]");
  const i64 rb = W.row_bytes;
  const Rows8Block k(W);
  const i64 nblk = k.nblk;
  const auto* w = static_cast<const u8*>(W.data);
  auto* o = static_cast<u8*>(out);
  if (const QGemmKernels& ks = q8_kernels(); ks.q8_repack8 != nullptr && W.cols > 0) {
    ks.q8_repack8(W.type, w, rb, W.cols / 32, g0, g1, o);
    return;
  }
  for (i64 g = g0; g < g1; ++g)
    for (i64 b = 0; b < nblk; ++b) {
      u8* dst = o + (g * nblk + b) * 8 * k.bytes;
      for (int r = 0; r < 8; ++r) {
        const u8* blk = w + (g * 8 + r) * rb + b * k.bytes;
        for (int s = 0; s < k.scales; ++s)
          std::memcpy(dst + 8 * k.field * s + k.field * r, blk + k.field_at + k.field * s,
                      static_cast<std::size_t>(k.field));
        for (int q = 0; q < k.words; ++q)
          std::memcpy(dst + 8 * k.field * k.scales + 32 * q + 4 * r, blk + k.code0 + 4 * q, 4);
      }
    }
}

void qgemm_rows8_row(const QMatrix& W, i64 r, void* out) {
  check_rows8(W, "qgemm_rows8_row");
  if (W.rows8 == nullptr || r < 0 || r >= W.rows / 8 * 8)
    throw ValueError("qgemm_rows8_row: row " + std::to_string(r) + " is not in the decode layout (" +
                     std::to_string(W.rows8 ? W.rows / 8 * 8 : 0) + " rows)");
  const Rows8Block k(W);
  const i64 nblk = k.nblk, g = r / 8;
  const int j = static_cast<int>(r % 8);
  const auto* p = static_cast<const u8*>(W.rows8);
  auto* o = static_cast<u8*>(out);
  for (i64 b = 0; b < nblk; ++b) {
    const u8* src = p + (g * nblk + b) * 8 * k.bytes;
    u8* blk = o + b * k.bytes;
    for (int s = 0; s < k.scales; ++s)
      std::memcpy(blk + k.field_at + k.field * s, src + 8 * k.field * s + k.field * j,
                  static_cast<std::size_t>(k.field));
    for (int q = 0; q < k.words; ++q)
      std::memcpy(blk + k.code0 + 4 * q, src + 8 * k.field * k.scales + 32 * q + 4 * j, 4);
  }
}

void quantize_rows_q8(i64 M, const float* A, i64 lda, i64 K, Q8Rows& out) {
  if (M < 0 || K < 0 || K % 32 || lda < K || (M > 0 && K > 0 && A == nullptr))
    throw ValueError("quantize_rows_q8: needs M >= 0, K a multiple of 32, lda >= K and A (M=" + std::to_string(M) +
                     ", K=" + std::to_string(K) + ", lda=" + std::to_string(lda) + ")");
  const i64 nblk = K / 32;
  out.M = M;
  out.K = K;
  out.blocks.resize(static_cast<std::size_t>(M * nblk) * sizeof(detail::Q8Act));
  auto* q = reinterpret_cast<detail::Q8Act*>(out.blocks.data());
  const QGemmKernels& ks = q8_kernels();
  for (i64 m = 0; m < M; ++m) {
    if (ks.q8_quantize != nullptr)
      ks.q8_quantize(A + m * lda, K, q + m * nblk);
    else
      detail::quantize_q8(A + m * lda, K, q + m * nblk);
  }
}

bool qgemm_q8_every_m(QType type) { return is_block_type(type) && q8_every_m(type); }

bool qgemm_uses_q8(i64 M, QType type, const QGemmOptions& o) {
  return o.activations == QActivations::Q8 && is_block_type(type) &&
         ((M > detail::kQDecodeMaxM && !o.rows_alone) || q8_every_m(type));
}

}  // namespace qkv::kernels
