// Row-at-a-time attention for short key sequences, written once over the same
// SIMD traits type `I` as flash_attention_impl.h and included right after it by
// each ISA translation unit (so it shares Dropout, valid_keys, row_key_end,
// mask_row and the per-thread workspaces).
//
// When a whole score row fits in a few vectors (Lk up to a few dozen keys:
// classifiers, toy seq2seq, short prompts) the tiled kernel's machinery —
// key panels of KP keys, query blocks of BQ rows, online rescaling, per-worker
// dQ slots — costs far more than the products themselves. Here one task is one
// head (b,h): K (and V in backward) are transposed once into [D][kvp] so a
// score row is D broadcast-FMAs over ceil(Lk/W) vectors, the softmax is exact
// (one max, one exp pass: no online rescaling), and the task owns every output
// row of its head (O, LSE; dQ, dK, dV), so results are bitwise reproducible for
// any thread count. Same semantics and same LSE as the tiled kernel; memory per
// thread O((D + Dv) Lk).
#pragma once

namespace qkv::kernels::flash {
namespace {

#define QKV_ROWS_INL __attribute__((always_inline)) inline

template <class I>
struct Rows {
  using V = typename I::V;
  static constexpr int W = I::W;

  // Head (b, h) of every operand: the forward's inputs and outputs, and the backward's. K, V (and
  // dK, dV) are those of h's key/value head h / G (grouped-query attention).
  struct FwdHead {
    const float *q, *k, *v;
    float *o, *lse;
  };
  static FwdHead fwd_head(float* O, float* LSE, const float* Q, const float* K, const float* Vv, const AttnParams& p,
                          i64 b, i64 h) {
    const i64 hk = h / group_size(p);
    return {Q + b * p.q_sb + h * p.q_sh, K + b * p.k_sb + hk * p.k_sh, Vv + b * p.v_sb + hk * p.v_sh,
            O + b * p.o_sb + h * p.o_sh, LSE + (b * p.H + h) * p.Lq};
  }
  struct BwdHead {
    const float *q, *k, *v, *o, *dout, *lse;
    float *dq, *dk, *dv;
  };
  static BwdHead bwd_head(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                          const float* Vv, const float* O, const float* LSE, const AttnParams& p, i64 b, i64 h) {
    const i64 hk = h / group_size(p);
    return {Q + b * p.q_sb + h * p.q_sh,  K + b * p.k_sb + hk * p.k_sh,  Vv + b * p.v_sb + hk * p.v_sh,
            O + b * p.o_sb + h * p.o_sh,  dO + b * p.o_sb + h * p.o_sh, LSE + (b * p.H + h) * p.Lq,
            dQ + b * p.q_sb + h * p.q_sh, dK + b * p.k_sb + hk * p.k_sh, dV + b * p.v_sb + hk * p.v_sh};
  }

  // Kt[d*kvp + j] = K[j][d] for j < kv, 0 for kv <= j < kvp. Rows are read whole; small head
  // dims get a compile-time inner loop (a load and a store per element), larger ones a loop.
  template <int Dc>
  static void transpose_fixed(float* Kt, i64 kvp, const float* K, i64 k_st, i64 kv) {
    for (i64 j = 0; j < kv; ++j)
#pragma GCC unroll 16
      for (int d = 0; d < Dc; ++d) Kt[d * kvp + j] = K[j * k_st + d];
  }
  template <int Dc>
  static void untranspose_fixed(float* out, i64 o_st, const float* Xt, i64 kvp, i64 kv) {
    for (i64 j = 0; j < kv; ++j)
#pragma GCC unroll 16
      for (int d = 0; d < Dc; ++d) out[j * o_st + d] = Xt[d * kvp + j];
  }
  static void transpose_rows(float* Kt, i64 kvp, const float* K, i64 k_st, i64 kv, i64 D) {
    switch (D) {
      case 1: transpose_fixed<1>(Kt, kvp, K, k_st, kv); break;
      case 2: transpose_fixed<2>(Kt, kvp, K, k_st, kv); break;
      case 4: transpose_fixed<4>(Kt, kvp, K, k_st, kv); break;
      case 8: transpose_fixed<8>(Kt, kvp, K, k_st, kv); break;
      case 16: transpose_fixed<16>(Kt, kvp, K, k_st, kv); break;
      default:
        for (i64 d = 0; d < D; ++d)
          for (i64 j = 0; j < kv; ++j) Kt[d * kvp + j] = K[j * k_st + d];
    }
    for (i64 d = 0; d < D; ++d)
      for (i64 j = kv; j < kvp; ++j) Kt[d * kvp + j] = 0.f;
  }
  // The inverse for the gradients: out[j][d] = Xt[d*kvp + j] for j < kv.
  static void untranspose_rows(float* out, i64 o_st, const float* Xt, i64 kvp, i64 kv, i64 D) {
    switch (D) {
      case 1: return untranspose_fixed<1>(out, o_st, Xt, kvp, kv);
      case 2: return untranspose_fixed<2>(out, o_st, Xt, kvp, kv);
      case 4: return untranspose_fixed<4>(out, o_st, Xt, kvp, kv);
      case 8: return untranspose_fixed<8>(out, o_st, Xt, kvp, kv);
      case 16: return untranspose_fixed<16>(out, o_st, Xt, kvp, kv);
      default:
        for (i64 j = 0; j < kv; ++j)
          for (i64 d = 0; d < D; ++d) out[j * o_st + d] = Xt[d * kvp + j];
    }
  }

