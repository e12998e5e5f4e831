// Rotary position embeddings (see kernels/rope.h).
#include "qkv/kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "qkv/core/error.h"

namespace qkv::kernels {
namespace {

void check_factor(double v, const char* what) {
  if (!(v > 0) || !std::isfinite(v))
    throw ValueError(std::string("rope_inv_freq: ") + what + " must be finite and > 0, got " + std::to_string(v));
}

// Index of the partner of dim j (< R/2 pairs) and its pair's frequency index.
inline void pair_of(std::int64_t i, std::int64_t half, RopeStyle style, std::int64_t& a, std::int64_t& b) {
  if (style == RopeStyle::Half) {
    a = i;
    b = i + half;
  } else {
    a = 2 * i;
    b = 2 * i + 1;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(std::int64_t rot_dim, double base, const RopeScaling& s, bool long_context) {
  if (rot_dim < 2 || rot_dim % 2)
    throw ValueError("rope_inv_freq: the rotated dims must be even and >= 2, got " + std::to_string(rot_dim));
  if (!(base > 1) || !std::isfinite(base))
    throw ValueError("rope_inv_freq: rope base (rope_theta) must be finite and > 1, got " + std::to_string(base));
  const std::int64_t half = rot_dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  // base ** (2i / R) in float32: transformers' base ** (torch.arange(0, dim, 2).float() / dim)
  std::vector<float> pos_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
    pos_freq[static_cast<std::size_t>(i)] = static_cast<float>(std::pow(base, static_cast<double>(e)));
    inv[static_cast<std::size_t>(i)] = 1.0f / pos_freq[static_cast<std::size_t>(i)];
  }
  switch (s.type) {
    case RopeScaling::Type::None: break;
    case RopeScaling::Type::Linear: {
      check_factor(s.factor, "the linear rope_scaling factor");
      for (float& f : inv) f = f / static_cast<float>(s.factor);
      break;
    }
    case RopeScaling::Type::Llama3: {
      check_factor(s.factor, "the llama3 rope_scaling factor");
      check_factor(s.low_freq_factor, "low_freq_factor");
      check_factor(s.high_freq_factor, "high_freq_factor");
      check_factor(s.original_max_positions, "original_max_position_embeddings");
      if (!(s.high_freq_factor > s.low_freq_factor))
        throw ValueError("rope_inv_freq: llama3 rope_scaling needs high_freq_factor > low_freq_factor, got " +
                         std::to_string(s.high_freq_factor) + " and " + std::to_string(s.low_freq_factor));
      // transformers' _compute_llama3_parameters, float32 tensors against Python floats
      const double c0 = s.original_max_positions, lo = s.low_freq_factor, hi = s.high_freq_factor, f = s.factor;
      const double low_wavelen = c0 / lo, high_wavelen = c0 / hi;
      for (float& v : inv) {
        const float wavelen = static_cast<float>(2.0 * std::numbers::pi) / v;
        const float scaled = wavelen > static_cast<float>(low_wavelen) ? v / static_cast<float>(f) : v;
        const bool medium = !(wavelen < static_cast<float>(high_wavelen)) && !(wavelen > static_cast<float>(low_wavelen));
        if (medium) {
          const float smooth = (static_cast<float>(c0) / wavelen - static_cast<float>(lo)) / static_cast<float>(hi - lo);
          v = (1.0f - smooth) * scaled / static_cast<float>(f) + smooth * scaled;
        } else {
          v = scaled;
        }
      }
      break;
    }
    case RopeScaling::Type::Yarn: {
      check_factor(s.factor, "the yarn rope_scaling factor");
      check_factor(s.original_max_positions, "original_max_position_embeddings");
      check_factor(s.beta_fast, "beta_fast");
      check_factor(s.beta_slow, "beta_slow");
      // transformers' _compute_yarn_parameters: the correction range in double, the ramp and the
      // blend in float32.
      const double dim = static_cast<double>(rot_dim);
      auto correction_dim = [&](double rotations) {
        return dim * std::log(s.original_max_positions / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
      };
      double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
      if (s.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, dim - 1);
      if (low == high) high += 0.001;  // transformers: "Prevent singularity"
      for (std::int64_t i = 0; i < half; ++i) {
        const float p = pos_freq[static_cast<std::size_t>(i)];
        const float extrapolation = 1.0f / p, interpolation = 1.0f / (static_cast<float>(s.factor) * p);
        const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low),
                                      0.0f, 1.0f);
        const float extra = 1.0f - ramp;
        inv[static_cast<std::size_t>(i)] = interpolation * (1.0f - extra) + extrapolation * extra;
      }
      break;
    }
    case RopeScaling::Type::LongRope: {
      const std::vector<float>& ext = long_context ? s.long_factor : s.short_factor;
      if (static_cast<std::int64_t>(ext.size()) != half)
        throw ValueError(std::string("rope_inv_freq: longrope ") + (long_context ? "long_factor" : "short_factor") +
                         " has " + std::to_string(ext.size()) + " values; the rotated dims " + std::to_string(rot_dim) +
                         " need " + std::to_string(half));
      for (std::int64_t i = 0; i < half; ++i) {
        const float f = ext[static_cast<std::size_t>(i)];
        check_factor(f, "a longrope factor");
        inv[static_cast<std::size_t>(i)] = 1.0f / (f * pos_freq[static_cast<std::size_t>(i)]);
      }
      break;
    }
  }
  return inv;
}

double rope_attention_factor(const RopeScaling& s, double max_positions) {
  if (s.attention_factor > 0) return s.attention_factor;
  switch (s.type) {
    case RopeScaling::Type::Yarn:
      return s.factor > 1 ? 0.1 * std::log(s.factor) + 1.0 : 1.0;
    case RopeScaling::Type::LongRope: {
      const double f = max_positions / s.original_max_positions;
      return f > 1 ? std::sqrt(1 + std::log(f) / std::log(s.original_max_positions)) : 1.0;
    }
    default: return 1.0;
  }
}

void rope_tables(float* cos, float* sin, const std::int64_t* pos, std::int64_t T, const float* inv_freq,
                 std::int64_t half, float attention_factor) {
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[t]) * inv_freq[i];
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  if (attention_factor != 1.0f)
    for (std::int64_t e = 0; e < T * half; ++e) cos[e] *= attention_factor, sin[e] *= attention_factor;
}

void rope_apply_f32(float* x, std::int64_t T, std::int64_t heads, std::int64_t D, std::int64_t ld,
                    std::int64_t rot_dim, const float* cos, const float* sin, RopeStyle style, bool inverse) {
  const std::int64_t half = rot_dim / 2;
  for (std::int64_t t = 0; t < T; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x + t * ld + h * D;
      if (style == RopeStyle::Half) {
        float* a = v;
        float* b = v + half;
        for (std::int64_t i = 0; i < half; ++i) {
          const float si = inverse ? -s[i] : s[i];
          // transformers: q * cos + rotate_half(q) * sin, two products then a sum
          const float pa = a[i] * c[i], qa = b[i] * si;
          const float pb = b[i] * c[i], qb = a[i] * si;
          a[i] = pa - qa;
          b[i] = pb + qb;
        }
      } else {
        for (std::int64_t i = 0; i < half; ++i) {
          const float si = inverse ? -s[i] : s[i];
          const float ai = v[2 * i], bi = v[2 * i + 1];
          const float pa = ai * c[i], qa = bi * si;
          const float pb = bi * c[i], qb = ai * si;
          v[2 * i] = pa - qa;
          v[2 * i + 1] = pb + qb;
        }
      }
    }
  }
}

template <class T>
void rope_apply_ref(T* x, std::int64_t rows, std::int64_t heads, std::int64_t D, std::int64_t ld, std::int64_t rot_dim,
                    const std::int64_t* pos, const float* inv_freq, RopeStyle style, bool inverse) {
  const std::int64_t half = rot_dim / 2;
  for (std::int64_t t = 0; t < rows; ++t)
    for (std::int64_t h = 0; h < heads; ++h) {
      T* v = x + t * ld + h * D;
      for (std::int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(pos[t]) * static_cast<double>(inv_freq[i]);
        const double c = std::cos(angle), s = inverse ? -std::sin(angle) : std::sin(angle);
        std::int64_t a = 0, b = 0;
        pair_of(i, half, style, a, b);
        const double va = static_cast<double>(v[a]), vb = static_cast<double>(v[b]);
        v[a] = static_cast<T>(va * c - vb * s);
        v[b] = static_cast<T>(vb * c + va * s);
      }
    }
}

template void rope_apply_ref<float>(float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                    const std::int64_t*, const float*, RopeStyle, bool);
template void rope_apply_ref<double>(double*, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                     const std::int64_t*, const float*, RopeStyle, bool);

}  // namespace qkv::kernels
