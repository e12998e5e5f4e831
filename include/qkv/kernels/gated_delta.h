// Gated DeltaNet (Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks"), the linear attention
// of Qwen3.5 and Qwen3-Next: instead of a growing cache of keys and values, each value head h
// keeps a matrix state S [Dk, Dv] that every token updates with a gated delta rule:
//
//   q, k = l2norm(q), l2norm(k)      (x / sqrt(sum x^2 + eps), over each head's Dk values)
//   q    = q / sqrt(Dk)
//   S    = exp(g_t) * S                       (decay; g_t <= 0, per token and value head)
//   S    = S + k (beta_t * (v - S^T k))^T     (delta rule: write the part of v that S does not
//                                              already predict from k, at rate beta_t in [0, 1])
//   o_t  = S^T q                              [Dv]
//
// Value head h reads key head h / (Hv / Hk) (transformers' grouped order) or h % Hk (the tiled
// order llama.cpp's converter writes GGUF files in: the value heads' rows permuted so that a
// repeat of the key heads lines up).
//
// Two forms of the same recurrence: token by token (decoding; what transformers'
// torch_recurrent_gated_delta_rule computes) and chunked (prefill; the WY / UT-transform chunking
// of the DeltaNet papers, transformers' torch_chunk_gated_delta_rule): within a chunk of c tokens
// the rank-one updates are gathered into a triangular solve and a few matrix products, and the
// state is carried from chunk to chunk. Both read the state in and leave it updated, so a
// sequence may be fed in pieces of any size.
//
// The causal short convolution in front of it (causal_conv1d_silu) is depthwise: each channel
// is a K-tap filter over that channel's last K inputs, followed by SiLU; its rolling state is
// the last K - 1 inputs.
//
// Letters (docs/shapes.md): n tokens, Hk key heads, Hv value heads, Dk key head dim, Dv value
// head dim, K convolution taps, Cc convolution channels (2 Hk Dk + Hv Dv for Qwen3.5).
#pragma once
#include <cstdint>

namespace qkv::kernels {

struct GatedDeltaParams {
  std::int64_t n = 0;                     // tokens of one sequence, in order
  std::int64_t Hk = 0, Hv = 0;            // key heads (dividing Hv) and value heads
  std::int64_t Dk = 0, Dv = 0;            // head dims
  bool tiled = false;                     // value head h reads key head h % Hk (else h / (Hv / Hk))
  bool l2norm_qk = true;                  // normalise q and k first (Qwen3.5 always does)
  float eps = 1e-6f;                      // of the L2 norms
  // Row strides in floats: token t's key head j at q + t * q_st + j * Dk (and k), value head h's
  // value at v + t * v_st + h * Dv, its decay and rate at g[t * gb_st + h], beta[t * gb_st + h],
  // its output at o + t * o_st + h * Dv.
  std::int64_t q_st = 0, k_st = 0, v_st = 0, gb_st = 0, o_st = 0;
  std::int64_t chunk = 64;                // tokens per chunk of the chunked form (>= 1)
};

// Value heads [h0, h1) of one sequence, token by token: o (written) and state [Hv, Dk, Dv] (heads
// h0..h1 read and updated in place). q, k and v are not modified. Different head ranges touch
// disjoint memory: a team may split the heads, with the same bits as one call over them all.
// AVX-512 / AVX2 / scalar as kernels::active_isa(). ValueError unless Hk divides Hv, the dims are
// >= 1, n >= 0 and 0 <= h0 <= h1 <= Hv (the chunked form: and chunk >= 1).
void gated_delta_recurrent(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
// The same outputs and final state by the chunked form (within float tolerance of the recurrence).
// Scratch of the calling thread is grown on demand (3 c Dk + 2 c^2 + c (Dk + Dv + 17) floats,
// c = min(chunk, n)). A sequence split at multiples of `chunk` gives the one call's bits.
void gated_delta_chunked(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                         const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
// Naive twin: the recurrence in double over every head (state [Hv, Dk, Dv] double, updated; o with
// row stride p.o_st as the kernels').
void gated_delta_ref(double* o, double* state, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, const GatedDeltaParams& p);

// Depthwise causal convolution + SiLU of channels [c0, c1): out[t][c] = silu(sum_j w[c * K + j] *
// x'[t + j][c]) for t < n, x' the K - 1 rows of `state` [K - 1, Cc] followed by the n rows of x
// (row stride ldx); then `state` holds the last K - 1 rows of x' (the state of a new sequence is
// zeros). out (row stride ldo) may not alias x. Channels split over a team touch disjoint memory
// (the same bits as one call). n = 0 leaves the state as it is; n < K - 1 shifts it by n rows.
// ValueError unless K >= 1, n >= 0 and 0 <= c0 <= c1 <= Cc.
void causal_conv1d_silu(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                        std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0,
                        std::int64_t c1);
// Naive twin in double (every channel; out [n, Cc] dense; state [K - 1, Cc] updated the same way).
void causal_conv1d_silu_ref(double* out, const float* x, std::int64_t ldx, std::int64_t n, std::int64_t Cc,
                            const float* w, std::int64_t K, double* state);

}  // namespace qkv::kernels