  // s[0..np) = scale * q . K[j] for j < n (np = round_up(n, W)), then masked: s[j] = -inf for
  // j < lo and j >= n, bias added on [lo, n).
  template <int DC>
  static void scores(float* s, const float* q, const float* Kt, i64 kvp, i64 lo, i64 n, i64 Drt, const AttnParams& p,
                     i64 b, i64 h, i64 i) {
    const i64 D = DC ? DC : Drt;
    const i64 np = round_up(n, W);
    const V vscale = I::set1(p.scale);
    for (i64 j = 0; j < np; j += W) {
      V a0 = I::zero(), a1 = I::zero();
      i64 d = 0;
      for (; d + 2 <= D; d += 2) {
        a0 = I::fma(I::set1(q[d]), I::load(Kt + d * kvp + j), a0);
        a1 = I::fma(I::set1(q[d + 1]), I::load(Kt + (d + 1) * kvp + j), a1);
      }
      if (d < D) a0 = I::fma(I::set1(q[d]), I::load(Kt + d * kvp + j), a0);
      I::store(s + j, I::mul(I::add(a0, a1), vscale));
    }
    if (n < np || lo > 0 || p.bias) Engine<I>::mask_row(s, lo, n, np, p, b, h, i, 0);
  }

  // scores() reading K's rows in place: s[j] = scale * q . K[j] as scalar dot products (keys
  // before lo are not read).
  template <int DC>
  static void scores_direct(float* s, const float* q, const float* k, i64 k_st, i64 lo, i64 n, i64 Drt,
                            const AttnParams& p, i64 b, i64 h, i64 i) {
    const i64 D = DC ? DC : Drt;
    const i64 np = round_up(n, W);
    for (i64 j = lo; j < n; ++j) {
      const float* kr = k + j * k_st;
      float a = 0.f;
      for (i64 d = 0; d < D; ++d) a += q[d] * kr[d];
      s[j] = a * p.scale;
    }
    for (i64 j = n; j < np; ++j) s[j] = 0.f;
    if (n < np || lo > 0 || p.bias) Engine<I>::mask_row(s, lo, n, np, p, b, h, i, 0);
  }

  // One head of the forward pass.
  template <int DC>
  static void forward_head(float* O, float* LSE, const float* Q, const float* K, const float* Vv,
                           const AttnParams& p, const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 h) {
    const i64 kv = valid_keys(p, b), kvp = round_up(std::max<i64>(kv, 1), W);
    const i64 D = DC ? DC : p.D, Dv = DC ? DC : p.Dv;  // compile-time for the common small head dims
    const auto [q, k, v, o, lse] = fwd_head(O, LSE, Q, K, Vv, p, b, h);
    // One or two query rows (a classifier's last layer asks only for token 0): transposing K and
    // V would cost as much as using them, so scores are dot products over K's rows in place.
    const bool direct = p.Lq <= 2;
    float* Kt = direct ? nullptr : ws.buf[kKPacked].get(static_cast<std::size_t>(D * kvp));
    float* s = ws.buf[kScores].get(static_cast<std::size_t>(kvp));
    float* acc = ws.buf[kOAcc].get(static_cast<std::size_t>(Dv));
    float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
    if (!direct) transpose_rows(Kt, kvp, k, p.k_st, kv, D);
    // Short rows: O_i[e] = <P_i, Vt[e]> over a few vectors (independent chains per e); longer
    // rows (and the direct case) accumulate P_ij V_j over j instead.
    const bool v_transposed = !direct && kvp <= 4 * W;
    float* Vt = v_transposed ? ws.buf[kVPacked].get(static_cast<std::size_t>(Dv * kvp)) : nullptr;
    if (v_transposed) transpose_rows(Vt, kvp, v, p.v_st, kv, Dv);
    const V vl2e = I::set1(kLog2e);
    for (i64 i = 0; i < p.Lq; ++i) {
      float* orow = o + i * p.o_st;
      const i64 n = row_key_end(p, kv, i), lo = row_key_begin(p, i);  // keys [lo, n)
      if (n <= lo) {
        std::memset(orow, 0, static_cast<std::size_t>(Dv) * sizeof(float));
        lse[i] = kNegInf;
        continue;
      }
      const i64 np = round_up(n, W);
      if (direct)
        scores_direct<DC>(s, q + i * p.q_st, k, p.k_st, lo, n, D, p, b, h, i);
      else
        scores<DC>(s, q + i * p.q_st, Kt, kvp, lo, n, D, p, b, h, i);
      V vmax = I::set1(kNegInf);
      for (i64 j = 0; j < np; j += W) vmax = I::max(vmax, I::load(s + j));
      // A row whose allowed keys all have a -inf bias has m = -inf: its offset is -inf too, so
      // P = exp2(-inf) = 0 and l = 0 below (no -inf - -inf). NaN scores survive into l (hmax
      // may drop a NaN, exp2 of a NaN lane does not).
      const float m = I::hmax(vmax);
      const V voff = I::set1(m == kNegInf ? kNegInf : -m * kLog2e);
      V vsum = I::zero();
      for (i64 j = 0; j < np; j += W) {
        const V e = I::exp2(I::fma(I::load(s + j), vl2e, voff));
        I::store(s + j, e);
        vsum = I::add(vsum, e);
      }
      const float l = I::hsum(vsum);
      if (l == 0.f) {  // fully masked row
        std::memset(orow, 0, static_cast<std::size_t>(Dv) * sizeof(float));
        lse[i] = kNegInf;
        continue;
      }
      lse[i] = m + std::log(l);
      if (drop.on) {  // dropout acts on P after the row sum (l is undropped)
        const float* mr = mul + i * p.Lk;  // lanes >= n read the next row's: P = 0 there
        for (i64 j = 0; j < np; j += W) I::store(s + j, I::mul(I::load(s + j), I::load(mr + j)));
      }
      const float inv = 1.f / l;
      if (v_transposed) {  // lanes j >= n hold P = 0 (and Vt is zero-padded past kv)
        for (i64 e = 0; e < Dv; ++e) {
          V a = I::zero();
          for (i64 j = 0; j < np; j += W) a = I::fma(I::load(s + j), I::load(Vt + e * kvp + j), a);
          orow[e] = I::hsum(a) * inv;
        }
        continue;
      }
      for (i64 e = 0; e < Dv; ++e) acc[e] = 0.f;
      for (i64 j = lo; j < n; ++j) {
        const float pj = s[j];
        const float* vr = v + j * p.v_st;
        for (i64 e = 0; e < Dv; ++e) acc[e] += pj * vr[e];
      }
      for (i64 e = 0; e < Dv; ++e) orow[e] = acc[e] * inv;
    }
  }

