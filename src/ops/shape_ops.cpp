#include "qkv/ops/shape_ops.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "ops_internal.h"

namespace qkv {

using autograd::record;

namespace {

// Resolves one -1 and checks the element count.
Shape infer_shape(const Tensor& x, const Shape& shape, const char* op) {
  Shape s = shape;
  std::int64_t known = 1;
  int infer = -1;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError(std::string(op) + ": only one dim can be -1, got " + shape_str(shape));
      infer = static_cast<int>(i);
    } else if (s[i] < 0) {
      throw ShapeError(std::string(op) + ": invalid size " + std::to_string(s[i]) + " in " + shape_str(shape));
    } else {
      known = known * s[i];
    }
  }
  const std::int64_t n = x.numel();
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      throw ShapeError(std::string(op) + ": shape " + shape_str(shape) + " is invalid for input of shape " +
                       x.shape_str() + " (" + std::to_string(n) + " elements)");
    s[infer] = n / known;
  } else if (known != n) {
    throw ShapeError(std::string(op) + ": shape " + shape_str(shape) + " (" + std::to_string(known) +
                     " elements) is invalid for input of shape " + x.shape_str() + " (" + std::to_string(n) +
                     " elements)");
  }
  return s;
}

// Strides for viewing (old shape, old strides) as new shape without copying,
// or nullopt when impossible (PyTorch's computeStride rule).
std::optional<Shape> view_strides(const Shape& os, const Shape& ost, const Shape& ns) {
  Shape nst(ns.size(), 0);
  std::int64_t on = 1;
  for (auto d : os) on *= d;
  if (on == 0 || os.empty()) return contiguous_strides(ns);
  std::int64_t view_d = static_cast<std::int64_t>(ns.size()) - 1;
  std::int64_t chunk_base_stride = ost.back();
  std::int64_t tensor_numel = 1, view_numel = 1;
  for (std::int64_t td = static_cast<std::int64_t>(os.size()) - 1; td >= 0; --td) {
    tensor_numel *= os[td];
    if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || ns[view_d] == 1)) {
        nst[view_d] = view_numel * chunk_base_stride;
        view_numel *= ns[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = ost[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return nst;
}

Tensor reshape_grad(const Tensor& g, const Shape& s) { return g.reshape(s); }

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "view", "x");
  const Shape ns = infer_shape(x, shape, "view");
  auto st = view_strides(x.shape(), x.strides(), ns);
  if (!st)
    throw ShapeError("view: cannot view a non-contiguous tensor of shape " + x.shape_str() + " (strides " +
                     shape_str(x.strides()) + ") as " + shape_str(ns) +
                     "; view needs a contiguous tensor; call contiguous() first (or use reshape)");
  Tensor out = make_view(x, ns, *st, x.offset());
  record(out, "view", {x}, [s = x.shape()](const Tensor& g) { return std::vector<Tensor>{reshape_grad(g, s)}; });
  return out;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "reshape", "x");
  const Shape ns = infer_shape(x, shape, "reshape");
  if (view_strides(x.shape(), x.strides(), ns)) return view(x, ns);
  return view(x.contiguous(), ns);
}

