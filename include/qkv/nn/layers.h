// Basic layers: Linear, Embedding, LayerNorm, Dropout. Options are aggregates
// with PyTorch's field names; initialisation follows PyTorch's defaults and
// draws from qkv::default_generator() (seed it with qkv::manual_seed).
#pragma once
#include <optional>

#include "qkv/nn/module.h"
#include "qkv/ops/elementwise.h"

namespace qkv::nn {

struct LinearOptions {
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  DType dtype = DType::F32;
};

// y = x W^T + b.  x [..., in] -> [..., out]; weight [out, in], bias [out].
// Init: U(-1/sqrt(in), 1/sqrt(in)) for both (PyTorch's kaiming_uniform(a=sqrt(5))).
class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  Tensor forward(const Tensor& x) const;
  const LinearOptions& options() const { return opt_; }
  Tensor weight, bias;

 private:
  LinearOptions opt_;
};

struct EmbeddingOptions {
  std::int64_t num_embeddings = 0;
  std::int64_t embedding_dim = 0;
  std::optional<std::int64_t> padding_idx;
  DType dtype = DType::F32;
};

// ids I64 [...] -> [..., E]; weight [V, E] ~ N(0, 1) (padding row zero).
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& o);
  Tensor forward(const Tensor& ids) const;
  const EmbeddingOptions& options() const { return opt_; }
  Tensor weight;

 private:
  EmbeddingOptions opt_;
};

struct LayerNormOptions {
  std::int64_t normalized_shape = 0;  // size of the last dim
  double eps = 1e-5;
  bool elementwise_affine = true;
  DType dtype = DType::F32;
};

// Normalises the last dim: x [..., C] -> [..., C]; weight = 1, bias = 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& o);
  Tensor forward(const Tensor& x) const;
  const LayerNormOptions& options() const { return opt_; }
  Tensor weight, bias;

 private:
  LayerNormOptions opt_;
};

struct DropoutOptions {
  double p = 0.5;
};

// Inverted dropout in training mode, identity in eval mode. p in [0, 1).
class Dropout : public Module {
 public:
  explicit Dropout(const DropoutOptions& o = {});
  Tensor forward(const Tensor& x) const;
  double p() const { return p_; }

 private:
  double p_;
};

enum class Activation { ReLU, GELU, GELUTanh };
Tensor activate(const Tensor& x, Activation a);
const char* activation_name(Activation a);

}  // namespace qkv::nn
