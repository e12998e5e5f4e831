// Decode attention: a few new queries per sequence against the keys and values
// held in a KV cache (generation). Letters (docs/shapes.md): B batch, H heads,
// Lq new queries (the longest of the batch), T cache capacity, D head dim.
//
//   query i of sequence b (i < q_len[b]) sees keys j <= k_len[b] - q_len[b] + i
//   (bottom-right causal alignment: the new queries are the last q_len[b] of its k_len[b] keys)
//   O[b,h,i,:] = sum_j softmax_j(scale * <Q[b,h,i,:], K[b,h,j,:]>) V[b,h,j,:]
//
// Keys j >= k_len[b] are never read (the cache's unused slots may hold anything,
// NaN included). Rows i >= q_len[b] of O are not written. A query that sees no key
// (k_len[b] - q_len[b] + i < 0 cannot happen when k_len >= q_len) gives O = 0.
//
// With few (b, h) pairs and long contexts the keys of one head are split into
// chunks handled by different threads, each chunk keeping its own running max m,
// sum l and output o, merged afterwards with the log-sum-exp rule
// (flash-decoding: O = sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s, M = max_s m_s).
// How a head is split depends only on B, H and k_len, not on the thread count, so
// results are bitwise identical for any number of threads.
#pragma once
#include <cstdint>

namespace qkv::kernels {

struct DecodeParams {
  std::int64_t B = 1, H = 1, Lq = 1, D = 0;
  // Element strides (last dim contiguous): Q/O [B,H,Lq,D], K/V [B,H,T,D].
  std::int64_t q_sb = 0, q_sh = 0, q_st = 0, o_sb = 0, o_sh = 0, o_st = 0;
  std::int64_t k_sb = 0, k_sh = 0, k_st = 0, v_sb = 0, v_sh = 0, v_st = 0;
  const std::int64_t* q_len = nullptr;  // [B], 0 <= q_len[b] <= Lq
  const std::int64_t* k_len = nullptr;  // [B], q_len[b] <= k_len[b] <= T
  float scale = 0.f;
};

//   O [B,H,Lq,D] strides o_*; Q [B,H,Lq,D] strides q_*; K, V [B,H,T,D] strides k_*, v_*
void decode_attention_forward(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p);

// Naive twin (T = float or double): one exact softmax per query row, no splitting.
template <class T>
void decode_attention_ref(T* O, const T* Q, const T* K, const T* V, const DecodeParams& p);

// The number of key chunks decode_attention_forward splits each head into for these
// sizes (1 = no split); exposed for tests.
std::int64_t decode_attention_splits(std::int64_t B, std::int64_t H, std::int64_t max_k_len);

}  // namespace qkv::kernels
