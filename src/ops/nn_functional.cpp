#include "qkv/ops/nn_functional.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops_internal.h"
#include "qkv/kernels/dropout.h"
#include "qkv/kernels/layer_norm.h"
#include "qkv/kernels/softmax.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/shape_ops.h"

namespace qkv {

using autograd::record;

namespace {

// ---------------------------------------------------------------- softmax kernels
// Rows of length n, contiguous. A row whose maximum is -inf (fully masked) gives zeros.

// fn(b, e) over row chunks of at least ~16 K elements, split over threads.
template <class F>
void for_row_chunks(std::int64_t rows, std::int64_t n, F&& fn) {
  parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(n, 1)), fn);
}

// Row softmax through the kernels (kernels/softmax.h): the vectorised one for float, the
// naive twin for double; rows split over threads.
template <class T>
void softmax_rows(T* y, const T* x, std::int64_t rows, std::int64_t n) {
  for_row_chunks(rows, n, [&](std::int64_t b, std::int64_t e) {
    if constexpr (std::is_same_v<T, float>)
      kernels::softmax_rows_f32(y + b * n, x + b * n, e - b, n);
    else
      kernels::softmax_rows_ref<T>(y + b * n, x + b * n, e - b, n);
  });
}

// dx = y * (g - sum(g * y)), through the kernels like softmax_rows.
template <class T>
void softmax_backward_rows(T* dx, const T* g, const T* y, std::int64_t rows, std::int64_t n) {
  for_row_chunks(rows, n, [&](std::int64_t b, std::int64_t e) {
    if constexpr (std::is_same_v<T, float>)
      kernels::softmax_backward_rows_f32(dx + b * n, g + b * n, y + b * n, e - b, n);
    else
      kernels::softmax_backward_rows_ref<T>(dx + b * n, g + b * n, y + b * n, e - b, n);
  });
}

// dx = g - exp(y) * sum(g); fully masked rows get 0. Through the kernels like softmax_rows.
template <class T>
void log_softmax_backward_rows(T* dx, const T* g, const T* y, std::int64_t rows, std::int64_t n) {
  for_row_chunks(rows, n, [&](std::int64_t b, std::int64_t e) {
    if constexpr (std::is_same_v<T, float>)
      kernels::log_softmax_backward_rows_f32(dx + b * n, g + b * n, y + b * n, e - b, n);
    else
      kernels::log_softmax_backward_rows_ref<T>(dx + b * n, g + b * n, y + b * n, e - b, n);
  });
}

// y = x - max - log(sum(exp(x - max))); NaN rows: NaN; fully masked rows: -inf. Through the
// kernels (kernels/softmax.h) like softmax_rows: vectorised for float, the naive twin for double.
template <class T>
void log_softmax_rows(T* y, const T* x, std::int64_t rows, std::int64_t n) {
  for_row_chunks(rows, n, [&](std::int64_t b, std::int64_t e) {
    if constexpr (std::is_same_v<T, float>)
      kernels::log_softmax_rows_f32(y + b * n, x + b * n, e - b, n);
    else
      kernels::log_softmax_rows_ref<T>(y + b * n, x + b * n, e - b, n);
  });
}

// Applies a last-dim row op to dim `dim` by moving it last.
template <class F>
Tensor along_last(const Tensor& x, std::int64_t dim, const char* op, F last_dim_op) {
  const int d = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return last_dim_op(x.reshape({1})).reshape({});
  if (d == x.dim() - 1) return last_dim_op(x);
  return last_dim_op(x.transpose(d, -1)).transpose(d, -1);
}

}  // namespace

