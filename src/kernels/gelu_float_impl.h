// GELU erf form, forward, in float: written once over a vector traits type `G` and included by
// activation_avx512.cpp (16 lanes) and activation_avx2.cpp (8 lanes), each under its own target
// pragma, so both ISAs compute the same operations in the same order: the same bits.
//
//   y = x Phi(x);  Phi(-a) = exp(-a^2/2) t Q(t),  t = 1 / (1 + a/4),  a = |x| clamped to 16
//
// the decomposition of the double path (activation.cpp) with a float-sized fit:
//   Q     degree 9 in t on [0.2, 1] (mpmath chebyfit of Phi(-a) exp(a^2/2) / t; max relative
//         error 1.4e-8, a quarter of a float ulp), Horner with FMA;
//   exp   Cody-Waite: k = round(w log2 e), r = w - k ln2 (ln2 split in two so k ln2_hi is
//         exact), Cephes' degree-5 expf polynomial (~1 ulp), then p 2^k with one rounding
//         (G::scale2: graceful underflow into denormals);
//   a^2   computed as hi + lo with an FMA, exp(-a^2/2) = exp(-hi/2) (1 - lo/2): rounding a^2
//         alone would cost |a^2/2| x 2^-24 relative (8 ulp at a = 4).
// Negative x: y = (x t Q) g multiplies the small factor last, so y stays normal as long as the
// true value is (down to x ~ -13.1). Measured over every 509th float in [-20, 20] against the
// exact float64 reference (tests/core/test_gelu_kernel.cpp): worst 4.46 ulp, see
// GeluKernel.FloatPathWithinFiveUlpsOfExactReference. Infinities, NaN and -0 behave as in the
// double path (gelu(-inf) = -0, NaN stays NaN).
//
// G provides: V, W (lanes), set1, load, store, add, sub, mul, div, fmadd (a b + c), fnmadd
// (c - a b), fmsub (a b - c), max / min (the second operand when either is NaN), abs, round
// (to nearest even), scale2(p, k) = p 2^k for integral k in [-185, 0], and pick_pos(x, neg,
// pos) = x > 0 ? pos : neg per lane (NaN and -0 take neg).
#pragma once

#include <cstdint>

