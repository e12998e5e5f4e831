// Bodies of the exact (float32-activation) quantized-weight kernels, written once over
//   V         float vector traits: R, W (lanes), zero(), loadu(p), storeu(p, r), add(a, b),
//             fma(a, b, c) = a*b + c, hsum(r) (one fixed reduction tree)
//   Dec<t>    the ISA's block decoder of type t: kBlock weights in kBytes bytes (F32/F16/BF16:
//             "blocks" of 32 values, kFloat = true), and
//             prep<NR>(p, rb, nb, s, ls): the kScales floats per block that block() needs (the
//               half scales converted, the k-quants' sub-block scales) for nb blocks of NR rows
//               (row r's blocks from p + r*rb, its scales to s + r*ls; kScales = 0: no prep).
//               Done for a chunk of blocks ahead of their use, so the block loop reads its
//               scales with broadcast loads instead of converting and shuffling them.
//             block(p, s, f): calls f(j, w) for j = 0 .. kBlock/W - 1 (in a fixed order) with w
//               the W weights [j*W, (j+1)*W) of the block at p (its scales at s), bitwise
//               dequantize_row's values.
// Each ISA file (qgemm_avx512.cpp, qgemm_avx2.cpp, qgemm_scalar.cpp) defines V and Dec after its
// `#pragma GCC target`, then includes this header; everything here has internal linkage.
//
// Decode (dot_rows): a tile of MR rows of A x NRW rows of W walks K block by block; each decoded
// weight vector j is multiplied into accumulator (j & 1) of each of the MR x NRW dot products, so
// every dot product has two vector accumulators whatever the tile, and its bits depend only on
// K and its two rows (not on M, N, the tile shape or the thread split). The first MR-row pass
// over a group of W rows streams them from memory; the other passes find them in L1.
#pragma once
#include <algorithm>
#include <cstdint>

#include "qgemm_internal.h"
#include "quant_internal.h"