Tensor contiguous(const Tensor& x) {
  detail::check_defined(x, "contiguous", "x");
  if (x.is_contiguous()) return x;
  Tensor out = x.detach().clone();
  record(out, "contiguous", {x}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1) {
  detail::check_defined(x, "transpose", "x");
  const int a = wrap_dim(d0, x.dim(), "transpose");
  const int b = wrap_dim(d1, x.dim(), "transpose");
  Shape s = x.shape(), st = x.strides();
  if (x.dim() > 0) {
    std::swap(s[a], s[b]);
    std::swap(st[a], st[b]);
  }
  Tensor out = make_view(x, s, st, x.offset());
  record(out, "transpose", {x}, [a, b](const Tensor& g) { return std::vector<Tensor>{g.transpose(a, b)}; });
  return out;
}

Tensor permute(const Tensor& x, const Shape& dims) {
  detail::check_defined(x, "permute", "x");
  if (static_cast<std::int64_t>(dims.size()) != x.dim())
    throw ShapeError("permute: " + std::to_string(dims.size()) + " dims " + shape_str(dims) + " for a tensor of shape " +
                     x.shape_str());
  std::vector<int> p(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape s(dims.size()), st(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    p[i] = wrap_dim(dims[i], x.dim(), "permute");
    if (seen[p[i]]) throw ShapeError("permute: dim repeated in " + shape_str(dims));
    seen[p[i]] = true;
    s[i] = x.shape()[p[i]];
    st[i] = x.strides()[p[i]];
  }
  Tensor out = make_view(x, s, st, x.offset());
  record(out, "permute", {x}, [p](const Tensor& g) {
    Shape inv(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) inv[p[i]] = static_cast<std::int64_t>(i);
    return std::vector<Tensor>{g.permute(inv)};
  });
  return out;
}

Tensor unsqueeze(const Tensor& x, std::int64_t d) {
  detail::check_defined(x, "unsqueeze", "x");
  const int w = wrap_dim(d, x.dim() + 1, "unsqueeze");
  Shape s = x.shape(), st = x.strides();
  const std::int64_t ins_stride = w < x.dim() ? s[w] * st[w] : 1;
  s.insert(s.begin() + w, 1);
  st.insert(st.begin() + w, ins_stride);
  Tensor out = make_view(x, s, st, x.offset());
  record(out, "unsqueeze", {x}, [sh = x.shape()](const Tensor& g) { return std::vector<Tensor>{reshape_grad(g, sh)}; });
  return out;
}

Tensor squeeze(const Tensor& x, std::int64_t d) {
  detail::check_defined(x, "squeeze", "x");
  const int w = wrap_dim(d, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[w] != 1) return x;
  Shape s = x.shape(), st = x.strides();
  s.erase(s.begin() + w);
  st.erase(st.begin() + w);
  Tensor out = make_view(x, s, st, x.offset());
  record(out, "squeeze", {x}, [sh = x.shape()](const Tensor& g) { return std::vector<Tensor>{reshape_grad(g, sh)}; });
  return out;
}

Tensor narrow(const Tensor& x, std::int64_t d, std::int64_t start, std::int64_t length) {
  detail::check_defined(x, "narrow", "x");
  const int w = wrap_dim(d, x.dim(), "narrow");
  const std::int64_t n = x.shape()[w];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    throw IndexError("narrow: range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                     ") is out of bounds for dim " + std::to_string(d) + " of size " + std::to_string(n) + " (shape " +
                     x.shape_str() + ")");
  Shape s = x.shape();
  s[w] = length;
  Tensor out = make_view(x, s, x.strides(), x.offset() + start * x.strides()[w]);
  record(out, "narrow", {x}, [sh = x.shape(), w, start, length](const Tensor& g) {
    // out = x[start:start+length] along w  ->  dx = zeros with g in that slice
    Tensor dx = Tensor::zeros(sh, g.dtype());
    narrow(dx, w, start, length).copy_(g);
    return std::vector<Tensor>{dx};
  });
  return out;
}

Tensor select(const Tensor& x, std::int64_t d, std::int64_t index) {
  const int w = wrap_dim(d, x.dim(), "select");
  const std::int64_t n = x.shape()[w];
  if (index < -n || index >= n)
    throw IndexError("select: index " + std::to_string(index) + " out of range for dim " + std::to_string(d) +
                     " of size " + std::to_string(n) + " (shape " + x.shape_str() + ")");
  if (index < 0) index += n;
  return squeeze(narrow(x, w, index, 1), w);
}

Tensor expand(const Tensor& x, const Shape& shape) {
  detail::check_defined(x, "expand", "x");
  if (!broadcastable_to(x.shape(), shape))
    throw ShapeError("expand: shape " + x.shape_str() + " cannot be broadcast to " + shape_str(shape));
  if (x.shape() == shape) return x;
  Shape st = broadcast_strides(x.shape(), x.strides(), shape);
  Tensor out = make_view(x, shape, st, x.offset());
  record(out, "expand", {x}, [sh = x.shape()](const Tensor& g) {
    return std::vector<Tensor>{autograd::sum_to(g, sh)};
  });
  return out;
}

Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim) {
  if (xs.empty()) throw ValueError("concat: needs at least one tensor");
  for (const auto& t : xs) detail::check_defined(t, "concat", "xs[i]");
  const Tensor& f = xs[0];
  const int w = wrap_dim(dim, f.dim(), "concat");
  Shape out_shape = f.shape();
  std::int64_t total = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    if (t.dim() != f.dim() || t.dtype() != f.dtype())
      throw ShapeError("concat: tensor " + std::to_string(i) + " is " + dtype_name(t.dtype()) + " " + t.shape_str() +
                       " but tensor 0 is " + dtype_name(f.dtype()) + " " + f.shape_str());
    for (int d = 0; d < f.dim(); ++d)
      if (d != w && t.shape()[d] != f.shape()[d])
        throw ShapeError("concat: tensor " + std::to_string(i) + " has shape " + t.shape_str() + " but tensor 0 has " +
                         f.shape_str() + "; sizes must match except in dim " + std::to_string(dim));
    total += t.shape()[w];
  }
  out_shape[w] = total;
  Tensor out = Tensor::empty(out_shape, f.dtype());
  std::int64_t off = 0;
  std::vector<std::int64_t> lens;
  for (const auto& t : xs) {
    narrow(out.detach(), w, off, t.shape()[w]).copy_(t);
    lens.push_back(t.shape()[w]);
    off += t.shape()[w];
  }
  record(out, "concat", xs, [w, lens](const Tensor& g) {
    std::vector<Tensor> gs;
    std::int64_t o = 0;
    for (auto l : lens) {
      gs.push_back(narrow(g, w, o, l));
      o += l;
    }
    return gs;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& xs, std::int64_t dim) {
  if (xs.empty()) throw ValueError("stack: needs at least one tensor");
  std::vector<Tensor> us;
  const int w = wrap_dim(dim, xs[0].dim() + 1, "stack");
  for (const auto& t : xs) {
    if (t.shape() != xs[0].shape())
      throw ShapeError("stack: tensors must have equal shapes, got " + t.shape_str() + " and " + xs[0].shape_str());
    us.push_back(unsqueeze(t, w));
  }
  return concat(us, w);
}

std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim) {
  detail::check_defined(x, "split", "x");
  if (split_size <= 0) throw ValueError("split: split_size must be > 0, got " + std::to_string(split_size));
  const int w = wrap_dim(dim, x.dim(), "split");
  std::vector<Tensor> out;
  const std::int64_t n = x.shape()[w];
  for (std::int64_t s = 0; s < n; s += split_size) out.push_back(narrow(x, w, s, std::min(split_size, n - s)));
  return out;
}

// Tensor's view methods.
Tensor Tensor::view(const Shape& s) const { return qkv::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return qkv::reshape(*this, s); }
Tensor Tensor::transpose(std::int64_t a, std::int64_t b) const { return qkv::transpose(*this, a, b); }
Tensor Tensor::permute(const Shape& d) const { return qkv::permute(*this, d); }
Tensor Tensor::unsqueeze(std::int64_t d) const { return qkv::unsqueeze(*this, d); }
Tensor Tensor::squeeze(std::int64_t d) const { return qkv::squeeze(*this, d); }
Tensor Tensor::narrow(std::int64_t d, std::int64_t s, std::int64_t l) const { return qkv::narrow(*this, d, s, l); }
Tensor Tensor::select(std::int64_t d, std::int64_t i) const { return qkv::select(*this, d, i); }
Tensor Tensor::expand(const Shape& s) const { return qkv::expand(*this, s); }

}  // namespace qkv
