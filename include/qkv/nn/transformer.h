// Feed-forward, encoder and decoder blocks, and their stacks.
#pragma once
#include <vector>

#include "qkv/core/memory.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/layers.h"

namespace qkv::nn {

struct FeedForwardOptions {
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  double dropout = 0.0;
  Activation activation = Activation::ReLU;
  DType dtype = DType::F32;
};

// x [..., d_model] -> linear2(dropout(act(linear1(x)))) [..., d_model].
class PositionwiseFeedForward : public Module {
 public:
  explicit PositionwiseFeedForward(const FeedForwardOptions& o);
  Tensor forward(const Tensor& x) const;
  std::shared_ptr<Linear> linear1, linear2;

 private:
  FeedForwardOptions opt_;
  std::shared_ptr<Dropout> dropout_;
};

struct EncoderBlockOptions {
  std::int64_t d_model = 0;
  std::int64_t num_heads = 1;
  std::int64_t d_ff = 0;
  double dropout = 0.1;
  Activation activation = Activation::ReLU;
  bool norm_first = false;  // false: post-norm as in the tutorials; true: pre-norm
  double layer_norm_eps = 1e-5;
  DType dtype = DType::F32;
};

// x [B, L, E] -> [B, L, E].
//   post-norm: x = norm1(x + drop(self_attn(x, x, x, mask))); x = norm2(x + drop(ffn(x)))
//   pre-norm:  x = x + drop(self_attn(n, n, n, mask)), n = norm1(x); x = x + drop(ffn(norm2(x)))
// If attn_weights is non-null it receives the self-attention weights [B, H, L, L].
// The parameter bytes of one block (weights and biases in o.dtype), added to `est`: the
// up-front memory check of the blocks, stacks and models built from these options.
void add_encoder_block_memory(MemoryEstimate& est, const EncoderBlockOptions& o);
void add_decoder_block_memory(MemoryEstimate& est, const EncoderBlockOptions& o);
// "d_model 512, d_ff 2048, 8 heads": how a block is named in a memory error.
std::string block_sizes_str(const EncoderBlockOptions& o);

class TransformerEncoderBlock : public Module {
 public:
  explicit TransformerEncoderBlock(const EncoderBlockOptions& o);
  Tensor forward(const Tensor& x, const Mask& mask = Mask(), Tensor* attn_weights = nullptr) const;
  std::shared_ptr<MultiHeadAttention> self_attn;
  std::shared_ptr<PositionwiseFeedForward> ffn;
  std::shared_ptr<LayerNorm> norm1, norm2;
  const EncoderBlockOptions& options() const { return opt_; }

 private:
  EncoderBlockOptions opt_;
  std::shared_ptr<Dropout> dropout1_, dropout2_;
};

using DecoderBlockOptions = EncoderBlockOptions;

// x [B, L, E], memory [B, S, E] -> [B, L, E].
//   post-norm: x = norm1(x + drop(self_attn(x, x, x, self_mask)))
//              x = norm2(x + drop(cross_attn(x, memory, memory, memory_mask)))
//              x = norm3(x + drop(ffn(x)))
//   pre-norm:  the same with each norm applied to its sublayer's input.
// self_mask is usually Mask::causal(); memory_mask usually a key padding mask.
class TransformerDecoderBlock : public Module {
 public:
  explicit TransformerDecoderBlock(const DecoderBlockOptions& o);
  Tensor forward(const Tensor& x, const Tensor& memory, const Mask& self_mask = Mask::causal(),
                 const Mask& memory_mask = Mask(), Tensor* self_weights = nullptr,
                 Tensor* cross_weights = nullptr) const;
  std::shared_ptr<MultiHeadAttention> self_attn, cross_attn;
  std::shared_ptr<PositionwiseFeedForward> ffn;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  const DecoderBlockOptions& options() const { return opt_; }

 private:
  DecoderBlockOptions opt_;
  std::shared_ptr<Dropout> dropout1_, dropout2_, dropout3_;
};

struct EncoderOptions {
  std::int64_t num_layers = 1;
  EncoderBlockOptions layer;
  bool final_norm = false;  // a LayerNorm `norm` after the last layer (usual with pre-norm)
};

// Stack of encoder blocks named layers.{i} (and `norm`). If weights is
// non-null it receives each layer's self-attention weights.
class TransformerEncoder : public Module {
 public:
  explicit TransformerEncoder(const EncoderOptions& o);
  Tensor forward(const Tensor& x, const Mask& mask = Mask(), std::vector<Tensor>* weights = nullptr) const;
  std::vector<std::shared_ptr<TransformerEncoderBlock>> layers;
  std::shared_ptr<LayerNorm> norm;  // null unless final_norm

 private:
  EncoderOptions opt_;
};

using DecoderOptions = EncoderOptions;

class TransformerDecoder : public Module {
 public:
  explicit TransformerDecoder(const DecoderOptions& o);
  Tensor forward(const Tensor& x, const Tensor& memory, const Mask& self_mask = Mask::causal(),
                 const Mask& memory_mask = Mask(), std::vector<Tensor>* self_weights = nullptr,
                 std::vector<Tensor>* cross_weights = nullptr) const;
  std::vector<std::shared_ptr<TransformerDecoderBlock>> layers;
  std::shared_ptr<LayerNorm> norm;

 private:
  DecoderOptions opt_;
};

}  // namespace qkv::nn
