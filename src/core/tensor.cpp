#include "qkv/core/tensor.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "qkv/autograd/autograd.h"
#include "qkv/core/memory.h"
#include "qkv/core/strided.h"
#include "qkv/ops/shape_ops.h"

namespace qkv {

namespace {

std::shared_ptr<TensorImpl> new_impl(const Shape& shape, DType dtype, const char* what) {
  const std::int64_t n = checked_numel(shape, what);
  const std::size_t es = dtype_size(dtype);
  if (n > 0 && static_cast<std::uint64_t>(n) > (std::uint64_t{1} << 62) / es)
    throw AllocError(std::string(what) + ": shape " + shape_str(shape) + " is too large to allocate");
  const std::uint64_t bytes = static_cast<std::uint64_t>(n) * es;
  if (bytes >= kCheckedAllocationBytes)  // a large tensor: does it fit before any page is touched?
    check_allocation(bytes, std::string(what) + ": " + dtype_name(dtype) + " tensor of shape " + shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<std::size_t>(n) * es, what);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return impl;
}

template <class T>
void fill_typed(void* p, std::int64_t n, double v) {
  T* d = static_cast<T*>(p);
  const T tv = static_cast<T>(v);
  for (std::int64_t i = 0; i < n; ++i) d[i] = tv;
}

void fill_raw(void* p, DType dt, std::int64_t n, double v) {
  switch (dt) {
    case DType::F32: fill_typed<float>(p, n, v); break;
    case DType::F64: fill_typed<double>(p, n, v); break;
    case DType::I64: fill_typed<std::int64_t>(p, n, v); break;
    case DType::Bool: std::memset(p, v != 0.0 ? 1 : 0, static_cast<std::size_t>(n)); break;
  }
}

}  // namespace

// ---------------------------------------------------------------- factories

Tensor Tensor::empty(const Shape& shape, DType dtype) { return Tensor(new_impl(shape, dtype, "empty")); }

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t(new_impl(shape, dtype, "zeros"));
  std::memset(t.raw_data(), 0, static_cast<std::size_t>(t.numel()) * dtype_size(dtype));
  return t;
}

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t(new_impl(shape, dtype, "full"));
  fill_raw(t.raw_data(), dtype, t.numel(), value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full({}, value, dtype); }

namespace {
template <class T>
Tensor from_vec(const std::vector<T>& v, const Shape& shape, const char* what) {
  const std::int64_t n = checked_numel(shape, what);
  if (n != static_cast<std::int64_t>(v.size()))
    throw ShapeError(std::string(what) + ": " + std::to_string(v.size()) + " values do not fill shape " +
                     shape_str(shape) + " (" + std::to_string(n) + " elements)");
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  if (n) std::memcpy(t.raw_data(), v.data(), v.size() * sizeof(T));
  return t;
}
}  // namespace

Tensor Tensor::from_vector(const std::vector<float>& v, const Shape& s) { return from_vec(v, s, "from_vector"); }
Tensor Tensor::from_vector(const std::vector<double>& v, const Shape& s) { return from_vec(v, s, "from_vector"); }
Tensor Tensor::from_vector(const std::vector<std::int64_t>& v, const Shape& s) {
  return from_vec(v, s, "from_vector");
}
Tensor Tensor::from_bools(const std::vector<int>& v, const Shape& s) {
  const std::int64_t n = checked_numel(s, "from_bools");
  if (n != static_cast<std::int64_t>(v.size()))
    throw ShapeError("from_bools: " + std::to_string(v.size()) + " values do not fill shape " + qkv::shape_str(s));
  Tensor t = empty(s, DType::Bool);
  auto* d = t.data<bool>();
  for (std::int64_t i = 0; i < n; ++i) d[i] = v[i] != 0;
  return t;
}

