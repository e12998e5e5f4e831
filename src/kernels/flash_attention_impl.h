// FlashAttention-2 forward and backward, written once over a SIMD traits type
// `I` and compiled per ISA by flash_attention_{scalar,avx2,avx512}.cpp, which
// include flash_attention_prelude.h, then `#pragma GCC target(...)`, define a
// traits struct (vector type V, width W, micro-kernel rows MR, vectors per
// micro-kernel row NV, tile sizes, ops) and then include this file. Everything
// here has internal linkage, so the three copies never meet at link time.
//
// Algorithm: Tri Dao, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning" (2023), Algorithms 1 (forward) and 2
// (backward), with the running variables named as in the paper:
//   m_i  running row max of the scaled scores     l_i  running sum of exp(s - m_i)
//   O_i  unnormalised output accumulator          L_i  = m_i + log l_i  (the saved LSE)
//   D_i  = rowsum(dO_i * O_i)  (backward)
// exp(x) is computed as exp2(x * log2 e) with a polynomial (fast_exp.h).
//
// Work split: forward tasks are (b, h, query block of BQ rows; for long
// heads kGroupBlocks blocks that walk the keys in chunks together); backward
// tasks are (b, key/value head hk, key block of BKB keys), so each task owns its
// rows of O (resp. dK, dV, summed over the hk's G = H / H_kv query heads) and no
// two threads write the same output. dQ in backward is accumulated per worker
// (one slot per (b, hk) segment of its static chunk, G heads wide); groups
// spanning two workers are summed afterwards in thread order, so the result is
// bitwise reproducible for a fixed thread count.
//
// Grouped-query attention reads a key/value head in place for each of its query
// heads (forward tasks of one group are consecutive, so a worker packs its K and
// V once). A sliding window starts each row's keys window - 1 before its
// position; whole tiles before a panel's first key (or, in backward, query
// blocks after a key tile's last row) are skipped, so the cost is O(Lq W). Forward tasks are
// handed out by parallel_claim (own range first, then stolen from the back of
// a slower worker's), which no output depends on; backward keeps parallel_for's
// static chunks, which the dQ slots need. With causal masks the block order
// inside a (b,h) zig-zags (0, n-1, 1, n-2, ...) so that the static contiguous
// chunks get equal work.
//
// Wherever a tile needs no mask, the online softmax step is fused into S = Q K^T: P =
// exp2(S - m_i) with the m_i known before the tile (0 for a row's first tile, where m_i is still
// -inf), on the products while still in registers, and m_i moves only when the tile's max rises
// by more than kMaxSlack (FlashAttention-4's conditional rescaling); the other tiles (and a first
// tile whose max is far from 0) take the two-pass step (S stored, masked, row max, then exp).
// A tile computes its keys rounded up to whole vectors, not to whole key panels.
//
// Inner products are one register-blocked micro-kernel, C[MR x NV*W] (+)=
// A B, with A broadcast from any strided layout and B streamed as NV vectors
// per step. Forward: S = Q K^T streams K packed once per head in key panels
// [D][KP] (KP = NV*W keys), O += P V streams V packed in column panels
// [Lk][KP]; heads with a few query rows (decode) read K and V in place
// instead. Backward: the five products reuse the same micro-kernel with the
// operands' roles swapped (K, V packed per key tile). Tiles live in reused
// per-thread workspaces; nothing is O(Lq * Lk).
#pragma once

namespace qkv::kernels::flash {
namespace {

using i64 = std::int64_t;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kLog2e = fastexp::kLog2e;
constexpr float kLn2 = 0.693147180559945309f;

inline i64 round_up(i64 x, i64 m) { return (x + m - 1) / m * m; }

// An attention sink (base-2 units, sink2 = sink * log2 e) joins a row's online-softmax state
// (running max m, sum l, both base-2): m = max(m, sink2), l = l w + 2^(sink2 - m_new), and the
// row's accumulated output is to be scaled by w = 2^(m_old - m_new) (0 when the row saw no key).
inline void sink_term(float sink2, float& m, float& l, float& w) {
  const float M = std::max(m, sink2);
  w = l > 0.f ? std::exp2(m - M) : 0.f;
  l = l * w + std::exp2(sink2 - M);
  m = M;
}

// Keys j < key_end(b) exist (key padding); later ones are never read.
inline i64 valid_keys(const AttnParams& p, i64 b) {
  if (!p.key_lengths) return p.Lk;
  return std::clamp<i64>(p.key_lengths[b], 0, p.Lk);
}
// Allowed keys of query row i: [row_key_begin, row_key_end) (empty when begin >= end). Row i
// sits at position i + (Lk - Lq); causal ends its keys there, the sliding window starts them
// window - 1 keys before.
inline i64 row_key_end(const AttnParams& p, i64 kv, i64 i) {
  if (!p.causal) return kv;
  return std::clamp<i64>(i + (p.Lk - p.Lq) + 1, 0, kv);
}
inline i64 row_key_begin(const AttnParams& p, i64 i) {
  if (p.window <= 0) return 0;
  return std::max<i64>(i + (p.Lk - p.Lq) - p.window + 1, 0);
}
// First query row after the last one that sees a key < kend (Lq if the window ends nowhere):
// rows at positions >= kend - 1 + window see only keys >= kend.
inline i64 rows_seeing_keys_below(const AttnParams& p, i64 kend) {
  if (p.window <= 0) return p.Lq;
  return std::clamp<i64>(kend - 1 + p.window - (p.Lk - p.Lq), 0, p.Lq);
}
// Grouped-query attention: query heads per key/value head, and the key/value heads.
inline i64 group_size(const AttnParams& p) { return p.H_kv > 0 ? p.H / p.H_kv : 1; }
inline i64 kv_heads(const AttnParams& p) { return p.H_kv > 0 ? p.H_kv : p.H; }
// 0, n-1, 1, n-2, ...: balances causal work over static contiguous chunks.
inline i64 zigzag(i64 r, i64 n) { return (r & 1) ? n - 1 - r / 2 : r / 2; }

// Dropout as in AttnParams: element (b,h,i,j) dropped iff
// dropout_dropped(seed, counter, dropout_threshold(p)) (kernels/dropout.h).
struct Dropout {
  bool on = false;
  float inv_keep = 1.f;
  std::uint64_t threshold = 0, seed = 0, offset = 0;
  i64 H = 0, Lq = 0, Lk = 0;
  explicit Dropout(const AttnParams& p) : on(p.dropout_p > 0.f), H(p.H), Lq(p.Lq), Lk(p.Lk) {
    if (!on) return;
    inv_keep = 1.f / (1.f - p.dropout_p);
    threshold = qkv::kernels::dropout_threshold(static_cast<double>(p.dropout_p));
    seed = p.seed;
    offset = p.offset;
  }
  // mul[j] = (keep ? 1/(1-p) : 0) for keys j0..j0+n-1 of row (b,h,i).
  void row(float* mul, i64 b, i64 h, i64 i, i64 j0, i64 n) const {
    const std::uint64_t c0 = offset + static_cast<std::uint64_t>(((b * H + h) * Lq + i) * Lk + j0);
    qkv::kernels::dropout_multipliers(mul, seed, c0, n, threshold, inv_keep);
  }
  // mul[i*Lk + j] for every (i, j) of head (b,h): its counters are consecutive.
  void head(float* mul, i64 b, i64 h) const {
    const std::uint64_t c0 = offset + static_cast<std::uint64_t>((b * H + h) * Lq * Lk);
    qkv::kernels::dropout_multipliers(mul, seed, c0, Lq * Lk, threshold, inv_keep);
  }
};

template <class I>
struct Engine {
  using V = typename I::V;
  static constexpr int W = I::W, MR = I::MR, NV = I::NV, KP = I::NV * I::W;
  static constexpr i64 BQ = I::kFwdQ, BK = I::kFwdK, BQB = I::kBwdQ, BKB = I::kBwdK;
  static_assert(BK % KP == 0 && BKB % KP == 0, "key blocks must be whole key panels");
  static constexpr i64 kInPlaceMaxRows = 16;  // forward reads K, V in place when Lq <= this

