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

template <class I>
struct Rows {
  using V = typename I::V;
  static constexpr int W = I::W;

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
  // j >= n, bias added on [0, n).
  template <int DC>
  static void scores(float* s, const float* q, const float* Kt, i64 kvp, i64 n, i64 Drt, const AttnParams& p, i64 b,
                     i64 h, i64 i) {
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
    if (n < np || p.bias) Engine<I>::mask_row(s, n, np, p, b, h, i, 0);
  }

  // One head of the forward pass.
  template <int DC>
  static void forward_head(float* O, float* LSE, const float* Q, const float* K, const float* Vv,
                           const AttnParams& p, const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 h) {
    const i64 kv = valid_keys(p, b), kvp = round_up(std::max<i64>(kv, 1), W);
    const i64 D = DC ? DC : p.D, Dv = DC ? DC : p.Dv;  // compile-time for the common small head dims
    const float* q = Q + b * p.q_sb + h * p.q_sh;
    const float* k = K + b * p.k_sb + h * p.k_sh;
    const float* v = Vv + b * p.v_sb + h * p.v_sh;
    float* o = O + b * p.o_sb + h * p.o_sh;
    float* lse = LSE + (b * p.H + h) * p.Lq;
    float* Kt = ws.buf[kKPacked].get(static_cast<std::size_t>(D * kvp));
    float* s = ws.buf[kScores].get(static_cast<std::size_t>(kvp));
    float* acc = ws.buf[kOAcc].get(static_cast<std::size_t>(Dv));
    float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
    transpose_rows(Kt, kvp, k, p.k_st, kv, D);
    // Short rows: O_i[e] = <P_i, Vt[e]> over a few vectors (independent chains per e); longer
    // rows accumulate P_ij V_j over j instead.
    const bool v_transposed = kvp <= 4 * W;
    float* Vt = v_transposed ? ws.buf[kVPacked].get(static_cast<std::size_t>(Dv * kvp)) : nullptr;
    if (v_transposed) transpose_rows(Vt, kvp, v, p.v_st, kv, Dv);
    const V vl2e = I::set1(kLog2e);
    for (i64 i = 0; i < p.Lq; ++i) {
      float* orow = o + i * p.o_st;
      const i64 n = row_key_end(p, kv, i);
      if (n <= 0) {
        std::memset(orow, 0, static_cast<std::size_t>(Dv) * sizeof(float));
        lse[i] = kNegInf;
        continue;
      }
      const i64 np = round_up(n, W);
      scores<DC>(s, q + i * p.q_st, Kt, kvp, n, D, p, b, h, i);
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
      for (i64 j = 0; j < n; ++j) {
        const float pj = s[j];
        const float* vr = v + j * p.v_st;
        for (i64 e = 0; e < Dv; ++e) acc[e] += pj * vr[e];
      }
      for (i64 e = 0; e < Dv; ++e) orow[e] = acc[e] * inv;
    }
  }

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
        for (i64 t = t0; t < t1; ++t) forward_head<DC>(O, LSE, Q, K, Vv, p, drop, ws, t / p.H, t % p.H);
      };
      dispatch_head_dim(p, run);
    });
  }

  // One head of the backward pass (FlashAttention-2 Alg. 2's quantities, one row at a time):
  //   P = exp(S - L_i), D_i = rowsum(dO_i * O_i), dV += dropout(P)^T dO,
  //   dP = dropout'(dO V^T), dS = P * (dP - D_i), dQ = scale dS K, dK += scale dS^T Q.
  template <int DC>
  static void backward_head(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                            const float* Vv, const float* O, const float* LSE, const AttnParams& p,
                            const Dropout& drop, ThreadWorkspace& ws, i64 b, i64 h) {
    const i64 kv = valid_keys(p, b), kvp = round_up(std::max<i64>(kv, 1), W);
    const i64 D = DC ? DC : p.D, Dv = DC ? DC : p.Dv;  // compile-time for the common small head dims
    const float* q = Q + b * p.q_sb + h * p.q_sh;
    const float* k = K + b * p.k_sb + h * p.k_sh;
    const float* v = Vv + b * p.v_sb + h * p.v_sh;
    const float* o = O + b * p.o_sb + h * p.o_sh;
    const float* dout = dO + b * p.o_sb + h * p.o_sh;
    const float* lse = LSE + (b * p.H + h) * p.Lq;
    float* dq = dQ + b * p.q_sb + h * p.q_sh;
    float* dk = dK + b * p.k_sb + h * p.k_sh;
    float* dv = dV + b * p.v_sb + h * p.v_sh;
    float* Kt = ws.buf[kKPacked].get(static_cast<std::size_t>(D * kvp));
    float* Vt = ws.buf[kVPacked].get(static_cast<std::size_t>(Dv * kvp));
    float* dKt = ws.buf[kdKAcc].get(static_cast<std::size_t>(D * kvp));   // dK^T [D][kvp]
    float* dVt = ws.buf[kdVAcc].get(static_cast<std::size_t>(Dv * kvp));  // dV^T [Dv][kvp]
    float* s = ws.buf[kScores].get(static_cast<std::size_t>(kvp));
    const float* mul = drop.on ? head_multipliers(drop, ws, p, b, h) : nullptr;
    float* dP = ws.buf[kdS].get(static_cast<std::size_t>(kvp));
    transpose_rows(Kt, kvp, k, p.k_st, kv, D);
    transpose_rows(Vt, kvp, v, p.v_st, kv, Dv);
    std::memset(dKt, 0, static_cast<std::size_t>(D * kvp) * sizeof(float));
    std::memset(dVt, 0, static_cast<std::size_t>(Dv * kvp) * sizeof(float));
    const V vl2e = I::set1(kLog2e), vscale = I::set1(p.scale);
    for (i64 i = 0; i < p.Lq; ++i) {
      float* dqrow = dq + i * p.q_st;
      const i64 n = row_key_end(p, kv, i);
      if (n <= 0 || lse[i] == kNegInf) {  // fully masked row: zero gradient
        std::memset(dqrow, 0, static_cast<std::size_t>(D) * sizeof(float));
        continue;
      }
      const i64 np = round_up(n, W);
      const float* qrow = q + i * p.q_st;
      const float* dorow = dout + i * p.o_st;
      scores<DC>(s, qrow, Kt, kvp, n, D, p, b, h, i);
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
    // dK, dV rows out of their transposes; keys at or beyond kv get zero gradient.
    untranspose_rows(dk, p.k_st, dKt, kvp, kv, D);
    untranspose_rows(dv, p.v_st, dVt, kvp, kv, Dv);
    for (i64 j = kv; j < p.Lk; ++j) {
      std::memset(dk + j * p.k_st, 0, static_cast<std::size_t>(D) * sizeof(float));
      std::memset(dv + j * p.v_st, 0, static_cast<std::size_t>(Dv) * sizeof(float));
    }
  }

  static void backward(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                       const float* Vv, const float* O, const float* LSE, const AttnParams& p) {
    if (p.B <= 0 || p.H <= 0) return;
    const Dropout drop(p);
    qkv::parallel_for(0, p.B * p.H, heads_per_task(p), [&](i64 t0, i64 t1) {
      ThreadWorkspace& ws = thread_workspace();
      auto run = [&]<int DC>() {
        for (i64 t = t0; t < t1; ++t)
          backward_head<DC>(dQ, dK, dV, dO, Q, K, Vv, O, LSE, p, drop, ws, t / p.H, t % p.H);
      };
      dispatch_head_dim(p, run);
    });
  }
};

}  // namespace
}  // namespace qkv::kernels::flash