Tensor Tensor::arange(std::int64_t n, DType dtype) {
  if (n < 0) throw ValueError("arange: n must be >= 0, got " + std::to_string(n));
  Tensor t = empty({n}, dtype);
  for (std::int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::F32: t.data<float>()[i] = static_cast<float>(i); break;
      case DType::F64: t.data<double>()[i] = static_cast<double>(i); break;
      case DType::I64: t.data<std::int64_t>()[i] = i; break;
      case DType::Bool: t.data<bool>()[i] = i != 0; break;
    }
  }
  return t;
}

Tensor Tensor::randn(const Shape& shape, Generator* gen, DType dtype) {
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype);
  const std::int64_t n = t.numel();
  const std::uint64_t base = g.reserve(static_cast<std::uint64_t>(n));
  dispatch_float(dtype, "randn", [&]<class T>() {
    T* d = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(normal_at(g.seed(), base + i));
  });
  return t;
}

Tensor Tensor::uniform(const Shape& shape, double lo, double hi, Generator* gen, DType dtype) {
  if (!(hi >= lo)) throw ValueError("uniform: need hi >= lo, got lo=" + std::to_string(lo) + " hi=" + std::to_string(hi));
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, dtype);
  const std::int64_t n = t.numel();
  const std::uint64_t base = g.reserve(static_cast<std::uint64_t>(n));
  dispatch_float(dtype, "uniform", [&]<class T>() {
    T* d = t.data<T>();
    for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(lo + (hi - lo) * uniform_at(g.seed(), base + i));
  });
  return t;
}

Tensor Tensor::randint(std::int64_t lo, std::int64_t hi, const Shape& shape, Generator* gen) {
  if (hi <= lo) throw ValueError("randint: need hi > lo, got lo=" + std::to_string(lo) + " hi=" + std::to_string(hi));
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, DType::I64);
  auto* d = t.data<std::int64_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) d[i] = g.randint(lo, hi);
  return t;
}

// ---------------------------------------------------------------- metadata

TensorImpl* Tensor::impl() const {
  if (!impl_) throw ValueError("tensor: operation on an undefined tensor");
  return impl_.get();
}

