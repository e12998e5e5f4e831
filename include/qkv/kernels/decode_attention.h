// Decode attention: a few new queries per sequence against the keys and values
// held in a KV cache (generation). Letters (docs/shapes.md): B batch, H query heads,
// H_kv key/value heads, Lq new queries (the longest of the batch), T cache capacity,
// D head dim.
//
//   query i of sequence b (i < q_len[b]) sits at position t = k_len[b] - q_len[b] + i and sees
//   keys j <= t (bottom-right causal alignment: the new queries are the last q_len[b] of its
//   k_len[b] keys), and with a sliding window W only keys j > t - W (Mistral's sliding_window)
//   O[b,h,i,:] = sum_j softmax_j(scale * <Q[b,h,i,:], K[b,g(h),j,:]>) V[b,g(h),j,:]
//
// Grouped-query attention: query head h reads key/value head g(h) = h / (H / H_kv) (H_kv = 1:
// multi-query). The G = H / H_kv query heads of a key/value head (and its q_len[b] new queries)
// are processed together, so each cached K and V row is read from memory once per group, not
// once per query head; the kernel is vectorised (AVX-512, AVX2, scalar by kernels::active_isa()).
//
// Keys j >= k_len[b] are never read (the cache's unused slots may hold anything,
// NaN included), nor keys before every query's window. Rows i >= q_len[b] of O are not written.
// Every query sees at least its own key, so no row is empty.
//
// With few (b, key/value head) pairs and long contexts the keys a group sees are split into
// chunks handled by different threads, each chunk keeping its own running max m, sum l and
// output o per query row, merged afterwards with the log-sum-exp rule
// (flash-decoding: O = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s, M = max_s m_s).
// How the heads are split depends only on the sizes (B, H_kv, the lengths and the window), never
// on the thread count, so results are bitwise identical for any number of threads; with
// DecodeParams::independent a sequence's split depends on its own lengths alone, so its results
// are bitwise those it gets alone, whatever the other rows of the batch hold (a
// continuous-batching scheduler's sequences).
#pragma once
#include <cstdint>

namespace qkv {
class Team;
}

namespace qkv::kernels {

struct DecodeParams {
  std::int64_t B = 1, H = 1, Lq = 1, D = 0;
  std::int64_t H_kv = 0;  // key/value heads, dividing H; 0 means H (one per query head)
  // Element strides (last dim contiguous): Q/O [B,H,Lq,D], K/V [B,H_kv,T,D].
  std::int64_t q_sb = 0, q_sh = 0, q_st = 0, o_sb = 0, o_sh = 0, o_st = 0;
  std::int64_t k_sb = 0, k_sh = 0, k_st = 0, v_sb = 0, v_sh = 0, v_st = 0;
  const std::int64_t* q_len = nullptr;  // [B], 0 <= q_len[b] <= Lq
  const std::int64_t* k_len = nullptr;  // [B], q_len[b] <= k_len[b] <= T
  float scale = 0.f;
  std::int64_t window = 0;  // sliding window W >= 1 (query at position t sees keys t - W < j <= t); 0: none
  float softcap = 0.f;      // scores s -> softcap * tanh(s / softcap) before the softmax (Gemma 2); 0: none
  // Attention sinks [H] (gpt-oss), or null: query head h's softmax has exp(sinks[h]) added to its
  // denominator, O = sum_j exp(s_j) v_j / (exp(sinks[h]) + sum_j exp(s_j)) (kernels/attention.h).
  const float* sinks = nullptr;
  // false: every (sequence, key/value head) splits its keys into decode_attention_splits(B, H_kv,
  // the most keys any sequence sees) chunks. true: sequence b's into decode_attention_splits(1, 1,
  // its own keys) — bitwise the result of a call for that sequence and head alone, whatever else
  // is in the batch (a server's batches come and go).
  bool independent = false;
};

//   O [B,H,Lq,D] strides o_*; Q [B,H,Lq,D] strides q_*; K, V [B,H_kv,T,D] strides k_*, v_*
void decode_attention_forward(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p);
// The same over a float16 cache: K, V hold IEEE halves (kernels/half.h; strides in elements), widened
// to float as they are read, so the arithmetic is decode_attention_forward's on the halves' values.
void decode_attention_forward_f16(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                                  const DecodeParams& p);

// The same, run by the members of a team (core/parallel.h) together: every member calls it with
// the same arguments, and `scratch`, shared by the team, holds decode_attention_team_scratch(p)
// floats (none may be needed: 0). Each member runs its static share of the tasks, then of the
// chunk merge; the call returns after a barrier, with O complete. Bitwise the result of the call
// without a team, for any team size. For a model that runs a whole decoding step as one team:
// long contexts split their keys over the members without waking the workers again.
std::int64_t decode_attention_team_scratch(const DecodeParams& p);
void decode_attention_forward(Team& tm, float* scratch, float* O, const float* Q, const float* K, const float* V,
                              const DecodeParams& p);
void decode_attention_forward_f16(Team& tm, float* scratch, float* O, const float* Q, const std::uint16_t* K,
                                  const std::uint16_t* V, const DecodeParams& p);

// Naive twin (T = float or double): one exact softmax per query row, no splitting, keys checked
// one by one against the causal and window rules.
template <class T>
void decode_attention_ref(T* O, const T* Q, const T* K, const T* V, const DecodeParams& p);

// The number of key chunks decode_attention_forward splits each key/value head of a sequence
// into, for B sequences, H_kv key/value heads and the sequence's queries seeing `keys` keys at
// most (1 = no split); exposed for tests.
std::int64_t decode_attention_splits(std::int64_t B, std::int64_t H_kv, std::int64_t keys);

}  // namespace qkv::kernels