  // ======================================================================================
  // Queries in the vector lanes: W query rows of a head at a time, one key per step
  // ======================================================================================
  // For the small compile-time head dims (4, 8, 16) a score row of a few keys leaves the row
  // code above dominated by horizontal reductions (max, sum, one per output column) and their
  // latency. Here lane r of every vector is query row i0 + r: the score of key j is D
  // broadcast-FMAs, and the max, the sum and O += P_j V_j are lane-wise. Masks (causal, bias)
  // become an additive table [j][lane] built per block; dropout multipliers are read from the
  // head's [Lq][Lk] multipliers through a transposed table. Lanes past Lq carry zero queries
  // and an all -inf offset (P = 0), so they add nothing to dK, dV. The scale is folded into
  // the queries: s = (scale q) . k.

  // qt[d*W + r] = src[(i0 + r)*st + d] * mul for r < nb, 0 for nb <= r < W.
  template <int DC>
  static void transpose_block_in(float* qt, const float* src, i64 st, i64 nb, float mul) {
    for (i64 r = 0; r < W; ++r)
#pragma GCC unroll 16
      for (int d = 0; d < DC; ++d) qt[d * W + r] = r < nb ? src[r * st + d] * mul : 0.f;
  }

  // v[d] lane r = src[r*st + d] * mul for r < nb (0 past nb), d < DC: through the ISA's
  // register transposes for a full block of 8 rows, else through scratch (DC * W floats).
  template <int DC>
  QKV_ROWS_INL static void lanes_in(V* v, float* scratch, const float* src, i64 st, i64 nb, float mul) {
    if constexpr (W == 8 && requires(V* o, const float* x) {
                    I::transpose8x4_in(o, x, i64{}, 1.f);
                    I::transpose8x8_in(o, x, i64{}, 1.f);
                  }) {
      if (nb == W) {
        if constexpr (DC == 4) {
          I::transpose8x4_in(v, src, st, mul);
          return;
        } else if constexpr (DC % 8 == 0) {
          for (int c = 0; c < DC; c += 8) I::transpose8x8_in(v + c, src + c, st, mul);
          return;
        }
      }
    }
    transpose_block_in<DC>(scratch, src, st, nb, mul);
    for (int d = 0; d < DC; ++d) v[d] = I::load(scratch + d * W);
  }

  // Per block: row i0 + r may see keys [nlo[r], nrow[r]) (nrow[r] = 0 when it sees none, and for
  // r >= nb); returns the block's largest nrow.
  static i64 block_rows(i64* nlo, i64* nrow, const AttnParams& p, i64 kv, i64 i0, i64 nb) {
    i64 jend = 0;
    for (i64 r = 0; r < W; ++r) {
      nlo[r] = r < nb ? row_key_begin(p, i0 + r) : 0;
      nrow[r] = r < nb ? row_key_end(p, kv, i0 + r) : 0;
      if (nrow[r] <= nlo[r]) nrow[r] = 0, nlo[r] = 0;
      jend = std::max(jend, nrow[r]);
    }
    return jend;
  }
  // add[j*W + r] = the additive mask of (i0 + r, j): -inf outside [nlo[r], nrow[r]), else the bias (or 0).
  static void block_mask(float* add, const i64* nlo, const i64* nrow, const AttnParams& p, i64 b, i64 h, i64 i0,
                         i64 jend) {
    for (i64 r = 0; r < W; ++r) {
      const float* bp = p.bias && nrow[r] > 0 ? p.bias + b * p.bias_sb + h * p.bias_sh + (i0 + r) * p.bias_si : nullptr;
      for (i64 j = 0; j < jend; ++j)
        add[j * W + r] = j >= nlo[r] && j < nrow[r] ? (bp ? bp[j * p.bias_sj] : 0.f) : kNegInf;
    }
  }
  // dt[j*W + r] = mul[(i0 + r)*Lk + j] (0 for r >= nb). A full block of 8 goes through 8x8
  // register transposes, which write dt up to row round_up(jend, 8) and read up to 7 floats past
  // a row's end: the next row's, or the zero tail of head_multipliers.
  static void block_dropout(float* dt, const float* mul, const AttnParams& p, i64 i0, i64 nb, i64 jend) {
    if constexpr (W == 8 && requires(V* o, const float* x) { I::transpose8x8_in(o, x, i64{}, 1.f); }) {
      if (nb == W) {
        for (i64 j0 = 0; j0 < jend; j0 += 8) {
          V t[8];
          I::transpose8x8_in(t, mul + i0 * p.Lk + j0, p.Lk, 1.f);
          for (int k = 0; k < 8; ++k) I::store(dt + (j0 + k) * W, t[k]);
        }
        return;
      }
    }
    for (i64 j = 0; j < jend; ++j)
      for (i64 r = 0; r < W; ++r) dt[j * W + r] = r < nb ? mul[(i0 + r) * p.Lk + j] : 0.f;
  }

