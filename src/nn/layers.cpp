#include "qkv/nn/layers.h"

#include <cmath>

#include "qkv/autograd/autograd.h"
#include "qkv/ops/linalg.h"
#include "qkv/ops/nn_functional.h"

namespace qkv::nn {

namespace {
void check_positive(std::int64_t v, const char* module, const char* field) {
  if (v <= 0)
    throw ValueError(std::string(module) + ": " + field + " must be > 0, got " + std::to_string(v));
}
}  // namespace

Linear::Linear(const LinearOptions& o) : opt_(o) {
  check_positive(o.in_features, "Linear", "in_features");
  check_positive(o.out_features, "Linear", "out_features");
  const double bound = 1.0 / std::sqrt(static_cast<double>(o.in_features));
  auto init = [&](const Shape& s) {
    return skip_init() ? Tensor::empty(s, o.dtype) : Tensor::uniform(s, -bound, bound, nullptr, o.dtype);
  };
  weight = register_parameter("weight", init({o.out_features, o.in_features}));
  if (o.bias) bias = register_parameter("bias", init({o.out_features}));
}

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

Embedding::Embedding(const EmbeddingOptions& o) : opt_(o) {
  check_positive(o.num_embeddings, "Embedding", "num_embeddings");
  check_positive(o.embedding_dim, "Embedding", "embedding_dim");
  if (o.padding_idx && (*o.padding_idx < 0 || *o.padding_idx >= o.num_embeddings))
    throw ValueError("Embedding: padding_idx " + std::to_string(*o.padding_idx) + " is outside [0, " +
                     std::to_string(o.num_embeddings) + ")");
  Tensor w = skip_init() ? Tensor::empty({o.num_embeddings, o.embedding_dim}, o.dtype)
                         : Tensor::randn({o.num_embeddings, o.embedding_dim}, nullptr, o.dtype);
  if (o.padding_idx && !skip_init()) w.select(0, *o.padding_idx).fill_(0.0);
  weight = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids, opt_.padding_idx); }

LayerNorm::LayerNorm(const LayerNormOptions& o) : opt_(o) {
  check_positive(o.normalized_shape, "LayerNorm", "normalized_shape");
  if (!(o.eps > 0.0)) throw ValueError("LayerNorm: eps must be > 0, got " + std::to_string(o.eps));
  if (o.elementwise_affine) {
    const Shape s{o.normalized_shape};
    weight = register_parameter("weight", skip_init() ? Tensor::empty(s, o.dtype) : Tensor::ones(s, o.dtype));
    bias = register_parameter("bias", skip_init() ? Tensor::empty(s, o.dtype) : Tensor::zeros(s, o.dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, {opt_.normalized_shape}, weight, bias, opt_.eps);
}

Dropout::Dropout(const DropoutOptions& o) : p_(o.p) {
  if (!(o.p >= 0.0 && o.p < 1.0)) throw ValueError("Dropout: p must be in [0, 1), got " + std::to_string(o.p));
}

Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p_, is_training()); }

Tensor activate(const Tensor& x, Activation a) {
  switch (a) {
    case Activation::ReLU: return relu(x);
    case Activation::GELU: return gelu(x, GeluApprox::None);
    case Activation::GELUTanh: return gelu(x, GeluApprox::Tanh);
  }
  return x;
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::ReLU: return "relu";
    case Activation::GELU: return "gelu";
    case Activation::GELUTanh: return "gelu_tanh";
  }
  return "?";
}

}  // namespace qkv::nn