Tensor softmax(const Tensor& x, std::int64_t dim) {
  detail::check_float(x, "softmax", "x");
  return along_last(x, dim, "softmax", [](const Tensor& xl) {
    Tensor xc = xl.detach().contiguous();
    const std::int64_t n = xl.shape().back();
    const std::int64_t rows = n ? xl.numel() / n : 0;
    Tensor y = Tensor::empty(xl.shape(), xl.dtype());
    dispatch_float(xl.dtype(), "softmax", [&]<class T>() { softmax_rows<T>(y.data<T>(), xc.data<T>(), rows, n); });
    record(y, "softmax", {xl}, [yd = y.detach(), rows, n](const Tensor& g) {
      // y = softmax(x)  ->  dx = y * (g - sum(g * y))
      Tensor gc = g.contiguous();
      Tensor dx = Tensor::empty(g.shape(), g.dtype());
      dispatch_float(g.dtype(), "softmax_backward", [&]<class T>() {
        softmax_backward_rows<T>(dx.data<T>(), gc.data<T>(), yd.data<T>(), rows, n);
      });
      return std::vector<Tensor>{dx};
    });
    return y;
  });
}

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  detail::check_float(x, "log_softmax", "x");
  return along_last(x, dim, "log_softmax", [](const Tensor& xl) {
    Tensor xc = xl.detach().contiguous();
    const std::int64_t n = xl.shape().back();
    const std::int64_t rows = n ? xl.numel() / n : 0;
    Tensor y = Tensor::empty(xl.shape(), xl.dtype());
    dispatch_float(xl.dtype(), "log_softmax", [&]<class T>() { log_softmax_rows<T>(y.data<T>(), xc.data<T>(), rows, n); });
    record(y, "log_softmax", {xl}, [yd = y.detach(), rows, n](const Tensor& g) {
      // y = x - logsumexp(x)  ->  dx = g - exp(y) * sum(g); fully masked rows get 0
      Tensor gc = g.contiguous();
      Tensor dx = Tensor::empty(g.shape(), g.dtype());
      dispatch_float(g.dtype(), "log_softmax_backward", [&]<class T>() {
        log_softmax_backward_rows<T>(dx.data<T>(), gc.data<T>(), yd.data<T>(), rows, n);
      });
      return std::vector<Tensor>{dx};
    });
    return y;
  });
}

// ---------------------------------------------------------------- layer_norm

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  detail::check_float(x, "layer_norm", "x");
  const std::size_t k = normalized_shape.size();
  if (k == 0 || k > static_cast<std::size_t>(x.dim()) ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<std::ptrdiff_t>(k)))
    throw ShapeError("layer_norm: normalized_shape " + shape_str(normalized_shape) +
                     " must match the trailing dims of input " + x.shape_str());
  if (weight.defined() && weight.shape() != normalized_shape)
    throw ShapeError("layer_norm: weight " + weight.shape_str() + " must have shape " + shape_str(normalized_shape));
  if (bias.defined() && bias.shape() != normalized_shape)
    throw ShapeError("layer_norm: bias " + bias.shape_str() + " must have shape " + shape_str(normalized_shape));
  if (weight.defined()) detail::check_same_dtype(x, weight, "layer_norm", "x", "weight");
  if (bias.defined()) detail::check_same_dtype(x, bias, "layer_norm", "x", "bias");
  if (!(eps > 0.0) || !std::isfinite(eps)) throw ValueError("layer_norm: eps must be a positive finite number, got " + std::to_string(eps));
  const std::int64_t n = checked_numel(normalized_shape);
  const std::int64_t rows = n ? x.numel() / n : 0;
  Tensor xc = x.detach().contiguous();
  Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  // Per-row mean and 1/std, kept for backward.
  auto mean = std::make_shared<std::vector<double>>(static_cast<std::size_t>(rows));
  auto rstd = std::make_shared<std::vector<double>>(static_cast<std::size_t>(rows));
  dispatch_float(x.dtype(), "layer_norm", [&]<class T>() {
    const T* xp = xc.data<T>();
    T* yp = y.data<T>();
    const T* wp = wc.defined() ? wc.data<T>() : nullptr;
    const T* bp = bc.defined() ? bc.data<T>() : nullptr;
    double* mp = mean->data();
    double* rp = rstd->data();
    parallel_for(0, rows, std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(n, 1)), [&](std::int64_t b, std::int64_t e) {
      if constexpr (std::is_same_v<T, float>)
        kernels::layer_norm_rows_f32(yp + b * n, mp + b, rp + b, xp + b * n, wp, bp, e - b, n, eps);
      else
        kernels::layer_norm_rows_ref<T>(yp + b * n, mp + b, rp + b, xp + b * n, wp, bp, e - b, n, eps);
    });
  });
  const bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
  const bool gx = x.requires_grad();
  record(y, "layer_norm", {x, weight, bias}, [xc, wc, mean, rstd, rows, n, gx, gw, gb](const Tensor& g) {
    // xh = (x - mu) * rstd; y = xh * w + b
    //   db = sum_rows g; dw = sum_rows g * xh
    //   dx = rstd * (g*w - mean(g*w) - xh * mean(g*w * xh))
    Tensor gc = g.contiguous();
    Tensor dx, dw, db;
    dispatch_float(g.dtype(), "layer_norm_backward", [&]<class T>() {
      const T* gp = gc.data<T>();
      const T* xp = xc.data<T>();
      const T* wp = wc.defined() ? wc.data<T>() : nullptr;
      if (gx) dx = Tensor::empty(gc.shape(), g.dtype());
      T* dxp = gx ? dx.data<T>() : nullptr;
      // Rows go in chunks of a fixed size (never dependent on the thread count); each chunk
      // sums its own dw, db partials, added in chunk order below: bitwise reproducible.
      const std::int64_t chunk = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(n, 1));
      const std::int64_t nchunks = (rows + chunk - 1) / chunk;
      std::vector<double> pw(gw ? static_cast<std::size_t>(nchunks * n) : 0, 0.0);
      std::vector<double> pb(gb ? static_cast<std::size_t>(nchunks * n) : 0, 0.0);
      parallel_for(0, nchunks, 1, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const std::int64_t r0 = c * chunk, nr = std::min(rows, r0 + chunk) - r0;
          double* dwp = gw ? pw.data() + c * n : nullptr;
          double* dbp = gb ? pb.data() + c * n : nullptr;
          T* dxr = dxp ? dxp + r0 * n : nullptr;
          if constexpr (std::is_same_v<T, float>)
            kernels::layer_norm_backward_rows_f32(dxr, dwp, dbp, gp + r0 * n, xp + r0 * n, wp, mean->data() + r0,
                                                  rstd->data() + r0, nr, n);
          else
            kernels::layer_norm_backward_rows_ref<T>(dxr, dwp, dbp, gp + r0 * n, xp + r0 * n, wp, mean->data() + r0,
                                                     rstd->data() + r0, nr, n);
        }
      });
      auto reduce = [&](const std::vector<double>& part, const Shape& shape) {
        Tensor t = Tensor::empty(shape, g.dtype());
        T* tp = t.data<T>();
        for (std::int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (std::int64_t c = 0; c < nchunks; ++c) s += part[static_cast<std::size_t>(c * n + i)];
          tp[i] = static_cast<T>(s);
        }
        return t;
      };
      if (gw) dw = reduce(pw, wc.shape());
      if (gb) db = reduce(pb, wc.defined() ? wc.shape() : Shape{n});
    });
    return std::vector<Tensor>{dx, dw, db};
  });
  return y;
}