  // Score vector of key row kr for the block's (scaled) queries qv.
  template <int DC>
  QKV_ROWS_INL static V lane_score(const V* qv, const float* kr) {
    V a0 = I::zero(), a1 = I::zero();
#pragma GCC unroll 16
    for (int d = 0; d + 1 < DC; d += 2) {
      a0 = I::fma(qv[d], I::set1(kr[d]), a0);
      a1 = I::fma(qv[d + 1], I::set1(kr[d + 1]), a1);
    }
    if constexpr (DC % 2) a0 = I::fma(qv[DC - 1], I::set1(kr[DC - 1]), a0);
    return I::add(a0, a1);
  }

  template <int DC>
  static void forward_head_lanes(float* O, float* LSE, const float* Q, const float* K, const float* Vv,
                                 const AttnParams& p, const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 h) {
    const i64 kv = valid_keys(p, b), kvm = std::max<i64>(kv, 1);
    const auto [q, k, v, o, lse] = fwd_head(O, LSE, Q, K, Vv, p, b, h);
    float* qt = ws.buf[kQRows].get(static_cast<std::size_t>(DC * W));
    float* S = ws.buf[kScores].get(static_cast<std::size_t>(kvm * W));
    const bool masked = p.causal || p.bias || p.window > 0;
    float* add = masked ? ws.buf[kRowMax].get(static_cast<std::size_t>(kvm * W)) : nullptr;
    float* dt = drop.on ? ws.buf[kPDrop].get(static_cast<std::size_t>((kvm + 8) * W)) : nullptr;
    const float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
    alignas(64) float lm[W], ll[W], llog[W], loff[W], ot[DC * W];
    i64 nlo[W], nrow[W];
    const V vl2e = I::set1(kLog2e);
    for (i64 i0 = 0; i0 < p.Lq; i0 += W) {
      const i64 nb = std::min<i64>(W, p.Lq - i0);
      const i64 jend = block_rows(nlo, nrow, p, kv, i0, nb);
      if (jend > 0) {
        V qv[DC];
        lanes_in<DC>(qv, qt, q + i0 * p.q_st, p.q_st, nb, p.scale);
        if (masked) block_mask(add, nlo, nrow, p, b, h, i0, jend);
        if (drop.on) block_dropout(dt, mul, p, i0, nb, jend);
        V vmax = I::set1(kNegInf);
        for (i64 j = 0; j < jend; ++j) {
          V s = lane_score<DC>(qv, k + j * p.k_st);
          if (masked) s = I::add(s, I::load(add + j * W));
          I::store(S + j * W, s);
          vmax = I::max(vmax, s);
        }
        // A lane whose keys are all masked has m = -inf: offset -inf, so P = exp2(-inf) = 0.
        I::store(lm, vmax);
        for (i64 r = 0; r < W; ++r) loff[r] = lm[r] == kNegInf ? kNegInf : -lm[r] * kLog2e;
        const V voff = I::load(loff);
        V vl = I::zero(), acc[DC];
        for (int e = 0; e < DC; ++e) acc[e] = I::zero();
        for (i64 j = 0; j < jend; ++j) {
          V P = I::exp2(I::fma(I::load(S + j * W), vl2e, voff));
          vl = I::add(vl, P);                             // l is undropped
          if (drop.on) P = I::mul(P, I::load(dt + j * W));
          const float* vr = v + j * p.v_st;
#pragma GCC unroll 16
          for (int e = 0; e < DC; ++e) acc[e] = I::fma(P, I::set1(vr[e]), acc[e]);
        }
        I::store(ll, vl);
        for (int e = 0; e < DC; ++e) I::store(ot + e * W, acc[e]);
      }
      if constexpr (requires(V x) { I::log(x); })  // l >= 1 wherever a row has a key (its max gives exp2(0) = 1)
        if (jend > 0) I::store(llog, I::log(I::max(I::load(ll), I::set1(1.f))));
      for (i64 r = 0; r < nb; ++r) {
        const i64 i = i0 + r;
        float* orow = o + i * p.o_st;
        if (nrow[r] <= 0 || ll[r] == 0.f) {  // fully masked row
          std::memset(orow, 0, static_cast<std::size_t>(DC) * sizeof(float));
          lse[i] = kNegInf;
          continue;
        }
        const float inv = 1.f / ll[r];
        for (int e = 0; e < DC; ++e) orow[e] = ot[e * W + r] * inv;
        constexpr bool vlog = requires(V x) { I::log(x); };
        lse[i] = lm[r] + (vlog && ll[r] >= 1.f && ll[r] <= 0x1p24f ? llog[r] : std::log(ll[r]));
      }
    }
  }

