// Decode attention over a KV cache (see decode_attention.h): per (sequence, head,
// key chunk) task, the exact softmax of the chunk's scores with its running max m,
// sum l and output o; chunks of one head merged by the log-sum-exp rule
// (Dao et al., "Flash-Decoding for long-context inference", 2023).
#include "qkv/kernels/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "qkv/core/parallel.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

// Heads with at least this many keys per chunk are worth splitting.
constexpr i64 kMinKeysPerChunk = 256;
// Split until there are about this many tasks (enough for a few cores).
constexpr i64 kTargetTasks = 16;

// Partial result of one query row over one key chunk: the chunk's max score m
// (-inf if the row saw no key in it), sum l = sum_j exp(s_j - m), and o = sum_j exp(s_j - m) v_j.
struct Partial {
  float m, l;
};

// Scores of query q against keys [j0, j1) into s; returns their max.
inline float scores(float* s, const float* q, const float* K, i64 k_st, i64 j0, i64 j1, i64 D, float scale) {
  float mx = -std::numeric_limits<float>::infinity();
  for (i64 j = j0; j < j1; ++j) {
    const float* k = K + j * k_st;
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (i64 d = 0; d < D; ++d) dot += q[d] * k[d];
    s[j - j0] = dot * scale;
    mx = std::max(mx, s[j - j0]);
  }
  return mx;
}

// o[0..D) = sum_{j in [j0, j1)} exp(s_j - m) v_j; returns sum_j exp(s_j - m).
inline float accumulate(float* o, float* s, const float* V, i64 v_st, i64 j0, i64 j1, i64 D, float m) {
  std::fill(o, o + D, 0.f);
  float l = 0.f;
  for (i64 j = j0; j < j1; ++j) {
    const float p = std::exp(s[j - j0] - m);
    l += p;
    const float* v = V + j * v_st;
#pragma omp simd
    for (i64 d = 0; d < D; ++d) o[d] += p * v[d];
  }
  return l;
}

}  // namespace

i64 decode_attention_splits(i64 B, i64 H, i64 max_k_len) {
  const i64 heads = std::max<i64>(B * H, 1);
  if (heads >= kTargetTasks) return 1;
  const i64 want = (kTargetTasks + heads - 1) / heads;
  return std::max<i64>(1, std::min(want, max_k_len / kMinKeysPerChunk));
}

