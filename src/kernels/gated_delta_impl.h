// The Gated DeltaNet kernels (include/qkv/kernels/gated_delta.h), written once over a SIMD traits
// type `I` and compiled per instruction set: gated_delta_{scalar,avx2,avx512}.cpp each define
// their traits (a vector V of W floats: zero, set1, load, store, fma, mul, sub; MR rows and NB
// vectors of the products' register tiles, RB vectors of the recurrence's column blocks) after
// their `#pragma GCC target` and then include this file. Everything here has internal linkage
// (an anonymous namespace), so the copies compiled for different ISAs never meet at link time.
//
// The maths is transformers' torch_recurrent_gated_delta_rule and torch_chunk_gated_delta_rule
// (models/qwen3_5/modeling_qwen3_5.py), per value head h (key head j):
//
//   recurrent, per token:  S = exp(g) S;  kv = S^T k;  delta = beta (v - kv);  S += k delta^T;
//                          o = S^T q
//   chunked, per chunk of c tokens (cum = the cumulative sum of g within the chunk):
//     A[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j), j < i     (the UT system, strictly lower)
//     (I + A) [U | Wk] = [beta v | beta k exp(cum)]              (forward substitution)
//     v_new = U - Wk S
//     o     = (q exp(cum)) S + P v_new,  P[i][j] = (q_i . k_j) exp(cum_i - cum_j), j <= i
//     S     = exp(cum_{c-1}) S + (k exp(cum_{c-1} - cum))^T v_new
//
// Every column of the state (a value dim) evolves on its own given q, k, g and beta, so the
// recurrence works on blocks of RB vectors of columns with the block's kv, delta and o in
// registers, and the chunked form's products are one register-tiled routine (mm) whose columns
// are value dims (or chunk positions). Column tails narrower than a vector use IsaScalar.
//
// Where the time goes (Dk = Dv = 128, one core with AVX-512): the recurrence streams each head's
// state through L2 twice per token and is bound by that bandwidth; a chunk of 64 spends ~60% in
// the five products (at ~75% of the FMA peak), the rest in the solve, the normalisation, the
// transpose of k and the pairwise decays.
#pragma once

namespace qkv::kernels::gdn {
namespace {

using i64 = std::int64_t;

// One float per "vector": the portable ISA, and the column tails (n % W) of the others.
struct IsaScalar {
  using V = float;
  static constexpr int W = 1, MR = 4, NB = 4, RB = 4;
  static V zero() { return 0.f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V x) { *p = x; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V sub(V a, V b) { return a - b; }
};

#define QKV_GDN_INL __attribute__((always_inline)) static inline

// Key head of value head h: transformers' grouped order (h / (Hv / Hk)) or llama.cpp's tiled
// order (h % Hk).
inline i64 key_head(const GatedDeltaParams& p, i64 h) { return p.tiled ? h % p.Hk : h / (p.Hv / p.Hk); }

// dst = src * scale / sqrt(sum src^2 + eps) when l2 (transformers' l2norm, then the scale),
// else src * scale; D floats.
inline void normalise(float* dst, const float* src, i64 D, bool l2, float eps, float scale) {
  if (l2) {
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (i64 d = 0; d < D; ++d) ss += src[d] * src[d];
    scale *= 1.f / std::sqrt(ss + eps);
  }
  for (i64 d = 0; d < D; ++d) dst[d] = src[d] * scale;
}

template <class I>
struct Kernels {
  // ---------------------------------------------------------------------------------------------
  // The products of the chunked form:
  //   C[i][x] = cs * C[i][x] + as * sum_{p < kdim} A[i * ars + p * aps] * B[p * ldb + x]
  // for i < m, x < n (C is not read when cs == 0). lower: row i sums only p < min(kdim, i0 + MR)
  // for its tile of rows starting at i0, so A[i][p] must be zero for p > i (a lower triangle).
  // ---------------------------------------------------------------------------------------------

