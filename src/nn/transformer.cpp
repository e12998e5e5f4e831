#include "qkv/nn/transformer.h"

#include "qkv/ops/elementwise.h"

namespace qkv::nn {

PositionwiseFeedForward::PositionwiseFeedForward(const FeedForwardOptions& o) : opt_(o) {
  linear1 = register_module("linear1", std::make_shared<Linear>(LinearOptions{
                                           .in_features = o.d_model, .out_features = o.d_ff, .dtype = o.dtype}));
  linear2 = register_module("linear2", std::make_shared<Linear>(LinearOptions{
                                           .in_features = o.d_ff, .out_features = o.d_model, .dtype = o.dtype}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout}));
}

Tensor PositionwiseFeedForward::forward(const Tensor& x) const {
  return linear2->forward(dropout_->forward(activate(linear1->forward(x), opt_.activation)));
}

namespace {
std::shared_ptr<MultiHeadAttention> make_mha(const EncoderBlockOptions& o) {
  return std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{
      .embed_dim = o.d_model, .num_heads = o.num_heads, .dropout = o.dropout, .dtype = o.dtype});
}
std::shared_ptr<LayerNorm> make_norm(const EncoderBlockOptions& o) {
  return std::make_shared<LayerNorm>(
      LayerNormOptions{.normalized_shape = o.d_model, .eps = o.layer_norm_eps, .dtype = o.dtype});
}
std::shared_ptr<PositionwiseFeedForward> make_ffn(const EncoderBlockOptions& o) {
  return std::make_shared<PositionwiseFeedForward>(FeedForwardOptions{
      .d_model = o.d_model, .d_ff = o.d_ff, .dropout = o.dropout, .activation = o.activation, .dtype = o.dtype});
}
// Attention: four E x E projections and biases; feed-forward: E x F, F x E and biases; norms: 2E each.
void add_attention_memory(MemoryEstimate& est, const EncoderBlockOptions& o, std::int64_t itemsize) {
  est.add({o.d_model, o.d_model}, 4, itemsize).add({o.d_model}, 4, itemsize);
}
void add_ffn_memory(MemoryEstimate& est, const EncoderBlockOptions& o, std::int64_t itemsize) {
  est.add({o.d_model, o.d_ff}, 2, itemsize).add({o.d_model}, 1, itemsize).add({o.d_ff}, 1, itemsize);
}
}  // namespace

void add_encoder_block_memory(MemoryEstimate& est, const EncoderBlockOptions& o) {
  const auto es = static_cast<std::int64_t>(dtype_size(o.dtype));
  add_attention_memory(est, o, es);
  add_ffn_memory(est, o, es);
  est.add({o.d_model}, 4, es);
}

void add_decoder_block_memory(MemoryEstimate& est, const EncoderBlockOptions& o) {
  const auto es = static_cast<std::int64_t>(dtype_size(o.dtype));
  add_attention_memory(est, o, es);
  add_attention_memory(est, o, es);
  add_ffn_memory(est, o, es);
  est.add({o.d_model}, 6, es);
}

std::string block_sizes_str(const EncoderBlockOptions& o) {
  return "d_model " + std::to_string(o.d_model) + ", d_ff " + std::to_string(o.d_ff) + ", " +
         std::to_string(o.num_heads) + " heads";
}

TransformerEncoderBlock::TransformerEncoderBlock(const EncoderBlockOptions& o) : opt_(o) {
  MemoryEstimate est;
  add_encoder_block_memory(est, o);
  est.check("TransformerEncoderBlock (" + block_sizes_str(o) + ")");
  self_attn = register_module("self_attn", make_mha(o));
  ffn = register_module("ffn", make_ffn(o));
  norm1 = register_module("norm1", make_norm(o));
  norm2 = register_module("norm2", make_norm(o));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout}));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout}));
}

Tensor TransformerEncoderBlock::forward(const Tensor& x_in, const Mask& mask, Tensor* attn_weights) const {
  const bool need = attn_weights != nullptr;
  Tensor x = x_in;
  if (opt_.norm_first) {
    Tensor n = norm1->forward(x);
    AttentionOutput a = self_attn->forward(n, n, n, mask, need);
    if (need) *attn_weights = a.weights;
    x = add(x, dropout1_->forward(a.output));
    x = add(x, dropout2_->forward(ffn->forward(norm2->forward(x))));
  } else {
    AttentionOutput a = self_attn->forward(x, x, x, mask, need);
    if (need) *attn_weights = a.weights;
    x = norm1->forward(add(x, dropout1_->forward(a.output)));
    x = norm2->forward(add(x, dropout2_->forward(ffn->forward(x))));
  }
  return x;
}

