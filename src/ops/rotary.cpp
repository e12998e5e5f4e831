// apply_rotary_emb: RoPE with autograd over the row kernels of kernels/rope.h.
#include "qkv/ops/rotary.h"

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ops_internal.h"

namespace qkv {
namespace {

constexpr const char* kOp = "apply_rotary_emb";

// The rotation's fixed data: positions, inv_freq, and the float kernel's cos/sin tables [T, R/2].
struct Rotation {
  std::int64_t T = 0, D = 0, R = 0;
  kernels::RopeStyle style = kernels::RopeStyle::Half;
  std::vector<std::int64_t> pos;
  std::vector<float> inv_freq, cos, sin;
};

// Rotates, in place, the `rows` contiguous rows of D values at y (row r at position index r % T)
// by +angle, or by -angle when inverse (the backward: the rotation is orthogonal).
template <class T>
void rotate_rows(T* y, std::int64_t rows, const Rotation& rot, bool inverse) {
  const std::int64_t half = rot.R / 2, Tn = rot.T, D = rot.D;
  parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(D, 1)), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e;) {
      const std::int64_t t0 = r % Tn, len = std::min(e - r, Tn - t0);  // a run of rows of one [T, D] slice
      if constexpr (std::is_same_v<T, float>)
        kernels::rope_apply_f32(y + r * D, len, 1, D, D, rot.R, rot.cos.data() + t0 * half, rot.sin.data() + t0 * half,
                                rot.style, inverse);
      else
        kernels::rope_apply_ref<T>(y + r * D, len, 1, D, D, rot.R, rot.pos.data() + t0, rot.inv_freq.data(), rot.style,
                                   inverse);
      r += len;
    }
  });
}

}  // namespace

// x [..., T, D], positions I64 [T] or undefined -> [..., T, D].
Tensor apply_rotary_emb(const Tensor& x, const Tensor& positions, const RotaryOptions& o) {
  detail::check_float(x, kOp, "x");
  if (x.dim() < 2) throw ShapeError(std::string(kOp) + ": x must be [..., T, D] (rank >= 2), got " + x.shape_str());
  auto rot = std::make_shared<Rotation>();
  rot->T = x.size(-2);
  rot->D = x.size(-1);
  rot->R = o.rotary_dim ? o.rotary_dim : rot->D;
  rot->style = o.style;
  if (rot->R < 2 || rot->R % 2 || rot->R > rot->D)
    throw ValueError(std::string(kOp) + ": rotary_dim must be even, >= 2 and <= the head dim D=" +
                     std::to_string(rot->D) + ", got " + std::to_string(rot->R) + " (x " + x.shape_str() + ")");
  if (positions.defined()) {
    if (positions.dtype() != DType::I64)
      throw TypeError(std::string(kOp) + ": positions must be int64, got " + dtype_name(positions.dtype()) + " " +
                      positions.shape_str());
    if (positions.dim() != 1 || positions.size(0) != rot->T)
      throw ShapeError(std::string(kOp) + ": positions " + positions.shape_str() + " must be [T] = [" +
                       std::to_string(rot->T) + "] for x " + x.shape_str() + " ([..., T, D])");
    rot->pos = positions.to_vector<std::int64_t>();
  } else {
    rot->pos.resize(static_cast<std::size_t>(rot->T));
    for (std::int64_t t = 0; t < rot->T; ++t) rot->pos[static_cast<std::size_t>(t)] = t;
  }
  try {
    rot->inv_freq = kernels::rope_inv_freq(rot->R, o.base, o.scaling);
  } catch (const ValueError& e) {
    throw ValueError(std::string(kOp) + ": " + e.what());
  }
  const std::int64_t half = rot->R / 2;
  if (x.dtype() == DType::F32) {
    rot->cos.resize(static_cast<std::size_t>(rot->T * half));
    rot->sin.resize(static_cast<std::size_t>(rot->T * half));
    kernels::rope_tables(rot->cos.data(), rot->sin.data(), rot->pos.data(), rot->T, rot->inv_freq.data(), half);
  }
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  y.copy_(x.detach());
  const std::int64_t rows = rot->T > 0 && rot->D > 0 ? x.numel() / rot->D : 0;
  dispatch_float(x.dtype(), kOp, [&]<class T>() { rotate_rows<T>(y.data<T>(), rows, *rot, false); });
  autograd::record(y, kOp, {x}, [rot, rows](const Tensor& g) {
    // y = R(angle) x  =>  dx = R(angle)^T g = R(-angle) g
    Tensor dx = Tensor::empty(g.shape(), g.dtype());
    dx.copy_(g);
    dispatch_float(g.dtype(), "apply_rotary_emb_backward", [&]<class T>() { rotate_rows<T>(dx.data<T>(), rows, *rot, true); });
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace qkv
