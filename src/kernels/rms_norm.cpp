// RMS normalisation kernels (see kernels/rms_norm.h).
#include "qkv/kernels/rms_norm.h"

#include <cmath>

namespace qkv::kernels {

void rms_norm_rows_f32(float* y, std::int64_t ldy, double* rstd, const float* x, std::int64_t ldx, const float* w,
                       std::int64_t rows, std::int64_t n, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    // Four double partial sums: vectorisable, and far more accurate than float32's.
    double s[4] = {0, 0, 0, 0};
    std::int64_t i = 0;
    for (; i + 4 <= n; i += 4)
      for (int k = 0; k < 4; ++k) s[k] += static_cast<double>(xr[i + k]) * static_cast<double>(xr[i + k]);
    for (; i < n; ++i) s[0] += static_cast<double>(xr[i]) * static_cast<double>(xr[i]);
    const double ms = ((s[0] + s[1]) + (s[2] + s[3])) / static_cast<double>(n);
    const double rs = 1.0 / std::sqrt(ms + eps);
    if (rstd) rstd[r] = rs;
    const float f = static_cast<float>(rs);
    if (w) {
      for (std::int64_t j = 0; j < n; ++j) {
        const float h = xr[j] * f;  // transformers: hidden * rsqrt(var + eps), then weight * hidden
        yr[j] = w[j] * h;
      }
    } else {
      for (std::int64_t j = 0; j < n; ++j) yr[j] = xr[j] * f;
    }
  }
}

template <class T>
void rms_norm_rows_ref(T* y, double* rstd, const T* x, const T* w, std::int64_t rows, std::int64_t n, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    double s = 0;
    for (std::int64_t j = 0; j < n; ++j) s += static_cast<double>(xr[j]) * static_cast<double>(xr[j]);
    const double rs = 1.0 / std::sqrt(s / static_cast<double>(n) + eps);
    if (rstd) rstd[r] = rs;
    for (std::int64_t j = 0; j < n; ++j)
      y[r * n + j] = static_cast<T>(static_cast<double>(xr[j]) * rs * (w ? static_cast<double>(w[j]) : 1.0));
  }
}

template <class T>
void rms_norm_backward_rows(T* dx, double* dw, const T* g, const T* x, const T* w, const double* rstd,
                            std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    const double rs = rstd[r];
    // forward: y = x * rstd * w, rstd = (mean(x^2) + eps)^(-1/2), d rstd / d x_j = -rstd^3 x_j / n
    double dot = 0;  // sum_i g_i w_i x_i
    for (std::int64_t j = 0; j < n; ++j)
      dot += static_cast<double>(gr[j]) * (w ? static_cast<double>(w[j]) : 1.0) * static_cast<double>(xr[j]);
    const double c = rs * rs * rs * dot / static_cast<double>(n);
    for (std::int64_t j = 0; j < n; ++j) {
      const double gw = static_cast<double>(gr[j]) * (w ? static_cast<double>(w[j]) : 1.0);
      if (dx) dx[r * n + j] = static_cast<T>(rs * gw - static_cast<double>(xr[j]) * c);
      if (dw) dw[j] += static_cast<double>(gr[j]) * static_cast<double>(xr[j]) * rs;
    }
  }
}

template void rms_norm_rows_ref<float>(float*, double*, const float*, const float*, std::int64_t, std::int64_t, double);
template void rms_norm_rows_ref<double>(double*, double*, const double*, const double*, std::int64_t, std::int64_t,
                                        double);
template void rms_norm_backward_rows<float>(float*, double*, const float*, const float*, const float*, const double*,
                                            std::int64_t, std::int64_t);
template void rms_norm_backward_rows<double>(double*, double*, const double*, const double*, const double*,
                                             const double*, std::int64_t, std::int64_t);

}  // namespace qkv::kernels