  // Backward with the same layout: per key j, P_j = exp(s_j - L), dP_j = dO V_j, dS_j =
  // P_j (dropout'(dP_j) - D); dQ += dS_j K_j lane-wise; dK_j, dV_j collect lane partials
  // [kv][D][W] over the blocks, summed across lanes once at the end.
  // One key/value head (b, hk): the partials of dK, dV collect every query head of its group.
  template <int DC>
  static void backward_head_lanes(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                                  const float* Vv, const float* O, const float* LSE, const AttnParams& p,
                                  const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 hk) {
    const i64 kv = valid_keys(p, b), kvm = std::max<i64>(kv, 1), G = group_size(p);
    float* qt = ws.buf[kQRows].get(static_cast<std::size_t>(DC * W));
    float* dot = ws.buf[kdORows].get(static_cast<std::size_t>(DC * W));
    const bool masked = p.causal || p.bias || p.window > 0;
    float* add = masked ? ws.buf[kRowMax].get(static_cast<std::size_t>(kvm * W)) : nullptr;
    float* dt = drop.on ? ws.buf[kPDrop].get(static_cast<std::size_t>((kvm + 8) * W)) : nullptr;
    float* dKp = ws.buf[kdKAcc].get(static_cast<std::size_t>(kvm * DC * W));
    float* dVp = ws.buf[kdVAcc].get(static_cast<std::size_t>(kvm * DC * W));
    i64 inited = 0;  // key rows [0, inited) of the partials hold sums; the rest is written on first use
    alignas(64) float loff[W], lD[W], dqt[DC * W];
    i64 nlo[W], nrow[W];
    const V vl2e = I::set1(kLog2e);
    for (i64 h = hk * G; h < (hk + 1) * G; ++h) {
      const auto [q, k, v, o, dout, lse, dq, dk, dv] = bwd_head(dQ, dK, dV, dO, Q, K, Vv, O, LSE, p, b, h);
      const float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
      for (i64 i0 = 0; i0 < p.Lq; i0 += W) {
        const i64 nb = std::min<i64>(W, p.Lq - i0);
        i64 jend = block_rows(nlo, nrow, p, kv, i0, nb);
        for (i64 r = 0; r < nb; ++r)
          if (lse[i0 + r] == kNegInf) nrow[r] = 0;  // fully masked row (e.g. an all -inf bias): zero gradient
        jend = 0;
        for (i64 r = 0; r < W; ++r) jend = std::max(jend, nrow[r]);
        if (jend > 0) {
          V qv[DC], dov[DC], dqa[DC];
          lanes_in<DC>(qv, qt, q + i0 * p.q_st, p.q_st, nb, p.scale);
          lanes_in<DC>(dov, dot, dout + i0 * p.o_st, p.o_st, nb, 1.f);
          for (int d = 0; d < DC; ++d) dqa[d] = I::zero();
          for (i64 r = 0; r < W; ++r) {
            float Di = 0.f;
            if (r < nb && nrow[r] > 0) {
              const float* dorow = dout + (i0 + r) * p.o_st;
              const float* orow = o + (i0 + r) * p.o_st;
              for (int e = 0; e < DC; ++e) Di += dorow[e] * orow[e];
            }
            lD[r] = Di;
            loff[r] = r < nb && nrow[r] > 0 ? -lse[i0 + r] * kLog2e : kNegInf;
          }
          if (masked) block_mask(add, nlo, nrow, p, b, h, i0, jend);
          if (drop.on) block_dropout(dt, mul, p, i0, nb, jend);
          const V voff = I::load(loff), vD = I::load(lD);
          for (i64 j = 0; j < jend; ++j) {
            const float* kr = k + j * p.k_st;
            const float* vr = v + j * p.v_st;
            V s = lane_score<DC>(qv, kr);
            if (masked) s = I::add(s, I::load(add + j * W));
            const V P = I::exp2(I::fma(s, vl2e, voff));
            V dp = lane_score<DC>(dov, vr);
            V pd = P;  // dropout(P)
            if (drop.on) {
              const V m = I::load(dt + j * W);
              pd = I::mul(P, m);
              dp = I::mul(dp, m);
            }
            const V ds = I::mul(P, I::sub(dp, vD));  // dS / scale: the scale sits in qv and below
            float* dkp = dKp + j * DC * W;
            float* dvp = dVp + j * DC * W;
            if (j < inited) {
#pragma GCC unroll 16
              for (int d = 0; d < DC; ++d) {
                I::store(dkp + d * W, I::fma(ds, qv[d], I::load(dkp + d * W)));  // scale dS_ij q_i
                I::store(dvp + d * W, I::fma(pd, dov[d], I::load(dvp + d * W)));
              }
            } else {  // first block to reach key j: no zeroing pass needed
#pragma GCC unroll 16
              for (int d = 0; d < DC; ++d) {
                I::store(dkp + d * W, I::mul(ds, qv[d]));
                I::store(dvp + d * W, I::mul(pd, dov[d]));
              }
            }
#pragma GCC unroll 16
            for (int d = 0; d < DC; ++d) dqa[d] = I::fma(ds, I::set1(kr[d]), dqa[d]);
          }
          inited = std::max(inited, jend);
          const V vscale = I::set1(p.scale);
          for (int d = 0; d < DC; ++d) I::store(dqt + d * W, I::mul(dqa[d], vscale));
        }
        for (i64 r = 0; r < nb; ++r) {
          float* dqrow = dq + (i0 + r) * p.q_st;
          if (nrow[r] <= 0) {
            std::memset(dqrow, 0, static_cast<std::size_t>(DC) * sizeof(float));
            continue;
          }
          for (int d = 0; d < DC; ++d) dqrow[d] = dqt[d * W + r];
        }
      }
    }
    float* dk = dK + b * p.k_sb + hk * p.k_sh;
    float* dv = dV + b * p.v_sb + hk * p.v_sh;
    if (inited < kv) {  // keys no query row may see (causal with Lk > Lq): zero gradient
      std::memset(dKp + inited * DC * W, 0, static_cast<std::size_t>((kv - inited) * DC * W) * sizeof(float));
      std::memset(dVp + inited * DC * W, 0, static_cast<std::size_t>((kv - inited) * DC * W) * sizeof(float));
    }
    float* sums = ws.buf[kdS].get(static_cast<std::size_t>(2 * kvm * DC + 8));
    lane_sums(sums, dKp, kv * DC);
    lane_sums(sums + kv * DC, dVp, kv * DC);
    for (i64 j = 0; j < kv; ++j)
      for (int d = 0; d < DC; ++d) {
        dk[j * p.k_st + d] = sums[j * DC + d];
        dv[j * p.v_st + d] = sums[(kv + j) * DC + d];
      }
    for (i64 j = kv; j < p.Lk; ++j) {
      std::memset(dk + j * p.k_st, 0, static_cast<std::size_t>(DC) * sizeof(float));
      std::memset(dv + j * p.v_st, 0, static_cast<std::size_t>(DC) * sizeof(float));
    }
  }

