// Decode attention (kernels/decode_attention.h), written once over the SIMD traits type `I` of
// flash_attention_impl.h and included after it by each ISA translation unit
// (flash_attention_{scalar,avx2,avx512}.cpp), so it shares their vectors, exp2 and workspaces.
//
// One task is (sequence b, key/value head hk, key chunk c). Its rows are the R = G * q_len[b]
// query rows of hk's G query heads (row r = g * q_len[b] + i), and it walks its chunk's keys in
// blocks of KB: per block it computes the scores of every row (each K row is loaded once and
// used by all R rows), takes the online-softmax step of each row (FlashAttention's running max
// m, sum l and unnormalised output o, in base-2 units: the queries carry scale * log2 e), and
// adds P V with every V row loaded once per group of rows held in registers. Reading each
// cached K and V row once per group instead of once per query head is what makes grouped-query
// decoding fast: the work is bounded by memory bandwidth, K and V bytes per group.
//
// The cache's elements KT are float, or IEEE half (std::uint16_t, kernels/half.h) for a float16
// KV cache: half the bytes, widened to float as they are loaded (I::load_half).
#pragma once

namespace qkv::kernels::flash {
namespace {

template <class I, class KT = float>
struct Decode {
  using V = typename I::V;
  static constexpr int W = I::W;
  // W cached elements as a vector of floats; one element as a float.
  __attribute__((always_inline)) static inline V ld(const KT* p) {
    if constexpr (std::is_same_v<KT, float>)
      return I::load(p);
    else
      return I::load_half(p);
  }
  static float ld1(const KT* p) {
    if constexpr (std::is_same_v<KT, float>)
      return *p;
    else
      return half_to_float(*p);
  }
  static constexpr i64 KB = 64;  // keys per block: K and V of a block (32 KiB at D = 64) stay in L1
  // Rows of the P V register block for a chunk of CV <= 4 vectors: M * CV accumulators plus CV
  // V vectors must fit the registers (32 zmm, 16 ymm).
  static constexpr int kMaxRows = W >= 16 ? 6 : W >= 8 ? 2 : 4;

  // The keys query row i of a sequence with nq new queries and nk keys sees: [lo, hi).
  static i64 key_hi(i64 nq, i64 nk, i64 i) { return nk - nq + i + 1; }
  static i64 key_lo(const DecodeParams& p, i64 nq, i64 nk, i64 i) { return decode_key_lo(p, nq, nk, i); }

  // S[r*KB + j] = <qs_r, K_j> for rows r < R (qs rows Dp wide, zero past D) and keys j < nb
  // (K_j = K + j * k_st, D elements), and up to round_up(nb, W) with copies of the last key. W
  // keys at a time: W independent FMA chains per row, reduced together (I::hsum_lanes).
  static void scores(float* S, const float* qs, i64 R, i64 Dp, const KT* K, i64 k_st, i64 nb, i64 D, i64 avail) {
    const i64 Dw = D / W * W;
    const KT* kr[W];
    for (i64 j0 = 0; j0 < nb; j0 += W) {
      for (int kk = 0; kk < W; ++kk) kr[kk] = K + std::min<i64>(j0 + kk, nb - 1) * k_st;
      for (i64 j = j0 + kPrefetchKeys; j < std::min(j0 + W + kPrefetchKeys, avail); ++j) prefetch_row(K + j * k_st, D);
      for (i64 r = 0; r < R; ++r) {
        const float* q = qs + r * Dp;
        V acc[W];
#pragma GCC unroll 16
        for (int kk = 0; kk < W; ++kk) acc[kk] = I::zero();
        for (i64 d = 0; d < Dw; d += W) {
          const V qv = I::load(q + d);
#pragma GCC unroll 16
          for (int kk = 0; kk < W; ++kk) acc[kk] = I::fma(qv, ld(kr[kk] + d), acc[kk]);
        }
        float* s = S + r * KB + j0;
        I::store(s, I::hsum_lanes(acc));
        if (Dw < D)
          for (int kk = 0; kk < W; ++kk)
            for (i64 d = Dw; d < D; ++d) s[kk] += q[d] * ld1(kr[kk] + d);
      }
    }
  }

