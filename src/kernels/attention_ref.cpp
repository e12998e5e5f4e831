// Naive attention: the reference twin of flash_attention.cpp, and the math path
// used when attention weights are requested. Materialises the scores, one
// query row at a time in forward and one (b,h) [Lq,Lk] matrix in backward.
// Templated over float/double: tests compare the fast kernel against the
// double instantiation and use the float one to size the tolerance (rule R1).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/dropout.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

// Whether query row i of sequence b may see key j, before bias: key padding, causal and the
// sliding window, with query i at position i + (Lk - Lq) (bottom-right aligned). Checked key by
// key, independently of the fast kernels' key ranges.
bool allowed(const AttnParams& p, i64 b, i64 i, i64 j) {
  const i64 pos = i + (p.Lk - p.Lq);
  if (p.key_lengths && j >= p.key_lengths[b]) return false;
  if (p.causal && j > pos) return false;
  if (p.window > 0 && pos - j >= p.window) return false;
  return true;
}

// Key/value head of query head h (grouped-query attention: H / H_kv query heads per kv head).
i64 kv_head(const AttnParams& p, i64 h) { return p.H_kv > 0 ? h / (p.H / p.H_kv) : h; }

// Dropout multiplier of element (b,h,i,j): 0 if dropped, else 1/(1-p).
template <class T>
T keep_scale(const AttnParams& p, i64 b, i64 h, i64 i, i64 j) {
  if (p.dropout_p <= 0.f) return T(1);
  const std::uint64_t counter = p.offset + static_cast<std::uint64_t>(((b * p.H + h) * p.Lq + i) * p.Lk + j);
  if (qkv::kernels::dropout_dropped(p.seed, counter, qkv::kernels::dropout_threshold(static_cast<double>(p.dropout_p))))
    return T(0);
  return T(1) / (T(1) - static_cast<T>(p.dropout_p));
}

// Softmax weights of row (b,h,i) into w[0..Lk) (before dropout); returns the LSE
// (-inf and w = 0 for a fully masked row).
template <class T>
T softmax_row(T* w, const T* Q, const T* K, const AttnParams& p, i64 b, i64 h, i64 i) {
  const T ninf = -std::numeric_limits<T>::infinity();
  const T* q = Q + b * p.q_sb + h * p.q_sh + i * p.q_st;
  T m = ninf;
  for (i64 j = 0; j < p.Lk; ++j) {
    T s = ninf;
    if (allowed(p, b, i, j)) {
      const T* k = K + b * p.k_sb + kv_head(p, h) * p.k_sh + j * p.k_st;
      T dot = 0;
      for (i64 d = 0; d < p.D; ++d) dot += q[d] * k[d];
      s = static_cast<T>(p.scale) * dot;
      if (p.softcap > 0) s = static_cast<T>(p.softcap) * std::tanh(s / static_cast<T>(p.softcap));
      if (p.bias) s += static_cast<T>(p.bias[b * p.bias_sb + h * p.bias_sh + i * p.bias_si + j * p.bias_sj]);
    }
    w[j] = s;
    if (s > m || s != s) m = s;  // a NaN score makes the row NaN (visible)
  }
  // An attention sink is one more logit in the softmax, whose weight goes to no value.
  const T sink = p.sinks ? static_cast<T>(p.sinks[h]) : ninf;
  if (sink > m) m = sink;
  if (m == ninf) {  // fully masked row: weights 0, never evaluate (-inf) - (-inf)
    for (i64 j = 0; j < p.Lk; ++j) w[j] = 0;
    return ninf;
  }
  T l = p.sinks ? std::exp(sink - m) : T(0);
  for (i64 j = 0; j < p.Lk; ++j) {
    w[j] = std::exp(w[j] - m);
    l += w[j];
  }
  for (i64 j = 0; j < p.Lk; ++j) w[j] /= l;
  return m + std::log(l);
}

}  // namespace

template <class T>
void attention_ref_forward(T* O, T* LSE, T* P, const T* Q, const T* K, const T* V, const AttnParams& p) {
  // O   [B,H,Lq,Dv]     strides o_*
  // LSE [B,H,Lq]        contiguous (may be null)
  // P   [B,H,Lq,Lk]     contiguous (may be null): weights after masking + softmax, before dropout
  // Q   [B,H,Lq,D]      strides q_*
  // K   [B,H_kv,Lk,D]   strides k_*
  // V   [B,H_kv,Lk,Dv]  strides v_*
  const i64 rows = p.B * p.H * p.Lq;
  qkv::parallel_for(0, rows, 16, [&](i64 r0, i64 r1) {
    std::vector<T> w(static_cast<std::size_t>(p.Lk));
    for (i64 r = r0; r < r1; ++r) {
      const i64 i = r % p.Lq, h = (r / p.Lq) % p.H, b = r / (p.Lq * p.H);
      const T lse = softmax_row(w.data(), Q, K, p, b, h, i);
      if (LSE) LSE[r] = lse;
      if (P)
        for (i64 j = 0; j < p.Lk; ++j) P[r * p.Lk + j] = w[j];
      T* o = O + b * p.o_sb + h * p.o_sh + i * p.o_st;
      for (i64 e = 0; e < p.Dv; ++e) o[e] = 0;
      for (i64 j = 0; j < p.Lk; ++j) {
        const T pj = w[j] * keep_scale<T>(p, b, h, i, j);
        if (pj == T(0)) continue;  // masked keys (maybe NaN-padded) are never read
        const T* v = V + b * p.v_sb + kv_head(p, h) * p.v_sh + j * p.v_st;
        for (i64 e = 0; e < p.Dv; ++e) o[e] += pj * v[e];
      }
    }
  });
}

