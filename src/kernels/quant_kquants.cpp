// Quantization to the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and the IQ4 types (IQ4_NL, IQ4_XS),
// bit for bit as ggml quantizes them without an importance matrix: what llama-quantize writes
// (ggml_quantize_chunk, which calls quantize_row_*_ref for the k-quants and quantize_iq4_nl /
// quantize_iq4_xs with 7 scale tries for the IQ4 types). A port of ggml/src/ggml-quants.c
// (llama.cpp 0c1e570: make_qkx2_quants, make_q3_quants, make_qx_quants, quantize_row_iq4_nl_impl
// and the quantize_row_*_ref functions); the reference fixture is
// tests/reference/make_kquant_fixtures.py, which runs ggml's own code.
//
// What "bit for bit" takes (as quant.cpp): every float operation in ggml's order, each rounded
// (contraction off below: ggml's reference library is built for baseline x86-64, no FMA); C's
// conversions where ggml relies on them (an int stored into uint8_t / int8_t keeps its low byte);
// ggml's nearest_int (round half to even through the 1.5 * 2^23 trick, garbage beyond 2^22 as
// ggml's); halves rounded to nearest even (ggml's software fp32 -> fp16 and numpy's agree on
// every finite value). Inputs must be finite (ggml's quantizers assume it).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant_internal.h"
#include "qkv/kernels/quant.h"
#include "quant_kquants.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace qkv::kernels::detail {
namespace {

using u8 = std::uint8_t;
using i8 = std::int8_t;

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS

inline int nearest_int(float fval) {
  const float val = fval + 12582912.0f;
  std::int32_t i;
  std::memcpy(&i, &val, 4);
  return (i & 0x007fffff) - 0x00400000;
}

inline void put_half(u8* p, float x) {
  const std::uint16_t h = f32_to_f16(x);
  std::memcpy(p, &h, 2);
}

template <class T>
inline T max_of(T a, T b) { return a > b ? a : b; }
template <class T>
inline T min_of(T a, T b) { return a < b ? a : b; }

// ggml's make_qkx2_quants: L[n] in [0, nmax] and the scale / (negated) min of x ~ scale * L - min,
// by weighted least squares over nstep + 1 trial scales.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, u8* L, float* the_min, u8* Laux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<u8>(max_of(0, min_of(nmax, l)));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = max_of(0, min_of(nmax, l));
      Laux[i] = static_cast<u8>(l);
      const float w = weights[i], fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += weights[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// ggml's make_q3_quants with do_rmse: L[n] in [0, 2 nmax) (offset by nmax) and the scale of
// x ~ scale * (L - nmax), refined one weight at a time (x^2-weighted least squares, up to 5 passes).
float make_q3_quants(int n, int nmax, const float* x, i8* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = max_of(-nmax, min_of(nmax - 1, l));
    L[i] = static_cast<i8>(l);
    const float w = x[i] * x[i], fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i], li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0) {
        float sl2 = suml2 - w * li * li;
        int new_l = nearest_int(x[i] * sl2 / slx);
        new_l = max_of(-nmax, min_of(nmax - 1, new_l));
        if (new_l != L[i]) {
          const float fl = static_cast<float>(new_l);
          slx += w * x[i] * fl;
          sl2 += w * fl * fl;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<i8>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (!n_changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<i8>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ggml's make_qx_quants with rmse_type 1 and no importance weights (x^2 weights): L[n] in
// [0, 2 nmax) (offset by nmax) and the scale of x ~ scale * (L - nmax), over 19 trial scales.
float make_qx_quants(int n, int nmax, const float* x, i8* L) {
  float max = 0;
  float amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0;
  float suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = max_of(-nmax, min_of(nmax - 1, l));
    L[i] = static_cast<i8>(l + nmax);
    const float w = x[i] * x[i], fl = static_cast<float>(l);
    sumlx += w * x[i] * fl;
    suml2 += w * fl * fl;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = max_of(-nmax, min_of(nmax - 1, l));
      const float w = x[i] * x[i], fl = static_cast<float>(l);
      sumlx += w * x[i] * fl;
      suml2 += w * fl * fl;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * x[i]);
        L[i] = static_cast<i8>(nmax + max_of(-nmax, min_of(nmax - 1, l)));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Four 2-bit codes per byte: qs[32h + l] = L[128h + l] | L[.. + 32] << 2 | L[.. + 64] << 4 | L[.. + 96] << 6.
template <class T>
void pack_2bit(const T* L, u8* qs) {
  for (int j = 0; j < 256; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<u8>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

// ---- one super-block of 256 values: x -> b ----

// Q2_K { u8 scales[16]; u8 qs[64]; f16 d, dmin; }
void q_q2_k(const float* x, u8* b) {
  u8* scales_out = b;
  u8* qs = b + 16;
  u8 L[256], Laux[16];
  float weights[16], mins[16], scales[16];
  constexpr float q4scale = 15.0f;
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
    scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  if (max_scale > 0) {
    const float iscale = q4scale / max_scale;
    for (int j = 0; j < 16; ++j) scales_out[j] = static_cast<u8>(nearest_int(iscale * scales[j]));
    put_half(b + 80, max_scale / q4scale);
  } else {
    for (int j = 0; j < 16; ++j) scales_out[j] = 0;
    put_half(b + 80, 0.0f);
  }
  if (max_min > 0) {
    const float iscale = q4scale / max_min;
    for (int j = 0; j < 16; ++j) scales_out[j] = static_cast<u8>(scales_out[j] | (nearest_int(iscale * mins[j]) << 4));
    put_half(b + 82, max_min / q4scale);
  } else {
    put_half(b + 82, 0.0f);
  }
  const float dh = load_f16(b + 80), dminh = load_f16(b + 82);
  for (int j = 0; j < 16; ++j) {
    const float d = dh * static_cast<float>(scales_out[j] & 0x0F);
    if (d == 0) continue;
    const float dm = dminh * static_cast<float>(scales_out[j] >> 4);
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int((x[16 * j + ii] + dm) / d);
      L[16 * j + ii] = static_cast<u8>(max_of(0, min_of(3, l)));
    }
  }
  pack_2bit(L, qs);
}

// Q3_K { u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d; }
void q_q3_k(const float* x, u8* b) {
  u8* hmask = b;
  u8* qs = b + 32;
  u8* sc = b + 96;
  i8 L[256];
  float scales[16];
  float max_scale = 0, amax = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
    const float scale = std::fabs(scales[j]);
    if (scale > amax) {
      amax = scale;
      max_scale = scales[j];
    }
  }
  std::memset(sc, 0, 12);
  if (max_scale != 0) {
    const float iscale = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      i8 l = static_cast<i8>(nearest_int(iscale * scales[j]));
      l = static_cast<i8>(max_of(-32, min_of(31, static_cast<int>(l))) + 32);
      if (j < 8)
        sc[j] = static_cast<u8>(l & 0xF);
      else
        sc[j - 8] = static_cast<u8>(sc[j - 8] | ((l & 0xF) << 4));
      l = static_cast<i8>(l >> 4);
      sc[j % 4 + 8] = static_cast<u8>(sc[j % 4 + 8] | (l << (2 * (j / 4))));
    }
    put_half(b + 108, 1 / iscale);
  } else {
    put_half(b + 108, 0.0f);
  }
  const float dh = load_f16(b + 108);
  for (int j = 0; j < 16; ++j) {
    i8 s = static_cast<i8>(j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4);
    s = static_cast<i8>((s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
    const float d = dh * static_cast<float>(s);
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<i8>(max_of(-4, min_of(3, l)) + 4);
    }
  }
  std::memset(hmask, 0, 32);
  for (int j = 0; j < 256; ++j)
    if (L[j] > 3) {
      hmask[j % 32] = static_cast<u8>(hmask[j % 32] | (1 << (j / 32)));
      L[j] = static_cast<i8>(L[j] - 4);
    }
  pack_2bit(L, qs);
}

// Q4_K / Q5_K's scales: the 8 sub-blocks' 6-bit scale and min, packed as get_scale_min_k4 reads them.
void pack_k4_scales(const float* scales, const float* mins, float max_scale, float max_min, u8* out) {
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < 8; ++j) {
    u8 ls = static_cast<u8>(nearest_int(inv_scale * scales[j]));
    u8 lm = static_cast<u8>(nearest_int(inv_min * mins[j]));
    ls = min_of<u8>(63, ls);
    lm = min_of<u8>(63, lm);
    if (j < 4) {
      out[j] = ls;
      out[j + 4] = lm;
    } else {
      out[j + 4] = static_cast<u8>((ls & 0xF) | ((lm & 0xF) << 4));
      out[j - 4] = static_cast<u8>(out[j - 4] | ((ls >> 4) << 6));
      out[j] = static_cast<u8>(out[j] | ((lm >> 4) << 6));
    }
  }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): the codes L[256] and d, dmin, scales of the block at b.
template <int kNmax>
void q_k4_codes(const float* x, u8* b, u8* L) {
  u8 Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = kNmax == 15 ? make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.0f, 0.1f, 20, false)
                            : make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  pack_k4_scales(scales, mins, max_scale, max_min, b + 4);
  put_half(b, max_scale / 63.0f);
  put_half(b + 2, max_min / 63.0f);
  const float dh = load_f16(b), dminh = load_f16(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k4_scale_min(b + 4, j, sc, m);
    const float d = dh * static_cast<float>(sc);
    if (d == 0) continue;
    const float dm = dminh * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      const int l = nearest_int((x[32 * j + ii] + dm) / d);
      L[32 * j + ii] = static_cast<u8>(max_of(0, min_of(kNmax, l)));
    }
  }
}

// Q4_K { f16 d, dmin; u8 scales[12]; u8 qs[128]; }
void q_q4_k(const float* x, u8* b) {
  u8 L[256];
  q_k4_codes<15>(x, b, L);
  u8* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = static_cast<u8>(L[j + l] | (L[j + l + 32] << 4));
}

// Q5_K { f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
void q_q5_k(const float* x, u8* b) {
  u8 L[256];
  q_k4_codes<31>(x, b, L);
  u8* qh = b + 16;
  u8* ql = b + 48;
  std::memset(qh, 0, 32);
  u8 m1 = 1, m2 = 2;
  for (int n = 0; n < 256; n += 64, ql += 32) {
    for (int j = 0; j < 32; ++j) {
      int l1 = L[n + j];
      if (l1 > 15) {
        l1 -= 16;
        qh[j] = static_cast<u8>(qh[j] | m1);
      }
      int l2 = L[n + j + 32];
      if (l2 > 15) {
        l2 -= 16;
        qh[j] = static_cast<u8>(qh[j] | m2);
      }
      ql[j] = static_cast<u8>(l1 | (l2 << 4));
    }
    m1 = static_cast<u8>(m1 << 2);
    m2 = static_cast<u8>(m2 << 2);
  }
}

// Q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }
void q_q6_k(const float* x, u8* b) {
  i8 L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(b, 0, 210);
    return;
  }
  auto* sc = reinterpret_cast<i8*>(b + 192);
  const float iscale = -128.0f / max_scale;
  put_half(b + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<i8>(min_of(127, nearest_int(iscale * scales[ib])));
  const float dh = load_f16(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = dh * static_cast<float>(sc[j]);
    if (d == 0) continue;
    for (int ii = 0; ii < 16; ++ii) {
      const int l = nearest_int(x[16 * j + ii] / d);
      L[16 * j + ii] = static_cast<i8>(max_of(-32, min_of(31, l)) + 32);
    }
  }
  u8* ql = b;
  u8* qh = b + 128;
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
      ql[l] = static_cast<u8>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<u8>(q2 | (q4 << 4));
      qh[l] = static_cast<u8>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                              ((L[j + l + 96] >> 4) << 6));
    }
}