  // o[m*Dp + e0 + c*W ..] += sum_{j < nb} P[m*KB + j] V[j*v_st + e0 + c*W ..] for rows m < M and
  // vectors c < CV, accumulated in registers.
  template <int M, int CV>
  static void pv_block(float* o, i64 Dp, const float* P, i64 nb, const KT* Vb, i64 v_st, i64 avail, i64 D) {
    V acc[M][CV];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int c = 0; c < CV; ++c) acc[m][c] = I::load(o + m * Dp + c * W);
    for (i64 j = 0; j < nb; ++j) {
      if (j + kPrefetchKeys < avail) prefetch_row(Vb + (j + kPrefetchKeys) * v_st, D);
      V vv[CV];
#pragma GCC unroll 4
      for (int c = 0; c < CV; ++c) vv[c] = ld(Vb + j * v_st + c * W);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const V pm = I::set1(P[m * KB + j]);
#pragma GCC unroll 4
        for (int c = 0; c < CV; ++c) acc[m][c] = I::fma(pm, vv[c], acc[m][c]);
      }
    }
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 4
      for (int c = 0; c < CV; ++c) I::store(o + m * Dp + c * W, acc[m][c]);
  }
  template <int M = kMaxRows>
  static void pv_rows(int m, int cv, float* o, i64 Dp, const float* P, i64 nb, const KT* Vb, i64 v_st, i64 avail,
                      i64 D) {
    if constexpr (M > 1) {
      if (m < M) return pv_rows<M - 1>(m, cv, o, Dp, P, nb, Vb, v_st, avail, D);
    }
    switch (cv) {
      case 4: return pv_block<M, 4>(o, Dp, P, nb, Vb, v_st, avail, D);
      case 3: return pv_block<M, 3>(o, Dp, P, nb, Vb, v_st, avail, D);
      case 2: return pv_block<M, 2>(o, Dp, P, nb, Vb, v_st, avail, D);
      default: return pv_block<M, 1>(o, Dp, P, nb, Vb, v_st, avail, D);
    }
  }
  // o[r] += P[r] V over the block, every row r < R: whole vectors in register blocks, the last
  // D % W columns one by one.
  static void pv(float* o, i64 R, i64 Dp, const float* P, i64 nb, const KT* Vb, i64 v_st, i64 D, i64 avail) {
    const i64 Dw = D / W * W;
    for (i64 e0 = 0; e0 < Dw; e0 += 4 * W) {
      const int cv = static_cast<int>(std::min<i64>(4, (Dw - e0) / W));
      for (i64 r0 = 0; r0 < R; r0 += kMaxRows) {
        const int m = static_cast<int>(std::min<i64>(kMaxRows, R - r0));
        pv_rows(m, cv, o + r0 * Dp + e0, Dp, P + r0 * KB, nb, Vb + e0, v_st, e0 == 0 && r0 == 0 ? avail : 0, D);
      }
    }
    for (i64 e = Dw; e < D; ++e)
      for (i64 r = 0; r < R; ++r) {
        float a = o[r * Dp + e];
        for (i64 j = 0; j < nb; ++j) a += P[r * KB + j] * ld1(Vb + j * v_st + e);
        o[r * Dp + e] = a;
      }
  }

  // Software prefetch of the rows kPrefetchKeys keys ahead of each stream (K in scores, V in
  // P V), into L2 (locality 1: prefetcht2). Without it the block's arithmetic, which waits on the
  // rows' loads, left memory idle: one thread at B = 1, H = 9 on H_kv = 3, D = 64, depth 2048
  // read K and V at ~63% of this machine's read bandwidth; with it ~75% (distances 8 to 64 keys
  // and hints t0/t1/t2 all within a few % of each other; medians of 3 runs).
  static constexpr i64 kPrefetchKeys = 8;
  static void prefetch_row(const KT* x, i64 D) {
    constexpr i64 kLine = 64 / sizeof(KT);  // elements per cache line
    for (i64 d = 0; d < D; d += kLine) __builtin_prefetch(x + d, 0, 1);
  }

  // Where a task leaves its rows: the output itself (one chunk), or a partial slot [m, l, o[D]]
  // per row for the merge.
  struct Out {
    float* O;
    float* parts;  // null when S == 1
    i64 slot;      // floats per partial row: D + 2
  };

