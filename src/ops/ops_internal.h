// Helpers shared by the op implementations (not installed).
#pragma once
#include <string>
#include <vector>

#include "qkv/autograd/autograd.h"
#include "qkv/core/parallel.h"
#include "qkv/core/strided.h"
#include "qkv/core/tensor.h"

namespace qkv::detail {

inline void check_defined(const Tensor& t, const char* op, const char* arg) {
  if (!t.defined()) throw ValueError(std::string(op) + ": argument '" + arg + "' is an undefined tensor");
}

inline void check_float(const Tensor& t, const char* op, const char* arg) {
  check_defined(t, op, arg);
  if (!is_floating(t.dtype()))
    throw TypeError(std::string(op) + ": " + arg + " must be float32 or float64, got " + dtype_name(t.dtype()) +
                    " " + t.shape_str());
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op, const char* an, const char* bn) {
  if (a.dtype() != b.dtype())
    throw TypeError(std::string(op) + ": " + an + " is " + dtype_name(a.dtype()) + " " + a.shape_str() + " but " + bn +
                    " is " + dtype_name(b.dtype()) + " " + b.shape_str() + "; convert one with .to()");
}

// Elementwise map over a tensor of any layout into a new contiguous tensor.
template <class T, class F>
Tensor map_unary(const Tensor& a, F f) {
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  T* o = out.data<T>();
  const T* x = a.data<T>();
  const std::int64_t n = a.numel();
  if (a.is_contiguous()) {
    parallel_for(0, n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) o[i] = f(x[i]);
    });
  } else {
    std::int64_t i = 0;
    for_each_offset(a.shape(), a.strides(), [&](std::int64_t off) { o[i++] = f(x[off]); });
  }
  return out;
}

// Elementwise map over two same-shaped tensors (any layouts) into a new contiguous tensor.
template <class T, class F>
Tensor map_unary2(const Tensor& a, const Tensor& b, F f) {
  if (a.is_contiguous() && b.is_contiguous()) {
    Tensor out = Tensor::empty(a.shape(), a.dtype());
    T* o = out.data<T>();
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    const std::int64_t n = a.numel();
    parallel_for(0, n, 1 << 16, [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t i = s; i < e; ++i) o[i] = f(x[i], y[i]);
    });
    return out;
  }
  return map_unary2<T>(a.contiguous(), b.contiguous(), f);
}

// out[i] = f(a[ia], b[ib]) with NumPy broadcasting; out is new and contiguous.
template <class T, class F>
Tensor map_binary(const Tensor& a, const Tensor& b, const Shape& out_shape, F f) {
  Tensor out = Tensor::empty(out_shape, a.dtype());
  T* o = out.data<T>();
  const T* x = a.data<T>();
  const T* y = b.data<T>();
  const std::int64_t n = out.numel();
  if (n == 0) return out;
  if (a.shape() == out_shape && b.shape() == out_shape && a.is_contiguous() && b.is_contiguous()) {
    parallel_for(0, n, 1 << 16, [&](std::int64_t s, std::int64_t e) {
      for (std::int64_t i = s; i < e; ++i) o[i] = f(x[i], y[i]);
    });
    return out;
  }
  const Shape sa = broadcast_strides(a.shape(), a.strides(), out_shape);
  const Shape sb = broadcast_strides(b.shape(), b.strides(), out_shape);
  if (out_shape.empty()) {
    o[0] = f(x[0], y[0]);
    return out;
  }
  const std::size_t r = out_shape.size();
  const std::int64_t inner = out_shape[r - 1];
  const std::int64_t ia = sa[r - 1], ib = sb[r - 1];
  Shape outer(out_shape.begin(), out_shape.end() - 1);
  Shape sao(sa.begin(), sa.end() - 1), sbo(sb.begin(), sb.end() - 1);
  T* op = o;
  for_each_offset2(outer, sao, sbo, [&](std::int64_t oa, std::int64_t ob) {
    const T* xa = x + oa;
    const T* yb = y + ob;
    if (ia == 1 && ib == 1) {
      for (std::int64_t i = 0; i < inner; ++i) op[i] = f(xa[i], yb[i]);
    } else if (ia == 1 && ib == 0) {
      const T yv = yb[0];
      for (std::int64_t i = 0; i < inner; ++i) op[i] = f(xa[i], yv);
    } else if (ia == 0 && ib == 1) {
      const T xv = xa[0];
      for (std::int64_t i = 0; i < inner; ++i) op[i] = f(xv, yb[i]);
    } else {
      for (std::int64_t i = 0; i < inner; ++i) op[i] = f(xa[i * ia], yb[i * ib]);
    }
    op += inner;
  });
  return out;
}

}  // namespace qkv::detail
