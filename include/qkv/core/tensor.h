// Tensor: a shared handle to (storage, shape, strides, offset, dtype) plus
// autograd state. Copying a Tensor shares it (like PyTorch); clone() copies.
//
//   Tensor x = Tensor::randn({2, 5, 512});
//   Tensor h = x.view({2, 5, 8, 64}).transpose(1, 2);   // (2, 8, 5, 64), a view
//   h.view({2, 40, 64});          // ShapeError: view needs a contiguous tensor; call contiguous() first
//   h.contiguous().view({2, 40, 64});                    // fine
#pragma once
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/dtype.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/core/shape.h"
#include "qkv/core/storage.h"

namespace qkv {

namespace autograd {
struct Node;
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;            // in elements
  std::int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;            // accumulated gradient (leaves)
  std::shared_ptr<autograd::Node> grad_fn;     // the op that produced this tensor (non-leaves)
};

class Tensor {
 public:
  Tensor() = default;  // undefined
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (all contiguous) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::F32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32);
  static Tensor ones(const Shape& shape, DType dtype = DType::F32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32);
  static Tensor scalar(double value, DType dtype = DType::F32);  // rank 0
  static Tensor from_vector(const std::vector<float>& v, const Shape& shape);
  static Tensor from_vector(const std::vector<double>& v, const Shape& shape);
  static Tensor from_vector(const std::vector<std::int64_t>& v, const Shape& shape);
  static Tensor from_bools(const std::vector<int>& v, const Shape& shape);  // nonzero = true
  static Tensor arange(std::int64_t n, DType dtype = DType::F32);
  // Standard normal / uniform [lo, hi) / integers [lo, hi). nullptr = default_generator().
  static Tensor randn(const Shape& shape, Generator* gen = nullptr, DType dtype = DType::F32);
  static Tensor uniform(const Shape& shape, double lo, double hi, Generator* gen = nullptr, DType dtype = DType::F32);
  static Tensor randint(std::int64_t lo, std::int64_t hi, const Shape& shape, Generator* gen = nullptr);
  // A tensor over memory someone else owns (a memory-mapped file's weights): no allocation, no
  // copy. `strides` in elements (empty: contiguous); `owner` keeps the memory alive while any
  // view of it lives. ValueError when data is not aligned for the dtype.
  static Tensor from_external(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                              const Shape& strides = {});

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl()->shape; }
  const Shape& sizes() const { return impl()->shape; }
  std::int64_t dim() const { return static_cast<std::int64_t>(impl()->shape.size()); }
  std::int64_t size(std::int64_t d) const;  // negative d counts from the end
  std::int64_t numel() const;
  const Shape& strides() const { return impl()->strides; }
  std::int64_t stride(std::int64_t d) const;
  std::int64_t offset() const { return impl()->offset; }
  DType dtype() const { return impl()->dtype; }
  bool is_contiguous() const;
  std::string shape_str() const { return qkv::shape_str(shape()); }

  // ---- data access ----
  // Pointer to element [0,...,0]; throws TypeError if T does not match dtype().
  template <class T>
  T* data() const;
  void* raw_data() const;
  // All elements in C order (works for any layout); converts to T.
  template <class T>
  std::vector<T> to_vector() const;
  double item() const;                                        // numel() == 1
  double at(std::initializer_list<std::int64_t> idx) const;   // one element, any dtype
  void set(std::initializer_list<std::int64_t> idx, double value) const;

  // ---- copies and conversions (autograd-aware) ----
  Tensor contiguous() const;  // itself if already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor detach() const;      // shares storage, no autograd history

  // ---- views and shape ops (autograd-aware; defined with the ops) ----
  Tensor view(const Shape& shape) const;      // ShapeError if not viewable without a copy
  Tensor reshape(const Shape& shape) const;   // view when possible, else a copy
  Tensor transpose(std::int64_t d0, std::int64_t d1) const;
  Tensor permute(const Shape& dims) const;
  Tensor unsqueeze(std::int64_t d) const;
  Tensor squeeze(std::int64_t d) const;
  Tensor narrow(std::int64_t d, std::int64_t start, std::int64_t length) const;
  Tensor select(std::int64_t d, std::int64_t index) const;  // removes dim d
  Tensor expand(const Shape& shape) const;                  // broadcast view (stride 0)

  // ---- autograd ----
  bool requires_grad() const { return impl()->requires_grad; }
  // Only on leaves of a floating dtype.
  Tensor& requires_grad_(bool on = true);
  Tensor grad() const;  // undefined if none
  void set_grad(const Tensor& g) const;
  void zero_grad() const;  // drops the gradient (PyTorch set_to_none)
  bool is_leaf() const { return impl()->grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl()->grad_fn; }
  // Backpropagates from this tensor. grad may be undefined only when numel() == 1.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // ---- in-place (no autograd; for optimisers, initialisers and buffers) ----
  void fill_(double value) const;
  void copy_(const Tensor& src) const;  // same shape (or broadcastable), any layout, converts dtype
  // This tensor, and every handle that shares it (a module's parameter, say), now views src's
  // memory instead of its own: PyTorch's `param.data = src`. Same shape and dtype (ShapeError /
  // TypeError otherwise); keeps requires_grad, drops any gradient. No copy.
  void set_data_(const Tensor& src) const;

  std::string to_string(int precision = 4) const;
  TensorImpl* impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// A tensor viewing `base`'s storage with new geometry (no autograd).
Tensor make_view(const Tensor& base, Shape shape, Shape strides, std::int64_t offset);

// Largest |a - b| over all elements (shapes must match); NaN if either has a NaN where the other does not.
double max_abs_diff(const Tensor& a, const Tensor& b);
// |a - b| <= atol + rtol*|b| elementwise, same shapes; NaNs must match positions (and infinities must be equal).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

}  // namespace qkv
