#include "qkv/ops/elementwise.h"

#include <cmath>

#include "ops_internal.h"
#include "qkv/kernels/activation.h"
#include "qkv/ops/reduce.h"

namespace qkv {

using autograd::record;
using autograd::sum_to;
using detail::map_binary;
using detail::map_unary;
using detail::map_unary2;

namespace {

struct BinaryPrep {
  Shape out_shape;
};

BinaryPrep prep_binary(const Tensor& a, const Tensor& b, const char* op) {
  detail::check_float(a, op, "a");
  detail::check_float(b, op, "b");
  detail::check_same_dtype(a, b, op, "a", "b");
  return {broadcast_shapes(a.shape(), b.shape(), op)};
}

}  // namespace

// ------------------------------------------------------------ binary

Tensor add(const Tensor& a, const Tensor& b) {
  auto p = prep_binary(a, b, "add");
  Tensor out = dispatch_float(a.dtype(), "add", [&]<class T>() {
    return map_binary<T>(a, b, p.out_shape, [](T x, T y) { return x + y; });
  });
  record(out, "add", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    // out = a + b
    return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  auto p = prep_binary(a, b, "sub");
  Tensor out = dispatch_float(a.dtype(), "sub", [&]<class T>() {
    return map_binary<T>(a, b, p.out_shape, [](T x, T y) { return x - y; });
  });
  record(out, "sub", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    // out = a - b
    return std::vector<Tensor>{sum_to(g, sa), sum_to(neg(g), sb)};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  auto p = prep_binary(a, b, "mul");
  Tensor out = dispatch_float(a.dtype(), "mul", [&]<class T>() {
    return map_binary<T>(a, b, p.out_shape, [](T x, T y) { return x * y; });
  });
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record(out, "mul", {a, b}, [a = a.detach(), b = b.detach(), ga, gb](const Tensor& g) {
    // out = a * b  ->  da = g * b, db = g * a
    return std::vector<Tensor>{ga ? sum_to(mul(g, b), a.shape()) : Tensor(),
                               gb ? sum_to(mul(g, a), b.shape()) : Tensor()};
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  auto p = prep_binary(a, b, "div");
  Tensor out = dispatch_float(a.dtype(), "div", [&]<class T>() {
    return map_binary<T>(a, b, p.out_shape, [](T x, T y) { return x / y; });
  });
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record(out, "div", {a, b}, [a = a.detach(), b = b.detach(), ga, gb](const Tensor& g) {
    // out = a / b  ->  da = g / b, db = -g * a / b^2
    Tensor da = ga ? sum_to(div(g, b), a.shape()) : Tensor();
    Tensor db = gb ? sum_to(neg(div(mul(g, a), mul(b, b))), b.shape()) : Tensor();
    return std::vector<Tensor>{da, db};
  });
  return out;
}

// ------------------------------------------------------------ scalar

Tensor add(const Tensor& a, double s) {
  detail::check_float(a, "add", "a");
  Tensor out = dispatch_float(a.dtype(), "add", [&]<class T>() {
    const T v = static_cast<T>(s);
    return map_unary<T>(a, [v](T x) { return x + v; });
  });
  record(out, "add_scalar", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor mul(const Tensor& a, double s) {
  detail::check_float(a, "mul", "a");
  Tensor out = dispatch_float(a.dtype(), "mul", [&]<class T>() {
    const T v = static_cast<T>(s);
    return map_unary<T>(a, [v](T x) { return x * v; });
  });
  // out = a * s  ->  da = g * s
  record(out, "mul_scalar", {a}, [s](const Tensor& g) { return std::vector<Tensor>{mul(g, s)}; });
  return out;
}

Tensor scale(const Tensor& a, double s) { return mul(a, s); }

Tensor neg(const Tensor& a) { return mul(a, -1.0); }

// ------------------------------------------------------------ unary

Tensor exp(const Tensor& a) {
  detail::check_float(a, "exp", "a");
  Tensor out = dispatch_float(a.dtype(), "exp", [&]<class T>() { return map_unary<T>(a, [](T x) { return std::exp(x); }); });
  record(out, "exp", {a}, [o = out.detach()](const Tensor& g) {
    // out = exp(a)  ->  da = g * out
    return std::vector<Tensor>{mul(g, o)};
  });
  return out;
}

Tensor log(const Tensor& a) {
  detail::check_float(a, "log", "a");
  Tensor out = dispatch_float(a.dtype(), "log", [&]<class T>() { return map_unary<T>(a, [](T x) { return std::log(x); }); });
  record(out, "log", {a}, [a = a.detach()](const Tensor& g) {
    // out = log(a)  ->  da = g / a
    return std::vector<Tensor>{div(g, a)};
  });
  return out;
}

Tensor sqrt(const Tensor& a) {
  detail::check_float(a, "sqrt", "a");
  Tensor out = dispatch_float(a.dtype(), "sqrt", [&]<class T>() { return map_unary<T>(a, [](T x) { return std::sqrt(x); }); });
  record(out, "sqrt", {a}, [o = out.detach()](const Tensor& g) {
    // out = sqrt(a)  ->  da = g / (2 out)
    return std::vector<Tensor>{div(g, mul(o, 2.0))};
  });
  return out;
}

Tensor square(const Tensor& a) {
  detail::check_float(a, "square", "a");
  Tensor out = dispatch_float(a.dtype(), "square", [&]<class T>() { return map_unary<T>(a, [](T x) { return x * x; }); });
  record(out, "square", {a}, [a = a.detach()](const Tensor& g) {
    // out = a^2  ->  da = 2 a g
    return std::vector<Tensor>{mul(mul(g, a), 2.0)};
  });
  return out;
}

Tensor tanh(const Tensor& a) {
  detail::check_float(a, "tanh", "a");
  Tensor out = dispatch_float(a.dtype(), "tanh", [&]<class T>() { return map_unary<T>(a, [](T x) { return std::tanh(x); }); });
  record(out, "tanh", {a}, [o = out.detach()](const Tensor& g) {
    // out = tanh(a)  ->  da = g (1 - out^2)
    return std::vector<Tensor>{dispatch_float(g.dtype(), "tanh_backward", [&]<class T>() {
      return map_unary2<T>(g, o, [](T gv, T y) { return gv * (T(1) - y * y); });
    })};
  });
  return out;
}

Tensor sigmoid(const Tensor& a) {
  detail::check_float(a, "sigmoid", "a");
  Tensor out = dispatch_float(a.dtype(), "sigmoid", [&]<class T>() {
    return map_unary<T>(a, [](T x) { return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x)); });
  });
  record(out, "sigmoid", {a}, [o = out.detach()](const Tensor& g) {
    // out = sigmoid(a)  ->  da = g out (1 - out)
    return std::vector<Tensor>{dispatch_float(g.dtype(), "sigmoid_backward", [&]<class T>() {
      return map_unary2<T>(g, o, [](T gv, T y) { return gv * y * (T(1) - y); });
    })};
  });
  return out;
}

Tensor relu(const Tensor& a) {
  detail::check_float(a, "relu", "a");
  // NaN propagates: (x > 0 ? x : 0) would turn NaN into 0.
  Tensor out = dispatch_float(a.dtype(), "relu", [&]<class T>() {
    return map_unary<T>(a, [](T x) { return x > T(0) || x != x ? x : T(0); });
  });
  record(out, "relu", {a}, [a = a.detach()](const Tensor& g) {
    // out = max(a, 0)  ->  da = g * (a > 0)
    return std::vector<Tensor>{dispatch_float(g.dtype(), "relu_backward", [&]<class T>() {
      return map_unary2<T>(g, a, [](T gv, T x) { return x > T(0) ? gv : T(0); });
    })};
  });
  return out;
}

Tensor gelu(const Tensor& a, GeluApprox approximate) {
  detail::check_float(a, "gelu", "a");
  const auto form = approximate == GeluApprox::Tanh ? kernels::GeluForm::Tanh : kernels::GeluForm::Erf;
  // float32 contiguous: the vectorised kernel (kernels/activation.h) over threads; otherwise its
  // naive twin, the float64 formula, elementwise.
  Tensor out;
  if (a.dtype() == DType::F32 && a.is_contiguous()) {
    out = Tensor::empty(a.shape(), DType::F32);
    const float* x = a.data<float>();
    float* y = out.data<float>();
    parallel_for(0, a.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
      kernels::gelu_forward_f32(y + b, x + b, e - b, form);
    });
  } else {
    out = dispatch_float(a.dtype(), "gelu", [&]<class T>() {
      return map_unary<T>(a, [form](T x) { return static_cast<T>(kernels::gelu_ref(x, form)); });
    });
  }
  record(out, "gelu", {a}, [a = a.detach(), form](const Tensor& g) {
    // out = gelu(a)  ->  da = g * gelu'(a)
    if (g.dtype() == DType::F32 && a.dtype() == DType::F32) {
      Tensor gc = g.contiguous(), ac = a.contiguous();
      Tensor da = Tensor::empty(g.shape(), DType::F32);
      const float* gp = gc.data<float>();
      const float* ap = ac.data<float>();
      float* dp = da.data<float>();
      parallel_for(0, da.numel(), 1 << 16, [&](std::int64_t b, std::int64_t e) {
        kernels::gelu_backward_f32(dp + b, gp + b, ap + b, e - b, form);
      });
      return std::vector<Tensor>{da};
    }
    return std::vector<Tensor>{dispatch_float(g.dtype(), "gelu_backward", [&]<class T>() {
      return map_unary2<T>(g, a, [form](T gv, T x) { return static_cast<T>(gv * kernels::gelu_grad_ref(x, form)); });
    })};
  });
  return out;
}

// ------------------------------------------------------------ masks

namespace {
// Mask as a contiguous Bool tensor broadcast to `shape`.
Tensor bool_broadcast(const Tensor& mask, const Shape& shape, const char* op) {
  if (!broadcastable_to(mask.shape(), shape))
    throw ShapeError(std::string(op) + ": mask " + mask.shape_str() + " does not broadcast to input " +
                     shape_str(shape));
  Tensor m = mask.dtype() == DType::Bool ? mask : ne(mask, 0.0);
  return m.expand(shape).contiguous();
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_float(x, "masked_fill", "x");
  detail::check_defined(mask, "masked_fill", "mask");
  Tensor m = bool_broadcast(mask, x.shape(), "masked_fill");
  Tensor xc = x.contiguous();
  Tensor out = dispatch_float(x.dtype(), "masked_fill", [&]<class T>() {
    Tensor o = Tensor::empty(x.shape(), x.dtype());
    const T* xs = xc.data<T>();
    const bool* ms = m.data<bool>();
    T* os = o.data<T>();
    const T v = static_cast<T>(value);
    for (std::int64_t i = 0, n = o.numel(); i < n; ++i) os[i] = ms[i] ? v : xs[i];
    return o;
  });
  record(out, "masked_fill", {x}, [m](const Tensor& g) {
    // out = mask ? value : x  ->  dx = mask ? 0 : g
    return std::vector<Tensor>{dispatch_float(g.dtype(), "masked_fill_backward", [&]<class T>() {
      Tensor gc = g.contiguous();
      Tensor o = Tensor::empty(g.shape(), g.dtype());
      const T* gs = gc.data<T>();
      const bool* ms = m.data<bool>();
      T* os = o.data<T>();
      for (std::int64_t i = 0, n = o.numel(); i < n; ++i) os[i] = ms[i] ? T(0) : gs[i];
      return o;
    })};
  });
  return out;
}

namespace {
template <class Pred>
Tensor compare(const Tensor& a, const char* op, Pred pred) {
  detail::check_defined(a, op, "a");
  Tensor out = Tensor::empty(a.shape(), DType::Bool);
  bool* o = out.data<bool>();
  const auto v = a.to_vector<double>();
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = pred(v[i]);
  return out;
}
}  // namespace

Tensor eq(const Tensor& a, double v) { return compare(a, "eq", [v](double x) { return x == v; }); }
Tensor ne(const Tensor& a, double v) { return compare(a, "ne", [v](double x) { return x != v; }); }
Tensor logical_not(const Tensor& a) { return compare(a, "logical_not", [](double x) { return x == 0.0; }); }

Tensor logical_and(const Tensor& a, const Tensor& b) {
  detail::check_defined(a, "logical_and", "a");
  detail::check_defined(b, "logical_and", "b");
  const Shape s = broadcast_shapes(a.shape(), b.shape(), "logical_and");
  Tensor ab = ne(a, 0.0).expand(s).contiguous();
  Tensor bb = ne(b, 0.0).expand(s).contiguous();
  Tensor out = Tensor::empty(s, DType::Bool);
  for (std::int64_t i = 0; i < out.numel(); ++i) out.data<bool>()[i] = ab.data<bool>()[i] && bb.data<bool>()[i];
  return out;
}

}  // namespace qkv