namespace {

using qkv::kernels::QType;
using qkv::kernels::detail::i64;
using qkv::kernels::detail::u8;

// Sequential float dot product of the K % 32 tail of a float-type row (the same code for every
// element, so still a function of K and the two rows only).
template <QType t>
float tail_dot(const u8* w, const float* a, i64 n) {
  float s = 0.0f;
  for (i64 i = 0; i < n; ++i) {
    float x;
    if constexpr (t == QType::F32)
      std::memcpy(&x, w + 4 * i, 4);
    else if constexpr (t == QType::F16)
      x = qkv::kernels::detail::f16_to_f32(qkv::kernels::detail::load_u16(w + 2 * i));
    else
      x = qkv::kernels::detail::bf16_to_f32(qkv::kernels::detail::load_u16(w + 2 * i));
    s += a[i] * x;
  }
  return s;
}

template <QType t>
void tail_values(const u8* w, float* out, i64 n) {
  for (i64 i = 0; i < n; ++i) {
    if constexpr (t == QType::F32)
      std::memcpy(out + i, w + 4 * i, 4);
    else if constexpr (t == QType::F16)
      out[i] = qkv::kernels::detail::f16_to_f32(qkv::kernels::detail::load_u16(w + 2 * i));
    else
      out[i] = qkv::kernels::detail::bf16_to_f32(qkv::kernels::detail::load_u16(w + 2 * i));
  }
}

// How far ahead of its reads the decode prefetches W (into L1, prefetcht0): the rows about this
// many bytes ahead, at least 4 and at most 32 rows. Without it the stream's latency adds to the
// decoding instead of hiding under it (SmolLM2's Q8_0 head, one thread, cold: ~8.6 -> ~10.5 GB/s;
// 2-6 KiB measured alike, prefetchnta and prefetcht1 slower).
inline constexpr i64 kPrefetchBytes = 6144;
inline i64 prefetch_rows(i64 rb) { return std::clamp<i64>((kPrefetchBytes + rb - 1) / std::max<i64>(rb, 1), 4, 32); }

// Blocks whose scales are converted at a time (the scratch stays ~2 KiB per tile).
template <class D>
constexpr i64 chunk_blocks() {
  return D::kBlock == 256 ? 8 : 64;
}

template <class D>
constexpr bool rolling() {
  if constexpr (requires { D::kRolling; })
    return D::kRolling;
  else
    return false;
}

// always_inline: GCC's IPA would otherwise find this function free of side effects (a prefetch
// has none it models) and delete every call to it.
__attribute__((always_inline)) inline void prefetch_block(const u8* q, int bytes) {
  for (int o = 0; o < bytes; o += 64) __builtin_prefetch(q + o, 0, 3);
}

// MR rows of A (row stride lda) x NRW rows of W (row stride rb): C[m*ldc + r] (=|+=) dot. With pf
// set, the same blocks of the NRW rows at pf are prefetched as the tile walks K.
//
// The scales a block needs are converted ahead of it. Decoders with kRolling (the 32-weight
// types: two halves at each block's start) do it on the fly: while the tile works on the 16
// blocks of group g, each step also copies the raw scale word of the same block of group g + 1
// (one scalar load and store, on ports the vector work leaves idle), and group g + 1's words are
// converted 16 blocks at a time when it starts. The k-quants convert a chunk of blocks at a time.
template <class V, QType t, template <QType> class Dec, int MR, int NRW>
void dot_tile(i64 K, const float* A, i64 lda, const u8* W, i64 rb, float* C, i64 ldc, bool accumulate,
              const u8* pf) {
  using D = Dec<t>;
  using R = typename V::R;
  constexpr int VW = V::W;
  const i64 nb = K / D::kBlock;
  R acc[MR][NRW][2];
#pragma GCC unroll 8
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int r = 0; r < NRW; ++r) acc[m][r][0] = acc[m][r][1] = V::zero();
  // Block b of the NRW rows, row r's scales at sc + r * ls.
  auto step = [&](i64 b, const float* sc, i64 ls) {
    const float* a = A + b * D::kBlock;
    const u8* wb = W + b * D::kBytes;
    if (pf != nullptr) {
      for (int r = 0; r < NRW; ++r) prefetch_block(pf + r * rb + b * D::kBytes, D::kBytes);
    }
#pragma GCC unroll 8
    for (int r = 0; r < NRW; ++r)
      D::block(wb + r * rb, sc + r * ls, [&](int j, R w) {
#pragma GCC unroll 8
        for (int m = 0; m < MR; ++m) acc[m][r][j & 1] = V::fma(w, V::loadu(a + m * lda + j * VW), acc[m][r][j & 1]);
      });
  };
  if constexpr (rolling<D>()) {
    constexpr i64 G = 16;
    alignas(64) std::uint32_t raw[2][NRW][G];
    alignas(64) float sc[NRW][2 * G];
    auto copy = [&](int buf, int r, i64 i, i64 b) {
      std::uint32_t v;
      std::memcpy(&v, W + r * rb + b * D::kBytes, 4);
      asm("" : "+r"(v));  // a scalar copy (GCC would otherwise gather with shuffles or merge stores)
      raw[buf][r][i] = v;
    };
    for (int r = 0; r < NRW; ++r)
      for (i64 i = 0; i < G; ++i) copy(0, r, i, std::min<i64>(i, nb - 1));
    for (i64 g = 0; g * G < nb; ++g) {
      const int cur = static_cast<int>(g & 1);
      for (int r = 0; r < NRW; ++r) D::convert16(raw[cur][r], sc[r]);
      const i64 n = std::min<i64>(G, nb - g * G);
      for (i64 i = 0; i < n; ++i) {
        const i64 b = g * G + i;
#pragma GCC unroll 8
        for (int r = 0; r < NRW; ++r) copy(cur ^ 1, r, i, std::min<i64>(b + G, nb - 1));
        step(b, sc[0] + 2 * i, 2 * G);
      }
    }
  } else {
    constexpr i64 kChunk = chunk_blocks<D>();
    constexpr int kS = D::kScales > 0 ? D::kScales : 1;
    alignas(64) float sc[NRW][kChunk * kS];
    for (i64 b0 = 0; b0 < nb; b0 += kChunk) {
      const i64 nc = std::min<i64>(kChunk, nb - b0);
      if constexpr (D::kScales > 0) D::template prep<NRW>(W + b0 * D::kBytes, rb, nc, sc[0], kChunk * kS);
      for (i64 i = 0; i < nc; ++i) {
        step(b0 + i, sc[0] + i * kS, kChunk * kS);
      }
    }
  }
  const i64 k0 = nb * D::kBlock;
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NRW; ++r) {
      float s = V::hsum(V::add(acc[m][r][0], acc[m][r][1]));
      if constexpr (D::kFloat)
        if (k0 < K) s += tail_dot<t>(W + r * rb + nb * D::kBytes, A + m * lda + k0, K - k0);
      float* c = C + m * ldc + r;
      *c = accumulate ? *c + s : s;
    }
}

