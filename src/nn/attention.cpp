#include "qkv/nn/attention.h"

#include "qkv/ops/shape_ops.h"

namespace qkv::nn {

ScaledDotProductAttention::ScaledDotProductAttention(const ScaledDotProductAttentionOptions& o) : opt_(o) {
  if (!(o.dropout >= 0.0 && o.dropout < 1.0))
    throw ValueError("ScaledDotProductAttention: dropout must be in [0, 1), got " + std::to_string(o.dropout));
}

AttentionOutput ScaledDotProductAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                   const Mask& mask) const {
  return scaled_dot_product_attention(
      q, k, v, mask, SdpaOptions{.dropout_p = is_training() ? opt_.dropout : 0.0, .need_weights = opt_.need_weights});
}

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionOptions& o) : opt_(o) {
  if (o.embed_dim <= 0 || o.num_heads <= 0)
    throw ValueError("MultiHeadAttention: embed_dim and num_heads must be > 0, got embed_dim=" +
                     std::to_string(o.embed_dim) + " num_heads=" + std::to_string(o.num_heads));
  if (o.embed_dim % o.num_heads != 0)
    throw ValueError("MultiHeadAttention: embed_dim (d_model) " + std::to_string(o.embed_dim) +
                     " is not divisible by num_heads " + std::to_string(o.num_heads) + " (" +
                     std::to_string(o.embed_dim) + " % " + std::to_string(o.num_heads) + " = " +
                     std::to_string(o.embed_dim % o.num_heads) + ")");
  if (!(o.dropout >= 0.0 && o.dropout < 1.0))
    throw ValueError("MultiHeadAttention: dropout must be in [0, 1), got " + std::to_string(o.dropout));
  const std::int64_t kdim = o.kdim ? o.kdim : o.embed_dim, vdim = o.vdim ? o.vdim : o.embed_dim;
  opt_.kdim = kdim;
  opt_.vdim = vdim;
  auto lin = [&](std::int64_t in) {
    return std::make_shared<Linear>(
        LinearOptions{.in_features = in, .out_features = o.embed_dim, .bias = o.bias, .dtype = o.dtype});
  };
  w_q = register_module("w_q", lin(o.embed_dim));
  w_k = register_module("w_k", lin(kdim));
  w_v = register_module("w_v", lin(vdim));
  w_o = register_module("w_o", lin(o.embed_dim));
}

Tensor MultiHeadAttention::split_heads(const Tensor& x) const { return qkv::split_heads(x, opt_.num_heads); }

Tensor MultiHeadAttention::merge_heads(const Tensor& x) const { return qkv::merge_heads(x); }

AttentionOutput MultiHeadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Mask& mask,
                                           bool need_weights) const {
  AttentionOutput a = scaled_dot_product_attention(
      q, k, v, mask,
      SdpaOptions{.dropout_p = is_training() ? opt_.dropout : 0.0, .need_weights = need_weights});
  a.output = w_o->forward(merge_heads(a.output));
  return a;
}

AttentionOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                            const Mask& mask, bool need_weights) const {
  const char* op = "MultiHeadAttention";
  auto check3 = [&](const Tensor& t, const char* name, std::int64_t width) {
    if (!t.defined() || t.dim() != 3 || t.shape()[2] != width)
      throw ShapeError(std::string(op) + ": " + name + " must be [B, L, " + std::to_string(width) + "], got " +
                       (t.defined() ? t.shape_str() : std::string("undefined")) + " (query " + query.shape_str() +
                       ", key " + key.shape_str() + ", value " + value.shape_str() + ")");
  };
  check3(query, "query", opt_.embed_dim);
  check3(key, "key", opt_.kdim);
  check3(value, "value", opt_.vdim);
  if (key.shape()[0] != query.shape()[0] || value.shape()[0] != query.shape()[0] ||
      key.shape()[1] != value.shape()[1])
    throw ShapeError(std::string(op) + ": batch or key length mismatch: query " + query.shape_str() + ", key " +
                     key.shape_str() + ", value " + value.shape_str() +
                     " (need equal B, and key/value with the same length)");
  return multi_head_attention(
      query, key, value,
      MultiHeadAttentionWeights{.w_q = w_q->weight, .w_k = w_k->weight, .w_v = w_v->weight, .w_o = w_o->weight,
                                .b_q = w_q->bias, .b_k = w_k->bias, .b_v = w_v->bias, .b_o = w_o->bias},
      opt_.num_heads, mask, SdpaOptions{.dropout_p = is_training() ? opt_.dropout : 0.0, .need_weights = need_weights});
}

}  // namespace qkv::nn
