#include "qkv/ops/reduce.h"

#include <algorithm>
#include <cmath>

#include "ops_internal.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/shape_ops.h"

namespace qkv {

using autograd::record;

namespace {

// Normalised, sorted, unique reduction dims; empty `dims` means all.
std::vector<int> reduction_dims(const Tensor& a, const Shape& dims, const char* op) {
  std::vector<int> out;
  if (dims.empty()) {
    for (int i = 0; i < a.dim(); ++i) out.push_back(i);
    return out;
  }
  for (auto d : dims) out.push_back(wrap_dim(d, a.dim(), op));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end())
    throw ValueError(std::string(op) + ": dim listed twice in the reduction dims of a tensor of shape " + a.shape_str());
  return out;
}

Shape keep_shape(const Tensor& a, const std::vector<int>& rd) {
  Shape s = a.shape();
  for (int d : rd) s[d] = 1;
  return s;
}

Shape drop_shape(const Tensor& a, const std::vector<int>& rd) {
  Shape s;
  for (int i = 0; i < a.dim(); ++i)
    if (std::find(rd.begin(), rd.end(), i) == rd.end()) s.push_back(a.shape()[i]);
  return s;
}

// Sum over rd into a contiguous tensor of keep_shape, accumulating in double
// in C order of the input (fixed order -> reproducible).
template <class T>
Tensor sum_impl(const Tensor& a, const std::vector<int>& rd) {
  const Shape ks = keep_shape(a, rd);
  Tensor out = Tensor::empty(ks, a.dtype());
  const std::int64_t on = out.numel();
  std::vector<double> acc(static_cast<std::size_t>(on), 0.0);
  const T* x = a.data<T>();
  // Output strides seen from the input's index space: 0 on reduced dims.
  Shape ostr = contiguous_strides(ks);
  for (int d : rd) ostr[d] = 0;
  if (a.is_contiguous() && rd.size() == 1 && rd[0] == a.dim() - 1) {
    const std::int64_t inner = a.shape().back();
    for (std::int64_t r = 0; r < on; ++r) {
      double s = 0;
      const T* row = x + r * inner;
      for (std::int64_t i = 0; i < inner; ++i) s += row[i];
      acc[r] = s;
    }
  } else {
    for_each_offset2(a.shape(), a.strides(), ostr, [&](std::int64_t ia, std::int64_t io) { acc[io] += x[ia]; });
  }
  T* o = out.data<T>();
  for (std::int64_t i = 0; i < on; ++i) o[i] = static_cast<T>(acc[i]);
  return out;
}

}  // namespace

Tensor sum(const Tensor& a, const Shape& dims, bool keepdim) {
  detail::check_float(a, "sum", "a");
  const auto rd = reduction_dims(a, dims, "sum");
  Tensor out = dispatch_float(a.dtype(), "sum", [&]<class T>() { return sum_impl<T>(a, rd); });
  if (!keepdim) out = out.detach().view(drop_shape(a, rd));
  const Shape ks = keep_shape(a, rd);
  record(out, "sum", {a}, [ks, as = a.shape()](const Tensor& g) {
    // out = sum_rd(a)  ->  da = broadcast(g)
    return std::vector<Tensor>{g.reshape(ks).expand(as).contiguous()};
  });
  return out;
}

Tensor sum(const Tensor& a) { return sum(a, {}, false); }

Tensor mean(const Tensor& a, const Shape& dims, bool keepdim) {
  detail::check_float(a, "mean", "a");
  const auto rd = reduction_dims(a, dims, "mean");
  std::int64_t count = 1;
  for (int d : rd) count *= a.shape()[d];
  return mul(sum(a, dims, keepdim), count == 0 ? NAN : 1.0 / static_cast<double>(count));
}

Tensor mean(const Tensor& a) { return mean(a, {}, false); }

namespace {
// Index along `dim` of the maximum, for every other position (first on ties; NaN wins).
template <class T>
std::vector<std::int64_t> argmax_impl(const Tensor& ac, int dim, std::vector<T>* values) {
  const Shape& s = ac.shape();
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= s[i];
  for (std::size_t i = dim + 1; i < s.size(); ++i) inner *= s[i];
  const std::int64_t n = s[dim];
  std::vector<std::int64_t> idx(static_cast<std::size_t>(outer * inner), 0);
  if (values) values->assign(idx.size(), T(0));
  const T* x = ac.data<T>();
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      std::int64_t best = 0;
      T bv = x[o * n * inner + i];
      for (std::int64_t k = 1; k < n && !(bv != bv); ++k) {
        const T v = x[(o * n + k) * inner + i];
        if (v > bv || v != v) {
          bv = v;
          best = k;
        }
      }
      idx[o * inner + i] = best;
      if (values) (*values)[o * inner + i] = bv;
    }
  return idx;
}

Shape reduced_shape(const Shape& s, int dim, bool keepdim) {
  Shape r = s;
  if (keepdim)
    r[dim] = 1;
  else
    r.erase(r.begin() + dim);
  return r;
}
}  // namespace

Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim) {
  detail::check_float(a, "argmax", "a");
  const int d = wrap_dim(dim, a.dim(), "argmax");
  if (a.dim() > 0 && a.shape()[d] == 0)
    throw ShapeError("argmax: cannot reduce over an empty dim " + std::to_string(dim) + " of " + a.shape_str());
  Tensor ac = a.contiguous();
  auto idx = dispatch_float(a.dtype(), "argmax", [&]<class T>() { return argmax_impl<T>(ac, d, nullptr); });
  return Tensor::from_vector(idx, a.dim() == 0 ? Shape{} : reduced_shape(a.shape(), d, keepdim));
}

Tensor amax(const Tensor& a, std::int64_t dim, bool keepdim) {
  detail::check_float(a, "amax", "a");
  const int d = wrap_dim(dim, a.dim(), "amax");
  if (a.dim() > 0 && a.shape()[d] == 0)
    throw ShapeError("amax: cannot reduce over an empty dim " + std::to_string(dim) + " of " + a.shape_str());
  Tensor ac = a.contiguous();
  const Shape os = a.dim() == 0 ? Shape{} : reduced_shape(a.shape(), d, keepdim);
  std::vector<std::int64_t> idx;
  Tensor out = dispatch_float(a.dtype(), "amax", [&]<class T>() {
    std::vector<T> vals;
    idx = argmax_impl<T>(ac, d, &vals);
    Tensor o = Tensor::empty(os, a.dtype());
    std::copy(vals.begin(), vals.end(), o.data<T>());
    return o;
  });
  record(out, "amax", {a}, [idx, as = a.shape(), d](const Tensor& g) {
    // out = max_d(a)  ->  da[argmax] = g
    Tensor gc = g.contiguous();
    Tensor da = Tensor::zeros(as, g.dtype());
    std::int64_t inner = 1;
    for (std::size_t i = d + 1; i < as.size(); ++i) inner *= as[i];
    const std::int64_t n = as.empty() ? 1 : as[d];
    dispatch_float(g.dtype(), "amax_backward", [&]<class T>() {
      const T* gs = gc.data<T>();
      T* o = da.data<T>();
      for (std::size_t p = 0; p < idx.size(); ++p) {
        const std::int64_t oi = static_cast<std::int64_t>(p) / inner, ii = static_cast<std::int64_t>(p) % inner;
        o[(oi * n + idx[p]) * inner + ii] = gs[p];
      }
    });
    return std::vector<Tensor>{da};
  });
  return out;
}

}  // namespace qkv