  // out[k] = the sum of the W lanes of vector k at vecs, k < n (eight at a time where the ISA
  // has a transposing reduction).
  static void lane_sums(float* out, const float* vecs, i64 n) {
    i64 k = 0;
    if constexpr (W == 8 && requires(const float* v, float* o) { I::hsum8(v, o); })
      for (; k + 8 <= n; k += 8) I::hsum8(vecs + k * W, out + k);
    for (; k < n; ++k) out[k] = I::hsum(I::load(vecs + k * W));
  }

  // The lane kernel runs for the compile-time head dims (D == Dv in {4, 8, 16}) on vector ISAs,
  // when a head has enough query rows to fill half a vector (a classifier's last layer that
  // only asks for token 0 has Lq = 1: one row per head runs faster in the row layout).
  static bool use_lanes(const AttnParams& p) { return W >= 8 && p.Lk <= 64 && p.Lq >= W / 2; }

  // Dropout multipliers of the whole head, [Lq][Lk] plus a zero tail of W so a row's last
  // vector can be loaded whole.
  static float* head_multipliers(const Dropout& drop, ThreadWorkspace& ws, const AttnParams& p, i64 b, i64 h) {
    const i64 n = p.Lq * p.Lk;
    float* mul = ws.buf[kDropMul].get(static_cast<std::size_t>(n + W));
    drop.head(mul, b, h);
    for (i64 j = n; j < n + W; ++j) mul[j] = 0.f;
    return mul;
  }

  // Calls f.template operator()<DC>() with DC = the head dim when D == Dv is one of the small
  // ones (loops then unroll fully), else DC = 0 (run-time dims).
  template <class F>
  static void dispatch_head_dim(const AttnParams& p, F& f) {
    if (p.D == p.Dv) {
      switch (p.D) {
        case 4: return f.template operator()<4>();
        case 8: return f.template operator()<8>();
        case 16: return f.template operator()<16>();
        default: break;
      }
    }
    f.template operator()<0>();
  }

  static i64 heads_per_task(const AttnParams& p) {
    // ~16k multiply-adds per task keeps the fork cost of a parallel_for small.
    const i64 work = std::max<i64>(1, p.Lq * std::max<i64>(p.Lk, 1) * (p.D + p.Dv));
    return std::max<i64>(1, 16384 / work);
  }

  static void forward(float* O, float* LSE, const float* Q, const float* K, const float* Vv, const AttnParams& p) {
    if (p.B <= 0 || p.H <= 0 || p.Lq <= 0) return;
    const Dropout drop(p);
    qkv::parallel_for(0, p.B * p.H, heads_per_task(p), [&](i64 t0, i64 t1) {
      ThreadWorkspace& ws = thread_workspace();
      auto run = [&]<int DC>() {
        if constexpr (DC != 0)
          if (use_lanes(p)) {
            for (i64 t = t0; t < t1; ++t) forward_head_lanes<DC>(O, LSE, Q, K, Vv, p, drop, ws, t / p.H, t % p.H);
            return;
          }
        for (i64 t = t0; t < t1; ++t) forward_head<DC>(O, LSE, Q, K, Vv, p, drop, ws, t / p.H, t % p.H);
      };
      dispatch_head_dim(p, run);
    });
  }

  // The keys [lo, n) backward row i sees; false, with its dQ row zeroed, when it sees none or its
  // forward row was fully masked (LSE = -inf): zero gradient.
  static bool backward_row_keys(const AttnParams& p, i64 kv, i64 i, const float* lse, float* dqrow, i64 D, i64& lo,
                                i64& n) {
    n = row_key_end(p, kv, i), lo = row_key_begin(p, i);
    if (n > lo && lse[i] != kNegInf) return true;
    std::memset(dqrow, 0, static_cast<std::size_t>(D) * sizeof(float));
    return false;
  }

