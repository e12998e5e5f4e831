#include "qkv/nn/module.h"

#include <set>

#include "qkv/autograd/autograd.h"

namespace qkv::nn {

namespace {
thread_local bool t_skip_init = false;
}

SkipInitGuard::SkipInitGuard() : prev_(t_skip_init) { t_skip_init = true; }
SkipInitGuard::~SkipInitGuard() { t_skip_init = prev_; }
bool skip_init() { return t_skip_init; }

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  t.requires_grad_(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent) {
  buffers_.emplace_back(name, t);
  buffer_persistent_.push_back(persistent);
  return t;
}

void Module::collect(const std::string& prefix, NamedTensors* params, NamedTensors* buffers, bool all_buffers) const {
  if (params)
    for (const auto& [n, t] : params_) params->emplace_back(prefix + n, t);
  if (buffers)
    for (std::size_t i = 0; i < buffers_.size(); ++i)
      if (all_buffers || buffer_persistent_[i]) buffers->emplace_back(prefix + buffers_[i].first, buffers_[i].second);
  for (const auto& [n, c] : children_)
    if (c) c->collect(prefix + n + ".", params, buffers, all_buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", &out, nullptr, false);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", nullptr, &out, false);
  return out;
}

std::int64_t Module::num_parameters() const {
  std::int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

StateDict Module::state_dict() const {
  StateDict sd;
  for (auto& [n, t] : named_parameters()) sd[n] = t;
  for (auto& [n, t] : named_buffers()) sd[n] = t;
  return sd;
}

void Module::load_state_dict(const StateDict& sd, bool strict) {
  NamedTensors mine = named_parameters();
  for (auto& b : named_buffers()) mine.push_back(b);
  std::set<std::string> expected;
  std::string missing, shape_errors;
  for (auto& [n, t] : mine) {
    expected.insert(n);
    auto it = sd.find(n);
    if (it == sd.end()) {
      missing += (missing.empty() ? "" : ", ") + n;
      continue;
    }
    if (it->second.shape() != t.shape())
      shape_errors += (shape_errors.empty() ? "" : "; ") + n + ": checkpoint has " + it->second.shape_str() +
                      ", model has " + t.shape_str();
  }
  std::string unexpected;
  for (auto& [n, t] : sd)
    if (!expected.count(n)) unexpected += (unexpected.empty() ? "" : ", ") + n;
  if (!shape_errors.empty()) throw ShapeError("load_state_dict: shape mismatch: " + shape_errors);
  if (strict && (!missing.empty() || !unexpected.empty()))
    throw ValueError("load_state_dict: " + (missing.empty() ? std::string() : "missing keys: " + missing) +
                     (missing.empty() || unexpected.empty() ? "" : "; ") +
                     (unexpected.empty() ? std::string() : "unexpected keys: " + unexpected));
  autograd::NoGradGuard ng;
  for (auto& [n, t] : mine) {
    auto it = sd.find(n);
    if (it != sd.end()) t.copy_(it->second);
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_)
    if (c) c->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

void Module::to(DType dtype) {
  NamedTensors all;
  collect("", &all, &all, true);
  for (auto& [n, t] : all) {
    if (t.dtype() == dtype || !is_floating(t.dtype())) continue;
    Tensor c = t.detach().to(dtype);
    TensorImpl* impl = t.impl();
    impl->storage = c.impl_ptr()->storage;
    impl->shape = c.shape();
    impl->strides = c.strides();
    impl->offset = 0;
    impl->dtype = dtype;
    impl->grad = nullptr;
  }
}

}  // namespace qkv::nn
