// multi_head_attention: the tutorials' multi-head attention as one function of its weights.
#include <string>

#include "ops_internal.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/linalg.h"

namespace qkv {
namespace {

constexpr const char* kOp = "multi_head_attention";

std::string shape_or_none(const Tensor& t) { return t.defined() ? t.shape_str() : std::string("undefined"); }

// weight [E, in] (nn.Linear layout), bias [E] or undefined.
void check_projection(const Tensor& w, const Tensor& b, const char* wname, const char* bname, std::int64_t E,
                      std::int64_t in) {
  if (!w.defined() || w.dim() != 2 || w.size(0) != E || w.size(1) != in)
    throw ShapeError(std::string(kOp) + ": " + wname + " must be [" + std::to_string(E) + ", " + std::to_string(in) +
                     "] (nn.Linear layout [out, in]), got " + shape_or_none(w));
  if (b.defined() && (b.dim() != 1 || b.size(0) != E))
    throw ShapeError(std::string(kOp) + ": " + bname + " must be [" + std::to_string(E) + "], got " + b.shape_str());
}

}  // namespace

Tensor split_heads(const Tensor& x, std::int64_t num_heads) {
  // [B, L, E] -> view [B, L, H, D] -> transpose(1, 2) -> [B, H, L, D]
  return x.view({x.size(0), x.size(1), num_heads, x.size(2) / num_heads}).transpose(1, 2);
}

Tensor merge_heads(const Tensor& x) {
  // [B, H, L, D] -> transpose(1, 2) -> [B, L, H, D] -> contiguous -> view [B, L, E]
  return x.transpose(1, 2).contiguous().view({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

// query [B, Lq, E], key [B, Lk, kdim], value [B, Lk, vdim] -> output [B, Lq, E], weights [B, H, Lq, Lk].
AttentionOutput multi_head_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const MultiHeadAttentionWeights& w, std::int64_t num_heads, const Mask& mask,
                                     const SdpaOptions& opt) {
  detail::check_defined(query, kOp, "query");
  detail::check_defined(key, kOp, "key");
  detail::check_defined(value, kOp, "value");
  if (query.dim() != 3 || key.dim() != 3 || value.dim() != 3 || key.size(0) != query.size(0) ||
      value.size(0) != query.size(0) || key.size(1) != value.size(1))
    throw ShapeError(std::string(kOp) + ": query " + query.shape_str() + ", key " + key.shape_str() + ", value " +
                     value.shape_str() + " must be [B, Lq, E], [B, Lk, kdim], [B, Lk, vdim]");
  const std::int64_t E = query.size(2);
  if (num_heads < 1)
    throw ValueError(std::string(kOp) + ": num_heads must be >= 1, got " + std::to_string(num_heads));
  if (E % num_heads != 0)
    throw ValueError(std::string(kOp) + ": embed_dim (d_model) " + std::to_string(E) + " is not divisible by num_heads " +
                     std::to_string(num_heads) + " (" + std::to_string(E) + " % " + std::to_string(num_heads) + " = " +
                     std::to_string(E % num_heads) + ")");
  check_projection(w.w_q, w.b_q, "w_q", "b_q", E, E);
  check_projection(w.w_k, w.b_k, "w_k", "b_k", E, key.size(2));
  check_projection(w.w_v, w.b_v, "w_v", "b_v", E, value.size(2));
  check_projection(w.w_o, w.b_o, "w_o", "b_o", E, E);
  const Tensor q = split_heads(linear(query, w.w_q, w.b_q), num_heads);
  const Tensor k = split_heads(linear(key, w.w_k, w.b_k), num_heads);
  const Tensor v = split_heads(linear(value, w.w_v, w.b_v), num_heads);
  AttentionOutput a = scaled_dot_product_attention(q, k, v, mask, opt);
  a.output = linear(merge_heads(a.output), w.w_o, w.b_o);
  return a;
}

}  // namespace qkv
