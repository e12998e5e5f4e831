// Reverse-mode autograd. Every op that produces a tensor from inputs that
// require grad records a Node: its name, edges to the inputs' producers (or
// to the leaf tensors that accumulate), and a backward function that maps the
// gradient of the output to one gradient per input. Tensor::backward() runs
// the nodes in reverse topological order; unless retain_graph, each node then
// frees what it saved, and a second backward through it is an AutogradError.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::autograd {

// Maps dL/d(output) to dL/d(input_i), one per input (undefined = no gradient).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;

struct Edge {
  std::shared_ptr<Node> node;          // producer of a non-leaf input, or
  std::shared_ptr<TensorImpl> leaf;    // a leaf that requires grad (accumulates), or neither
};

struct Node {
  std::string name;          // op name, for messages: "matmul"
  std::vector<Edge> next;    // one per input
  BackwardFn fn;
  Shape out_shape;
  DType out_dtype = DType::F32;
  std::uint64_t seq = 0;     // creation order
  bool released = false;
};

// Grad mode (thread-local). Ops record nodes only when it is on.
bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// True when grad mode is on and any of the inputs requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

// Makes `out` the result of op `name` applied to `inputs` (if any requires
// grad and grad mode is on); fn returns one gradient per input.
void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn);

// Runs backward from root (see Tensor::backward).
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// Called during run_backward, on its thread, once for every leaf the graph reaches, as soon
// as the last gradient the leaf can get from this backward has been accumulated into it
// (its grad is then final for this backward; undefined if it got none). Data-parallel
// training starts exchanging a gradient here, overlapped with the rest of the backward.
using LeafReadyHook = std::function<void(const std::shared_ptr<TensorImpl>& leaf)>;
// Installs `hook` for the backward passes this thread runs while the guard lives.
class LeafReadyGuard {
 public:
  explicit LeafReadyGuard(LeafReadyHook hook);
  ~LeafReadyGuard();
  LeafReadyGuard(const LeafReadyGuard&) = delete;
  LeafReadyGuard& operator=(const LeafReadyGuard&) = delete;

 private:
  LeafReadyHook hook_;
  LeafReadyHook* prev_;
};

// Sums `grad` down to `shape` (undoing broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace qkv::autograd
