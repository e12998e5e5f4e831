// Scaled dot-product attention kernels: a FlashAttention-2-style tiled kernel
// (fp32, forward + backward, memory linear in sequence length) and its naive
// twin that materialises the scores (the test reference, and the math path
// used when attention weights are requested).
//
// Letters (docs/shapes.md): B batch, H (query) heads, H_kv key/value heads, Lq query length,
// Lk key length, D query/key head dim, Dv value head dim.
//
//   scores[b,h,i,j] = scale * <q[b,h,i,:], k[b,g(h),j,:]> + bias[b,h,i,j]
//                     (then softcap * tanh(scores / softcap) with a soft-cap, forward only)
//                     (-inf where masked: causal, sliding window, key padding, -inf bias)
//   P[b,h,i,:]      = softmax_j(scores[b,h,i,:])      (0 for a fully masked row)
//   O[b,h,i,:]      = sum_j dropout(P)[b,h,i,j] * v[b,g(h),j,:]
//   LSE[b,h,i]      = log sum_j exp(scores[b,h,i,j])  (-inf for a fully masked row)
// With attention sinks (gpt-oss: one learned logit sink[h] per query head), the softmax's
// denominator has one more term: P[b,h,i,j] = exp(s_j) / (exp(sink[h]) + sum_j' exp(s_j')), so a
// row's weights sum to less than 1 (the sink's share goes to no value), and LSE includes it
// (log(exp(sink[h]) + sum_j exp(s_j)); sink[h] for a fully masked row, whose O is 0). Forward only.
//
// Grouped-query attention (GQA; multi-query when H_kv = 1): query head h reads key/value head
// g(h) = h / (H / H_kv), in place (K and V are never copied per query head); the backward sums
// the gradients of a key/value head over its H / H_kv query heads.
//
// Positions are bottom-right aligned: query row i sits at position i + (Lk - Lq), the last Lq of
// Lk keys (KV-cache decoding). causal keeps keys j <= i + (Lk - Lq); a sliding window W keeps
// keys j > i + (Lk - Lq) - W (Mistral's sliding_window: with causal, query position t sees keys
// t - W < j <= t). Tiles entirely outside the window are skipped, so the cost is O(Lq * W).
//
// Kernels do not validate shapes (ops/ does that); they require B,H,Lq,Lk >= 0,
// H_kv >= 1 dividing H (or 0 for H), window >= 0, D,Dv >= 1, 0 <= dropout_p < 1, and
// non-overlapping outputs.
// Thread safety: several threads may call the kernels at once (workspaces are per thread,
// indexed by the calling thread's own team), each with bitwise the results of the call alone.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// Which kernel flash_attention_forward/backward run: Auto picks the row kernel for short key
// sequences (a whole score row in a few vectors, see attention_rows_impl.h) and the tiled one
// otherwise; tests force either to check both against the reference.
enum class AttnKernel : std::uint8_t { Auto, Tiled, Rows };
// Auto uses the row kernel when Lk <= kRowsKernelMaxKeys and D <= kRowsKernelMaxDim: its K
// transpose is unrolled up to D = 16, and beyond that the tiled kernel is faster at every length
// (one thread, 12 heads, Lq = Lk in 8..32, Zen 5): forward D = 32 tiled 4.9-37 us vs rows
// 15.7-79 us (AVX-512), D = 64 2.4-51 vs 13.5-184 us (AVX2); backward D = 32 11.7-32 vs 20-72 us
// (AVX-512), 10.6-56 vs 16-167 us (AVX2). At D <= 16 the forward's rows win (D = 8, L = 16:
// 3.6 vs 11.4 us) and the backward's are within 1.5x either way.
inline constexpr std::int64_t kRowsKernelMaxKeys = 32;
inline constexpr std::int64_t kRowsKernelMaxDim = 16;

