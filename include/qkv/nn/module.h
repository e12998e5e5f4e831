// Module: parameters, buffers and children with dotted PyTorch-style names
// ("encoder.layers.0.self_attn.w_q.weight"), train/eval mode, state dicts.
// Modules only combine ops; each has its own forward() signature.
//
// Thread safety: forward() is const and keeps no state, so one module (weights shared,
// read-only) may serve several threads at once once it is in eval mode (in training mode
// dropout draws from the shared default_generator()); every call's activations, autograd
// graph and workspaces are its own. Anything that changes the module (train/eval, load_state_dict,
// to, zero_grad, an optimiser step) must not run while another thread uses it.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// While a SkipInitGuard lives on a thread, the modules built there allocate their parameters
// without initialising them: no random numbers drawn, no page of memory touched (PyTorch's
// skip_init, accelerate's init_empty_weights). For models whose every parameter is about to be
// loaded from a file; the values are unspecified until then.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool prev_;
};
// True inside a SkipInitGuard on this thread.
bool skip_init();
using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  virtual ~Module() = default;

  // Parameters of this module and its children, in registration order.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // Persistent buffers (saved in state dicts), in registration order.
  NamedTensors named_buffers() const;
  std::int64_t num_parameters() const;

  // Parameters and persistent buffers by name.
  StateDict state_dict() const;
  // Copies values in (converting dtype). strict: missing or unexpected keys are
  // a ValueError listing them. A shape mismatch is a ShapeError naming the key.
  // Nothing is changed unless every key checks out.
  void load_state_dict(const StateDict& sd, bool strict = true);

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Converts every parameter and buffer to dtype in place (handles stay valid).
  void to(DType dtype);

 protected:
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void collect(const std::string& prefix, NamedTensors* params, NamedTensors* buffers, bool all_buffers) const;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<bool> buffer_persistent_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace qkv::nn
