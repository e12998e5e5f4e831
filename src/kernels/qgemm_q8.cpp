// The Q8-activation path of qgemm (kernels/qgemm.h, QActivations::Q8) for products with more rows
// than the decode path takes: A is quantized per 32 values as llama.cpp's Q8_0, W is unpacked
// panel by panel into integer codes laid out for the ISA's integer dot-product micro-kernel
// (AVX-512 VNNI vpdpbusd, AVX2 vpmaddubsw + vpmaddwd, or plain loops), and each scale block of
// each product contributes
//   ws * d_a * (codes . q_a) + wo * (d_a * sum q_a)        (w = ws * code + wo, exactly as dequantized)
// in float32. One column panel of W is packed per thread at a time (np columns x K codes + two
// floats per scale block and column); the rows of A are walked in tiles of the kernel's rows.
// Threads split the column panels; K is never split, so results are bitwise identical for any
// thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gemm_internal.h"
#include "qgemm_internal.h"
#include "qkv/core/parallel.h"
#include "qkv/core/error.h"
#include "qkv/kernels/qgemm.h"
#include "quant_internal.h"

namespace qkv::kernels::detail {
namespace {

// Codes of one row of W and its scale blocks (sb values each): w[k] = s[k/sb] * code[k] + o[k/sb].
// signed_q8: the codes of the 8-bit-range types (Q8_0's quants, the IQ4 and MXFP4 values) are the int8
// values themselves (o = 0) instead of value + 128 (o = -128 s; MXFP4: value + 12, o = -12 s).
void decode_codes(QType t, const u8* row, i64 K, bool signed_q8, u8* code, float* s, float* o) {
  auto put = [&](i64 b, float sv, float ov) {
    s[b] = sv;
    o[b] = ov;
  };
  switch (t) {
    case QType::Q8_0:
      for (i64 b = 0; b < K / 32; ++b) {
        const u8* p = row + 34 * b;
        const float d = load_f16(p);
        for (int i = 0; i < 32; ++i) code[32 * b + i] = static_cast<u8>(signed_q8 ? p[2 + i] : p[2 + i] ^ 0x80u);
        put(b, d, signed_q8 ? 0.0f : -128.0f * d);
      }
      return;
    case QType::Q4_0:
    case QType::Q4_1:
      for (i64 b = 0; b < K / 32; ++b) {
        const bool affine = t == QType::Q4_1;
        const u8* p = row + (affine ? 20 : 18) * b;
        const u8* qs = p + (affine ? 4 : 2);
        for (int i = 0; i < 16; ++i) {
          code[32 * b + i] = qs[i] & 0x0F;
          code[32 * b + 16 + i] = qs[i] >> 4;
        }
        const float d = load_f16(p);
        put(b, d, affine ? load_f16(p + 2) : -8.0f * d);
      }
      return;
    case QType::Q5_0:
    case QType::Q5_1:
      for (i64 b = 0; b < K / 32; ++b) {
        const bool affine = t == QType::Q5_1;
        const u8* p = row + (affine ? 24 : 22) * b;
        const std::uint32_t qh = load_u32(p + (affine ? 4 : 2));
        const u8* qs = p + (affine ? 8 : 6);
        for (int i = 0; i < 16; ++i) {
          code[32 * b + i] = static_cast<u8>((qs[i] & 0x0F) | (((qh >> i) & 1u) << 4));
          code[32 * b + 16 + i] = static_cast<u8>((qs[i] >> 4) | (((qh >> (i + 16)) & 1u) << 4));
        }
        const float d = load_f16(p);
        put(b, d, affine ? load_f16(p + 2) : -16.0f * d);
      }
      return;
    case QType::Q4_K:
    case QType::Q5_K:
      for (i64 b = 0; b < K / 256; ++b) {
        const bool five = t == QType::Q5_K;
        const u8* p = row + (five ? 176 : 144) * b;
        const u8* qs = p + (five ? 48 : 16);
        const float d = load_f16(p), dmin = load_f16(p + 2);
        for (int j = 0; j < 8; ++j) {
          int sc, m;
          k4_scale_min(p + 4, j, sc, m);
          put(8 * b + j, d * static_cast<float>(sc), -(dmin * static_cast<float>(m)));
          for (int l = 0; l < 32; ++l) {
            int c = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
            if (five) c |= ((p[16 + l] >> j) & 1) << 4;
            code[256 * b + 32 * j + l] = static_cast<u8>(c);
          }
        }
      }
      return;
    case QType::Q6_K:
      for (i64 b = 0; b < K / 256; ++b) {
        const u8* p = row + 210 * b;
        const auto* sc = reinterpret_cast<const std::int8_t*>(p + 192);
        const float d = load_f16(p + 208);
        for (int j = 0; j < 16; ++j) {
          const float ds = d * static_cast<float>(sc[j]);
          put(16 * b + j, ds, -32.0f * ds);
        }
        for (int i = 0; i < 256; ++i) {
          const int h = i / 128, r = i % 128;
          const int lo = (p[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
          const int hi = (p[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
          code[256 * b + i] = static_cast<u8>(lo | (hi << 4));
        }
      }
      return;
    case QType::Q2_K:  // sub-blocks of 16: s = d * (sc & 15), o = -(dmin * (sc >> 4)), code = q
      for (i64 b = 0; b < K / 256; ++b) {
        const u8* p = row + 84 * b;
        const float d = load_f16(p + 80), dmin = load_f16(p + 82);
        for (int j = 0; j < 16; ++j)
          put(16 * b + j, d * static_cast<float>(p[j] & 0x0F), -(dmin * static_cast<float>(p[j] >> 4)));
        for (int i = 0; i < 256; ++i)
          code[256 * b + i] = static_cast<u8>((p[16 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3);
      }
      return;
    case QType::Q3_K:  // sub-blocks of 16: s = d * scale, code = q + 4 (0..7), o = -4 s
      for (i64 b = 0; b < K / 256; ++b) {
        const u8* p = row + 110 * b;
        const float d = load_f16(p + 108);
        const u8* sc = p + 96;
        for (int j = 0; j < 16; ++j) {
          const int lo = j < 8 ? sc[j] & 0x0F : sc[j - 8] >> 4, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
          const float ds = d * static_cast<float>((lo | (hi << 4)) - 32);
          put(16 * b + j, ds, -4.0f * ds);
        }
        for (int i = 0; i < 256; ++i) {
          const int lo = (p[32 + 32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3;
          code[256 * b + i] = static_cast<u8>(lo | (((p[i % 32] >> (i / 32)) & 1) << 2));
        }
      }
      return;
    case QType::IQ4_NL:
    case QType::IQ4_XS: {
      const bool xs = t == QType::IQ4_XS;
      const i64 nsb = K / 32;  // scale blocks of 32: an IQ4_NL block, or a sub-block of IQ4_XS
      for (i64 j = 0; j < nsb; ++j) {
        const u8* p = xs ? row + 136 * (j / 8) : row + 18 * j;
        const u8* qs = xs ? p + 8 + 16 * (j % 8) : p + 2;
        float sv = load_f16(p);
        if (xs) {
          const int k = static_cast<int>(j % 8);
          const int ls = ((p[4 + k / 2] >> (4 * (k % 2))) & 0x0F) | (((load_u16(p + 2) >> (2 * k)) & 3) << 4);
          sv = sv * static_cast<float>(ls - 32);
        }
        put(j, sv, signed_q8 ? 0.0f : -128.0f * sv);
        for (int i = 0; i < 16; ++i) {
          const int lo = kIQ4NL[qs[i] & 0x0F], hi = kIQ4NL[qs[i] >> 4];
          code[32 * j + i] = static_cast<u8>(signed_q8 ? lo : lo + 128);
          code[32 * j + 16 + i] = static_cast<u8>(signed_q8 ? hi : hi + 128);
        }
      }
      return;
    }
    case QType::MXFP4:  // as IQ4_NL: s = 2^(e - 128), codes kMXFP4's values
      // Unsigned, the codes are value + 12 (0..24) and o = -12 s, not + 128 and -128 s: the offset's
      // term, which the codes' sum cancels, is as small as the values allow (rounding errors of
      // the block terms ~10x smaller), and -12 s overflows only from e = 253 on (2^125), where
      // the weights of values +-8 and +-12 are infinite too (-128 s did from e = 249, weights of
      // 2^121 and beyond).
      for (i64 b = 0; b < K / 32; ++b) {
        const u8* p = row + 17 * b;
        const float sv = e8m0_half(p[0]);
        put(b, sv, signed_q8 ? 0.0f : -12.0f * sv);
        for (int i = 0; i < 16; ++i) {
          const int lo = kMXFP4[p[1 + i] & 0x0F], hi = kMXFP4[p[1 + i] >> 4];
          code[32 * b + i] = static_cast<u8>(signed_q8 ? lo : lo + 12);
          code[32 * b + 16 + i] = static_cast<u8>(signed_q8 ? hi : hi + 12);
        }
      }
      return;
    default: return;
  }
}

// The values per scale block of the Q8 path's panels: 16 for the types whose sub-blocks are 16.
int q8_scale_block(QType t) { return t == QType::Q6_K || t == QType::Q2_K || t == QType::Q3_K ? 16 : 32; }
// Types whose codes span 8 bits (Q8_0's quants, the IQ4 values: + 128 they would saturate vpmaddubsw;
// MXFP4's -12..12 with them: as int8 they need no offset term at all), stored as int8 where the
// ISA's kernel asks (q8_signed).
bool q8_byte_codes(QType t) {
  return t == QType::Q8_0 || t == QType::IQ4_NL || t == QType::IQ4_XS || t == QType::MXFP4;
}

// Values of K per stretch of a panel packed by the ISA's vector packer (a multiple of 256).
constexpr i64 kQ8Stretch = 256;

struct Panel {
  std::vector<u8> wq, code;
  std::vector<float> ws, wo, s, o, out;
};

// Columns [n0, n0 + np) of C's panel: W rows n0.. packed, all of K (rows past N: codes 0, scales 0).
void pack_panel(const QGemmQ8Args& a, int np, int sb, bool signed_q8, i64 n0, Panel& p) {
  const i64 K = a.K, nsb = K / sb;
  p.wq.assign(static_cast<std::size_t>(K * np), 0);
  p.ws.assign(static_cast<std::size_t>(nsb * np), 0.0f);
  p.wo.assign(static_cast<std::size_t>(nsb * np), 0.0f);
  p.code.resize(static_cast<std::size_t>(K));
  p.s.resize(static_cast<std::size_t>(nsb));
  p.o.resize(static_cast<std::size_t>(nsb));
  for (int j = 0; j < np && n0 + j < a.N; ++j) {
    decode_codes(a.type, a.W + (n0 + j) * a.row_bytes, K, signed_q8, p.code.data(), p.s.data(), p.o.data());
    for (i64 q = 0; q < K / 4; ++q) std::memcpy(&p.wq[static_cast<std::size_t>((q * np + j) * 4)], &p.code[4 * q], 4);
    for (i64 b = 0; b < nsb; ++b) {
      p.ws[static_cast<std::size_t>(b * np + j)] = p.s[b];
      p.wo[static_cast<std::size_t>(b * np + j)] = p.o[b];
    }
  }
}

}  // namespace

void quantize_q8(const float* a, i64 K, Q8Act* out) {
  for (i64 b = 0; b < K / 32; ++b) {
    const float* x = a + 32 * b;
    float amax = 0.0f;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    Q8Act& q = out[b];
    q.sum = 0;
    if (!finite) {  // a NaN or inf shows as a NaN scale (the block's products are NaN)
      q.d = std::numeric_limits<float>::quiet_NaN();
      std::memset(q.q, 0, 32);
      continue;
    }
    q.d = amax / 127.0f;
    const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
    for (int i = 0; i < 32; ++i) {
      // |x * id| <= 127 (one rounding of amax * (127 / amax)); nearbyint rounds half to even.
      const int v = std::clamp(static_cast<int>(std::nearbyint(x[i] * id)), -127, 127);
      q.q[i] = static_cast<std::int8_t>(v);
      q.sum += v;
    }
  }
}

void qgemm_q8_run(const QGemmKernels& ks, const QGemmQ8Args& a, bool accumulate, const GemmEpilogue& e, bool threaded,
                  int part, int parts) {
  const int sb = q8_scale_block(a.type);
  const i64 nsb = a.K / sb, nblk = a.K / 32;
  const int np = ks.q8_np, mr = ks.q8_mr;
  // A quantized once (each part of a split call does it for itself): blocks, then the per
  // scale block pairs (d, d * sum) the kernel reads.
  // (The calling thread's buffers, reused: a decode step calls this for every product of every
  // layer. The workers below read them through the pointers, not the thread_local names.)
  thread_local std::vector<Q8Act> aq_buf;
  thread_local std::vector<float> asc_buf;
  if (a.aq == nullptr) aq_buf.resize(static_cast<std::size_t>(std::max<i64>(a.M * nblk, 1)));
  asc_buf.resize(static_cast<std::size_t>(std::max<i64>(a.M * nsb * 2, 1)));
  const Q8Act* const aq = a.aq != nullptr ? a.aq : aq_buf.data();
  float* const asc = asc_buf.data();
  for (i64 m = 0; m < a.M; ++m) {
    const Q8Act* row = aq + m * nblk;
    if (a.aq == nullptr) {
      if (ks.q8_quantize != nullptr)
        ks.q8_quantize(a.A + m * a.lda, a.K, aq_buf.data() + m * nblk);
      else
        quantize_q8(a.A + m * a.lda, a.K, aq_buf.data() + m * nblk);
    }
    for (i64 b = 0; b < nsb; ++b) {
      const Q8Act& blk = row[b * sb / 32];
      std::int32_t sum = blk.sum;
      if (sb == 16) {
        sum = 0;
        for (int i = 0; i < 16; ++i) sum += blk.q[(b % 2) * 16 + i];
      }
      asc[(m * nsb + b) * 2] = blk.d;
      asc[(m * nsb + b) * 2 + 1] = blk.d * static_cast<float>(sum);
    }
  }
  const bool signed_codes = ks.q8_signed && q8_byte_codes(a.type);
  const bool vector_pack = ks.q8_pack != nullptr && (ks.q8_pack_types & qtype_bit(a.type)) != 0;
  const i64 panels = (a.N + np - 1) / np;
  // A decode row (M = 1) of a full panel skips the packing where the ISA has q8_row, or q8_row8 and
  // W its decode layout (bitwise the same products: the panel would be used once).
  const bool one_row =
      a.M == 1 && vector_pack && (ks.q8_row != nullptr || (a.rows8 != nullptr && ks.q8_row8 != nullptr));
  // Every row tile of a panel walks K in stretches of kQ8Stretch values (the vector packer's
  // panels: 8 KiB of codes for Q4_*, in L1 with the tiles' reads), each tile resuming its sums
  // where the last stretch left them (the same float additions as one pass over K).
  auto run = [&](i64 p0, i64 p1) {
    thread_local Panel pan;
    pan.out.resize(static_cast<std::size_t>(((a.M + mr - 1) / mr) * mr * np));
    for (i64 p = p0; p < p1; ++p) {
      const i64 n0 = p * np, nn = std::min<i64>(np, a.N - n0);
      const bool stretches = vector_pack && nn == np;
      // A full panel's sums go straight to C (unless they are added to it).
      const bool direct = nn == np && !accumulate;
      const i64 kc = stretches ? std::min<i64>(a.K, kQ8Stretch) : a.K;
      const u8* next = stretches && p + 1 < p1 && n0 + 2 * np <= a.N ? a.W + (n0 + np) * a.row_bytes : nullptr;
      const bool fused = one_row && stretches;
      // One row: the panel's products straight from its blocks, in the decode layout when W has one
      // (its panel starts where the panel's rows start in W: both are dense).
      if (fused && a.rows8 != nullptr && ks.q8_row8 != nullptr)
        ks.q8_row8(a.type, a.rows8 + n0 * a.row_bytes, a.K / 32, aq, asc, direct ? a.C + n0 : pan.out.data());
      else if (fused)
        ks.q8_row(a.type, a.W + n0 * a.row_bytes, a.row_bytes, a.K / 32, aq, asc, direct ? a.C + n0 : pan.out.data(), next);
      for (i64 k0 = 0; !fused && k0 < a.K; k0 += kc) {
        const i64 kn = std::min(kc, a.K - k0), b0 = k0 / sb, nsbc = kn / sb;
        if (stretches) {
          pan.wq.resize(static_cast<std::size_t>(kn * np));
          pan.ws.resize(static_cast<std::size_t>(nsbc * np));
          pan.wo.resize(static_cast<std::size_t>(nsbc * np));
          if (a.rows8 != nullptr && ks.q8_pack8 != nullptr)  // from the decode layout (the blocks untouched)
            ks.q8_pack8(a.type, a.rows8 + n0 * a.row_bytes, a.K / 32, k0 / 32, kn / 32, pan.wq.data(), pan.ws.data(),
                        pan.wo.data());
          else
            ks.q8_pack(a.type, a.W + n0 * a.row_bytes, a.row_bytes, k0 / 32, kn / 32, pan.wq.data(), pan.ws.data(),
                       pan.wo.data(), next);
        } else {
          pack_panel(a, np, sb, signed_codes, n0, pan);
        }
        for (i64 m0 = 0; m0 < a.M; m0 += mr) {
          const int rows = static_cast<int>(std::min<i64>(mr, a.M - m0));
          float* out = direct ? a.C + m0 * a.ldc + n0 : pan.out.data() + m0 * np;
          ks.q8_tile(rows, nsbc, sb, signed_codes, pan.wq.data(), pan.ws.data(), pan.wo.data(),
                     aq + m0 * nblk + k0 / 32, nblk, asc + m0 * nsb * 2 + b0 * 2, nsb * 2, out, direct ? a.ldc : np,
                     k0 > 0);
        }
      }
      for (i64 m0 = 0; m0 < a.M; m0 += mr) {
        const int rows = static_cast<int>(std::min<i64>(mr, a.M - m0));
        if (!direct)
          for (int m = 0; m < rows; ++m) {
            float* c = a.C + (m0 + m) * a.ldc + n0;
            const float* o = pan.out.data() + (m0 + m) * np;
            if (accumulate)
              for (i64 j = 0; j < nn; ++j) c[j] += o[j];
            else
              std::copy(o, o + nn, c);
          }
        if (!e.empty()) apply_gemm_epilogue(e, a.C + m0 * a.ldc + n0, a.ldc, m0, n0, rows, nn);
      }
    }
  };
  if (part >= 0) {
    run(panels * part / parts, panels * (part + 1) / parts);
  } else if (threaded) {
    const double flops = 2.0 * static_cast<double>(a.M) * static_cast<double>(np) * static_cast<double>(a.K);
    parallel_for(0, panels, std::max<i64>(1, static_cast<i64>(4.0e6 / std::max(flops, 1.0))), run);
  } else {
    run(0, panels);
  }
}

}  // namespace qkv::kernels::detail

namespace qkv::kernels {

void quantize_activations_q8(const float* a, std::int64_t K, float* d, std::int8_t* q, std::int32_t* sum) {
  if (K < 0 || K % 32)
    throw ValueError("quantize_activations_q8: K must be a non-negative multiple of 32, got " + std::to_string(K));
  std::vector<detail::Q8Act> blocks(static_cast<std::size_t>(K / 32));
  detail::quantize_q8(a, K, blocks.data());
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    d[b] = blocks[b].d;
    sum[b] = blocks[b].sum;
    std::memcpy(q + 32 * b, blocks[b].q, 32);
  }
}

}  // namespace qkv::kernels
