// Optimisers with PyTorch's update rules (torch.optim, foreach=False):
// SGD (momentum, dampening, nesterov, weight decay), Adam (L2 weight decay
// added to the gradient), AdamW (decoupled weight decay). Gradient clipping
// by global norm.
//
// step() first checks every gradient: a non-finite value is a NumericError
// naming the parameter, raised before any parameter or state is changed.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::optim {

using NamedParams = std::vector<std::pair<std::string, Tensor>>;

class Optimizer {
 public:
  explicit Optimizer(NamedParams params, const char* kind);
  explicit Optimizer(const std::vector<Tensor>& params, const char* kind);
  virtual ~Optimizer() = default;
  // Applies one update from the accumulated gradients (parameters without a gradient are skipped).
  void step();
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr);
  std::int64_t steps() const { return step_; }
  const NamedParams& params() const { return params_; }
  // Optimiser state as named tensors (for checkpoints): "step" and per-parameter buffers
  // named "<kind>.<buffer>.<param name>". load_state restores exactly.
  NamedParams state() const;
  void load_state(const NamedParams& st);

 protected:
  virtual void update(std::size_t i, const Tensor& p, const Tensor& g) = 0;
  // Per-parameter state buffers (created lazily, zero-initialised, same shape as the parameter).
  Tensor& buffer(const std::string& name, std::size_t i);
  NamedParams params_;
  double lr_ = 1e-3;
  std::int64_t step_ = 0;
  std::string kind_;

 private:
  std::vector<std::pair<std::string, std::vector<Tensor>>> buffers_;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(NamedParams params, const SGDOptions& o);
  SGD(const std::vector<Tensor>& params, const SGDOptions& o);

 private:
  void validate();
  void update(std::size_t i, const Tensor& p, const Tensor& g) override;
  SGDOptions o_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled (default 1e-2 there)
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  Adam(NamedParams params, const AdamOptions& o);
  Adam(const std::vector<Tensor>& params, const AdamOptions& o);
  // Parameters whose name `exempt` accepts get no weight decay (PyTorch: a second
  // parameter group with weight_decay 0; GPT training exempts biases and LayerNorm
  // weights, i.e. every parameter of rank < 2). Returns how many were exempted.
  std::size_t exclude_from_weight_decay(const std::function<bool(const std::string&)>& exempt);

 protected:
  Adam(NamedParams params, const AdamOptions& o, bool decoupled, const char* kind);
  void update(std::size_t i, const Tensor& p, const Tensor& g) override;

 private:
  void validate();
  AdamOptions o_;
  bool decoupled_ = false;
  std::vector<char> no_decay_;  // per parameter; empty: none exempt
};

class AdamW : public Adam {
 public:
  AdamW(NamedParams params, const AdamOptions& o);
  AdamW(const std::vector<Tensor>& params, const AdamOptions& o);
};

enum class NonFinite { Error, Skip };

// Scales all gradients so their global L2 norm is at most max_norm; returns the
// norm before clipping. A non-finite norm: NonFinite::Error throws NumericError
// (gradients untouched); NonFinite::Skip zeroes nothing, leaves gradients as they
// are and returns the non-finite norm so the caller can skip the step.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, NonFinite on_nonfinite = NonFinite::Error);

}  // namespace qkv::optim