// ---------------------------------------------------------------- dropout

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  detail::check_float(x, "dropout", "x");
  if (!(p >= 0.0 && p < 1.0)) throw ValueError("dropout: p must be in [0, 1), got " + std::to_string(p));
  if (!training || p == 0.0) return x;
  Generator& g = gen ? *gen : default_generator();
  const std::int64_t n = x.numel();
  const std::uint64_t seed = g.seed(), base = g.reserve(static_cast<std::uint64_t>(n));
  // Element i is dropped iff dropout_dropped(seed, base + i, dropout_threshold(p)) (kernels/dropout.h). The mask is
  // stored as multipliers (1/(1-p) or 0) in x's dtype, so applying it is one vectorised product.
  const double sc = 1.0 / (1.0 - p);
  const std::uint64_t threshold = kernels::dropout_threshold(p);
  Tensor mask = Tensor::empty(x.shape(), x.dtype());
  Tensor xc = x.detach().contiguous();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  // Mask and output in one pass: each block of the mask is applied while it is in L1.
  dispatch_float(x.dtype(), "dropout", [&]<class T>() {
    T* mp = mask.data<T>();
    const T* xp = xc.data<T>();
    T* op = out.data<T>();
    constexpr std::int64_t kBlock = 2048;
    parallel_for(0, n, 1 << 15, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i0 = b; i0 < e; i0 += kBlock) {
        const std::int64_t len = std::min(kBlock, e - i0);
        const std::uint64_t c0 = base + static_cast<std::uint64_t>(i0);
        if constexpr (std::is_same_v<T, float>) {
          kernels::dropout_multipliers(mp + i0, seed, c0, len, threshold, static_cast<float>(sc));
        } else {
          std::uint8_t keep[kBlock];
          kernels::dropout_keep_mask(keep, seed, c0, len, threshold);
          for (std::int64_t i = 0; i < len; ++i) mp[i0 + i] = keep[i] ? static_cast<T>(sc) : T(0);
        }
        for (std::int64_t i = i0; i < i0 + len; ++i) op[i] = xp[i] * mp[i];
      }
    });
  });
  auto apply = [mask](const Tensor& t) {
    return dispatch_float(t.dtype(), "dropout", [&]<class T>() {
      Tensor tc = t.contiguous();
      Tensor o = Tensor::empty(t.shape(), t.dtype());
      const T* tp = tc.data<T>();
      const T* m = mask.data<T>();
      T* op = o.data<T>();
      parallel_for(0, o.numel(), 1 << 15, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) op[i] = tp[i] * m[i];
      });
      return o;
    });
  };
  // out = x * keep / (1 - p)  ->  dx = g * keep / (1 - p)
  record(out, "dropout", {x}, [apply](const Tensor& gr) { return std::vector<Tensor>{apply(gr)}; });
  return out;
}