  // ---- micro-kernel: C[r][0..nv*W) (+)= alpha * sum_k A(r,k) * B(k, 0..nv*W), r < M ----
  //   A(r,k) = a[k*a_ks + r*a_rs] (broadcast)   B(k,:) = b + k*b_ks (nv vectors)   C row r = c + r*c_rs
  // zero_acc, then mac: acc[r][v] += sum_{k < K} A(r,k) B(k, v*W..), with a and b left K steps on.
  template <int M, int NVc>
  __attribute__((always_inline)) static inline void zero_acc(V (&acc)[M][NVc]) {
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NVc; ++v) acc[r][v] = I::zero();
  }
  template <int M, int NVc>
  __attribute__((always_inline)) static inline void mac(V (&acc)[M][NVc], i64 K, const float*& a, i64 a_ks, i64 a_rs,
                                                        const float*& b, i64 b_ks) {
#pragma GCC unroll 2
    for (i64 k = 0; k < K; ++k) {
      V bv[NVc];
#pragma GCC unroll 4
      for (int v = 0; v < NVc; ++v) bv[v] = I::load(b + v * W);
#pragma GCC unroll 16
      for (int r = 0; r < M; ++r) {
        const V x = I::set1(a[r * a_rs]);
#pragma GCC unroll 4
        for (int v = 0; v < NVc; ++v) acc[r][v] = I::fma(x, bv[v], acc[r][v]);
      }
      a += a_ks;
      b += b_ks;
    }
  }

