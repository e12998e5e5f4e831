// Masks and scaled dot-product attention.
//
// The ecosystem has opposite mask conventions (REFERENCES.md section 1), so a
// mask is a type whose constructor says which one is meant:
//   Mask::keep(m)      nonzero/true = may attend   (the tutorials, PyTorch SDPA)
//   Mask::block(m)     nonzero/true = may NOT attend (nn.MultiheadAttention attn_mask/key_padding_mask)
//   Mask::additive(b)  float added to the scores (-inf blocks)
//   Mask::causal()     query i sees key j iff j <= i + (Lk - Lq)  (bottom-right aligned)
//   Mask::padding(ids, pad_id)  keys whose token is pad_id are blocked, shaped [B,1,1,S]
// Masks combine with &. Every part must broadcast (right-aligned) to the
// scores shape [..., Lq, Lk], else ShapeError naming both shapes.
// A query row with no allowed key gives output 0 and gradient 0, never NaN.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/core/tensor.h"

namespace qkv {

class Mask {
 public:
  Mask() = default;  // allows everything
  static Mask causal();
  // Causal for exactly these sizes; using it with other Lq/Lk is a ShapeError.
  static Mask causal(std::int64_t Lq, std::int64_t Lk);
  static Mask padding(const Tensor& token_ids, std::int64_t pad_id);
  static Mask keep(const Tensor& m);
  static Mask block(const Tensor& m);
  static Mask additive(const Tensor& bias);
  Mask operator&(const Mask& o) const;

  bool empty() const { return !causal_ && keeps_.empty() && additive_.empty(); }
  bool has_causal() const { return causal_; }
  const std::vector<Tensor>& keep_parts() const { return keeps_; }
  const std::vector<Tensor>& additive_parts() const { return additive_; }

  // Checks every part against the scores shape [..., Lq, Lk] (ShapeError naming `op`).
  void check(const Shape& scores_shape, const char* op) const;
  // The whole mask as one additive bias of `dtype`, broadcastable to
  // scores_shape and of the same rank: 0 allowed, -inf blocked, plus additive parts.
  // Undefined if the mask is empty.
  Tensor to_bias(const Shape& scores_shape, DType dtype, const char* op) const;
  // The bias without the causal part (the fast kernel applies causal itself).
  Tensor to_bias_without_causal(const Shape& scores_shape, DType dtype, const char* op) const;
  // Human-readable: "causal & keep[2,1,1,7]".
  std::string describe() const;

 private:
  bool causal_ = false;
  std::int64_t causal_lq_ = -1, causal_lk_ = -1;
  std::vector<Tensor> keeps_;     // Bool, true = keep
  std::vector<Tensor> additive_;  // float
};

struct SdpaOptions {
  double dropout_p = 0.0;              // applied to the attention weights when > 0
  std::optional<double> scale;         // default 1/sqrt(D)
  bool need_weights = false;           // also return the weights (uses the math path)
  Generator* generator = nullptr;      // dropout randomness; nullptr = default_generator()
  // Grouped-query attention (PyTorch's enable_gqa): k and v may have fewer heads (dim -3) than q,
  // H_kv dividing H; query head h uses key/value head h / (H / H_kv). The fast path reads the
  // shared heads in place (no copy per query head); their gradients sum over the query heads.
  bool enable_gqa = false;
  // Sliding window W >= 1 (Mistral's sliding_window; 0: none): query i, at position
  // i + (Lk - Lq) (bottom-right aligned, as Mask::causal()), sees only keys j with
  // position - j < W. With Mask::causal(), position t sees keys t - W < j <= t. The fast path
  // skips the keys outside the window (cost O(Lq W)), not computing them under a mask.
  std::int64_t sliding_window = 0;
};

struct AttentionOutput {
  Tensor output;   // [..., Lq, Dv]
  Tensor weights;  // [..., Lq, Lk] after masking and softmax, before dropout; undefined unless need_weights
};

// q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] with equal leading dims; with enable_gqa,
// q [..., H, Lq, D], k [..., H_kv, Lk, D], v [..., H_kv, Lk, Dv] (H_kv dividing H, the other
// leading dims equal). output [..., Lq, Dv] (q's leading dims) =
// dropout(softmax(q k^T * scale + mask + window)) v.
AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Mask& mask = Mask(), const SdpaOptions& opt = {});

// The projections of multi-head attention in nn.Linear layout, the tutorials' W_q, W_k, W_v and
// W_o: w_q [E, E], w_k [E, kdim], w_v [E, vdim], w_o [E, E]; each bias [E] or undefined.
struct MultiHeadAttentionWeights {
  Tensor w_q, w_k, w_v, w_o;
  Tensor b_q, b_k, b_v, b_o;
};

// Multi-head attention as the tutorials compute it: Q = query w_q^T + b_q split into H heads
// [B, H, Lq, D] (D = E / H), likewise K and V; O = scaled_dot_product_attention(Q, K, V, mask,
// opt); output = merge_heads(O) w_o^T + b_o.
//   query [B, Lq, E], key [B, Lk, kdim], value [B, Lk, vdim] -> output [B, Lq, E] and, when
//   opt.need_weights, the per-head weights [B, H, Lq, Lk].
// ValueError for num_heads < 1 or E % num_heads != 0; ShapeError naming the tensor for any
// other shape that does not fit.
AttentionOutput multi_head_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const MultiHeadAttentionWeights& w, std::int64_t num_heads,
                                     const Mask& mask = Mask(), const SdpaOptions& opt = {});

// x [B, L, H*D] -> [B, H, L, D] (a view: view [B, L, H, D], then transpose(1, 2)).
Tensor split_heads(const Tensor& x, std::int64_t num_heads);
// x [B, H, L, D] -> [B, L, H*D] (transpose(1, 2), contiguous, view).
Tensor merge_heads(const Tensor& x);

}  // namespace qkv