  // One task: keys [c0, c1) of key/value head hk of sequence b, all rows of its query heads.
  static void task(const DecodeParams& p, const float* Q, const KT* K, const KT* Vv, const Out& out, i64 b,
                   i64 hk, i64 c0, i64 c1, i64 part0) {
    const i64 nq = p.q_len[b], nk = p.k_len[b], G = p.H_kv > 0 ? p.H / p.H_kv : 1, R = G * nq, D = p.D;
    const i64 Dp = round_up(D, W);
    if (R == 0) return;
    ThreadWorkspace& ws = thread_workspace();
    float* qs = ws.buf[kQPacked].get(static_cast<std::size_t>(R * Dp));
    float* o = ws.buf[kOAcc].get(static_cast<std::size_t>(R * Dp));
    float* S = ws.buf[kScores].get(static_cast<std::size_t>(R * KB));
    float* m = ws.buf[kRowMax].get(static_cast<std::size_t>(R));
    float* l = ws.buf[kRowSum].get(static_cast<std::size_t>(R));
    const float qmul = p.scale * kLog2e;  // scores in base-2 units: P = exp2(s - m)
    for (i64 r = 0; r < R; ++r) {
      const float* q = Q + b * p.q_sb + (hk * G + r / nq) * p.q_sh + (r % nq) * p.q_st;
      for (i64 d = 0; d < D; ++d) qs[r * Dp + d] = q[d] * qmul;
      for (i64 d = D; d < Dp; ++d) qs[r * Dp + d] = 0.f;
      m[r] = kNegInf, l[r] = 0.f;
    }
    std::memset(o, 0, static_cast<std::size_t>(R * Dp) * sizeof(float));
    const KT* Kb = K + b * p.k_sb + hk * p.k_sh;
    const KT* Vb = Vv + b * p.v_sb + hk * p.v_sh;
    for (i64 j0 = c0; j0 < c1; j0 += KB) {
      const i64 nb = std::min(KB, c1 - j0), nbp = round_up(nb, W);
      scores(S, qs, R, Dp, Kb + j0 * p.k_st, p.k_st, nb, D, c1 - j0);
      if (p.softcap > 0) {  // in base-2 units: cap2 * tanh(s2 / cap2), cap2 = cap * log2(e)
        const float cap2 = p.softcap * kLog2e, inv = 1.f / cap2;
        for (i64 r = 0; r < R; ++r)
          for (i64 j = 0; j < nb; ++j) S[r * KB + j] = cap2 * std::tanh(S[r * KB + j] * inv);
      }
      // Online softmax step per row (FlashAttention-2 Alg. 1 lines 9-10): keys outside the row's
      // [lo, hi) are -inf; m_new = max(m, rowmax); o, l *= exp2(m - m_new); P = exp2(s - m_new).
      for (i64 r = 0; r < R; ++r) {
        const i64 i = r % nq;
        const i64 a = std::clamp<i64>(key_lo(p, nq, nk, i) - j0, 0, nb);
        const i64 e = std::clamp<i64>(key_hi(nq, nk, i) - j0, 0, nb);
        float* s = S + r * KB;
        if (a >= e) {  // the row sees no key of this block: P = 0
          std::memset(s, 0, static_cast<std::size_t>(nbp) * sizeof(float));
          continue;
        }
        for (i64 j = 0; j < a; ++j) s[j] = kNegInf;
        for (i64 j = e; j < nbp; ++j) s[j] = kNegInf;
        V vmax = I::set1(kNegInf);
        for (i64 j = 0; j < nbp; j += W) vmax = I::max(vmax, I::load(s + j));
        const float bmax = I::hmax(vmax);
        if (bmax > m[r]) {
          if (m[r] != kNegInf) {
            const float alpha = fastexp::exp2_scalar(m[r] - bmax);
            l[r] *= alpha;
            const V va = I::set1(alpha);
            for (i64 d = 0; d < Dp; d += W) I::store(o + r * Dp + d, I::mul(I::load(o + r * Dp + d), va));
          }
          m[r] = bmax;
        }
        const V voff = I::set1(-m[r]);
        V vsum = I::zero();
        for (i64 j = 0; j < nbp; j += W) {
          const V pj = I::exp2(I::add(I::load(s + j), voff));
          I::store(s + j, pj);
          vsum = I::add(vsum, pj);
        }
        l[r] += I::hsum(vsum);
      }
      pv(o, R, Dp, S, nb, Vb + j0 * p.v_st, p.v_st, D, c1 - j0);
    }
    for (i64 r = 0; r < R; ++r) {
      const i64 h = hk * G + r / nq, i = r % nq;
      if (!out.parts) {  // O = o / l (every row sees at least its own key: l >= 1), the sink in l
        float* orow = out.O + b * p.o_sb + h * p.o_sh + i * p.o_st;
        float mr = m[r], lr = l[r], w = 1.f;
        if (p.sinks) sink_term(p.sinks[h] * kLog2e, mr, lr, w);
        const float inv = lr > 0.f ? w / lr : 0.f;
        for (i64 d = 0; d < D; ++d) orow[d] = o[r * Dp + d] * inv;
      } else {
        float* slot = out.parts + (part0 + r) * out.slot;
        slot[0] = m[r], slot[1] = l[r];
        std::memcpy(slot + 2, o + r * Dp, static_cast<std::size_t>(D) * sizeof(float));
      }
    }
  }