namespace qkv::kernels::detail::gelu_float {

// Q(t), kQ[i] multiplies t^i (tests/reference/fit_gelu_float.py prints these).
inline constexpr float kQ[10] = {0.09974522512879712f,  0.09953766812737957f,  0.09519514796003485f,
                                 0.07325946316625148f,  0.08364302837394368f,  0.017246211840828366f,
                                 0.024172474022358136f, 0.05403641868481296f,  -0.06349129013611807f,
                                 0.016655655876114842f};

// exp(w) for w in [-128, 0] (w = -hi/2 with hi <= 256).
template <class G>
__attribute__((always_inline)) inline typename G::V exp(typename G::V w) {
  using V = typename G::V;
  const V k = G::round(G::mul(w, G::set1(1.44269504088896341f)));
  V r = G::fnmadd(k, G::set1(0.693359375f), w);  // k * ln2_hi is exact
  r = G::fnmadd(k, G::set1(-2.12194440e-4f), r);
  V p = G::set1(1.9875691500e-4f);
  p = G::fmadd(p, r, G::set1(1.3981999507e-3f));
  p = G::fmadd(p, r, G::set1(8.3334519073e-3f));
  p = G::fmadd(p, r, G::set1(4.1665795894e-2f));
  p = G::fmadd(p, r, G::set1(1.6666665459e-1f));
  p = G::fmadd(p, r, G::set1(5.0000001201e-1f));
  p = G::fmadd(G::mul(p, r), r, G::add(r, G::set1(1.f)));  // 1 + r + r^2 P(r)
  return G::scale2(p, k);
}

template <class G>
__attribute__((always_inline)) inline typename G::V gelu_erf(typename G::V x) {
  using V = typename G::V;
  const V one = G::set1(1.f);
  const V lo16 = G::max(G::set1(-16.f), x);  // NaN kept (second operand)
  const V xc = G::min(G::set1(16.f), lo16);
  const V a = G::abs(xc);
  // d + de = 1 + a/4 exactly (TwoSum; a/4 is exact), t = fl(1/d), rt = 1 - t d exactly.
  const V s = G::mul(a, G::set1(0.25f));
  const V d = G::add(one, s);
  const V bv = G::sub(d, one);
  const V de = G::add(G::sub(one, G::sub(d, bv)), G::sub(s, bv));
  const V t = G::div(one, d);
  const V rt = G::fnmadd(t, d, one);
  V q = G::set1(kQ[9]);
  for (int i = 8; i >= 0; --i) q = G::fmadd(q, t, G::set1(kQ[i]));
  // R = t Q(t) at the rounded t; the exact t is t + t (rt - de t) (first order), and
  // dR/dt = (a R - 1/sqrt(2 pi)) (-4 / t^2) (R = Phi(-a) exp(a^2/2), dR/da = a R - 1/sqrt(2 pi)),
  // so R(exact t) = R - 4 (a R - 1/sqrt(2 pi)) (rt - de t) d. Without it the rounding of t, which
  // R amplifies up to 3x, cost ~6 ulp.
  V tq = G::mul(t, q);
  const V slope = G::fmsub(a, tq, G::set1(0.3989422804014327f));
  const V dt = G::mul(G::fnmadd(de, t, rt), d);
  tq = G::fnmadd(G::mul(slope, G::set1(4.f)), dt, tq);
  const V hi = G::mul(a, a);
  const V lo = G::fmsub(a, a, hi);
  V g = exp<G>(G::mul(hi, G::set1(-0.5f)));
  g = G::fnmadd(G::mul(g, G::set1(0.5f)), lo, g);  // g (1 - lo/2)
  // x >= 0: x (1 - tq g);  x < 0 (and -0): (x tq) g.
  const V pos = G::mul(x, G::fnmadd(tq, g, one));
  const V neg = G::mul(G::mul(lo16, tq), g);
  return G::pick_pos(x, neg, pos);
}

// Rows of n values (row strides ldy, ldx; y may equal x). Four vectors at a time: one vector's
// chain (division, Horner, exp) is long, and a GEMM epilogue hands over only a small tile, so
// independent vectors must be in flight together to fill the pipes. Each row's tail goes through
// the same vector code (a value's result does not depend on its position).
template <class G>
__attribute__((always_inline)) inline void forward_rows(float* y, std::int64_t ldy, const float* x, std::int64_t ldx,
                                                        std::int64_t rows, std::int64_t n) {
  constexpr int W = G::W;
  const std::int64_t nv = n / W;  // full vectors per row
  const std::int64_t total = rows * nv;
  std::int64_t v = 0;
  for (; v + 4 <= total; v += 4) {
    const float* src[4];
    float* dst[4];
    for (int u = 0; u < 4; ++u) {
      const std::int64_t r = (v + u) / nv, c = (v + u) % nv * W;
      src[u] = x + r * ldx + c;
      dst[u] = y + r * ldy + c;
    }
    const typename G::V r0 = gelu_erf<G>(G::load(src[0])), r1 = gelu_erf<G>(G::load(src[1]));
    const typename G::V r2 = gelu_erf<G>(G::load(src[2])), r3 = gelu_erf<G>(G::load(src[3]));
    G::store(dst[0], r0);
    G::store(dst[1], r1);
    G::store(dst[2], r2);
    G::store(dst[3], r3);
  }
  for (; v < total; ++v) {
    const std::int64_t r = v / nv, c = v % nv * W;
    G::store(y + r * ldy + c, gelu_erf<G>(G::load(x + r * ldx + c)));
  }
  if (nv * W < n) {
    const std::int64_t c0 = nv * W, m = n - c0;
    for (std::int64_t r = 0; r < rows; ++r) {
      float buf[W] = {};
      for (std::int64_t j = 0; j < m; ++j) buf[j] = x[r * ldx + c0 + j];
      G::store(buf, gelu_erf<G>(G::load(buf)));
      for (std::int64_t j = 0; j < m; ++j) y[r * ldy + c0 + j] = buf[j];
    }
  }
}

}  // namespace qkv::kernels::detail::gelu_float