  // backward_head for one or two query rows: K and V read in place, dK and dV rows written
  // directly (no transposes, which would cost as much as the work). One key/value head (b, hk):
  // its dK, dV rows sum every query head of its group.
  template <int DC>
  static void backward_head_direct(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                                   const float* Vv, const float* O, const float* LSE, const AttnParams& p,
                                   const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 hk) {
    const i64 kv = valid_keys(p, b), kvp = round_up(std::max<i64>(kv, 1), W), G = group_size(p);
    const i64 D = DC ? DC : p.D, Dv = DC ? DC : p.Dv;
    float* s = ws.buf[kScores].get(static_cast<std::size_t>(kvp));
    float* dqa = ws.buf[kOAcc].get(static_cast<std::size_t>(D));
    {
      float* dk = dK + b * p.k_sb + hk * p.k_sh;
      float* dv = dV + b * p.v_sb + hk * p.v_sh;
      for (i64 j = 0; j < p.Lk; ++j) {  // keys at or beyond kv (or seen by no row) keep zero gradient
        for (i64 d = 0; d < D; ++d) dk[j * p.k_st + d] = 0.f;
        for (i64 e = 0; e < Dv; ++e) dv[j * p.v_st + e] = 0.f;
      }
    }
    const V vl2e = I::set1(kLog2e);
    for (i64 h = hk * G; h < (hk + 1) * G; ++h) {
      const auto [q, k, v, o, dout, lse, dq, dk, dv] = bwd_head(dQ, dK, dV, dO, Q, K, Vv, O, LSE, p, b, h);
      const float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
      for (i64 i = 0; i < p.Lq; ++i) {
        float* dqrow = dq + i * p.q_st;
        i64 lo, n;  // keys [lo, n)
        if (!backward_row_keys(p, kv, i, lse, dqrow, D, lo, n)) continue;
        const float* qrow = q + i * p.q_st;
        const float* dorow = dout + i * p.o_st;
        const float* orow = o + i * p.o_st;
        scores_direct<DC>(s, qrow, k, p.k_st, lo, n, D, p, b, h, i);
        const V voff = I::set1(-lse[i] * kLog2e);
        for (i64 j = 0; j < round_up(n, W); j += W) I::store(s + j, I::exp2(I::fma(I::load(s + j), vl2e, voff)));
        float Di = 0.f;
        for (i64 e = 0; e < Dv; ++e) Di += dorow[e] * orow[e];
        for (i64 d = 0; d < D; ++d) dqa[d] = 0.f;
        for (i64 j = lo; j < n; ++j) {
          const float* kr = k + j * p.k_st;
          const float* vr = v + j * p.v_st;
          float dp = 0.f;
          for (i64 e = 0; e < Dv; ++e) dp += dorow[e] * vr[e];
          const float P = s[j];
          float pd = P;  // dropout(P)
          if (drop.on) {
            const float m = mul[i * p.Lk + j];
            pd = P * m;
            dp *= m;
          }
          const float ds = p.scale * P * (dp - Di);
          float* dvr = dv + j * p.v_st;
          float* dkr = dk + j * p.k_st;
          for (i64 e = 0; e < Dv; ++e) dvr[e] += pd * dorow[e];
          for (i64 d = 0; d < D; ++d) {
            dkr[d] += ds * qrow[d];
            dqa[d] += ds * kr[d];
          }
        }
        for (i64 d = 0; d < D; ++d) dqrow[d] = dqa[d];
      }
    }
  }

