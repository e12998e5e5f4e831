// rms_norm: the functional RMSNorm with autograd over the row kernels of kernels/rms_norm.h.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ops_internal.h"
#include "qkv/kernels/rms_norm.h"
#include "qkv/ops/nn_functional.h"

namespace qkv {

// x [..., *normalized_shape], weight [*normalized_shape] or undefined -> y [...same...].
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps_opt) {
  constexpr const char* op = "rms_norm";
  detail::check_float(x, op, "x");
  const std::size_t k = normalized_shape.size();
  if (k == 0 || k > static_cast<std::size_t>(x.dim()) ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - static_cast<std::ptrdiff_t>(k)))
    throw ShapeError(std::string(op) + ": normalized_shape " + shape_str(normalized_shape) +
                     " must match the trailing dims of input " + x.shape_str());
  if (weight.defined()) {
    if (weight.shape() != normalized_shape)
      throw ShapeError(std::string(op) + ": weight " + weight.shape_str() + " must have shape " +
                       shape_str(normalized_shape));
    detail::check_same_dtype(x, weight, op, "x", "weight");
  }
  // PyTorch: eps=None means torch.finfo(x.dtype).eps.
  const double eps = eps_opt ? *eps_opt
                             : (x.dtype() == DType::F32 ? static_cast<double>(std::numeric_limits<float>::epsilon())
                                                        : std::numeric_limits<double>::epsilon());
  if (!(eps >= 0.0) || !std::isfinite(eps))
    throw ValueError(std::string(op) + ": eps must be a finite number >= 0, got " + std::to_string(eps));
  const std::int64_t n = checked_numel(normalized_shape);
  const std::int64_t rows = n ? x.numel() / n : 0;
  Tensor xc = x.detach().contiguous();
  Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  auto rstd = std::make_shared<std::vector<double>>(static_cast<std::size_t>(rows));  // kept for backward
  const std::int64_t grain = std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(n, 1));
  if (n > 0)
    dispatch_float(x.dtype(), op, [&]<class T>() {
      const T* xp = xc.data<T>();
      T* yp = y.data<T>();
      const T* wp = wc.defined() ? wc.data<T>() : nullptr;
      double* rp = rstd->data();
      parallel_for(0, rows, grain, [&](std::int64_t b, std::int64_t e) {
        if constexpr (std::is_same_v<T, float>)
          kernels::rms_norm_rows_f32(yp + b * n, n, rp + b, xp + b * n, n, wp, e - b, n, eps);
        else
          kernels::rms_norm_rows_ref<T>(yp + b * n, rp + b, xp + b * n, wp, e - b, n, eps);
      });
    });
  const bool gx = x.requires_grad(), gw = weight.defined() && weight.requires_grad();
  autograd::record(y, op, {x, weight}, [xc, wc, rstd, rows, n, gx, gw](const Tensor& g) {
    // y = x * rstd * w:  dx = rstd * g w - x * rstd^3 * mean(g w x),  dw = sum_rows g * x * rstd
    Tensor gc = g.contiguous();
    Tensor dx, dw;
    dispatch_float(g.dtype(), "rms_norm_backward", [&]<class T>() {
      if (gx) dx = Tensor::empty(gc.shape(), g.dtype());
      if (n == 0) {
        if (gw) dw = Tensor::zeros(wc.shape(), g.dtype());
        return;
      }
      const T* gp = gc.data<T>();
      const T* xp = xc.data<T>();
      const T* wp = wc.defined() ? wc.data<T>() : nullptr;
      T* dxp = gx ? dx.data<T>() : nullptr;
      // Rows go in chunks of a fixed size (never dependent on the thread count); each chunk sums
      // its own dw partial, added in chunk order below: bitwise reproducible.
      const std::int64_t chunk = std::max<std::int64_t>(1, 16384 / n);
      const std::int64_t nchunks = (rows + chunk - 1) / chunk;
      std::vector<double> pw(gw ? static_cast<std::size_t>(nchunks * n) : 0, 0.0);
      parallel_for(0, nchunks, 1, [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const std::int64_t r0 = c * chunk, nr = std::min(rows, r0 + chunk) - r0;
          kernels::rms_norm_backward_rows<T>(dxp ? dxp + r0 * n : nullptr, gw ? pw.data() + c * n : nullptr,
                                             gp + r0 * n, xp + r0 * n, wp, rstd->data() + r0, nr, n);
        }
      });
      if (gw) {
        dw = Tensor::empty(wc.shape(), g.dtype());
        T* dwp = dw.data<T>();
        for (std::int64_t i = 0; i < n; ++i) {
          double s = 0;
          for (std::int64_t c = 0; c < nchunks; ++c) s += pw[static_cast<std::size_t>(c * n + i)];
          dwp[i] = static_cast<T>(s);
        }
      }
    });
    return std::vector<Tensor>{dx, dw};
  });
  return y;
}

}  // namespace qkv
