// Neural-network functions: softmax, layer_norm, dropout, embedding, losses.
#pragma once
#include <optional>

#include "qkv/core/rng.h"
#include "qkv/core/tensor.h"

namespace qkv {

// Max-subtracted softmax along dim. A slice whose entries are all -inf (a
// fully masked attention row) gives all zeros and zero gradient, never NaN.
Tensor softmax(const Tensor& x, std::int64_t dim);
// log(softmax); an all -inf slice gives -inf everywhere and zero gradient.
Tensor log_softmax(const Tensor& x, std::int64_t dim);

// Normalises over the trailing dims given by normalized_shape (two-pass
// mean/variance in float64 accumulation; biased variance as in PyTorch).
// weight/bias may be undefined; eps > 0.
//   x [..., *normalized_shape], weight/bias [*normalized_shape] -> [...same...]
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5);

// Root-mean-square normalisation over the trailing dims given by normalized_shape
// (torch.nn.functional.rms_norm; Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * weight,
// the mean of squares accumulated in double (kernels/rms_norm.h). weight may be undefined (1);
// eps defaults to the dtype's machine epsilon, as in PyTorch (Llama configs pass 1e-5 or 1e-6).
//   x [..., *normalized_shape], weight [*normalized_shape] -> [...same...]
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);

// Inverted dropout: in training zeroes each element with probability p and
// scales the rest by 1/(1-p); identity when !training or p == 0.
// p must be in [0, 1). The mask is a pure function of (gen seed, offset).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// weight [V, E], ids I64 [...] -> [..., E]. ids outside [0, V) -> IndexError.
// Rows of padding_idx receive no gradient (if given).
Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<std::int64_t> padding_idx = std::nullopt);

struct CrossEntropyOptions {
  std::int64_t ignore_index = -100;
  double label_smoothing = 0.0;   // in [0, 1]
  bool mean = true;               // false: sum
};
// logits [N, C] (or [C]), targets I64 [N] (or []) -> rank-0 loss.
// Mean over non-ignored targets, as torch.nn.functional.cross_entropy.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& opt = {});

}  // namespace qkv