  // One key/value head of the backward pass (FlashAttention-2 Alg. 2's quantities, one row at a
  // time, for each query head of its group):
  //   P = exp(S - L_i), D_i = rowsum(dO_i * O_i), dV += dropout(P)^T dO,
  //   dP = dropout'(dO V^T), dS = P * (dP - D_i), dQ = scale dS K, dK += scale dS^T Q.
  template <int DC>
  static void backward_head(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                            const float* Vv, const float* O, const float* LSE, const AttnParams& p,
                            const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 hk) {
    const i64 kv = valid_keys(p, b), kvp = round_up(std::max<i64>(kv, 1), W), G = group_size(p);
    const i64 D = DC ? DC : p.D, Dv = DC ? DC : p.Dv;  // compile-time for the common small head dims
    const float* k = K + b * p.k_sb + hk * p.k_sh;
    const float* v = Vv + b * p.v_sb + hk * p.v_sh;
    float* Kt = ws.buf[kKPacked].get(static_cast<std::size_t>(D * kvp));
    float* Vt = ws.buf[kVPacked].get(static_cast<std::size_t>(Dv * kvp));
    float* dKt = ws.buf[kdKAcc].get(static_cast<std::size_t>(D * kvp));   // dK^T [D][kvp]
    float* dVt = ws.buf[kdVAcc].get(static_cast<std::size_t>(Dv * kvp));  // dV^T [Dv][kvp]
    float* s = ws.buf[kScores].get(static_cast<std::size_t>(kvp));
    float* dP = ws.buf[kdS].get(static_cast<std::size_t>(kvp));
    transpose_rows(Kt, kvp, k, p.k_st, kv, D);
    transpose_rows(Vt, kvp, v, p.v_st, kv, Dv);
    std::memset(dKt, 0, static_cast<std::size_t>(D * kvp) * sizeof(float));
    std::memset(dVt, 0, static_cast<std::size_t>(Dv * kvp) * sizeof(float));
    const V vl2e = I::set1(kLog2e), vscale = I::set1(p.scale);
    for (i64 h = hk * G; h < (hk + 1) * G; ++h) {
      const float* q = Q + b * p.q_sb + h * p.q_sh;
      const float* o = O + b * p.o_sb + h * p.o_sh;
      const float* dout = dO + b * p.o_sb + h * p.o_sh;
      const float* lse = LSE + (b * p.H + h) * p.Lq;
      float* dq = dQ + b * p.q_sb + h * p.q_sh;
      const float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
      for (i64 i = 0; i < p.Lq; ++i) {
        float* dqrow = dq + i * p.q_st;
        i64 lo, n;  // keys [lo, n)
        if (!backward_row_keys(p, kv, i, lse, dqrow, D, lo, n)) continue;
        const i64 np = round_up(n, W);
        const float* qrow = q + i * p.q_st;
        const float* dorow = dout + i * p.o_st;
        scores<DC>(s, qrow, Kt, kvp, lo, n, D, p, b, h, i);
        float Di = 0.f;
        const float* orow = o + i * p.o_st;
        for (i64 e = 0; e < Dv; ++e) Di += dorow[e] * orow[e];
        // Row i's multipliers; lanes j >= n read the next row's (or the zero tail), harmless since
        // P = 0 there.
        const float* mr = drop.on ? mul + i * p.Lk : nullptr;
        const V voff = I::set1(-lse[i] * kLog2e), vDi = I::set1(Di);
        for (i64 j = 0; j < np; j += W) {
          // P = exp(s - L_i) (masked lanes: exp(-inf) = 0); dP = dO_i V^T (padded keys: zero columns)
          const V P = I::exp2(I::fma(I::load(s + j), vl2e, voff));
          V dp = I::zero();
          for (i64 e = 0; e < Dv; ++e) dp = I::fma(I::set1(dorow[e]), I::load(Vt + e * kvp + j), dp);
          V pd = P;  // dropout(P)
          if (drop.on) {
            const V m = I::load(mr + j);
            pd = I::mul(P, m);
            dp = I::mul(dp, m);
          }
          // dV^T[:, j] += dropout(P)_ij dO_i ;  scale dS_ij = scale P_ij (dP_ij - D_i)
          for (i64 e = 0; e < Dv; ++e) {
            float* dvt = dVt + e * kvp + j;
            I::store(dvt, I::fma(pd, I::set1(dorow[e]), I::load(dvt)));
          }
          const V ds = I::mul(vscale, I::mul(P, I::sub(dp, vDi)));
          I::store(dP + j, ds);
          // dK^T[:, j] += scale dS_ij q_i
          for (i64 d = 0; d < D; ++d) {
            float* dkt = dKt + d * kvp + j;
            I::store(dkt, I::fma(ds, I::set1(qrow[d]), I::load(dkt)));
          }
        }
        // dQ_i = sum_j (scale dS_ij) K_j
        for (i64 d = 0; d < D; ++d) {
          V a = I::zero();
          for (i64 j = 0; j < np; j += W) a = I::fma(I::load(dP + j), I::load(Kt + d * kvp + j), a);
          dqrow[d] = I::hsum(a);
        }
      }
    }
    // dK, dV rows out of their transposes; keys at or beyond kv get zero gradient.
    float* dk = dK + b * p.k_sb + hk * p.k_sh;
    float* dv = dV + b * p.v_sb + hk * p.v_sh;
    untranspose_rows(dk, p.k_st, dKt, kvp, kv, D);
    untranspose_rows(dv, p.v_st, dVt, kvp, kv, Dv);
    for (i64 j = kv; j < p.Lk; ++j) {
      std::memset(dk + j * p.k_st, 0, static_cast<std::size_t>(D) * sizeof(float));
      std::memset(dv + j * p.v_st, 0, static_cast<std::size_t>(Dv) * sizeof(float));
    }
  }

  // Tasks: key/value heads (b, hk), each owning its dK, dV rows and its G query heads' dQ rows.
  static void backward(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                       const float* Vv, const float* O, const float* LSE, const AttnParams& p) {
    if (p.B <= 0 || p.H <= 0) return;
    const Dropout drop(p);
    const i64 Hkv = kv_heads(p);
    const i64 per_task = std::max<i64>(1, heads_per_task(p) / group_size(p));
    qkv::parallel_for(0, p.B * Hkv, per_task, [&](i64 t0, i64 t1) {
      ThreadWorkspace& ws = thread_workspace();
      auto run = [&]<int DC>() {
        if constexpr (DC != 0)
          if (use_lanes(p)) {
            for (i64 t = t0; t < t1; ++t)
              backward_head_lanes<DC>(dQ, dK, dV, dO, Q, K, Vv, O, LSE, p, drop, ws, t / Hkv, t % Hkv);
            return;
          }
        if (p.Lq <= 2) {  // as forward_head's direct case
          for (i64 t = t0; t < t1; ++t)
            backward_head_direct<DC>(dQ, dK, dV, dO, Q, K, Vv, O, LSE, p, drop, ws, t / Hkv, t % Hkv);
          return;
        }
        for (i64 t = t0; t < t1; ++t)
          backward_head<DC>(dQ, dK, dV, dO, Q, K, Vv, O, LSE, p, drop, ws, t / Hkv, t % Hkv);
      };
      dispatch_head_dim(p, run);
    });
  }
};

#undef QKV_ROWS_INL

}  // namespace
}  // namespace qkv::kernels::flash