  // MR rows x NB vectors of C, accumulated in registers.
  template <class J, int MR, int NB>
  QKV_GDN_INL void tile(float* C, i64 ldc, const float* A, i64 ars, i64 aps, const float* B, i64 ldb, i64 kdim,
                        float cs, float as) {
    using U = typename J::V;
    constexpr int w = J::W;
    U acc[MR][NB];
    for (int r = 0; r < MR; ++r)
      for (int u = 0; u < NB; ++u) acc[r][u] = J::zero();
    for (i64 p = 0; p < kdim; ++p) {
      U b[NB];
      for (int u = 0; u < NB; ++u) b[u] = J::load(B + p * ldb + u * w);
      for (int r = 0; r < MR; ++r) {
        const U a = J::set1(A[r * ars + p * aps]);
        for (int u = 0; u < NB; ++u) acc[r][u] = J::fma(a, b[u], acc[r][u]);
      }
    }
    const U vs = J::set1(as), vc = J::set1(cs);
    for (int r = 0; r < MR; ++r)
      for (int u = 0; u < NB; ++u) {
        float* c = C + r * ldc + u * w;
        const U x = J::mul(vs, acc[r][u]);
        J::store(c, cs != 0.f ? J::fma(vc, J::load(c), x) : x);
      }
  }

  // Every row of one column block (NB vectors of J).
  template <class J, int NB>
  static void rows(float* C, i64 ldc, const float* A, i64 ars, i64 aps, const float* B, i64 ldb, i64 m, i64 kdim,
                   float cs, float as, bool lower) {
    i64 i = 0;
    for (; i + J::MR <= m; i += J::MR)
      tile<J, J::MR, NB>(C + i * ldc, ldc, A + i * ars, ars, aps, B, ldb, lower ? std::min(kdim, i + J::MR) : kdim,
                         cs, as);
    for (; i < m; ++i)
      tile<J, 1, NB>(C + i * ldc, ldc, A + i * ars, ars, aps, B, ldb, lower ? std::min(kdim, i + 1) : kdim, cs, as);
  }

  static void mm(float* C, i64 ldc, const float* A, i64 ars, i64 aps, const float* B, i64 ldb, i64 m, i64 n, i64 kdim,
                 float cs, float as, bool lower = false) {
    constexpr i64 wide = I::NB * I::W;
    i64 x = 0;
    for (; x + wide <= n; x += wide) rows<I, I::NB>(C + x, ldc, A, ars, aps, B + x, ldb, m, kdim, cs, as, lower);
    for (; x + I::W <= n; x += I::W) rows<I, 1>(C + x, ldc, A, ars, aps, B + x, ldb, m, kdim, cs, as, lower);
    for (; x < n; ++x) rows<IsaScalar, 1>(C + x, ldc, A, ars, aps, B + x, ldb, m, kdim, cs, as, lower);
  }

  // ---------------------------------------------------------------------------------------------
  // Recurrent form
  // ---------------------------------------------------------------------------------------------

  // One token of one head on NB vectors of columns: S (ld floats a row, Dk rows) and o, v at the
  // block's first column. Two passes over the block's rows: the first reads kv = (exp(g) S)^T k
  // (as exp(g) (S^T k): the decay is a scalar, and this pass only reads), the second writes
  // S = exp(g) S + k delta^T and reads o = S^T q from the new rows. The state is written once
  // per token, not twice: at Dk = Dv = 128 a head's state (64 KiB) does not stay in L1 (its
  // 512-byte rows fold onto a quarter of the sets), so each pass streams it from L2.
  template <class J, int NB>
  QKV_GDN_INL void step_cols(float* S, i64 ld, i64 Dk, float* o, const float* qn, const float* kn, const float* v,
                             float decay, float beta) {
    using U = typename J::V;
    constexpr int w = J::W;
    U kv[NB];
    for (int u = 0; u < NB; ++u) kv[u] = J::zero();
    for (i64 i = 0; i < Dk; ++i) {
      const float* s = S + i * ld;
      const U ki = J::set1(kn[i]);
      for (int u = 0; u < NB; ++u) kv[u] = J::fma(ki, J::load(s + u * w), kv[u]);
    }
    const U dec = J::set1(decay), b = J::set1(beta);
    U delta[NB], out[NB];
    for (int u = 0; u < NB; ++u) {
      delta[u] = J::mul(J::sub(J::load(v + u * w), J::mul(dec, kv[u])), b);
      out[u] = J::zero();
    }
    for (i64 i = 0; i < Dk; ++i) {
      float* s = S + i * ld;
      const U ki = J::set1(kn[i]), qi = J::set1(qn[i]);
      for (int u = 0; u < NB; ++u) {
        const U x = J::fma(ki, delta[u], J::mul(dec, J::load(s + u * w)));
        J::store(s + u * w, x);
        out[u] = J::fma(qi, x, out[u]);
      }
    }
    for (int u = 0; u < NB; ++u) J::store(o + u * w, out[u]);
  }