std::int64_t Tensor::size(std::int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
std::int64_t Tensor::stride(std::int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }

std::int64_t Tensor::numel() const {
  std::int64_t n = 1;
  for (auto s : shape()) n *= s;
  return n;
}

bool Tensor::is_contiguous() const {
  std::int64_t expected = 1;
  const auto& sh = shape();
  const auto& st = strides();
  for (std::size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

template <class T>
T* Tensor::data() const {
  if (dtype() != dtype_of<T>())
    throw TypeError(std::string("data<") + dtype_name(dtype_of<T>()) + ">: tensor is " + dtype_name(dtype()));
  return static_cast<T*>(impl()->storage->data()) + impl()->offset;
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template std::int64_t* Tensor::data<std::int64_t>() const;
template bool* Tensor::data<bool>() const;

void* Tensor::raw_data() const {
  return static_cast<char*>(impl()->storage->data()) + impl()->offset * static_cast<std::int64_t>(dtype_size(dtype()));
}

namespace {
double read_elem(const char* p, DType dt) {
  switch (dt) {
    case DType::F32: return *reinterpret_cast<const float*>(p);
    case DType::F64: return *reinterpret_cast<const double*>(p);
    case DType::I64: return static_cast<double>(*reinterpret_cast<const std::int64_t*>(p));
    case DType::Bool: return *reinterpret_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0;
}
void write_elem(char* p, DType dt, double v) {
  switch (dt) {
    case DType::F32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case DType::F64: *reinterpret_cast<double*>(p) = v; break;
    case DType::I64: *reinterpret_cast<std::int64_t*>(p) = static_cast<std::int64_t>(v); break;
    case DType::Bool: *reinterpret_cast<bool*>(p) = v != 0.0; break;
  }
}
}  // namespace

template <class T>
std::vector<T> Tensor::to_vector() const {
  std::vector<T> out;
  out.reserve(static_cast<std::size_t>(numel()));
  const char* base = static_cast<const char*>(raw_data());
  const auto es = static_cast<std::int64_t>(dtype_size(dtype()));
  for_each_offset(shape(), strides(), [&](std::int64_t off) {
    out.push_back(static_cast<T>(read_elem(base + off * es, dtype())));
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>() const;
template std::vector<int> Tensor::to_vector<int>() const;

double Tensor::item() const {
  if (numel() != 1)
    throw ShapeError("item: tensor of shape " + shape_str() + " has " + std::to_string(numel()) +
                     " elements; item() needs exactly one");
  return read_elem(static_cast<const char*>(raw_data()), dtype());
}

namespace {
std::int64_t element_offset(const Tensor& t, std::initializer_list<std::int64_t> idx, const char* op) {
  if (static_cast<std::int64_t>(idx.size()) != t.dim())
    throw IndexError(std::string(op) + ": " + std::to_string(idx.size()) + " indices for a tensor of shape " +
                     t.shape_str());
  std::int64_t off = 0;
  std::size_t d = 0;
  for (std::int64_t i : idx) {
    const std::int64_t n = t.shape()[d];
    const std::int64_t w = i < 0 ? i + n : i;
    if (w < 0 || w >= n)
      throw IndexError(std::string(op) + ": index " + std::to_string(i) + " out of range for dim " + std::to_string(d) +
                       " of size " + std::to_string(n) + " (shape " + t.shape_str() + ")");
    off += w * t.strides()[d];
    ++d;
  }
  return off;
}
}  // namespace

double Tensor::at(std::initializer_list<std::int64_t> idx) const {
  const std::int64_t off = element_offset(*this, idx, "at");
  return read_elem(static_cast<const char*>(raw_data()) + off * static_cast<std::int64_t>(dtype_size(dtype())), dtype());
}

void Tensor::set(std::initializer_list<std::int64_t> idx, double value) const {
  const std::int64_t off = element_offset(*this, idx, "set");
  write_elem(static_cast<char*>(raw_data()) + off * static_cast<std::int64_t>(dtype_size(dtype())), dtype(), value);
}

// ---------------------------------------------------------------- copies

namespace {
// Copies src (any layout) into the contiguous dst of the same shape, converting dtype.
void copy_into_contiguous(const Tensor& dst, const Tensor& src) {
  const auto es = static_cast<std::int64_t>(dtype_size(src.dtype()));
  const auto ed = static_cast<std::int64_t>(dtype_size(dst.dtype()));
  if (src.dtype() == dst.dtype() && src.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), static_cast<std::size_t>(src.numel() * es));
    return;
  }
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  std::int64_t i = 0;
  if (src.dtype() == dst.dtype() && src.dim() > 0) {
    // Row by row over the innermost dim: one memcpy per row when it is contiguous, else a
    // typed strided loop.
    const Shape& sh = src.shape();
    const Shape& st = src.strides();
    const std::int64_t inner = sh.back(), is = st.back();
    const Shape outer(sh.begin(), sh.end() - 1), outer_st(st.begin(), st.end() - 1);
    for_each_offset(outer, outer_st, [&](std::int64_t off) {
      char* drow = d + i * ed;
      const char* srow = s + off * es;
      if (is == 1) {
        std::memcpy(drow, srow, static_cast<std::size_t>(inner * es));
      } else if (es == 4) {
        std::uint32_t v;
        for (std::int64_t k = 0; k < inner; ++k) {
          std::memcpy(&v, srow + k * is * 4, 4);
          std::memcpy(drow + k * 4, &v, 4);
        }
      } else if (es == 8) {
        std::uint64_t v;
        for (std::int64_t k = 0; k < inner; ++k) {
          std::memcpy(&v, srow + k * is * 8, 8);
          std::memcpy(drow + k * 8, &v, 8);
        }
      } else {
        for (std::int64_t k = 0; k < inner; ++k)
          std::memcpy(drow + k * es, srow + k * is * es, static_cast<std::size_t>(es));
      }
      i += inner;
    });
  } else if (src.dtype() == dst.dtype()) {
    std::memcpy(d, s, static_cast<std::size_t>(es));  // 0-dim
  } else {
    for_each_offset(src.shape(), src.strides(), [&](std::int64_t off) {
      write_elem(d + (i++) * ed, dst.dtype(), read_elem(s + off * es, src.dtype()));
    });
  }
}
}  // namespace

Tensor Tensor::contiguous() const { return qkv::contiguous(*this); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype());
  copy_into_contiguous(out, *this);
  if (autograd::any_requires_grad({this})) {
    autograd::record(out, "clone", {*this}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  }
  return out;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty(shape(), dt);
  copy_into_contiguous(out, *this);
  if (is_floating(dt) && is_floating(dtype()) && autograd::any_requires_grad({this})) {
    const DType src_dt = dtype();
    autograd::record(out, "to", {*this}, [src_dt](const Tensor& g) { return std::vector<Tensor>{g.to(src_dt)}; });
  }
  return out;
}

Tensor Tensor::from_external(void* data, const Shape& shape, DType dtype, std::shared_ptr<const void> owner,
                             const Shape& strides) {
  const std::int64_t n = checked_numel(shape, "from_external");
  const std::size_t es = dtype_size(dtype);
  if (reinterpret_cast<std::uintptr_t>(data) % es)
    throw ValueError("from_external: the data of a " + std::string(dtype_name(dtype)) + " tensor " + qkv::shape_str(shape) +
                     " is not aligned to " + std::to_string(es) + " bytes");
  if (!strides.empty() && strides.size() != shape.size())
    throw ShapeError("from_external: strides " + qkv::shape_str(strides) + " do not match shape " + qkv::shape_str(shape));
  std::int64_t span = n ? 1 : 0;  // elements from the first to the last one addressed, inclusive
  const Shape st = strides.empty() ? contiguous_strides(shape) : strides;
  for (std::size_t d = 0; d < shape.size() && n; ++d) {
    if (st[d] < 0) throw ShapeError("from_external: negative stride in " + qkv::shape_str(st));
    span += (shape[d] - 1) * st[d];
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<std::size_t>(span) * es, std::move(owner));
  impl->shape = shape;
  impl->strides = st;
  impl->dtype = dtype;
  return Tensor(impl);
}

void Tensor::set_data_(const Tensor& src) const {
  if (src.shape() != shape())
    throw ShapeError("set_data_: source " + src.shape_str() + " does not match " + shape_str());
  if (src.dtype() != dtype())
    throw TypeError(std::string("set_data_: source dtype ") + dtype_name(src.dtype()) + " does not match " +
                    dtype_name(dtype()));
  TensorImpl* d = impl();
  d->storage = src.impl_ptr()->storage;
  d->strides = src.strides();
  d->offset = src.offset();
  d->grad.reset();
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_ptr()->storage;
  impl->shape = shape();
  impl->strides = strides();
  impl->offset = offset();
  impl->dtype = dtype();
  return Tensor(impl);
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, std::int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl_ptr()->storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(impl);
}

void Tensor::fill_(double value) const {
  if (is_contiguous()) {
    fill_raw(raw_data(), dtype(), numel(), value);
    return;
  }
  char* base = static_cast<char*>(raw_data());
  const auto es = static_cast<std::int64_t>(dtype_size(dtype()));
  for_each_offset(shape(), strides(), [&](std::int64_t off) { write_elem(base + off * es, dtype(), value); });
}

void Tensor::copy_(const Tensor& src) const {
  if (!broadcastable_to(src.shape(), shape()))
    throw ShapeError("copy_: source " + src.shape_str() + " does not broadcast to destination " + shape_str());
  Tensor s = src.shape() == shape() ? src : qkv::expand(src.detach(), shape());
  if (is_contiguous()) {
    // Source may alias destination only if identical; copy via a temporary in that case.
    if (s.impl_ptr()->storage == impl_ptr()->storage) s = s.detach().clone();
    copy_into_contiguous(*this, s);
    return;
  }
  Tensor tmp = empty(shape(), dtype());
  copy_into_contiguous(tmp, s);
  char* base = static_cast<char*>(raw_data());
  const char* t = static_cast<const char*>(tmp.raw_data());
  const auto es = static_cast<std::int64_t>(dtype_size(dtype()));
  std::int64_t i = 0;
  for_each_offset(shape(), strides(), [&](std::int64_t off) {
    std::memcpy(base + off * es, t + (i++) * es, static_cast<std::size_t>(es));
  });
}

// ---------------------------------------------------------------- autograd

Tensor& Tensor::requires_grad_(bool on) {
  if (on && !is_floating(dtype()))
    throw TypeError(std::string("requires_grad_: only float tensors can require gradients, this one is ") +
                    dtype_name(dtype()));
  if (!is_leaf())
    throw AutogradError("requires_grad_: can only be set on leaf tensors (this one was produced by '" +
                        impl()->grad_fn->name + "'); use detach() to make a leaf");
  impl()->requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return impl()->grad ? Tensor(impl()->grad) : Tensor(); }

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined() && g.shape() != shape())
    throw ShapeError("set_grad: gradient " + g.shape_str() + " does not match tensor " + shape_str());
  impl()->grad = g.defined() ? g.impl_ptr() : nullptr;
}

void Tensor::zero_grad() const { impl()->grad = nullptr; }

void Tensor::backward(const Tensor& grad, bool retain_graph) const { autograd::run_backward(*this, grad, retain_graph); }

// ---------------------------------------------------------------- printing

std::string Tensor::to_string(int precision) const {
  std::ostringstream os;
  os << "tensor(";
  const auto v = to_vector<double>();
  const auto& sh = shape();
  if (sh.empty()) {
    os << std::setprecision(precision) << v[0];
  } else {
    // Nested brackets, C order; at most 6 items per dim shown.
    std::function<void(std::size_t, std::int64_t)> rec = [&](std::size_t d, std::int64_t base) {
      os << "[";
      std::int64_t inner = 1;
      for (std::size_t k = d + 1; k < sh.size(); ++k) inner *= sh[k];
      for (std::int64_t i = 0; i < sh[d]; ++i) {
        if (sh[d] > 6 && i == 3) {
          os << "..., ";
          i = sh[d] - 3;
        }
        if (d + 1 == sh.size()) {
          os << std::fixed << std::setprecision(precision) << v[static_cast<std::size_t>(base + i)];
        } else {
          rec(d + 1, base + i * inner);
        }
        if (i + 1 < sh[d]) os << (d + 1 == sh.size() ? ", " : ",\n" + std::string(8 + d, ' '));
      }
      os << "]";
    };
    rec(0, 0);
  }
  os << ", shape=" << shape_str() << ", dtype=" << dtype_name(dtype()) << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

// ---------------------------------------------------------------- comparisons

double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    throw ShapeError("max_abs_diff: shapes " + a.shape_str() + " and " + b.shape_str() + " differ");
  const auto va = a.to_vector<double>();
  const auto vb = b.to_vector<double>();
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) != std::isnan(vb[i])) return std::nan("");
    if (std::isnan(va[i])) continue;
    if (std::isinf(va[i]) || std::isinf(vb[i])) {
      if (va[i] != vb[i]) return INFINITY;
      continue;
    }
    m = std::max(m, std::fabs(va[i] - vb[i]));
  }
  return m;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return false;
  const auto va = a.to_vector<double>();
  const auto vb = b.to_vector<double>();
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) || std::isnan(vb[i])) {
      if (std::isnan(va[i]) != std::isnan(vb[i])) return false;
      continue;
    }
    if (std::isinf(va[i]) || std::isinf(vb[i])) {
      if (va[i] != vb[i]) return false;
      continue;
    }
    if (std::fabs(va[i] - vb[i]) > atol + rtol * std::fabs(vb[i])) return false;
  }
  return true;
}

}  // namespace qkv