struct AttnParams {
  std::int64_t B = 1, H = 1, Lq = 0, Lk = 0, D = 0, Dv = 0;  // Dv: value head dim (often == D)
  std::int64_t H_kv = 0;  // key/value heads (GQA), dividing H; 0 means H (one per query head)
  // Element strides (last dim contiguous) of q [B,H,Lq,D], k [B,H_kv,Lk,D], v [B,H_kv,Lk,Dv],
  // o/dO [B,H,Lq,Dv]; dq/dk/dv use the same strides as q/k/v. LSE is always contiguous [B,H,Lq].
  std::int64_t q_sb = 0, q_sh = 0, q_st = 0, k_sb = 0, k_sh = 0, k_st = 0, v_sb = 0, v_sh = 0, v_st = 0,
               o_sb = 0, o_sh = 0, o_st = 0;
  float scale = 0.f;  // usually 1/sqrt(D)
  bool causal = false;  // bottom-right aligned: query i sees key j iff j <= i + (Lk - Lq)
  std::int64_t window = 0;  // sliding window W >= 1: query i sees key j only if i + (Lk - Lq) - j < W; 0: none
  // Soft-capping of the scores (Gemma 2): s = softcap * tanh(s / softcap) before the mask and
  // the softmax; 0: none. Forward only: the backward kernels require 0.
  float softcap = 0.f;
  // Attention sinks [H] (natural-log units, one per query head), or null: see above. Forward
  // only: the backward kernels require null.
  const float* sinks = nullptr;
  const std::int64_t* key_lengths = nullptr;  // [B] or null: keys j >= key_lengths[b] are masked (lengths may be 0)
  // Optional additive bias/mask, added to the scaled scores; element (b,h,i,j) at
  //   bias[b*bias_sb + h*bias_sh + i*bias_si + j*bias_sj]; -inf blocks (strides may be 0 to broadcast).
  const float* bias = nullptr;
  std::int64_t bias_sb = 0, bias_sh = 0, bias_si = 0, bias_sj = 0;
  float dropout_p = 0.f;  // dropout on the attention probabilities, in [0,1)
  // Element (b,h,i,j) is dropped iff qkv::kernels::dropout_dropped(seed, offset + ((b*H+h)*Lq+i)*Lk+j,
  //   dropout_threshold(dropout_p)) (kernels/dropout.h);
  // kept ones are scaled by 1/(1-p).
  std::uint64_t seed = 0, offset = 0;
  AttnKernel kernel = AttnKernel::Auto;
};

// The arithmetic of a model layer's scores, as one struct wherever it is handed on (the KV
// cache's prefill attention, the decoder's layers): scale, sliding window, soft-cap and sinks,
// with the meanings of AttnParams' fields of the same names.
struct ScoreParams {
  float scale = 0.f;
  std::int64_t window = 0;
  float softcap = 0.f;
  const float* sinks = nullptr;  // [H] or null
};

// Tiled FlashAttention-2 forward (Dao, "FlashAttention-2", 2023, Algorithm 1).
//   O   [B,H,Lq,Dv]  strides o_*
//   LSE [B,H,Lq]     contiguous; natural-log log-sum-exp of the scaled, masked scores; -inf for a fully masked row
//   Q [B,H,Lq,D], K [B,H_kv,Lk,D], V [B,H_kv,Lk,Dv]  strides q_*, k_*, v_*
// A query row with no allowed key gives O = 0 (and zero gradients), never NaN. Keys at or beyond
// key_lengths[b] are never read. Bitwise reproducible for a fixed thread count (in fact for any).
void flash_attention_forward(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p);

// Tiled FlashAttention-2 backward (Dao 2023, Algorithm 2): recomputes P from LSE.
//   dQ [B,H,Lq,D], dK [B,H_kv,Lk,D], dV [B,H_kv,Lk,Dv]  written (not accumulated), strides q_*, k_*, v_*
//     (dK, dV of a key/value head: the sum over its query heads)
//   dO, O [B,H,Lq,Dv]  strides o_*;  LSE [B,H,Lq] contiguous, as written by flash_attention_forward
//   Q, K, V  as in forward (same params, same seed/offset for dropout)
// Bitwise reproducible across runs for a fixed thread count.
void flash_attention_backward(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                              const float* V, const float* O, const float* LSE, const AttnParams& p);

// Naive reference (T = float or double): materialises scores row by row; writes O, LSE (may be null),
// and, if P is non-null, the attention weights after masking+softmax and before dropout, contiguous
// [B,H,Lq,Lk].
//   O [B,H,Lq,Dv] strides o_*;  LSE [B,H,Lq] contiguous;  P [B,H,Lq,Lk] contiguous
//   Q, K, V as in flash_attention_forward; the bias stays float (converted to T)
template <class T>
void attention_ref_forward(T* O, T* LSE, T* P, const T* Q, const T* K, const T* V, const AttnParams& p);
// Naive reference backward (recomputes the forward; no saved O/LSE needed).
//   dQ, dK, dV written with the strides of Q, K, V;  dO [B,H,Lq,Dv] strides o_*
template <class T>
void attention_ref_backward(T* dQ, T* dK, T* dV, const T* dO, const T* Q, const T* K, const T* V,
                            const AttnParams& p);

// Diagnostics: the tile sizes the flash kernels use with the active ISA (tests sweep every size +-1).
struct FlashTileSizes {
  int simd_width;    // floats per vector (1 for the scalar path)
  int micro_rows;    // rows of the register micro-kernel
  int key_panel;     // keys per packed K panel (micro-kernel columns)
  int fwd_q_block;   // forward: query rows per task
  int fwd_k_block;   // forward: keys per online-softmax step
  int bwd_q_block;   // backward: query rows per inner step
  int bwd_k_block;   // backward: keys per task (owner of dK/dV rows)
};
FlashTileSizes flash_attention_tile_sizes();

}  // namespace qkv::kernels