TransformerDecoderBlock::TransformerDecoderBlock(const DecoderBlockOptions& o) : opt_(o) {
  MemoryEstimate est;
  add_decoder_block_memory(est, o);
  est.check("TransformerDecoderBlock (" + block_sizes_str(o) + ")");
  self_attn = register_module("self_attn", make_mha(o));
  cross_attn = register_module("cross_attn", make_mha(o));
  ffn = register_module("ffn", make_ffn(o));
  norm1 = register_module("norm1", make_norm(o));
  norm2 = register_module("norm2", make_norm(o));
  norm3 = register_module("norm3", make_norm(o));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout}));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout}));
  dropout3_ = register_module("dropout3", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout}));
}

Tensor TransformerDecoderBlock::forward(const Tensor& x_in, const Tensor& memory, const Mask& self_mask,
                                        const Mask& memory_mask, Tensor* self_weights, Tensor* cross_weights) const {
  Tensor x = x_in;
  if (opt_.norm_first) {
    Tensor n = norm1->forward(x);
    AttentionOutput a = self_attn->forward(n, n, n, self_mask, self_weights != nullptr);
    x = add(x, dropout1_->forward(a.output));
    Tensor n2 = norm2->forward(x);
    AttentionOutput c = cross_attn->forward(n2, memory, memory, memory_mask, cross_weights != nullptr);
    x = add(x, dropout2_->forward(c.output));
    x = add(x, dropout3_->forward(ffn->forward(norm3->forward(x))));
    if (self_weights) *self_weights = a.weights;
    if (cross_weights) *cross_weights = c.weights;
  } else {
    AttentionOutput a = self_attn->forward(x, x, x, self_mask, self_weights != nullptr);
    x = norm1->forward(add(x, dropout1_->forward(a.output)));
    AttentionOutput c = cross_attn->forward(x, memory, memory, memory_mask, cross_weights != nullptr);
    x = norm2->forward(add(x, dropout2_->forward(c.output)));
    x = norm3->forward(add(x, dropout3_->forward(ffn->forward(x))));
    if (self_weights) *self_weights = a.weights;
    if (cross_weights) *cross_weights = c.weights;
  }
  return x;
}

TransformerEncoder::TransformerEncoder(const EncoderOptions& o) : opt_(o) {
  if (o.num_layers < 0) throw ValueError("TransformerEncoder: num_layers must be >= 0, got " + std::to_string(o.num_layers));
  MemoryEstimate est;
  add_encoder_block_memory(est, o.layer);
  est.scale(o.num_layers).check("TransformerEncoder (" + std::to_string(o.num_layers) + " layers, " +
                                block_sizes_str(o.layer) + ")");
  for (std::int64_t i = 0; i < o.num_layers; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<TransformerEncoderBlock>(o.layer)));
  if (o.final_norm) norm = register_module("norm", make_norm(o.layer));
}

Tensor TransformerEncoder::forward(const Tensor& x_in, const Mask& mask, std::vector<Tensor>* weights) const {
  Tensor x = x_in;
  if (weights) weights->clear();
  for (const auto& l : layers) {
    Tensor w;
    x = l->forward(x, mask, weights ? &w : nullptr);
    if (weights) weights->push_back(w);
  }
  return norm ? norm->forward(x) : x;
}

TransformerDecoder::TransformerDecoder(const DecoderOptions& o) : opt_(o) {
  if (o.num_layers < 0) throw ValueError("TransformerDecoder: num_layers must be >= 0, got " + std::to_string(o.num_layers));
  MemoryEstimate est;
  add_decoder_block_memory(est, o.layer);
  est.scale(o.num_layers).check("TransformerDecoder (" + std::to_string(o.num_layers) + " layers, " +
                                block_sizes_str(o.layer) + ")");
  for (std::int64_t i = 0; i < o.num_layers; ++i)
    layers.push_back(register_module("layers." + std::to_string(i), std::make_shared<TransformerDecoderBlock>(o.layer)));
  if (o.final_norm) norm = register_module("norm", make_norm(o.layer));
}

Tensor TransformerDecoder::forward(const Tensor& x_in, const Tensor& memory, const Mask& self_mask,
                                   const Mask& memory_mask, std::vector<Tensor>* self_weights,
                                   std::vector<Tensor>* cross_weights) const {
  Tensor x = x_in;
  if (self_weights) self_weights->clear();
  if (cross_weights) cross_weights->clear();
  for (const auto& l : layers) {
    Tensor sw, cw;
    x = l->forward(x, memory, self_mask, memory_mask, self_weights ? &sw : nullptr, cross_weights ? &cw : nullptr);
    if (self_weights) self_weights->push_back(sw);
    if (cross_weights) cross_weights->push_back(cw);
  }
  return norm ? norm->forward(x) : x;
}

}  // namespace qkv::nn