void decode_attention_forward(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p) {
  const i64 B = p.B, H = p.H, Lq = p.Lq, D = p.D;
  if (B <= 0 || H <= 0 || Lq <= 0) return;
  i64 max_k = 0;
  for (i64 b = 0; b < B; ++b) max_k = std::max(max_k, p.k_len[b]);
  const i64 S = decode_attention_splits(B, H, max_k);
  // Chunk c of sequence b covers keys [c * len / S, (c + 1) * len / S): fixed by the sizes alone.
  // Partials (m, l) and o of every (b, h, chunk, row) when S > 1; each task writes only its own.
  // Kept per calling thread across calls: a warm decode step allocates nothing.
  thread_local std::vector<Partial> part;
  thread_local std::vector<float> po;
  if (S > 1) {
    part.resize(static_cast<std::size_t>(B * H * S * Lq));
    po.resize(static_cast<std::size_t>(B * H * S * Lq * D));
  }
  const i64 tasks = B * H * S;
  Partial* partials = part.data();
  float* outs = po.data();
  parallel_for(0, tasks, 1, [&](i64 t0, i64 t1) {
    thread_local std::vector<float> s, o;
    s.resize(static_cast<std::size_t>(std::max<i64>((max_k + S - 1) / S + 1, 1)));
    o.resize(static_cast<std::size_t>(D));
    for (i64 t = t0; t < t1; ++t) {
      const i64 c = t % S, bh = t / S, b = bh / H, h = bh % H;
      const i64 nq = p.q_len[b], nk = p.k_len[b];
      const i64 c0 = c * nk / S, c1 = (c + 1) * nk / S;
      const float* Kb = K + b * p.k_sb + h * p.k_sh;
      const float* Vb = V + b * p.v_sb + h * p.v_sh;
      for (i64 i = 0; i < nq; ++i) {
        const float* q = Q + b * p.q_sb + h * p.q_sh + i * p.q_st;
        const i64 last = nk - nq + i;  // query i sees keys j <= last
        const i64 j1 = std::min(c1, last + 1);
        float m = -std::numeric_limits<float>::infinity(), l = 0.f;
        if (c0 < j1) {
          m = scores(s.data(), q, Kb, p.k_st, c0, j1, D, p.scale);
          l = accumulate(o.data(), s.data(), Vb, p.v_st, c0, j1, D, m);
        } else {
          std::fill(o.begin(), o.end(), 0.f);
        }
        if (S == 1) {
          float* out = O + b * p.o_sb + h * p.o_sh + i * p.o_st;
          const float inv = l > 0.f ? 1.f / l : 0.f;
          for (i64 d = 0; d < D; ++d) out[d] = o[d] * inv;
        } else {
          const i64 slot = (bh * S + c) * Lq + i;
          partials[slot] = Partial{m, l};
          std::copy(o.begin(), o.end(), outs + slot * D);
        }
      }
    }
  });
  if (S == 1) return;
  // Merge the chunks of each (b, h, row) in chunk order.
  parallel_for(0, B * H, 1, [&](i64 r0, i64 r1) {
    for (i64 bh = r0; bh < r1; ++bh) {
      const i64 b = bh / H, h = bh % H;
      for (i64 i = 0; i < p.q_len[b]; ++i) {
        float M = -std::numeric_limits<float>::infinity();
        for (i64 c = 0; c < S; ++c) M = std::max(M, partials[(bh * S + c) * Lq + i].m);
        float* out = O + b * p.o_sb + h * p.o_sh + i * p.o_st;
        std::fill(out, out + D, 0.f);
        float L = 0.f;
        if (M != -std::numeric_limits<float>::infinity()) {
          for (i64 c = 0; c < S; ++c) {
            const i64 slot = (bh * S + c) * Lq + i;
            if (partials[slot].l == 0.f) continue;
            const float w = std::exp(partials[slot].m - M);
            L += w * partials[slot].l;
            const float* oc = outs + slot * D;
            for (i64 d = 0; d < D; ++d) out[d] += w * oc[d];
          }
        }
        const float inv = L > 0.f ? 1.f / L : 0.f;
        for (i64 d = 0; d < D; ++d) out[d] *= inv;
      }
    }
  });
}

template <class T>
void decode_attention_ref(T* O, const T* Q, const T* K, const T* V, const DecodeParams& p) {
  for (i64 b = 0; b < p.B; ++b)
    for (i64 h = 0; h < p.H; ++h) {
      const i64 nq = p.q_len[b], nk = p.k_len[b];
      for (i64 i = 0; i < nq; ++i) {
        const T* q = Q + b * p.q_sb + h * p.q_sh + i * p.q_st;
        T* out = O + b * p.o_sb + h * p.o_sh + i * p.o_st;
        const i64 n = nk - nq + i + 1;  // keys 0..n-1 visible
        std::vector<T> s(static_cast<std::size_t>(std::max<i64>(n, 0)));
        T mx = -std::numeric_limits<T>::infinity();
        for (i64 j = 0; j < n; ++j) {
          T dot = 0;
          for (i64 d = 0; d < p.D; ++d) dot += q[d] * K[b * p.k_sb + h * p.k_sh + j * p.k_st + d];
          s[j] = dot * static_cast<T>(p.scale);
          mx = std::max(mx, s[j]);
        }
        T sum = 0;
        for (i64 j = 0; j < n; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (i64 d = 0; d < p.D; ++d) {
          T acc = 0;
          for (i64 j = 0; j < n; ++j) acc += s[j] * V[b * p.v_sb + h * p.v_sh + j * p.v_st + d];
          out[d] = n > 0 ? acc / sum : T(0);
        }
      }
    }
}

template void decode_attention_ref<float>(float*, const float*, const float*, const float*, const DecodeParams&);
template void decode_attention_ref<double>(double*, const double*, const double*, const double*, const DecodeParams&);

}  // namespace qkv::kernels