// All M rows of A against W rows [n0, n1): rows of W in groups of 4 (one pass per MR rows of A),
// the last N % 4 one at a time.
template <class V, QType t, template <QType> class Dec, int MR>
void dot_rows_mr(i64 m0, i64 K, const float* A, i64 lda, const u8* W, i64 rb, i64 n, float* C, i64 ldc,
                 bool accumulate, int group, i64 pf_rows) {
  constexpr int NRW = V::nrw(MR);
  const float* a = A + m0 * lda;
  float* c = C + m0 * ldc + n;
  const u8* w = W + n * rb;
  const u8* pf = pf_rows > 0 ? w + pf_rows * rb : nullptr;
  if (group == 4) {
    for (int r = 0; r < 4; r += NRW)
      dot_tile<V, t, Dec, MR, NRW>(K, a, lda, w + r * rb, rb, c + r, ldc, accumulate, pf ? pf + r * rb : nullptr);
  } else {
    dot_tile<V, t, Dec, MR, 1>(K, a, lda, w, rb, c, ldc, accumulate, pf);
  }
}

// Rows of A per tile beyond 4 (V::kMrWide where the ISA has the registers for it).
template <class V>
constexpr int wide_rows() {
  if constexpr (requires { V::kMrWide; })
    return V::kMrWide;
  else
    return 4;
}

template <class V, QType t, template <QType> class Dec>
void dot_rows_t(i64 M, i64 K, const float* A, i64 lda, const u8* W, i64 rb, i64 n0, i64 n1, float* C, i64 ldc,
                bool accumulate) {
  const i64 ahead = prefetch_rows(rb);
  for (i64 n = n0; n < n1;) {
    const int group = n + 4 <= n1 ? 4 : 1;
    // The first pass over this group of W rows prefetches the rows `ahead` (if they are in this
    // call's range).
    i64 pf = n + ahead + group <= n1 ? ahead : 0;
    i64 m = 0;
    if constexpr (wide_rows<V>() > 4) {
      // Wide tiles while their rows of A stay in L1 (32 KiB of it): each block of W, once
      // dequantized, feeds twice the rows (SmolLM2 Q4_1, 16 sequences, 2 threads: a decode step
      // 45.0 -> 39.2 ms). A row of C gets the same bits in any tile: each dot sums its blocks in
      // the same order. (Packing the rows by block, for constant offsets instead of a register
      // per row, measured slower.)
      if (K * wide_rows<V>() * static_cast<i64>(sizeof(float)) <= 32 * 1024)
        for (; m + wide_rows<V>() <= M; m += wide_rows<V>(), pf = 0)
          dot_rows_mr<V, t, Dec, wide_rows<V>()>(m, K, A, lda, W, rb, n, C, ldc, accumulate, group, pf);
    }
    for (; m + 4 <= M; m += 4, pf = 0)
      dot_rows_mr<V, t, Dec, 4>(m, K, A, lda, W, rb, n, C, ldc, accumulate, group, pf);
    switch (M - m) {
      case 3: dot_rows_mr<V, t, Dec, 3>(m, K, A, lda, W, rb, n, C, ldc, accumulate, group, pf); break;
      case 2: dot_rows_mr<V, t, Dec, 2>(m, K, A, lda, W, rb, n, C, ldc, accumulate, group, pf); break;
      case 1: dot_rows_mr<V, t, Dec, 1>(m, K, A, lda, W, rb, n, C, ldc, accumulate, group, pf); break;
      default: break;
    }
    n += group;
  }
}

