// Attention modules: ScaledDotProductAttention and MultiHeadAttention
// (separate W_q, W_k, W_v, W_o as in the tutorials; self- and cross-attention).
#pragma once
#include "qkv/nn/layers.h"
#include "qkv/ops/attention.h"

namespace qkv::nn {

struct ScaledDotProductAttentionOptions {
  double dropout = 0.0;
  bool need_weights = true;
};

// The tutorials' single-head module: q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv]
// -> output [..., Lq, Dv], weights [..., Lq, Lk].
class ScaledDotProductAttention : public Module {
 public:
  explicit ScaledDotProductAttention(const ScaledDotProductAttentionOptions& o = {});
  AttentionOutput forward(const Tensor& q, const Tensor& k, const Tensor& v, const Mask& mask = Mask()) const;

 private:
  ScaledDotProductAttentionOptions opt_;
};

struct MultiHeadAttentionOptions {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 1;
  double dropout = 0.0;  // on the attention weights
  bool bias = true;
  std::int64_t kdim = 0;  // 0: embed_dim
  std::int64_t vdim = 0;  // 0: embed_dim
  DType dtype = DType::F32;
};

// query [B, Lq, E], key [B, Lk, kdim], value [B, Lk, vdim] -> output [B, Lq, E]
// and, when need_weights, per-head weights [B, H, Lq, Lk].
// Q = w_q(query) viewed [B, Lq, H, D] and transposed to [B, H, Lq, D] (D = E / H), etc.
class MultiHeadAttention : public Module {
 public:
  explicit MultiHeadAttention(const MultiHeadAttentionOptions& o);
  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value, const Mask& mask = Mask(),
                          bool need_weights = false) const;
  // Splits [B, L, E] into heads [B, H, L, D] / merges back.
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;
  // Attention of already projected heads q [B,H,Lq,D], k/v [B,H,Lk,D], then merge + w_o.
  AttentionOutput attend(const Tensor& q, const Tensor& k, const Tensor& v, const Mask& mask, bool need_weights) const;
  const MultiHeadAttentionOptions& options() const { return opt_; }
  std::int64_t head_dim() const { return opt_.embed_dim / opt_.num_heads; }

  std::shared_ptr<Linear> w_q, w_k, w_v, w_o;

 private:
  MultiHeadAttentionOptions opt_;
};

}  // namespace qkv::nn