// ---------------------------------------------------------------- embedding

Tensor embedding(const Tensor& weight, const Tensor& ids, std::optional<std::int64_t> padding_idx) {
  detail::check_float(weight, "embedding", "weight");
  detail::check_defined(ids, "embedding", "ids");
  if (ids.dtype() != DType::I64)
    throw TypeError(std::string("embedding: ids must be int64, got ") + dtype_name(ids.dtype()) + " " + ids.shape_str());
  if (weight.dim() != 2) throw ShapeError("embedding: weight must be [num_embeddings, dim], got " + weight.shape_str());
  const std::int64_t V = weight.shape()[0], E = weight.shape()[1];
  const auto idv = ids.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < idv.size(); ++i)
    if (idv[i] < 0 || idv[i] >= V)
      throw IndexError("embedding: id " + std::to_string(idv[i]) + " at flat position " + std::to_string(i) +
                       " of ids " + ids.shape_str() + " is out of range for a table of " + std::to_string(V) +
                       " rows (weight " + weight.shape_str() + ")");
  Shape os = ids.shape();
  os.push_back(E);
  Tensor wc = weight.detach().contiguous();
  Tensor out = Tensor::empty(os, weight.dtype());
  dispatch_float(weight.dtype(), "embedding", [&]<class T>() {
    const T* w = wc.data<T>();
    T* o = out.data<T>();
    for (std::size_t i = 0; i < idv.size(); ++i) std::copy(w + idv[i] * E, w + (idv[i] + 1) * E, o + i * E);
  });
  record(out, "embedding", {weight}, [idv, V, E, padding_idx](const Tensor& g) {
    // out[i] = weight[ids[i]]  ->  dweight[ids[i]] += g[i] (not for padding_idx)
    Tensor gc = g.contiguous();
    Tensor dw = Tensor::zeros({V, E}, g.dtype());
    dispatch_float(g.dtype(), "embedding_backward", [&]<class T>() {
      const T* gp = gc.data<T>();
      T* d = dw.data<T>();
      for (std::size_t i = 0; i < idv.size(); ++i) {
        if (padding_idx && idv[i] == *padding_idx) continue;
        for (std::int64_t j = 0; j < E; ++j) d[idv[i] * E + j] += gp[i * E + j];
      }
    });
    return std::vector<Tensor>{dw};
  });
  return out;
}