// ---- the IQ4 types: ggml's quantize_row_iq4_nl_impl, no importance weights, ntry = 7 ----

// ggml's best_index_int8 over the 16 values: the nearest one (ties to the upper), by bisection.
int best_index_iq4(float x) {
  const i8* val = kIQ4NL;
  if (x <= static_cast<float>(val[0])) return 0;
  if (x >= static_cast<float>(val[15])) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < static_cast<float>(val[mav]))
      mu = mav;
    else
      ml = mav;
  }
  return x - static_cast<float>(val[mu - 1]) < static_cast<float>(val[mu]) - x ? mu - 1 : mu;
}

// The scale of one block of 32 (x^2 weights): L[32] set, 0 for a block of zeros (L then untouched).
float iq4_block_scale(const float* xb, u8* Lb) {
  constexpr int kNtry = 7;
  const i8* values = kIQ4NL;
  float amax = 0, max = 0;
  for (int j = 0; j < 32; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  float d = -max / static_cast<float>(values[0]);
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < 32; ++j) {
    const float al = id * xb[j];
    const int l = best_index_iq4(al);
    Lb[j] = static_cast<u8>(l);
    const float q = static_cast<float>(values[l]), w = xb[j] * xb[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kNtry; itry <= kNtry; ++itry) {
    id = static_cast<float>(itry + values[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float al = id * xb[j];
      const int l = best_index_iq4(al);
      const float q = static_cast<float>(values[l]), w = xb[j] * xb[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void pack_iq4(const u8* L, int n, u8* q4) {
  for (int i = 0; i < n / 32; ++i)
    for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<u8>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

// IQ4_NL { f16 d; u8 qs[16]; }
void q_iq4_nl(const float* x, u8* b) {
  u8 L[32];
  const float scale = iq4_block_scale(x, L);
  put_half(b, scale);
  const float id = scale != 0 ? 1 / scale : 0.0f;
  for (int j = 0; j < 32; ++j) L[j] = static_cast<u8>(best_index_iq4(id * x[j]));
  pack_iq4(L, 32, b + 2);
}

// IQ4_XS { f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]; }
void q_iq4_xs(const float* x, u8* b) {
  u8 L[256];
  float scales[8];
  float max_scale = 0, amax_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    scales[ib] = iq4_block_scale(x + 32 * ib, L + 32 * ib);
    const float abs_d = std::fabs(scales[ib]);
    if (abs_d > amax_scale) {
      amax_scale = abs_d;
      max_scale = scales[ib];
    }
  }
  std::uint16_t scales_h = 0;
  u8* scales_l = b + 4;
  const float d = -max_scale / 32;
  put_half(b, d);
  const float id = d != 0 ? 1 / d : 0.0f;
  for (int ib = 0; ib < 8; ++ib) {
    int l = nearest_int(id * scales[ib]);
    l = max_of(-32, min_of(31, l));
    const float dl = d * static_cast<float>(l);
    const float idl = dl != 0 ? 1 / dl : 0.0f;
    for (int j = 0; j < 32; ++j) L[32 * ib + j] = static_cast<u8>(best_index_iq4(idl * x[32 * ib + j]));
    l += 32;
    const u8 l_l = static_cast<u8>(l & 0xf), l_h = static_cast<u8>(l >> 4);
    if (ib % 2 == 0)
      scales_l[ib / 2] = l_l;
    else
      scales_l[ib / 2] = static_cast<u8>(scales_l[ib / 2] | (l_l << 4));
    scales_h = static_cast<std::uint16_t>(scales_h | (l_h << (2 * (ib % 8))));
  }
  std::memcpy(b + 2, &scales_h, 2);
  pack_iq4(L, 256, b + 8);
}

}  // namespace

KQuantizer kquantizer(QType t) {
  switch (t) {
    case QType::Q2_K: return q_q2_k;
    case QType::Q3_K: return q_q3_k;
    case QType::Q4_K: return q_q4_k;
    case QType::Q5_K: return q_q5_k;
    case QType::Q6_K: return q_q6_k;
    case QType::IQ4_NL: return q_iq4_nl;
    case QType::IQ4_XS: return q_iq4_xs;
    default: return nullptr;
  }
}

}  // namespace qkv::kernels::detail