  // Small tiles (M * NVc < 8 accumulators: partial panels, decode) would wait on the FMA latency,
  // so they keep U interleaved copies of the accumulators over k and sum them at the end.
  template <int M, int NVc>
  static void micro(i64 K, const float* a, i64 a_ks, i64 a_rs, const float* b, i64 b_ks, float* c, i64 c_rs,
                    float alpha, bool accumulate) {
    constexpr int U = M * NVc >= 8 ? 1 : M * NVc >= 4 ? 2 : 4;
    V acc[U][M][NVc];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) zero_acc(acc[u]);
    i64 k = 0;
    if constexpr (U == 1) {
      mac(acc[0], K, a, a_ks, a_rs, b, b_ks);
    } else {
      for (; k + U <= K; k += U)
#pragma GCC unroll 4
        for (int u = 0; u < U; ++u) mac(acc[u], 1, a, a_ks, a_rs, b, b_ks);
      mac(acc[0], K - k, a, a_ks, a_rs, b, b_ks);
#pragma GCC unroll 4
      for (int u = 1; u < U; ++u)
#pragma GCC unroll 16
        for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
          for (int v = 0; v < NVc; ++v) acc[0][r][v] = I::add(acc[0][r][v], acc[u][r][v]);
    }
    const V va = I::set1(alpha);
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NVc; ++v) {
        V x = alpha == 1.f ? acc[0][r][v] : I::mul(acc[0][r][v], va);
        float* cp = c + r * c_rs + v * W;
        if (accumulate) x = I::add(x, I::load(cp));
        I::store(cp, x);
      }
  }

  template <int M>
  static void micro_nv(int nv, i64 K, const float* a, i64 a_ks, i64 a_rs, const float* b, i64 b_ks, float* c,
                       i64 c_rs, float alpha, bool acc) {
    if constexpr (NV >= 4) {
      if (nv == 4) return micro<M, 4>(K, a, a_ks, a_rs, b, b_ks, c, c_rs, alpha, acc);
      if (nv == 3) return micro<M, 3>(K, a, a_ks, a_rs, b, b_ks, c, c_rs, alpha, acc);
    }
    if constexpr (NV >= 2) {
      if (nv == 2) return micro<M, 2>(K, a, a_ks, a_rs, b, b_ks, c, c_rs, alpha, acc);
    }
    micro<M, 1>(K, a, a_ks, a_rs, b, b_ks, c, c_rs, alpha, acc);
  }

  template <int M = MR>
  static void micro_m(int m, int nv, i64 K, const float* a, i64 a_ks, i64 a_rs, const float* b, i64 b_ks, float* c,
                      i64 c_rs, float alpha, bool acc) {
    if constexpr (M > 1) {
      if (m < M) return micro_m<M - 1>(m, nv, K, a, a_ks, a_rs, b, b_ks, c, c_rs, alpha, acc);
    }
    micro_nv<M>(nv, K, a, a_ks, a_rs, b, b_ks, c, c_rs, alpha, acc);
  }

  // C[rows][cols] (+)= alpha * A B over K; cols a multiple of W. B's column chunk n0 (NV*W wide)
  // starts at b + (n0 / (NV*W)) * b_cs.
  static void gemm(i64 rows, i64 cols, i64 K, const float* a, i64 a_ks, i64 a_rs, const float* b, i64 b_ks,
                   i64 b_cs, float* c, i64 c_rs, float alpha, bool accumulate) {
    for (i64 r0 = 0; r0 < rows; r0 += MR) {
      const int m = static_cast<int>(std::min<i64>(MR, rows - r0));
      for (i64 n0 = 0, chunk = 0; n0 < cols; n0 += KP, ++chunk) {
        const int nv = static_cast<int>(std::min<i64>(NV, (cols - n0) / W));
        micro_m(m, nv, K, a + r0 * a_rs, a_ks, a_rs, b + chunk * b_cs, b_ks, c + r0 * c_rs + n0, c_rs, alpha,
                accumulate);
      }
    }
  }

  // dst[(j/KP)][d][j%KP] = src[j*ld + d] for j < n, zero up to round_up(n, KP): key panels the
  // micro-kernel streams as B for S = Q K^T (and dP = dO V^T).
  // Whole W x W blocks go through the ISA's register transpose where it has one (I::transpose).
  static void pack_panels(float* dst, const float* src, i64 ld, i64 n, i64 dim) {
    for (i64 j0 = 0; j0 < n; j0 += KP) {
      const i64 jn = std::min<i64>(KP, n - j0);
      float* dp = dst + j0 * dim;
      i64 jb = 0, db = 0;  // keys [0, jb) x dims [0, db) done by blocks
      if constexpr (requires(float* d, const float* s) { I::transpose(d, i64{}, s, i64{}); }) {
        jb = jn / W * W, db = dim / W * W;
        for (i64 j = 0; j < jb; j += W)
          for (i64 d = 0; d < db; d += W) I::transpose(dp + d * KP + j, KP, src + (j0 + j) * ld + d, ld);
      }
      for (i64 jj = 0; jj < jn; ++jj) {
        const float* s = src + (j0 + jj) * ld;
        for (i64 d = jj < jb ? db : 0; d < dim; ++d) dp[d * KP + jj] = s[d];
      }
      for (i64 jj = jn; jj < KP; ++jj)
        for (i64 d = 0; d < dim; ++d) dp[d * KP + jj] = 0.f;
    }
  }
  // dst[(e/KP)][j][e%KP] = src[j*ld + e] for j < n, e < dim, zero up to round_up(dim, KP): column
  // panels of a row-major matrix, which the micro-kernel streams contiguously as B for O += P V.
  static void pack_cols(float* dst, const float* src, i64 ld, i64 n, i64 dim) {
    for (i64 e0 = 0; e0 < dim; e0 += KP) {
      const i64 en = std::min<i64>(KP, dim - e0);
      float* dp = dst + e0 * n;
      for (i64 j = 0; j < n; ++j) {
        const float* s = src + j * ld + e0;
        for (i64 e = 0; e < en; ++e) dp[j * KP + e] = s[e];
        for (i64 e = en; e < KP; ++e) dp[j * KP + e] = 0.f;
      }
    }
  }
  // dst[(r/MR)][d][r%MR] = src[r*ld + d] * mul for r < n, zero up to round_up(n, MR): row panels of
  // a forward task's Q block, so the micro-kernel's broadcasts of A are contiguous.
  static void pack_rows(float* dst, const float* src, i64 ld, i64 n, i64 dim, float mul) {
    for (i64 r0 = 0; r0 < n; r0 += MR) {
      const i64 rn = std::min<i64>(MR, n - r0);
      float* dp = dst + r0 * dim;
      for (i64 r = 0; r < rn; ++r) {
        const float* s = src + (r0 + r) * ld;
        for (i64 d = 0; d < dim; ++d) dp[d * MR + r] = s[d] * mul;
      }
      for (i64 r = rn; r < MR; ++r)
        for (i64 d = 0; d < dim; ++d) dp[d * MR + r] = 0.f;
    }
  }
  // Rows of width dim padded with zeros to dimp (only used when dim % W != 0).
  static void copy_rows_padded(float* dst, i64 dimp, const float* src, i64 ld, i64 n, i64 dim) {
    for (i64 r = 0; r < n; ++r) {
      std::memcpy(dst + r * dimp, src + r * ld, static_cast<std::size_t>(dim) * sizeof(float));
      std::memset(dst + r * dimp + dim, 0, static_cast<std::size_t>(dimp - dim) * sizeof(float));
    }
  }

  // Masks one score tile row: columns [0, lo) and [lim, ncols) -> -inf, bias added on [lo, lim).
  // bias_mul converts the bias to the scores' units (log2 e where scores are in base 2).
  static void mask_row(float* s, i64 lo, i64 lim, i64 ncols, const AttnParams& p, i64 b, i64 h, i64 i, i64 k0,
                       float bias_mul = 1.f) {
    lo = std::clamp<i64>(lo, 0, ncols);
    for (i64 j = 0; j < lo; ++j) s[j] = kNegInf;
    for (i64 j = std::max(lim, lo); j < ncols; ++j) s[j] = kNegInf;
    if (p.bias) {
      const float* bp = p.bias + b * p.bias_sb + h * p.bias_sh + i * p.bias_si + k0 * p.bias_sj;
      const i64 n = std::min(lim, ncols);
      if (p.bias_sj == 1)
        for (i64 j = lo; j < n; ++j) s[j] += bp[j] * bias_mul;
      else
        for (i64 j = lo; j < n; ++j) s[j] += bp[j * p.bias_sj] * bias_mul;
    }
  }

  // ======================================================================================
  // Forward (FlashAttention-2, Algorithm 1)
  // ======================================================================================
  struct FwdCtx {
    const AttnParams& p;
    const float* Q;
    float* O;
    float* LSE;
    i64 Dvp;  // Dv rounded up to W
    Dropout drop;
  };

  // x[0..n) *= a (n a multiple of W): a row of P or O_i when m_i moves.
  static void scale_vec(float* x, i64 n, float a) {
    const V va = I::set1(a);
    for (i64 j = 0; j < n; j += W) I::store(x + j, I::mul(I::load(x + j), va));
  }

  // Online softmax step for the mr rows of one score tile S (row stride BK, ncols columns),
  // FlashAttention-2 Alg. 1 lines 9-10, with S, m_i in base-2 units (scale * log2 e folded into Q,
  // so exp(s - m) = exp2(s2 - m2) costs no multiply):
  //   m_new = max(m_i, rowmax(S));  P = exp2(S - m_new)  (written over S)
  //   l_i   = exp2(m_i - m_new) l_i + rowsum(P);  O_i *= exp2(m_i - m_new)  (only if the max moved)
  // A row with no allowed key so far keeps m_i = -inf, l_i = 0 and gets P = exp(-inf) = 0:
  // its offset is -inf rather than +m_new, so (-inf) - (-inf) is never formed. The phases run
  // over all rows before the next, so the rows' scalar reductions overlap instead of stalling.
  static void online_softmax(float* S, i64 mr, i64 ncols, float* m, float* l, float* acc, i64 Dvp) {
    float m_new[MR], offset[MR];
    for (i64 r = 0; r < mr; ++r) {
      const float* s = S + r * BK;
      V vmax = I::set1(kNegInf);
      for (i64 j = 0; j < ncols; j += W) vmax = I::max(vmax, I::load(s + j));
      m_new[r] = std::max(m[r], I::hmax(vmax));
      offset[r] = m_new[r] == kNegInf ? kNegInf : -m_new[r];
    }
    for (i64 r = 0; r < mr; ++r) {
      float* s = S + r * BK;
      const V voff = I::set1(offset[r]);
      V vsum = I::zero();
      for (i64 j = 0; j < ncols; j += W) {
        const V e = I::exp2(I::add(I::load(s + j), voff));
        I::store(s + j, e);
        vsum = I::add(vsum, e);
      }
      const float m_old = m[r];
      if (m_new[r] != m_old && m_old != kNegInf) {
        const float alpha = fastexp::exp2_scalar(m_old - m_new[r]);
        l[r] *= alpha;
        scale_vec(acc + r * Dvp, Dvp, alpha);
      }
      l[r] += I::hsum(vsum);
      m[r] = m_new[r];
    }
  }

  // How far (base-2 units) a tile's row max may rise above the running max m_i before m_i moves:
  // below that the tile's P stays under 2^kMaxSlack and m_i, l_i and O_i need no rescaling, the
  // conditional rescaling of FlashAttention-4. Any value works: O_i / l_i and L_i = m_i ln 2 +
  // log l_i hold for any m_i that does not overflow P.
  static constexpr float kMaxSlack = 8.f;
  // A rise of this much or more would overflow exp2 (P >= 2^126): that tile takes the two-pass path.
  static constexpr float kMaxRise = 126.f;

  // One MR x KP tile of the fused step: C = A B as in micro<M, NV> (A the packed Q panel [K][MR],
  // B a key panel [K][KP]), then, still in registers, per row r: rmax[r] = max(rmax[r], C_r),
  // P_r = exp2(C_r + moff[r]) stored at p + r*BK, rsum[r] += P_r. tail (or null): W values, 0
  // or -inf, added to the last vector's products first, so the zero-padded keys past the tile's
  // last key count as masked (P = 0, never the max).
  // Kept out of line: inlined into its caller, GCC 12 spilled the accumulators of the product loop.
  template <int M, int NVc>
  __attribute__((noinline)) static void micro_exp(i64 K, const float* a, const float* b, float* p, const float* moff,
                                                  V* rmax, V* rsum, const float* tail) {
    V acc[M][NVc];
    zero_acc(acc);
    mac(acc, K, a, MR, 1, b, KP);
    if (tail) {
      const V tv = I::load(tail);
#pragma GCC unroll 16
      for (int r = 0; r < M; ++r) acc[r][NVc - 1] = I::add(acc[r][NVc - 1], tv);
    }
#pragma GCC unroll 16
    for (int r = 0; r < M; ++r) {
      const V off = I::set1(moff[r]);
      V mx = rmax[r], sm = rsum[r];
#pragma GCC unroll 4
      for (int v = 0; v < NVc; ++v) {
        mx = I::max(mx, acc[r][v]);
        const V e = I::exp2(I::add(acc[r][v], off));
        I::store(p + r * BK + v * W, e);
        sm = I::add(sm, e);
      }
      rmax[r] = mx;
      rsum[r] = sm;
    }
  }
  // nv (<= NV) vectors of the panel: the last panel of a tile whose keys end inside it.
  template <int M = MR>
  static void micro_exp_m(int m, int nv, i64 K, const float* a, const float* b, float* p, const float* moff,
                          V* rmax, V* rsum, const float* tail) {
    if constexpr (M > 1) {
      if (m < M) return micro_exp_m<M - 1>(m, nv, K, a, b, p, moff, rmax, rsum, tail);
    }
    if constexpr (NV >= 4) {
      if (nv == 4) return micro_exp<M, 4>(K, a, b, p, moff, rmax, rsum, tail);
      if (nv == 3) return micro_exp<M, 3>(K, a, b, p, moff, rmax, rsum, tail);
    }
    if constexpr (NV >= 2) {
      if (nv == 2) return micro_exp<M, 2>(K, a, b, p, moff, rmax, rsum, tail);
    }
    micro_exp<M, 1>(K, a, b, p, moff, rmax, rsum, tail);
  }

  // A row's first tile (m_i = -inf: no key yet, so l_i = 0 and O_i = 0) is fused at m_i = 0 when
  // its max lands in (-kMaxDrop, kMaxRise): its P then stays far above the denormals.
  static constexpr float kMaxDrop = 64.f;

  // The online softmax step of one row panel fused into S = Q K^T, for a tile of kn keys that no
  // row masks (ncols = kn rounded up to W columns, the padding masked here): the exponentials use the m_i known before the tile
  // (0 for a row's first tile), P = exp2(S - m_i), computed on the products while they are still
  // in registers, and the tile's row max comes out of the same registers; no pass over S reads
  // it back. Only a row whose max rose by more than kMaxSlack moves m_i (its P, l_i and O_i are
  // multiplied by exp2(m_i - m_new)). Returns false, with m, l and acc untouched, when a row's max
  // rose by kMaxRise or more (or is NaN), or a first tile's max is kMaxDrop or more below 0: the
  // caller then redoes the tile with the two-pass step.
  static bool fused_scores_softmax(const float* qp, const float* kp, i64 D, float* S, i64 mr, i64 kn, i64 ncols,
                                   float* m, float* l, float* acc, i64 Dvp) {
    alignas(64) float tail[W];
    for (i64 j = 0; j < W; ++j) tail[j] = ncols - W + j < kn ? 0.f : kNegInf;
    V rmax[MR], rsum[MR];
    float moff[MR], base[MR];
    for (i64 r = 0; r < mr; ++r) {
      base[r] = m[r] == kNegInf ? 0.f : m[r];
      rmax[r] = I::set1(kNegInf), rsum[r] = I::zero(), moff[r] = -base[r];
    }
    const int mi = static_cast<int>(mr);
    for (i64 c = 0; c < ncols; c += KP)
      micro_exp_m(mi, static_cast<int>(std::min<i64>(NV, (ncols - c) / W)), D, qp, kp + c * D, S + c, moff, rmax,
                  rsum, c + KP >= ncols && kn < ncols ? tail : nullptr);
    float tmax[MR];
    for (i64 r = 0; r < mr; ++r) {
      tmax[r] = I::hmax(rmax[r]);
      if (!(tmax[r] - base[r] < kMaxRise)) return false;
      if (m[r] == kNegInf && !(tmax[r] > -kMaxDrop)) return false;
    }
    for (i64 r = 0; r < mr; ++r) {
      m[r] = base[r];
      float sum = I::hsum(rsum[r]);
      if (tmax[r] > m[r] + kMaxSlack) {
        const float alpha = fastexp::exp2_scalar(m[r] - tmax[r]);
        scale_vec(S + r * BK, ncols, alpha);
        scale_vec(acc + r * Dvp, Dvp, alpha);
        sum *= alpha;
        l[r] *= alpha;
        m[r] = tmax[r];
      }
      l[r] += sum;
    }
    return true;
  }

  // Where a forward task reads K and V: packed once per head (Kp != null), or, for heads with a
  // handful of query rows (decode), in place, since packing would cost more than the products.
  struct KVSource {
    const float* Kp = nullptr;  // valid keys in key panels [kv/KP][D][KP] (zero-padded panel)
    const float* Vp = nullptr;  // valid V rows in column panels [Dv/KP][kv][KP], panel stride vpanel
    i64 vpanel = 0;
    const float* K = nullptr;  // in place: this head's K rows (stride k_st) and V rows (stride v_st,
    const float* V = nullptr;  //   Dv a multiple of W so whole vectors stay inside each row)
  };

  // Soft-capping of a tile of scores in base-2 units: s2 = log2(e) * cap * tanh(s / cap), s the
  // natural-unit score, is cap2 * tanh(s2 / cap2) with cap2 = cap * log2(e).
  static void softcap_scores(float* S, i64 mr, i64 ncols, float cap2) {
    const float inv = 1.f / cap2;
    for (i64 r = 0; r < mr; ++r)
      for (i64 j = 0; j < ncols; ++j) S[r * BK + j] = cap2 * std::tanh(S[r * BK + j] * inv);
  }

  // S[r][j] = scale * <q_r, k_j> for r < mr, j < kn with K rows read in place; four keys at a
  // time so their dot products are independent FMA chains.
  static void dot_scores(float* S, const float* q, i64 q_st, i64 mr, const float* k, i64 k_st, i64 kn, i64 D,
                         float scale) {
    const i64 Dw = D / W * W;
    for (i64 r = 0; r < mr; ++r) {
      const float* qr = q + r * q_st;
      float* sr = S + r * BK;
      i64 j = 0;
      for (; j + 4 <= kn; j += 4) {
        const float* k0 = k + j * k_st;
        const float *k1 = k0 + k_st, *k2 = k1 + k_st, *k3 = k2 + k_st;
        V a0 = I::zero(), a1 = I::zero(), a2 = I::zero(), a3 = I::zero();
        for (i64 d = 0; d < Dw; d += W) {
          const V qv = I::load(qr + d);
          a0 = I::fma(qv, I::load(k0 + d), a0);
          a1 = I::fma(qv, I::load(k1 + d), a1);
          a2 = I::fma(qv, I::load(k2 + d), a2);
          a3 = I::fma(qv, I::load(k3 + d), a3);
        }
        float d0 = I::hsum(a0), d1 = I::hsum(a1), d2 = I::hsum(a2), d3 = I::hsum(a3);
        for (i64 d = Dw; d < D; ++d) d0 += qr[d] * k0[d], d1 += qr[d] * k1[d], d2 += qr[d] * k2[d], d3 += qr[d] * k3[d];
        sr[j] = scale * d0, sr[j + 1] = scale * d1, sr[j + 2] = scale * d2, sr[j + 3] = scale * d3;
      }
      for (; j < kn; ++j) {
        const float* kr = k + j * k_st;
        V acc = I::zero();
        for (i64 d = 0; d < Dw; d += W) acc = I::fma(I::load(qr + d), I::load(kr + d), acc);
        float dot = I::hsum(acc);
        for (i64 d = Dw; d < D; ++d) dot += qr[d] * kr[d];
        sr[j] = scale * dot;
      }
    }
  }

  // Long key sequences are walked in chunks of kChunkTiles key tiles (KC keys: 256 KiB of K and V
  // at D = 64 with 128-key tiles, which stays in L2), each chunk by every query block of a task
  // of kGroupBlocks blocks before the next chunk, so a chunk comes from memory once per task
  // instead of the head's whole K and V once per block. Used when a head's K and V exceed
  // kChunkFromBytes: measured on one core (best runs, B=1, L = 2048 / 4096 / 8192, D = 64) the
  // one-block walk ran 66 / 62 / 63 GFLOP/s, and switching off either product gave the same time
  // at every length, i.e. the long heads lost to K and V no longer staying in cache.
  static constexpr i64 kChunkTiles = 4, kGroupBlocks = 4, KC = kChunkTiles * BK;
  static constexpr i64 kChunkFromBytes = 3 << 19;  // 1.5 MiB

  // One task: query rows [i0, i0+mq) of head (b,h) (mq <= kGroupBlocks * BQ), keys and values
  // from kvs.
  static void forward_rows(const FwdCtx& x, ThreadWorkspace& ws, i64 b, i64 h, i64 i0, i64 mq, const KVSource& kvs) {
    const AttnParams& p = x.p;
    const i64 kv = valid_keys(p, b), Dvp = x.Dvp;
    const float* q = x.Q + b * p.q_sb + h * p.q_sh + i0 * p.q_st;
    float* o = x.O + b * p.o_sb + h * p.o_sh + i0 * p.o_st;
    float* lse = x.LSE + (b * p.H + h) * p.Lq + i0;
    // Keys seen by any row of the task: [kbeg, kend), row ranges moving right with the rows.
    const i64 kbeg = row_key_begin(p, i0), kend = row_key_end(p, kv, i0 + mq - 1);
    if (kend <= kbeg) {  // every row fully masked: O = 0, LSE = -inf (the sink with one)
      for (i64 r = 0; r < mq; ++r) {
        std::memset(o + r * p.o_st, 0, static_cast<std::size_t>(p.Dv) * sizeof(float));
        lse[r] = p.sinks ? p.sinks[h] : kNegInf;
      }
      return;
    }
    const auto rows = static_cast<std::size_t>(mq);
    float* m = ws.buf[kRowMax].get(rows);          // m_i: running max of the scaled scores
    float* l = ws.buf[kRowSum].get(rows);          // l_i: running sum of exp(s_ij - m_i)
    float* acc = ws.buf[kOAcc].get(rows * static_cast<std::size_t>(Dvp));  // O_i: sum_j exp(s_ij - m_i) v_j
    float* S = ws.buf[kScores].get(MR * BK);       // S / P tile of one row panel
    // Scores in base-2 units: s2 = (scale * log2 e) <q, k>, from a packed, pre-scaled Q block.
    const float qmul = p.scale * kLog2e;
    float* qp = nullptr;
    if (kvs.Kp) {
      qp = ws.buf[kQPacked].get(static_cast<std::size_t>(round_up(mq, MR) * p.D));
      pack_rows(qp, q, p.q_st, mq, p.D, qmul);
    }
    for (i64 r = 0; r < mq; ++r) m[r] = kNegInf, l[r] = 0.f;
    std::memset(acc, 0, static_cast<std::size_t>(mq * Dvp) * sizeof(float));
    i64 lo[MR], lim[MR];

    // Tiles start at whole key panels (the packed K's layout), from the first panel any row sees.
    for (i64 c0 = kbeg / KP * KP; c0 < kend; c0 += KC)
      for (i64 s0 = 0; s0 < mq; s0 += BQ) {  // query block [s0, s1) over key chunk [c0, c0 + KC)
        const i64 s1 = std::min(mq, s0 + BQ);
        const i64 send = std::min(c0 + KC, row_key_end(p, kv, i0 + s1 - 1));
        const i64 sbeg = std::max(c0, row_key_begin(p, i0 + s0) / KP * KP);  // sliding window: skip whole tiles
        for (i64 k0 = sbeg; k0 < send; k0 += BK)
          for (i64 r0 = s0; r0 < s1; r0 += MR) {
            const i64 mr = std::min<i64>(MR, s1 - r0);
            const i64 pend = row_key_end(p, kv, i0 + r0 + mr - 1);
            if (k0 >= pend) continue;  // causal: tile fully masked for this panel
            // Score columns: the tile's keys rounded up to whole vectors (a key panel's last
            // vectors past them are not computed).
            // The tile ends at the chunk's end too: with a window, sbeg is a key panel past c0,
            // not a tile boundary, and the next chunk counts the keys from c0 + KC on.
            const i64 kn = std::min(BK, std::min(pend, send) - k0), ncols = round_up(kn, W);
            if (k0 + kn <= row_key_begin(p, i0 + r0)) continue;  // sliding window: tile before every row's keys
            bool fused = kvs.Kp && !p.bias && !(p.softcap > 0);  // no row masks any of the tile's keys
            for (i64 r = 0; r < mr; ++r) {
              // allowed columns of row r: [lo, lim)
              lo[r] = row_key_begin(p, i0 + r0 + r) - k0;
              lim[r] = row_key_end(p, kv, i0 + r0 + r) - k0;
              fused = fused && lim[r] >= kn && lo[r] <= 0;
            }
            if (!fused ||
                !fused_scores_softmax(qp + r0 * p.D, kvs.Kp + k0 * p.D, p.D, S, mr, kn, ncols, m + r0, l + r0,
                                      acc + r0 * Dvp, Dvp)) {
              // S = scale * log2(e) * Q_panel K_tile^T, masked, then the two-pass online softmax step
              if (kvs.Kp)
                gemm(mr, ncols, p.D, qp + r0 * p.D, MR, 1, kvs.Kp + k0 * p.D, KP, p.D * KP, S, BK, 1.f, false);
              else
                dot_scores(S, q + r0 * p.q_st, p.q_st, mr, kvs.K + k0 * p.k_st, p.k_st, kn, p.D, qmul);
              if (p.softcap > 0) softcap_scores(S, mr, ncols, p.softcap * kLog2e);
              for (i64 r = 0; r < mr; ++r)
                if (lim[r] < ncols || lo[r] > 0 || p.bias)
                  mask_row(S + r * BK, lo[r], lim[r], ncols, p, b, h, i0 + r0 + r, k0, kLog2e);
              online_softmax(S, mr, ncols, m + r0, l + r0, acc + r0 * Dvp, Dvp);
            }
            if (x.drop.on) {  // dropout acts on P after the row sums (l_i is undropped)
              float mul[BK];
              for (i64 r = 0; r < mr; ++r) {
                const i64 n = std::min(lim[r], kn);
                if (n <= 0) continue;
                x.drop.row(mul, b, h, i0 + r0 + r, k0, n);
                for (i64 j = 0; j < n; ++j) S[r * BK + j] *= mul[j];
              }
            }
            // O_i += P V_tile (only the kn valid keys are read)
            if (kvs.Vp)
              gemm(mr, Dvp, kn, S, 1, BK, kvs.Vp + k0 * KP, KP, kvs.vpanel, acc + r0 * Dvp, Dvp, 1.f, true);
            else
              gemm(mr, Dvp, kn, S, 1, BK, kvs.V + k0 * p.v_st, p.v_st, KP, acc + r0 * Dvp, Dvp, 1.f, true);
          }
      }
    // O = O_i / l_i;  LSE = L_i = m_i ln 2 + log l_i  (m_i in base-2 units). A sink joins the
    // row's sum last: m' = max(m_i, sink), l' = l_i 2^(m_i - m') + 2^(sink - m'), O = O_i 2^(m_i - m') / l'.
    for (i64 r = 0; r < mq; ++r) {
      float* orow = o + r * p.o_st;
      float mr = m[r], lr = l[r], w = 1.f;
      if (p.sinks) sink_term(p.sinks[h] * kLog2e, mr, lr, w);
      if (lr == 0.f) {
        std::memset(orow, 0, static_cast<std::size_t>(p.Dv) * sizeof(float));
        lse[r] = p.sinks ? p.sinks[h] : kNegInf;
        continue;
      }
      const float inv = w / lr;
      for (i64 e = 0; e < p.Dv; ++e) orow[e] = acc[r * Dvp + e] * inv;
      lse[r] = mr * kLn2 + std::log(lr);
    }
  }

  static void forward(float* O, float* LSE, const float* Q, const float* K, const float* V_,
                      const AttnParams& p) {
    if (p.B <= 0 || p.H <= 0 || p.Lq <= 0) return;
    const FwdCtx x{p, Q, O, LSE, round_up(p.Dv, W), Dropout(p)};
    // Packing K and V costs O(Lk (D + Dv)) per head and worker; with few query rows that is more
    // than the products themselves, so such heads read K and V in place.
    const bool in_place = p.Lq <= kInPlaceMaxRows && x.Dvp == p.Dv;
    // Tasks of kGroupBlocks query blocks for heads whose K and V outgrow the cache, else of one.
    const bool grouped = !in_place && p.Lk * (p.D + p.Dv) * static_cast<i64>(sizeof(float)) > kChunkFromBytes;
    const i64 G = grouped ? kGroupBlocks : 1, QG = group_size(p);
    const i64 nqb = (p.Lq + BQ - 1) / BQ, ngr = (nqb + G - 1) / G, ntask = p.B * p.H * ngr;
    // Each task writes its own rows of O and LSE from the same inputs whoever runs it, so the
    // tasks are balanced at run time (a worker slowed by another process gives its last tasks
    // away) and the result stays bitwise the same.
    qkv::parallel_claim(0, ntask, [&](const qkv::ClaimNext& next) {
      ThreadWorkspace& ws = thread_workspace();
      i64 packed = -1;
      KVSource kvs;
      for (i64 t; next(t);) {
        // Query heads h of one key/value head hk = h / QG are consecutive tasks: a worker packs
        // that head's K and V once for all of them.
        const i64 bh = t / ngr, rank = t % ngr, b = bh / p.H, h = bh % p.H, hk = h / QG;
        if (in_place) {
          kvs.K = K + b * p.k_sb + hk * p.k_sh;
          kvs.V = V_ + b * p.v_sb + hk * p.v_sh;
        } else if (bh / QG != packed) {  // K and V packed once per key/value head per worker
          packed = bh / QG;
          const i64 kv = valid_keys(p, b);
          float* kp = ws.buf[kKPacked].get(static_cast<std::size_t>(round_up(kv, KP) * p.D + 1));
          pack_panels(kp, K + b * p.k_sb + hk * p.k_sh, p.k_st, kv, p.D);
          float* vp = ws.buf[kVPacked].get(static_cast<std::size_t>(round_up(p.Dv, KP) * kv + 1));
          pack_cols(vp, V_ + b * p.v_sb + hk * p.v_sh, p.v_st, kv, p.Dv);
          kvs.Kp = kp, kvs.Vp = vp, kvs.vpanel = kv * KP;
        }
        const i64 i0 = (p.causal ? zigzag(rank, ngr) : rank) * G * BQ;
        forward_rows(x, ws, b, h, i0, std::min(G * BQ, p.Lq - i0), kvs);
      }
    });
  }

  // ======================================================================================
  // Backward (FlashAttention-2, Algorithm 2)
  // ======================================================================================
  struct BwdCtx {
    const AttnParams& p;
    const float *dO, *Q, *K, *Vin, *LSE, *Di;
    float *dK, *dV;
    i64 Dp, Dvp;  // D, Dv rounded up to W
    Dropout drop;
  };

  // Where a backward task finds its G query heads' rows: head g of the group at base + g * hs,
  // row i at + i * ld (dQ accumulates there; Q and dO rows are readable to width Dp / Dvp).
  struct GroupRows {
    float* dq;
    i64 dq_hs, dq_ld;
    const float* q;
    i64 q_hs, q_ld;
    const float* dO;
    i64 dO_hs, dO_ld;
  };

  // One task: keys [k0, k0+BKB) of key/value head (b, hk). Writes their dK, dV rows, summed over
  // the head's G = H / H_kv query heads h = hk * G + g; adds each query head's share of dQ into
  // rows.dq (Dp wide).
  static void backward_block(const BwdCtx& x, ThreadWorkspace& ws, i64 b, i64 hk, i64 k0, const GroupRows& rows) {
    const AttnParams& p = x.p;
    const i64 D = p.D, Dv = p.Dv, Dp = x.Dp, Dvp = x.Dvp, G = group_size(p);
    const i64 kv = valid_keys(p, b), owned = std::min(BKB, p.Lk - k0);
    const i64 kn = std::clamp<i64>(kv - k0, 0, owned);  // valid keys of the tile
    float* dk = x.dK + b * p.k_sb + hk * p.k_sh + k0 * p.k_st;
    float* dv = x.dV + b * p.v_sb + hk * p.v_sh + k0 * p.v_st;
    for (i64 j = kn; j < owned; ++j) {  // padded keys: zero gradient, never read
      std::memset(dk + j * p.k_st, 0, static_cast<std::size_t>(D) * sizeof(float));
      std::memset(dv + j * p.v_st, 0, static_cast<std::size_t>(Dv) * sizeof(float));
    }
    if (kn == 0) return;
    const i64 ncols = round_up(kn, KP);
    const float* kt = x.K + b * p.k_sb + hk * p.k_sh + k0 * p.k_st;
    const float* vt = x.Vin + b * p.v_sb + hk * p.v_sh + k0 * p.v_st;
    float* Kp = ws.buf[kKPacked].get(BKB * D + 1);
    float* Vp = ws.buf[kVPacked].get(BKB * Dv + 1);
    pack_panels(Kp, kt, p.k_st, kn, D);
    pack_panels(Vp, vt, p.v_st, kn, Dv);
    const float* krows = kt;
    i64 kld = p.k_st;
    if (Dp != D) {
      float* kr = ws.buf[kKRows].get(BKB * Dp);
      copy_rows_padded(kr, Dp, kt, p.k_st, kn, D);
      krows = kr, kld = Dp;
    }
    float* dKa = ws.buf[kdKAcc].get(BKB * Dp);
    float* dVa = ws.buf[kdVAcc].get(BKB * Dvp);
    std::memset(dKa, 0, static_cast<std::size_t>(kn * Dp) * sizeof(float));
    std::memset(dVa, 0, static_cast<std::size_t>(kn * Dvp) * sizeof(float));
    float* P = ws.buf[kScores].get(BQB * BKB);
    float* dS = ws.buf[kdS].get(BQB * BKB);
    float* Mul = x.drop.on ? ws.buf[kDropMul].get(BQB * BKB) : nullptr;
    float* Pd = x.drop.on ? ws.buf[kPDrop].get(BQB * BKB) : P;
    // Rows that see a key of the tile: [qbeg, qend) (causal starts them, the window ends them).
    const i64 qbeg = p.causal ? std::clamp<i64>(k0 - (p.Lk - p.Lq), 0, p.Lq) : 0;
    const i64 qend = rows_seeing_keys_below(p, k0 + kn);
    const V vl2e = I::set1(kLog2e), vscale = I::set1(p.scale);

    for (i64 g = 0; g < G; ++g) {
      const i64 h = hk * G + g, bh = b * p.H + h;
      const float* q = x.Q + b * p.q_sb + h * p.q_sh;
      const float* dO = x.dO + b * p.o_sb + h * p.o_sh;
      const float* lse = x.LSE + bh * p.Lq;
      const float* Di = x.Di + bh * p.Lq;
      float* dq = rows.dq + g * rows.dq_hs;
      const float* qrows = rows.q + g * rows.q_hs;
      const float* dorows = rows.dO + g * rows.dO_hs;
      for (i64 i0 = qbeg; i0 < qend; i0 += BQB) {
        const i64 mq = std::min(BQB, qend - i0);
        // S = scale * Q K^T  (forward: s_ij = scale <q_i, k_j> + bias_ij)
        gemm(mq, ncols, D, q + i0 * p.q_st, 1, p.q_st, Kp, KP, D * KP, P, BKB, p.scale, false);
        // P_ij = exp(s_ij - L_i), recomputed from the saved LSE
        for (i64 r = 0; r < mq; ++r) {
          const i64 i = i0 + r, lim = row_key_end(p, kv, i) - k0, lo = row_key_begin(p, i) - k0;
          float* s = P + r * BKB;
          if (lim <= 0 || lo >= std::min(lim, kn) || lse[i] == kNegInf) {  // row sees nothing here: P = 0 -> dS = 0
            std::memset(s, 0, static_cast<std::size_t>(ncols) * sizeof(float));
            if (Mul) {
              std::memset(Mul + r * BKB, 0, static_cast<std::size_t>(ncols) * sizeof(float));
              std::memset(Pd + r * BKB, 0, static_cast<std::size_t>(ncols) * sizeof(float));
            }
            continue;
          }
          if (lim < ncols || lo > 0 || p.bias) mask_row(s, lo, lim, ncols, p, b, h, i, k0);
          // s - L_i is exact (Sterbenz) where it matters (s near L_i); folding L_i * log2(e) into an
          // FMA would add the rounding of that product, which P = exp(s - L_i) does not renormalise.
          const V vlse = I::set1(lse[i]);
          for (i64 j = 0; j < ncols; j += W) I::store(s + j, I::exp2(I::mul(I::sub(I::load(s + j), vlse), vl2e)));
          if (Mul) {  // Pd = P * z, z = dropout multiplier (0 or 1/(1-p))
            float* mu = Mul + r * BKB;
            const i64 n = std::min(lim, kn);
            x.drop.row(mu, b, h, i, k0, n);
            for (i64 j = n; j < ncols; ++j) mu[j] = 0.f;
            for (i64 j = 0; j < ncols; ++j) Pd[r * BKB + j] = s[j] * mu[j];
          }
        }
        // dV_j += sum_i Pd_ij dO_i          (forward: O_i = sum_j Pd_ij v_j)
        gemm(kn, Dvp, mq, Pd, BKB, 1, dorows + i0 * rows.dO_ld, rows.dO_ld, KP, dVa, Dvp, 1.f, true);
        // dPd_ij = <dO_i, v_j>
        gemm(mq, ncols, Dv, dO + i0 * p.o_st, 1, p.o_st, Vp, KP, Dv * KP, dS, BKB, 1.f, false);
        // dS_ij = scale * P_ij (dP_ij - D_i),  dP = dPd * z   (softmax backward; scale of s folded in)
        for (i64 r = 0; r < mq; ++r) {
          const V vdi = I::set1(Di[i0 + r]);
          float* ds = dS + r * BKB;
          const float* pr = P + r * BKB;
          if (Mul) {
            const float* mu = Mul + r * BKB;
            for (i64 j = 0; j < ncols; j += W)
              I::store(ds + j, I::mul(I::mul(I::load(pr + j), I::sub(I::mul(I::load(ds + j), I::load(mu + j)), vdi)),
                                      vscale));
          } else {
            for (i64 j = 0; j < ncols; j += W)
              I::store(ds + j, I::mul(I::mul(I::load(pr + j), I::sub(I::load(ds + j), vdi)), vscale));
          }
        }
        // dK_j += sum_i dS_ij q_i           (s_ij = scale <q_i, k_j>)
        gemm(kn, Dp, mq, dS, BKB, 1, qrows + i0 * rows.q_ld, rows.q_ld, KP, dKa, Dp, 1.f, true);
        // dQ_i += sum_j dS_ij k_j
        gemm(mq, Dp, kn, dS, 1, BKB, krows, kld, KP, dq + i0 * rows.dq_ld, rows.dq_ld, 1.f, true);
      }
    }
    for (i64 j = 0; j < kn; ++j) {
      std::memcpy(dk + j * p.k_st, dKa + j * Dp, static_cast<std::size_t>(D) * sizeof(float));
      std::memcpy(dv + j * p.v_st, dVa + j * Dvp, static_cast<std::size_t>(Dv) * sizeof(float));
    }
  }

  static void backward(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                       const float* V_, const float* O, const float* LSE, const AttnParams& p) {
    if (p.B <= 0 || p.H <= 0) return;
    const i64 BH = p.B * p.H, Lq = p.Lq, Lk = p.Lk, D = p.D, Dv = p.Dv, G = group_size(p), Hkv = kv_heads(p);
    auto zero_rows = [](float* base, i64 sb, i64 sh, i64 st, i64 B, i64 H, i64 L, i64 dim) {
      for (i64 b = 0; b < B; ++b)
        for (i64 h = 0; h < H; ++h)
          for (i64 i = 0; i < L; ++i)
            std::memset(base + b * sb + h * sh + i * st, 0, static_cast<std::size_t>(dim) * sizeof(float));
    };
    if (Lq <= 0 || Lk <= 0) {  // nothing attends: all gradients are zero
      zero_rows(dQ, p.q_sb, p.q_sh, p.q_st, p.B, p.H, Lq, D);
      zero_rows(dK, p.k_sb, p.k_sh, p.k_st, p.B, Hkv, Lk, D);
      zero_rows(dV, p.v_sb, p.v_sh, p.v_st, p.B, Hkv, Lk, Dv);
      return;
    }
    CallWorkspace& cw = call_workspace();
    float* Di = cw.di.get(static_cast<std::size_t>(BH * Lq));
    // D_i = rowsum(dO_i * O_i)  (= sum_j P_ij dP_ij, FlashAttention-2 Alg. 2 line 4)
    qkv::parallel_for(0, BH * Lq, 256, [&](i64 r0, i64 r1) {
      for (i64 r = r0; r < r1; ++r) {
        const i64 i = r % Lq, h = (r / Lq) % p.H, b = r / (Lq * p.H);
        const float* a = dO + b * p.o_sb + h * p.o_sh + i * p.o_st;
        const float* o = O + b * p.o_sb + h * p.o_sh + i * p.o_st;
        V vs = I::zero();
        i64 e = 0;
        for (; e + W <= Dv; e += W) vs = I::fma(I::load(a + e), I::load(o + e), vs);
        float s = I::hsum(vs);
        for (; e < Dv; ++e) s += a[e] * o[e];
        Di[r] = s;
      }
    });
    const BwdCtx x{p, dO, Q, K, V_, LSE, Di, dK, dV, round_up(D, W), round_up(Dv, W), Dropout(p)};
    // Tasks: (b, key/value head hk, key block), each owning its dK, dV rows. A group gk = b * H_kv + hk
    // covers the query heads hk * G .. hk * G + G - 1, whose dQ its segments accumulate.
    const i64 nkb = (Lk + BKB - 1) / BKB, ntask = p.B * Hkv * nkb;
    const int T = qkv::num_threads();
    const i64 head_slot = Lq * x.Dp, slot_size = G * head_slot;  // slots are only touched (made resident) when used
    float* slots = cw.dq_slots.get(static_cast<std::size_t>(2 * T * slot_size));
    cw.slot_bh.assign(static_cast<std::size_t>(2 * T), -1);
    auto dq_head = [&](i64 gk, i64 g) { return dQ + (gk / Hkv) * p.q_sb + ((gk % Hkv) * G + g) * p.q_sh; };
    auto write_dq = [&](i64 gk, const float* src) {
      for (i64 g = 0; g < G; ++g) {
        float* dst = dq_head(gk, g);
        for (i64 i = 0; i < Lq; ++i)
          std::memcpy(dst + i * p.q_st, src + g * head_slot + i * x.Dp, static_cast<std::size_t>(D) * sizeof(float));
      }
    };

    qkv::parallel_for(0, ntask, 1, [&](i64 t0, i64 t1) {
      const int tid = qkv::thread_index();
      ThreadWorkspace& ws = thread_workspace();
      // A group segment covering all key blocks of its key/value head owns its query heads' dQ: it
      // accumulates in place (or, for odd D, in slot 1 and is copied out). Only the first and last
      // segments of a worker's chunk can be partial (a group split between workers); they
      // accumulate in slots 0 and 1 and are summed in thread order after the parallel loop.
      for (i64 t = t0; t < t1;) {
        const i64 gk = t / nkb, seg_end = std::min(t1, (gk + 1) * nkb), b = gk / Hkv, hk = gk % Hkv;
        const bool whole = t == gk * nkb && seg_end == (gk + 1) * nkb;
        GroupRows rows{};
        if (whole && x.Dp == D) {
          rows.dq = dq_head(gk, 0), rows.dq_hs = p.q_sh, rows.dq_ld = p.q_st;
          for (i64 g = 0; g < G; ++g)
            for (i64 i = 0; i < Lq; ++i)
              std::memset(rows.dq + g * p.q_sh + i * p.q_st, 0, static_cast<std::size_t>(D) * sizeof(float));
        } else {
          const int slot = (t == t0 && !whole) ? 0 : 1;
          rows.dq = slots + (2 * tid + slot) * slot_size, rows.dq_hs = head_slot, rows.dq_ld = x.Dp;
          std::memset(rows.dq, 0, static_cast<std::size_t>(slot_size) * sizeof(float));
          if (!whole) cw.slot_bh[2 * tid + slot] = gk;
        }
        rows.q = Q + b * p.q_sb + hk * G * p.q_sh, rows.q_hs = p.q_sh, rows.q_ld = p.q_st;
        rows.dO = dO + b * p.o_sb + hk * G * p.o_sh, rows.dO_hs = p.o_sh, rows.dO_ld = p.o_st;
        if (x.Dp != D) {
          float* qr = ws.buf[kQRows].get(static_cast<std::size_t>(G * Lq * x.Dp));
          for (i64 g = 0; g < G; ++g) copy_rows_padded(qr + g * Lq * x.Dp, x.Dp, rows.q + g * p.q_sh, p.q_st, Lq, D);
          rows.q = qr, rows.q_hs = Lq * x.Dp, rows.q_ld = x.Dp;
        }
        if (x.Dvp != Dv) {
          float* dr = ws.buf[kdORows].get(static_cast<std::size_t>(G * Lq * x.Dvp));
          for (i64 g = 0; g < G; ++g)
            copy_rows_padded(dr + g * Lq * x.Dvp, x.Dvp, rows.dO + g * p.o_sh, p.o_st, Lq, Dv);
          rows.dO = dr, rows.dO_hs = Lq * x.Dvp, rows.dO_ld = x.Dvp;
        }
        for (; t < seg_end; ++t) {
          const i64 rank = t % nkb, kb = p.causal ? zigzag(rank, nkb) : rank;
          backward_block(x, ws, b, hk, kb * BKB, rows);
        }
        if (whole && x.Dp != D) write_dq(gk, rows.dq);
      }
    });

    // Groups split between workers: dQ = sum of their partial slots, in slot (= thread) order.
    const std::vector<i64>& sb = cw.slot_bh;
    for (int s = 0; s < 2 * T; ++s) {
      const i64 gk = sb[s];
      if (gk < 0 || std::find(sb.begin(), sb.begin() + s, gk) != sb.begin() + s) continue;
      qkv::parallel_for(0, G * Lq, 64, [&](i64 r0, i64 r1) {
        for (i64 r = r0; r < r1; ++r) {
          const i64 g = r / Lq, i = r % Lq;
          float* drow = dq_head(gk, g) + i * p.q_st;
          const i64 at = g * head_slot + i * x.Dp;
          std::memcpy(drow, slots + s * slot_size + at, static_cast<std::size_t>(D) * sizeof(float));
          for (int s2 = s + 1; s2 < 2 * T; ++s2)
            if (sb[s2] == gk) {
              const float* src = slots + s2 * slot_size + at;
              for (i64 d = 0; d < D; ++d) drow[d] += src[d];
            }
        }
      });
    }
  }

  static FlashTileSizes tiles() {
    return FlashTileSizes{W, MR, KP, static_cast<int>(BQ), static_cast<int>(BK), static_cast<int>(BQB),
                          static_cast<int>(BKB)};
  }
};

}  // namespace
}  // namespace qkv::kernels::flash