  // Task t of the plan (any order, any thread: each writes only its own rows or partial slots).
  static void run_task(const DecodePlan& pl, const float* Q, const KT* K, const KT* Vv, const Out& out, i64 t) {
    const DecodeParams& p = pl.p;
    const i64 b = static_cast<i64>(std::upper_bound(pl.start.begin(), pl.start.end(), t) - pl.start.begin()) - 1;
    const i64 S = pl.splits(b), local = t - pl.start[static_cast<std::size_t>(b)], c = local % S, hk = local / S;
    const i64 lo = pl.first(b), n = p.k_len[b] - lo;
    Out o = out;
    if (S == 1) o.parts = nullptr;  // this sequence's rows go straight to O
    task(p, Q, K, Vv, o, b, hk, lo + c * n / S, lo + (c + 1) * n / S, t * pl.Rmax);
  }

  // Merges the chunks of the split heads among units [u0, u1) of the B * Hkv (sequence, key/value
  // head) pairs, each row in chunk order: O = sum_c 2^(m_c - M) o_c / sum_c 2^(m_c - M) l_c.
  static void merge(const DecodePlan& pl, const Out& out, i64 u0, i64 u1) {
    const DecodeParams& p = pl.p;
    const i64 D = p.D, G = pl.G;
    for (i64 u = u0; u < u1; ++u) {
      const i64 b = u / pl.Hkv, hk = u % pl.Hkv, S = pl.splits(b), nq = p.q_len[b];
      if (S == 1) continue;
      for (i64 r = 0; r < G * nq; ++r) {
        auto slot = [&](i64 c) {
          return out.parts + ((pl.start[static_cast<std::size_t>(b)] + hk * S + c) * pl.Rmax + r) * out.slot;
        };
        const i64 h = hk * G + r / nq;
        const float sink2 = p.sinks ? p.sinks[h] * kLog2e : kNegInf;
        float M = sink2;  // the sink counts once, beside the chunks
        for (i64 c = 0; c < S; ++c) M = std::max(M, slot(c)[0]);
        float* orow = out.O + b * p.o_sb + h * p.o_sh + (r % nq) * p.o_st;
        std::fill(orow, orow + D, 0.f);
        float L = p.sinks ? std::exp2(sink2 - M) : 0.f;
        for (i64 c = 0; c < S; ++c) {
          const float* sc = slot(c);
          if (sc[1] == 0.f) continue;  // the row saw no key of this chunk
          const float w = fastexp::exp2_scalar(sc[0] - M);
          L += w * sc[1];
          for (i64 d = 0; d < D; ++d) orow[d] += w * sc[2 + d];
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
        for (i64 d = 0; d < D; ++d) orow[d] *= inv;
      }
    }
  }

  // Without a team: the tasks are handed out at run time over the pool (a worker that starts late
  // or is slowed down gives its last tasks away), the merge (O(rows * S * D) next to the tasks'
  // O(rows * keys * D)) runs here, not worth waking the workers a second time. With a team
  // (every member calling with the same arguments): member k runs its static share of the tasks,
  // then of the merge, the partials in the team's `scratch` (DecodePlan::scratch_floats()); returns
  // after a barrier. Either way the same tasks and the same merge: the same bits.
  static void forward(float* O, const float* Q, const KT* K, const KT* Vv, const DecodeParams& p, Team* tm,
                      float* scratch) {
    const DecodePlan pl(p);
    if (pl.empty()) {
      if (tm) tm->barrier();
      return;
    }
    Out out{O, nullptr, pl.slot()};
    const i64 units = p.B * pl.Hkv;
    if (tm) {
      if (pl.split) out.parts = scratch;
      const auto [t0, t1] = tm->part(0, pl.tasks);
      for (i64 t = t0; t < t1; ++t) run_task(pl, Q, K, Vv, out, t);
      if (pl.split) {
        tm->barrier();
        const auto [u0, u1] = tm->part(0, units);
        merge(pl, out, u0, u1);
      }
      tm->barrier();
      return;
    }
    if (pl.split) out.parts = call_workspace().decode_parts.get(static_cast<std::size_t>(pl.scratch_floats()));
    qkv::parallel_claim(0, pl.tasks, [&](const qkv::ClaimNext& next) {
      for (i64 t; next(t);) run_task(pl, Q, K, Vv, out, t);
    });
    if (pl.split) merge(pl, out, 0, units);
  }
};

}  // namespace
}  // namespace qkv::kernels::flash