// ---------------------------------------------------------------- cross_entropy

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets_in, const CrossEntropyOptions& opt) {
  detail::check_float(logits_in, "cross_entropy", "logits");
  detail::check_defined(targets_in, "cross_entropy", "targets");
  if (targets_in.dtype() != DType::I64)
    throw TypeError(std::string("cross_entropy: targets must be int64 class indices, got ") +
                    dtype_name(targets_in.dtype()) + " " + targets_in.shape_str());
  if (!(opt.label_smoothing >= 0.0 && opt.label_smoothing <= 1.0))
    throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " + std::to_string(opt.label_smoothing));
  const bool single = logits_in.dim() == 1;
  Tensor logits = single ? logits_in.unsqueeze(0) : logits_in;
  Tensor targets = single ? targets_in.reshape({1}) : targets_in;
  if (logits.dim() != 2 || targets.dim() != 1 || targets.shape()[0] != logits.shape()[0])
    throw ShapeError("cross_entropy: expected logits [N, C] and targets [N], got logits " + logits_in.shape_str() +
                     " and targets " + targets_in.shape_str());
  const std::int64_t N = logits.shape()[0], C = logits.shape()[1];
  const auto tv = targets.to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < N; ++i)
    if (tv[i] != opt.ignore_index && (tv[i] < 0 || tv[i] >= C))
      throw IndexError("cross_entropy: target " + std::to_string(tv[i]) + " at position " + std::to_string(i) +
                       " is out of range for " + std::to_string(C) + " classes (logits " + logits_in.shape_str() + ")");
  // Fused over the vocabulary: the forward keeps the logits and two numbers per row (max and
  // log-sum-exp, kernels/softmax.h), never a log-softmax tensor; the backward recomputes
  // logp = (x - m) - lse on the fly (bitwise the values log_softmax would have stored).
  Tensor lc = logits.detach().contiguous();
  Tensor stats = Tensor::empty({2, N}, lc.dtype());  // row 0: max, row 1: log-sum-exp
  std::int64_t count = 0;
  for (auto t : tv) count += t != opt.ignore_index;
  const double ls = opt.label_smoothing;
  Tensor loss = dispatch_float(lc.dtype(), "cross_entropy", [&]<class T>() {
    const T* x = lc.data<T>();
    T* m = stats.data<T>();
    T* lse = m + N;
    // Row losses over threads, then summed in row order: the total is the same for any thread count.
    std::vector<double> row_loss(static_cast<std::size_t>(N), 0.0);
    for_row_chunks(N, C, [&](std::int64_t b, std::int64_t e) {
      if constexpr (std::is_same_v<T, float>)
        kernels::log_softmax_stats_rows_f32(m + b, lse + b, x + b * C, e - b, C);
      else
        kernels::log_softmax_stats_rows_ref<T>(m + b, lse + b, x + b * C, e - b, C);
      for (std::int64_t i = b; i < e; ++i) {
        if (tv[i] == opt.ignore_index) continue;
        const bool masked = m[i] == -std::numeric_limits<T>::infinity();
        const T mi = m[i], li = lse[i];
        const T* xi = x + i * C;
        const T lpt = masked ? -std::numeric_limits<T>::infinity() : xi[tv[i]] - mi - li;
        // `omp simd` keeps one partial sum per lane: a fixed order for a given build (never
        // dependent on threads or data), and not one serial chain of double adds.
        double smooth = 0;
        if (ls > 0) {
          if (masked) {
            smooth = -std::numeric_limits<double>::infinity();
          } else {
#pragma omp simd reduction(+ : smooth)
            for (std::int64_t c = 0; c < C; ++c) smooth += static_cast<T>(xi[c] - mi - li);
          }
        }
        row_loss[static_cast<std::size_t>(i)] = -(1.0 - ls) * lpt - ls / static_cast<double>(C) * smooth;
      }
    });
    double total = 0;
    for (std::int64_t i = 0; i < N; ++i)
      if (tv[i] != opt.ignore_index) total += row_loss[static_cast<std::size_t>(i)];
    const double v = opt.mean ? (count ? total / static_cast<double>(count) : std::nan("")) : total;
    return Tensor::scalar(v, lc.dtype());
  });
  record(loss, "cross_entropy", {logits}, [lc, stats, tv, count, ls, N, C, opt](const Tensor& g) {
    // loss_i = -(1-ls) logp[t_i] - ls/C sum_c logp[c]
    //   dlogits_i = (softmax_i - (1-ls) onehot(t_i) - ls/C) * g / count
    Tensor dl = Tensor::empty({N, C}, g.dtype());
    // Rows through the kernels (kernels/softmax.h), split over threads: vectorised for float,
    // the naive twin for double.
    dispatch_float(g.dtype(), "cross_entropy_backward", [&]<class T>() {
      const T* x = lc.data<T>();
      const T* m = stats.data<T>();
      const T* lse = m + N;
      T* d = dl.data<T>();
      const double scale = g.item() / (opt.mean ? static_cast<double>(count) : 1.0);
      for_row_chunks(N, C, [&](std::int64_t b, std::int64_t e) {
        if constexpr (std::is_same_v<T, float>)
          kernels::cross_entropy_backward_logits_rows_f32(d + b * C, x + b * C, m + b, lse + b, tv.data() + b, e - b,
                                                          C, scale, ls, opt.ignore_index);
        else
          kernels::cross_entropy_backward_logits_rows_ref<T>(d + b * C, x + b * C, m + b, lse + b, tv.data() + b,
                                                             e - b, C, scale, ls, opt.ignore_index);
      });
    });
    return std::vector<Tensor>{dl};
  });
  return loss;
}

}  // namespace qkv
