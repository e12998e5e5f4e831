#include "qkv/autograd/autograd.h"

#include <atomic>
#include <unordered_map>

#include "qkv/ops/elementwise.h"
#include "qkv/ops/reduce.h"

namespace qkv::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local LeafReadyHook* t_leaf_ready = nullptr;
std::atomic<std::uint64_t> g_seq{0};
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

LeafReadyGuard::LeafReadyGuard(LeafReadyHook hook) : hook_(std::move(hook)), prev_(t_leaf_ready) {
  t_leaf_ready = &hook_;
}
LeafReadyGuard::~LeafReadyGuard() { t_leaf_ready = prev_; }

void record(Tensor& out, const char* name, const std::vector<Tensor>& inputs, BackwardFn fn) {
  if (!any_requires_grad(inputs)) return;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->fn = std::move(fn);
  node->out_shape = out.shape();
  node->out_dtype = out.dtype();
  node->seq = g_seq.fetch_add(1, std::memory_order_relaxed);
  node->next.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    Edge e;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn())
        e.node = t.grad_fn();
      else
        e.leaf = t.impl_ptr();
    }
    node->next.push_back(std::move(e));
  }
  // `out` may be a view sharing storage; it gets its own impl with history.
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const std::int64_t lead = grad.dim() - static_cast<std::int64_t>(shape.size());
  Shape dims;
  for (std::int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && grad.shape()[i] != 1) {
      dims.push_back(i);
    }
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  if (lead > 0) r = r.reshape(shape);
  if (r.shape() != shape) r = r.reshape(shape);
  return r;
}

namespace {

void accumulate_leaf(TensorImpl* leaf, const Tensor& g, const std::string& from) {
  if (g.shape() != leaf->shape)
    throw AutogradError("backward: gradient from '" + from + "' has shape " + g.shape_str() +
                        " but the leaf has shape " + shape_str(leaf->shape));
  const bool convert = g.dtype() != leaf->dtype;
  const Tensor converted = convert ? g.to(leaf->dtype) : Tensor();
  const Tensor& gg = convert ? converted : g;
  if (!leaf->grad) {
    // The leaf must own its gradient: a gradient may alias another tensor's (an identity
    // backward passes its input on; a user's grad_in). A gradient nobody else holds — the
    // only handle to its TensorImpl and the only user of its whole, contiguous storage, as a
    // kernel's fresh output is — is adopted as it is; anything else is copied. (Copying
    // always doubled the peak memory of dQ/dK/dV in attention's backward.)
    const auto& impl = gg.impl_ptr();
    const bool sole_owner = impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->grad_fn &&
                            !impl->requires_grad && gg.is_contiguous() &&
                            gg.offset() == 0 &&
                            static_cast<std::size_t>(gg.numel()) * dtype_size(gg.dtype()) == impl->storage->nbytes();
    leaf->grad = sole_owner ? impl : gg.clone().impl_ptr();
  } else {
    leaf->grad = add(Tensor(leaf->grad), gg).impl_ptr();
  }
}

}  // namespace

void run_backward(const Tensor& root, const Tensor& grad_in, bool retain_graph) {
  if (!root.defined()) throw AutogradError("backward: called on an undefined tensor");
  if (!root.requires_grad())
    throw AutogradError("backward: tensor of shape " + root.shape_str() +
                        " does not require grad and has no grad_fn (did you forget requires_grad_() on a parameter, "
                        "or compute it under NoGradGuard?)");
  Tensor grad = grad_in;
  if (!grad.defined()) {
    if (root.numel() != 1)
      throw AutogradError("backward: output has shape " + root.shape_str() +
                          "; a gradient can be created implicitly only for scalar outputs (pass grad)");
    grad = Tensor::ones(root.shape(), root.dtype());
  } else if (grad.shape() != root.shape()) {
    throw AutogradError("backward: grad has shape " + grad.shape_str() + " but the output has shape " +
                        root.shape_str());
  }
  NoGradGuard no_grad;
  LeafReadyHook* const leaf_ready = t_leaf_ready;
  if (root.is_leaf()) {
    accumulate_leaf(root.impl(), grad, "backward");
    if (leaf_ready) (*leaf_ready)(root.impl_ptr());
    return;
  }

  // Collect the graph and count, for each node, how many edges point at it (and, with a
  // leaf-ready hook, at each leaf: the leaf is ready once every node with an edge to it is done).
  std::unordered_map<Node*, int> deps;
  std::unordered_map<TensorImpl*, int> leaf_deps;
  std::vector<Node*> stack{root.grad_fn().get()};
  deps[root.grad_fn().get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (leaf_ready && e.leaf) ++leaf_deps[e.leaf.get()];
      if (!e.node) continue;
      auto it = deps.find(e.node.get());
      if (it == deps.end()) {
        deps[e.node.get()] = 1;
        stack.push_back(e.node.get());
      } else {
        ++it->second;
      }
    }
  }

  // A node is done (processed, or released without a gradient): its leaf edges count down.
  auto node_done = [&](const Node& n) {
    if (!leaf_ready) return;
    for (const Edge& e : n.next)
      if (e.leaf && --leaf_deps[e.leaf.get()] == 0) (*leaf_ready)(e.leaf);
  };

  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn().get()] = grad;
  std::vector<std::shared_ptr<Node>> ready{root.grad_fn()};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Tensor g = std::move(pending[node.get()]);
    pending.erase(node.get());
    if (node->released || !node->fn)
      throw AutogradError("backward: trying to backward through the graph a second time (the saved tensors of '" +
                          node->name +
                          "' were freed after the first backward); pass retain_graph=true to the first backward");
    std::vector<Tensor> grads = node->fn(g);
    if (grads.size() != node->next.size())
      throw AutogradError("backward: '" + node->name + "' returned " + std::to_string(grads.size()) +
                          " gradients for " + std::to_string(node->next.size()) + " inputs");
    if (!retain_graph) {
      node->fn = nullptr;
      node->released = true;
    }
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const Edge& e = node->next[i];
      const Tensor& gi = grads[i];
      if (e.leaf) {
        if (gi.defined()) accumulate_leaf(e.leaf.get(), gi, node->name);
      } else if (e.node) {
        Node* nx = e.node.get();
        if (gi.defined()) {
          if (gi.shape() != nx->out_shape)
            throw AutogradError("backward: '" + node->name + "' produced a gradient of shape " + gi.shape_str() +
                                " for input " + std::to_string(i) + " ('" + nx->name + "', shape " +
                                shape_str(nx->out_shape) + ")");
          auto it = pending.find(nx);
          if (it == pending.end() || !it->second.defined())
            pending[nx] = gi;
          else
            it->second = add(it->second, gi);
        }
        if (--deps[nx] == 0) {
          if (pending.count(nx) && pending[nx].defined()) {
            ready.push_back(e.node);
          } else {
            // No gradient reached this node: its inputs get none from here either; still
            // release it so the graph is consistently freed.
            pending.erase(nx);
            std::vector<Node*> st{nx};
            while (!st.empty()) {
              Node* m = st.back();
              st.pop_back();
              if (!retain_graph) {
                m->fn = nullptr;
                m->released = true;
              }
              node_done(*m);
              for (const Edge& me : m->next)
                if (me.node && --deps[me.node.get()] == 0) {
                  if (pending.count(me.node.get()) && pending[me.node.get()].defined())
                    ready.push_back(me.node);
                  else
                    st.push_back(me.node.get());
                }
            }
          }
        }
      }
    }
    node_done(*node);
  }
}

}  // namespace qkv::autograd