template <class V, QType t, template <QType> class Dec>
void dequant_rows_t(const u8* W, i64 rb, i64 r0, i64 nr, i64 k0, i64 kc, float* out, i64 ldo) {
  using D = Dec<t>;
  using R = typename V::R;
  constexpr int VW = V::W;
  constexpr i64 kChunk = chunk_blocks<D>();
  constexpr int kS = D::kScales > 0 ? D::kScales : 1;
  alignas(64) float sc[kChunk * kS];
  const i64 nb = kc / D::kBlock;
  for (i64 r = 0; r < nr; ++r) {
    const u8* row = W + (r0 + r) * rb + k0 / D::kBlock * D::kBytes;
    float* o = out + r * ldo;
    for (i64 b0 = 0; b0 < nb; b0 += kChunk) {
      const i64 nc = std::min<i64>(kChunk, nb - b0);
      if constexpr (D::kScales > 0) D::template prep<1>(row + b0 * D::kBytes, 0, nc, sc, 0);
      for (i64 i = 0; i < nc; ++i) {
        const i64 b = b0 + i;
        D::block(row + b * D::kBytes, sc + i * kS, [&](int j, R w) { V::storeu(o + b * D::kBlock + j * VW, w); });
      }
    }
    if constexpr (D::kFloat)
      if (nb * D::kBlock < kc) tail_values<t>(row + nb * D::kBytes, o + nb * D::kBlock, kc - nb * D::kBlock);
  }
}

template <class V, template <QType> class Dec>
void dot_rows_any(QType t, i64 M, i64 K, const float* A, i64 lda, const u8* W, i64 rb, i64 n0, i64 n1, float* C,
                  i64 ldc, bool accumulate) {
  switch (t) {
#define QKV_QGEMM_CASE(T) \
  case QType::T: return dot_rows_t<V, QType::T, Dec>(M, K, A, lda, W, rb, n0, n1, C, ldc, accumulate);
    QKV_QGEMM_CASE(F32)
    QKV_QGEMM_CASE(F16)
    QKV_QGEMM_CASE(BF16)
    QKV_QGEMM_CASE(Q8_0)
    QKV_QGEMM_CASE(Q4_0)
    QKV_QGEMM_CASE(Q4_1)
    QKV_QGEMM_CASE(Q5_0)
    QKV_QGEMM_CASE(Q5_1)
    QKV_QGEMM_CASE(Q4_K)
    QKV_QGEMM_CASE(Q5_K)
    QKV_QGEMM_CASE(Q6_K)
    QKV_QGEMM_CASE(Q2_K)
    QKV_QGEMM_CASE(Q3_K)
    QKV_QGEMM_CASE(IQ4_NL)
    QKV_QGEMM_CASE(IQ4_XS)
    QKV_QGEMM_CASE(MXFP4)
#undef QKV_QGEMM_CASE
  }
}

template <class V, template <QType> class Dec>
void dequant_rows_any(QType t, const u8* W, i64 rb, i64 r0, i64 nr, i64 k0, i64 kc, float* out, i64 ldo) {
  switch (t) {
#define QKV_QGEMM_CASE(T) \
  case QType::T: return dequant_rows_t<V, QType::T, Dec>(W, rb, r0, nr, k0, kc, out, ldo);
    QKV_QGEMM_CASE(F32)
    QKV_QGEMM_CASE(F16)
    QKV_QGEMM_CASE(BF16)
    QKV_QGEMM_CASE(Q8_0)
    QKV_QGEMM_CASE(Q4_0)
    QKV_QGEMM_CASE(Q4_1)
    QKV_QGEMM_CASE(Q5_0)
    QKV_QGEMM_CASE(Q5_1)
    QKV_QGEMM_CASE(Q4_K)
    QKV_QGEMM_CASE(Q5_K)
    QKV_QGEMM_CASE(Q6_K)
    QKV_QGEMM_CASE(Q2_K)
    QKV_QGEMM_CASE(Q3_K)
    QKV_QGEMM_CASE(IQ4_NL)
    QKV_QGEMM_CASE(IQ4_XS)
    QKV_QGEMM_CASE(MXFP4)
#undef QKV_QGEMM_CASE
  }
}

}  // namespace