template <class T>
void attention_ref_backward(T* dQ, T* dK, T* dV, const T* dO, const T* Q, const T* K, const T* V,
                            const AttnParams& p) {
  if (p.softcap > 0) throw ValueError("attention_ref_backward: soft-capped scores have no backward (softcap must be 0)");
  if (p.sinks) throw ValueError("attention_ref_backward: attention sinks have no backward (sinks must be null)");
  // dQ, Q  [B,H,Lq,D]      strides q_*
  // dK, K  [B,H_kv,Lk,D]   strides k_*
  // dV, V  [B,H_kv,Lk,Dv]  strides v_*
  // dO     [B,H,Lq,Dv]     strides o_*
  const i64 Lq = p.Lq, Lk = p.Lk, Hkv = p.H_kv > 0 ? p.H_kv : p.H, G = p.H / Hkv;
  // One task per key/value head: it owns dK, dV of that head, summed over its G query heads.
  qkv::parallel_for(0, p.B * Hkv, 1, [&](i64 t0, i64 t1) {
    std::vector<T> P(static_cast<std::size_t>(Lq * Lk)), dS(static_cast<std::size_t>(Lq * Lk));
    for (i64 t = t0; t < t1; ++t) {
      const i64 b = t / Hkv, hk = t % Hkv;
      const T* k = K + b * p.k_sb + hk * p.k_sh;
      const T* v = V + b * p.v_sb + hk * p.v_sh;
      T* dk = dK + b * p.k_sb + hk * p.k_sh;
      T* dv = dV + b * p.v_sb + hk * p.v_sh;
      for (i64 j = 0; j < Lk; ++j) {
        for (i64 d = 0; d < p.D; ++d) dk[j * p.k_st + d] = 0;
        for (i64 e = 0; e < p.Dv; ++e) dv[j * p.v_st + e] = 0;
      }
      for (i64 h = hk * G; h < (hk + 1) * G; ++h) {
        const T* q = Q + b * p.q_sb + h * p.q_sh;
        const T* dout = dO + b * p.o_sb + h * p.o_sh;
        T* dq = dQ + b * p.q_sb + h * p.q_sh;
        for (i64 i = 0; i < Lq; ++i) softmax_row(&P[i * Lk], Q, K, p, b, h, i);
        for (i64 i = 0; i < Lq; ++i) {
          // forward: o_i = sum_j P_ij * z_ij * v_j  (z = dropout scale)
          //   dV_j += P_ij z_ij dO_i;  dP_ij = z_ij <dO_i, v_j>
          // softmax: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)
          T rowdot = 0;
          for (i64 j = 0; j < Lk; ++j) {
            const T pij = P[i * Lk + j];
            T dp = 0;
            if (pij != T(0)) {
              const T z = keep_scale<T>(p, b, h, i, j);
              for (i64 e = 0; e < p.Dv; ++e) {
                dv[j * p.v_st + e] += pij * z * dout[i * p.o_st + e];
                dp += dout[i * p.o_st + e] * v[j * p.v_st + e];
              }
              dp *= z;
            }
            dS[i * Lk + j] = dp;
            rowdot += pij * dp;
          }
          for (i64 j = 0; j < Lk; ++j) dS[i * Lk + j] = P[i * Lk + j] * (dS[i * Lk + j] - rowdot);
        }
        // scores = scale * q k^T:  dQ_i = scale * sum_j dS_ij k_j;  dK_j += scale * sum_i dS_ij q_i
        const T sc = static_cast<T>(p.scale);
        for (i64 i = 0; i < Lq; ++i)
          for (i64 d = 0; d < p.D; ++d) {
            T acc = 0;
            for (i64 j = 0; j < Lk; ++j)
              if (dS[i * Lk + j] != T(0)) acc += dS[i * Lk + j] * k[j * p.k_st + d];
            dq[i * p.q_st + d] = sc * acc;
          }
        for (i64 j = 0; j < Lk; ++j)
          for (i64 d = 0; d < p.D; ++d) {
            T acc = 0;
            for (i64 i = 0; i < Lq; ++i) acc += dS[i * Lk + j] * q[i * p.q_st + d];
            dk[j * p.k_st + d] += sc * acc;
          }
      }
    }
  });
}

template void attention_ref_forward<float>(float*, float*, float*, const float*, const float*, const float*,
                                           const AttnParams&);
template void attention_ref_forward<double>(double*, double*, double*, const double*, const double*,
                                            const double*, const AttnParams&);
template void attention_ref_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, const AttnParams&);
template void attention_ref_backward<double>(double*, double*, double*, const double*, const double*,
                                             const double*, const double*, const AttnParams&);

}  // namespace qkv::kernels