  static void recurrent(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, const GatedDeltaParams& p, i64 h0, i64 h1) {
    const i64 Dk = p.Dk, Dv = p.Dv;
    const float qscale = 1.f / std::sqrt(static_cast<float>(Dk));
    float* qn = scratch(static_cast<std::size_t>(2 * Dk));
    float* kn = qn + Dk;
    constexpr i64 wide = I::RB * I::W;
    // Head by head, so the head's state (Dk Dv floats) stays in cache over the tokens.
    for (i64 h = h0; h < h1; ++h) {
      const i64 j = key_head(p, h);
      float* S = state + h * Dk * Dv;
      for (i64 t = 0; t < p.n; ++t) {
        normalise(qn, q + t * p.q_st + j * Dk, Dk, p.l2norm_qk, p.eps, qscale);
        normalise(kn, k + t * p.k_st + j * Dk, Dk, p.l2norm_qk, p.eps, 1.f);
        const float decay = std::exp(g[t * p.gb_st + h]), b = beta[t * p.gb_st + h];
        const float* vt = v + t * p.v_st + h * Dv;
        float* ot = o + t * p.o_st + h * Dv;
        i64 x = 0;
        for (; x + wide <= Dv; x += wide) step_cols<I, I::RB>(S + x, Dv, Dk, ot + x, qn, kn, vt + x, decay, b);
        for (; x + wide / 2 <= Dv; x += wide / 2)
          step_cols<I, I::RB / 2>(S + x, Dv, Dk, ot + x, qn, kn, vt + x, decay, b);
        for (; x + I::W <= Dv; x += I::W) step_cols<I, 1>(S + x, Dv, Dk, ot + x, qn, kn, vt + x, decay, b);
        for (; x < Dv; ++x) step_cols<IsaScalar, 1>(S + x, Dv, Dk, ot + x, qn, kn, vt + x, decay, b);
      }
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Chunked form
  // ---------------------------------------------------------------------------------------------

  struct Chunk {        // scratch of one chunk of up to C tokens (row strides: the chunk's length c)
    float* qn;          // [c, Dk] normalised, scaled queries; then q exp(cum)
    float* kn;          // [c, Dk] normalised keys; then k exp(cum_last - cum)
    float* kT;          // [Dk, c] the normalised keys transposed
    float* A;           // [c, c] the UT system's strictly lower triangle
    float* P;           // [c, c] the intra-chunk attention (lower triangle with the diagonal)
    float* X;           // [c, Dv + Dk] the solve's [U | Wk]; then U is v_new (row stride ldx)
    float* cum;         // [c] cumulative log decay
    i64 ldx;            // Dv + Dk + 16: rows of a power-of-two length fold onto a few L1 sets, and
                        // the state update, which streams X once per 4 rows of S, missed L1
                        // (Dk = Dv = 128: 16 more floats made it 20% faster)
  };

  // Tokens [t0, t0 + c) of value head h (key head j), state S [Dk, Dv] updated.
  static void chunk(const Chunk& w, float* o, float* S, const float* q, const float* k, const float* v,
                    const float* g, const float* beta, const GatedDeltaParams& p, i64 h, i64 j, i64 t0, i64 c) {
    const i64 Dk = p.Dk, Dv = p.Dv, ldx = w.ldx, nx = Dv + Dk;
    const float qscale = 1.f / std::sqrt(static_cast<float>(Dk));
    float acc = 0.f;
    for (i64 t = 0; t < c; ++t) {
      const i64 tt = t0 + t;
      normalise(w.qn + t * Dk, q + tt * p.q_st + j * Dk, Dk, p.l2norm_qk, p.eps, qscale);
      normalise(w.kn + t * Dk, k + tt * p.k_st + j * Dk, Dk, p.l2norm_qk, p.eps, 1.f);
      acc += g[tt * p.gb_st + h];
      w.cum[t] = acc;
    }
    for (i64 d = 0; d < Dk; ++d)
      for (i64 t = 0; t < c; ++t) w.kT[d * c + t] = w.kn[t * Dk + d];
    // Gram matrices k k^T and q k^T, then their decays (and beta on the UT system's rows).
    mm(w.A, c, w.kn, Dk, 1, w.kT, c, c, c, Dk, 0.f, 1.f);
    mm(w.P, c, w.qn, Dk, 1, w.kT, c, c, c, Dk, 0.f, 1.f);
    for (i64 i = 0; i < c; ++i) {
      const float bi = beta[(t0 + i) * p.gb_st + h];
      float* a = w.A + i * c;
      float* pr = w.P + i * c;
      // exp(cum_i - cum_j) <= 1 as 2^((cum_i - cum_j) log2 e): fast_exp.h's portable exp2 (1.1 ulp),
      // which the compiler vectorises for the file's ISA (std::exp, a library call per pair, took
      // about a tenth of a chunk at c = 64, Dk = Dv = 128).
      for (i64 jj = 0; jj < i; ++jj) {
        const float e = fastexp::exp2_scalar((w.cum[i] - w.cum[jj]) * fastexp::kLog2e);
        a[jj] *= bi * e;
        pr[jj] *= e;
      }
      for (i64 jj = i + 1; jj < c; ++jj) pr[jj] = 0.f;  // (mm's lower reads up to its tile's last row)
      // Right-hand sides: [beta v | beta k exp(cum)].
      const float* vi = v + (t0 + i) * p.v_st + h * Dv;
      float* x = w.X + i * ldx;
      for (i64 d = 0; d < Dv; ++d) x[d] = vi[d] * bi;
      const float ek = bi * std::exp(w.cum[i]);
      for (i64 d = 0; d < Dk; ++d) x[Dv + d] = w.kn[i * Dk + d] * ek;
    }
    // (I + A) X = rhs by forward substitution (A strictly lower, so I + A is unit lower
    // triangular): row i -= A[i][:i] X[:i], rows in order. Blocked: a block of kSolve rows first
    // takes the rows before it in one product (register tiles of MR rows), then the rows within
    // the block one by one.
    constexpr i64 kSolve = 16;
    for (i64 i0 = 0; i0 < c; i0 += kSolve) {
      const i64 rows = std::min(kSolve, c - i0);
      float* xb = w.X + i0 * ldx;
      mm(xb, ldx, w.A + i0 * c, c, 1, w.X, ldx, rows, nx, i0, 1.f, -1.f);
      for (i64 i = 1; i < rows; ++i) mm(xb + i * ldx, ldx, w.A + (i0 + i) * c + i0, 0, 1, xb, ldx, 1, nx, i, 1.f, -1.f);
    }
    // The decays applied once: q exp(cum), k exp(cum_last - cum).
    const float last = w.cum[c - 1];
    for (i64 t = 0; t < c; ++t) {
      const float eq = std::exp(w.cum[t]), ek = std::exp(last - w.cum[t]);
      float *qt = w.qn + t * Dk, *kt = w.kn + t * Dk;
      for (i64 d = 0; d < Dk; ++d) qt[d] *= eq;
      for (i64 d = 0; d < Dk; ++d) kt[d] *= ek;
    }
    // v_new = U - Wk S (in place over U); o = q S + P v_new; S = exp(last) S + k^T v_new.
    float* oc = o + t0 * p.o_st + h * Dv;
    mm(w.X, ldx, w.X + Dv, ldx, 1, S, Dv, c, Dv, Dk, 1.f, -1.f);
    mm(oc, p.o_st, w.qn, Dk, 1, S, Dv, c, Dv, Dk, 0.f, 1.f);
    mm(oc, p.o_st, w.P, c, 1, w.X, ldx, c, Dv, c, 1.f, 1.f, /*lower=*/true);
    // (exp(last) may underflow to 0 for a strongly decaying chunk: then the old state is dropped,
    // which is what it would have decayed to.)
    mm(S, Dv, w.kn, 1, Dk, w.X, ldx, Dk, Dv, c, std::exp(last), 1.f);
  }

  static void chunked(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const GatedDeltaParams& p, i64 h0, i64 h1) {
    if (p.n <= 0) return;
    const i64 Dk = p.Dk, Dv = p.Dv, C = std::min(p.chunk, p.n);
    Chunk w;
    w.ldx = Dv + Dk + 16;
    float* buf = scratch(static_cast<std::size_t>(3 * C * Dk + 2 * C * C + C * w.ldx + C));
    w.qn = buf;
    w.kn = w.qn + C * Dk;
    w.kT = w.kn + C * Dk;
    w.A = w.kT + Dk * C;
    w.P = w.A + C * C;
    w.X = w.P + C * C;
    w.cum = w.X + C * w.ldx;
    for (i64 h = h0; h < h1; ++h) {
      const i64 j = key_head(p, h);
      float* S = state + h * Dk * Dv;
      for (i64 t0 = 0; t0 < p.n; t0 += C) chunk(w, o, S, q, k, v, g, beta, p, h, j, t0, std::min(C, p.n - t0));
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Causal depthwise convolution + SiLU
  // ---------------------------------------------------------------------------------------------

  // Channels [c0, c1) as rows of a product over channels: the taps transposed to wT [K, nc]
  // (contiguous per tap), then per token out = silu(sum_j wT[j] * x'[t + j]) with plain loops the
  // compiler vectorises for the file's ISA. SiLU as PyTorch's: x / (1 + exp(-x)), std::exp.
  static void conv_silu(float* out, i64 ldo, const float* x, i64 ldx, i64 n, i64 Cc, const float* w, i64 K,
                        float* state, i64 c0, i64 c1) {
    const i64 nc = c1 - c0;
    if (nc <= 0) return;
    float* wT = scratch(static_cast<std::size_t>((K + 1) * nc));
    float* acc = wT + K * nc;
    for (i64 c = 0; c < nc; ++c)
      for (i64 jj = 0; jj < K; ++jj) wT[jj * nc + c] = w[(c0 + c) * K + jj];
    // Row r of x' = the K - 1 state rows, then x.
    auto row = [&](i64 r) { return r < K - 1 ? state + r * Cc + c0 : x + (r - (K - 1)) * ldx + c0; };
    for (i64 t = 0; t < n; ++t) {
      for (i64 c = 0; c < nc; ++c) acc[c] = 0.f;
      for (i64 jj = 0; jj < K; ++jj) {
        const float* xr = row(t + jj);
        const float* wr = wT + jj * nc;
#pragma omp simd
        for (i64 c = 0; c < nc; ++c) acc[c] += wr[c] * xr[c];
      }
      float* orow = out + t * ldo + c0;
      for (i64 c = 0; c < nc; ++c) orow[c] = acc[c] / (1.f + std::exp(-acc[c]));
    }
    // The new state: the last K - 1 rows of x' (rows n .. n + K - 2). When n < K - 1, part of it
    // is the old state shifted up by n rows (copied in increasing order, so no row is
    // overwritten before it is read).
    for (i64 r = 0; r < K - 1; ++r) {
      const i64 src = n + r;
      float* dst = state + r * Cc + c0;
      const float* s = row(src);
      if (s != dst) std::copy(s, s + nc, dst);
    }
  }
};

#undef QKV_GDN_INL

}  // namespace
}  // namespace qkv::kernels::gdn
