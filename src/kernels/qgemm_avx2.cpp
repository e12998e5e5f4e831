// AVX2 + FMA block decoders for the quantized-weight products (bodies in qgemm_impl.h and
// qgemm_q8_impl.h). Compiled with a target pragma, used only when active_isa() >= Avx2 (and
// tested on AVX-512 machines through set_isa).
//
// Each decoder gives 8-wide float vectors of bitwise dequantize_row's values: the quants are
// widened to int32 lanes and converted, then d * q + m is one fma, which rounds as gguf-py's two
// operations because d * q is exact (a half times an integer below 2^6: at most 17 significant
// bits; the k-quants' d * sc * q at most 23).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "qgemm_internal.h"

// (clang ignores GCC's target pragma, so it builds these only when it targets AVX2 already.)
#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)))
#define QKV_QGEMM_HAVE_AVX2 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "qgemm_impl.h"

namespace {

using qkv::kernels::detail::k4_scale_min;
using qkv::kernels::detail::load_u16;
using qkv::kernels::detail::load_u32;
using qkv::kernels::detail::i64;

struct V8 {
  using R = __m256;
  static constexpr int W = 8;
  // Rows of W per decode tile for MR rows of A: 2 * MR * NRW accumulators of the 16 registers.
  static constexpr int nrw(int mr) { return mr == 1 ? 4 : mr == 2 ? 2 : 1; }
  static inline R zero() { return _mm256_setzero_ps(); }
  static inline R loadu(const float* p) { return _mm256_loadu_ps(p); }
  static inline void storeu(float* p, R v) { _mm256_storeu_ps(p, v); }
  static inline R add(R a, R b) { return _mm256_add_ps(a, b); }
  static inline R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static inline float hsum(R v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
};

// 8 bytes -> 8 int32 lanes.
inline __m256i u8x8(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i i8x8(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline float half(const std::uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
inline __m256i low4(__m256i b) { return _mm256_and_si256(b, _mm256_set1_epi32(15)); }
inline __m256i high4(__m256i b) { return _mm256_srli_epi32(b, 4); }
inline __m256 cvt(__m256i q) { return _mm256_cvtepi32_ps(q); }
// Bit (first + lane) of qh, as 16 or 0 per lane.
inline __m256i bit4_of(std::uint32_t qh, int first) {
  const __m256i sh = _mm256_add_epi32(_mm256_set1_epi32(first), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const __m256i b = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(qh)), sh),
                                     _mm256_set1_epi32(1));
  return _mm256_slli_epi32(b, 4);
}

// The scales of the 32-weight blocks: the first two halves of each (d, and m or the first quants),
// for nb (<= 64) blocks (kBytes apart) of NR rows (rb apart) -> s[r*ls + 2b] (d), s[r*ls + 2b + 1]
// (m). Each block's 4 bytes are copied with one scalar load and store (ports the block loop
// leaves idle; GCC would gather them with shuffles, or merge the stores in registers, so an
// empty asm pins each), all rows before any is converted (the wide loads then do not wait on
// the narrow stores), then converted 16 halves at a time.
template <int kBytes, int NR>
inline void prep_scales(const u8* p, i64 rb, i64 nb, float* s, i64 ls) {
  alignas(64) std::uint32_t raw[NR][64];
  for (int r = 0; r < NR; ++r) {
    const u8* q = p + r * rb;
    for (i64 b = 0; b < nb; ++b) {
      std::uint32_t v;
      std::memcpy(&v, q + b * kBytes, 4);
      asm("" : "+r"(v));
      raw[r][b] = v;
      asm("" ::: "memory");
    }
    for (i64 b = nb; b < (nb + 7) / 8 * 8; ++b) raw[r][b] = 0;
  }
  for (int r = 0; r < NR; ++r) {
    const auto* h = reinterpret_cast<const __m128i*>(raw[r]);
    for (i64 i = 0; i < 2 * nb; i += 8) _mm256_store_ps(s + r * ls + i, _mm256_cvtph_ps(_mm_load_si128(h + i / 8)));
  }
}

// 16 blocks' raw scale words (two halves each) -> 32 floats.
inline void convert_scales16(const std::uint32_t* raw, float* s) {
  const auto* h = reinterpret_cast<const __m128i*>(raw);
  for (int i = 0; i < 4; ++i) _mm256_store_ps(s + 8 * i, _mm256_cvtph_ps(_mm_load_si128(h + i)));
}

template <QType t>
struct Dec;

template <>
struct Dec<QType::F32> {
  static constexpr int kBlock = 32, kBytes = 128;
  static constexpr bool kFloat = true;
  static constexpr int kScales = 0;
  template <class F>
  static inline void block(const u8* p, const float*, F&& f) {
    for (int j = 0; j < 4; ++j) f(j, _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8 * j));
  }
};

template <>
struct Dec<QType::F16> {
  static constexpr int kBlock = 32, kBytes = 64;
  static constexpr bool kFloat = true;
  static constexpr int kScales = 0;
  template <class F>
  static inline void block(const u8* p, const float*, F&& f) {
    for (int j = 0; j < 4; ++j) f(j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j))));
  }
};

template <>
struct Dec<QType::BF16> {
  static constexpr int kBlock = 32, kBytes = 64;
  static constexpr bool kFloat = true;
  static constexpr int kScales = 0;
  template <class F>
  static inline void block(const u8* p, const float*, F&& f) {
    for (int j = 0; j < 4; ++j) {
      const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * j)));
      f(j, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
  }
};

template <>
struct Dec<QType::Q8_0> {
  static constexpr int kBlock = 32, kBytes = 34;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 2;
  static constexpr bool kRolling = true;
  static inline void convert16(const std::uint32_t* raw, float* s) { convert_scales16(raw, s); }
  template <int NR>
  static inline void prep(const u8* p, i64 rb, i64 nb, float* s, i64 ls) {
    prep_scales<kBytes, NR>(p, rb, nb, s, ls);
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    const __m256 d = _mm256_set1_ps(s[0]);
    for (int j = 0; j < 4; ++j) f(j, _mm256_mul_ps(cvt(i8x8(p + 2 + 8 * j)), d));
  }
};

// The 32-weight 4/5-bit blocks: bytes 8c..8c+8 of qs hold weights 8c.. (low nibbles) and
// 16+8c.. (high nibbles); w = fma(d, q, m), or d * (q - 8) / d * (q - 16) for the symmetric types.
template <int kQs, int kQh, bool kAffine, int kOffset>
struct Dec4or5 {
  static constexpr int kBlock = 32, kBytes = kQs + 16;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 2;
  static constexpr bool kRolling = true;
  static inline void convert16(const std::uint32_t* raw, float* s) { convert_scales16(raw, s); }
  template <int NR>
  static inline void prep(const u8* p, i64 rb, i64 nb, float* s, i64 ls) {
    prep_scales<kBytes, NR>(p, rb, nb, s, ls);
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    const __m256 d = _mm256_set1_ps(s[0]);
    const __m256 m = _mm256_set1_ps(s[1]);
    const __m256i off = _mm256_set1_epi32(kOffset);
    const std::uint32_t qh = kQh ? load_u32(p + kQh) : 0;
    // Affine: fma(d, q, m). Symmetric: d * (q - offset), one product as gguf-py's (an fma with
    // m = -offset d would round d * 8 - 8 d to +0 where gguf-py's d * 0 is -0 for a negative d).
    auto w = [&](__m256i q) {
      if constexpr (kAffine)
        return _mm256_fmadd_ps(d, cvt(q), m);
      else
        return _mm256_mul_ps(d, cvt(_mm256_sub_epi32(q, off)));
    };
    for (int c = 0; c < 2; ++c) {
      const __m256i b = u8x8(p + kQs + 8 * c);
      __m256i lo = low4(b), hi = high4(b);
      if constexpr (kQh != 0) {
        lo = _mm256_or_si256(lo, bit4_of(qh, 8 * c));
        hi = _mm256_or_si256(hi, bit4_of(qh, 16 + 8 * c));
      }
      f(c, w(lo));
      f(2 + c, w(hi));
    }
  }
};

template <>
struct Dec<QType::Q4_0> : Dec4or5<2, 0, false, 8> {};
template <>
struct Dec<QType::Q4_1> : Dec4or5<4, 0, true, 0> {};
template <>
struct Dec<QType::Q5_0> : Dec4or5<6, 2, false, 16> {};
template <>
struct Dec<QType::Q5_1> : Dec4or5<8, 4, true, 0> {};

// The Q8 kernels of the k-quants, Q5_0, IQ4_NL and MXFP4 (qgemm_kq8_impl.h): their per-row integer
// sums with vpmaddubsw (int8 codes as |code| times a signed by the code, as q8_tile), as many
// results added in int16 as the codes allow (kMax = 12: 10, 15: 8, 31: 4, 63: 2, 127: 1; |sum| <=
// 32767), then one vpmaddwd. The 8-bit-range codes are int8 here (q8_signed).
template <int N, int kMax, bool kSigned>
inline __m256i kq_isum(const __m256i* c, const std::int8_t* a) {
  constexpr int G = 32767 / (2 * kMax * 127);
  static_assert(G >= 1);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc = _mm256_setzero_si256();
  for (int q0 = 0; q0 < N; q0 += G) {
    __m256i s16 = _mm256_setzero_si256();
    for (int q = q0; q < std::min(N, q0 + G); ++q) {
      std::int32_t a4;
      std::memcpy(&a4, a + 4 * q, 4);
      const __m256i aq = _mm256_set1_epi32(a4);
      s16 = _mm256_add_epi16(s16, kSigned ? _mm256_maddubs_epi16(_mm256_abs_epi8(c[q]), _mm256_sign_epi8(aq, c[q]))
                                          : _mm256_maddubs_epi16(c[q], aq));
    }
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(s16, ones));
  }
  return acc;
}
constexpr bool kq_signed_bytes = true;
#include "qgemm_kq8_impl.h"

// The k-quants' and the 4-bit table types' decoders (Q2_K .. Q6_K, IQ4_NL, IQ4_XS, MXFP4).
#include "qgemm_avx2_kquants.h"

// ---- the Q8 path's micro-kernel: MR rows of A x 16 columns, vpmaddubsw + vpmaddwd ----
// vpmaddubsw adds two uint8 x int8 products in int16 with saturation: safe for the codes of the
// 2-6-bit types (<= 63: |sum| <= 16128); Q8_0 and the IQ4 types come as int8 codes (signed_codes)
// and are multiplied as |w| x (sign(w) a), |sum| <= 2 * 128 * 127 = 32512 (llama.cpp's trick).
template <int MR>
void q8_tile_mr(i64 nsb, int sb, bool signed_codes, const u8* wq, const float* ws, const float* wo,
                const qkv::kernels::detail::Q8Act* A, i64 lda, const float* asc, i64 ldas, float* out, i64 ldo, bool resume) {
  __m256 f[MR][2];
  for (int m = 0; m < MR; ++m) {
    f[m][0] = resume ? _mm256_loadu_ps(out + ldo * m) : _mm256_setzero_ps();
    f[m][1] = resume ? _mm256_loadu_ps(out + ldo * m + 8) : _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  const int nq = sb / 4;
  for (i64 b = 0; b < nsb; ++b) {
    __m256i acc[MR][2];
    for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm256_setzero_si256();
    const i64 k0 = b * sb;
    const std::int8_t* ap[MR];
    for (int m = 0; m < MR; ++m) ap[m] = A[m * lda + k0 / 32].q + k0 % 32;
    const u8* w = wq + k0 / 4 * 64;
    for (int q = 0; q < nq; ++q) {
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * q));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 64 * q + 32));
      const __m256i u0 = signed_codes ? _mm256_abs_epi8(w0) : w0, u1 = signed_codes ? _mm256_abs_epi8(w1) : w1;
      for (int m = 0; m < MR; ++m) {
        std::int32_t a4;
        std::memcpy(&a4, ap[m] + 4 * q, 4);
        const __m256i a = _mm256_set1_epi32(a4);
        const __m256i a0 = signed_codes ? _mm256_sign_epi8(a, w0) : a, a1 = signed_codes ? _mm256_sign_epi8(a, w1) : a;
        acc[m][0] = _mm256_add_epi32(acc[m][0], _mm256_madd_epi16(_mm256_maddubs_epi16(u0, a0), ones));
        acc[m][1] = _mm256_add_epi32(acc[m][1], _mm256_madd_epi16(_mm256_maddubs_epi16(u1, a1), ones));
      }
    }
    const __m256 s0 = _mm256_loadu_ps(ws + 16 * b), s1 = _mm256_loadu_ps(ws + 16 * b + 8);
    const __m256 o0 = _mm256_loadu_ps(wo + 16 * b), o1 = _mm256_loadu_ps(wo + 16 * b + 8);
    for (int m = 0; m < MR; ++m) {
      const __m256 da = _mm256_set1_ps(asc[m * ldas + 2 * b]), sa = _mm256_set1_ps(asc[m * ldas + 2 * b + 1]);
      f[m][0] = _mm256_fmadd_ps(o0, sa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][0]), _mm256_mul_ps(s0, da), f[m][0]));
      f[m][1] = _mm256_fmadd_ps(o1, sa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[m][1]), _mm256_mul_ps(s1, da), f[m][1]));
    }
  }
  for (int m = 0; m < MR; ++m) {
    _mm256_storeu_ps(out + ldo * m, f[m][0]);
    _mm256_storeu_ps(out + ldo * m + 8, f[m][1]);
  }
}

void q8_tile(int mr, i64 nsb, int sb, bool signed_codes, const u8* wq, const float* ws, const float* wo,
             const qkv::kernels::detail::Q8Act* A, i64 lda, const float* asc, i64 ldas, float* out, i64 ldo, bool resume) {
  if (mr == 1) return q8_tile_mr<1>(nsb, sb, signed_codes, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
  q8_tile_mr<2>(nsb, sb, signed_codes, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
}

// ---- the Q8 path's packer (Q4_0, Q4_1, Q8_0): a full panel of 16 rows of W, vectorised ----
//
// The layout of qgemm_q8.cpp's pack_panel, bitwise: codes [K/4][16][4] (column j's 4 codes of
// k-quad q at (q*16 + j)*4), ws/wo [K/32][16]. Per block, 8 rows at a time: row r + 4l's 16 bytes
// go to 128-bit lane l of register r (r < 4, l < 2), and a 4 x 4 transpose of dwords within the
// lanes (unpack 32, then 64) leaves dword q of the 8 rows in register q, in row order; 4-bit codes
// are its low nibbles (quads 0-3) and its high nibbles (quads 4-7). Q8_0's codes are its int8
// quants themselves (signed codes, wo = 0: AVX2's vpmaddubsw would saturate on q + 128). The
// scales come from scales8.

// Dwords q = 0..3 of the 16 bytes at p + r * rb (r < 8) -> out[q] (8 rows each, in order).
inline void transpose8x4(const u8* p, i64 rb, __m256i out[4]) {
  __m256i z[4];
  for (int r = 0; r < 4; ++r)
    z[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * rb))),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (r + 4) * rb)), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

// Bytes of a block of the packed types.
template <QType t>
constexpr int kQ8Bytes = t == QType::Q8_0 ? 34 : t == QType::Q4_1 ? 20 : 18;

// The two 16-bit halves of the first dword of the blocks at blk + r * rb (r < 8) ([d, m], or
// [d, two codes]): [first halves of rows 0..7 | second halves of rows 0..7], the decode layout's
// scales. The dwords come out of the transpose8x4 pattern (dword 0 only, no scalar copies), a
// byte shuffle splits their halves (lane 0: rows 0..3, lane 1: rows 4..7), one permute puts the
// quarters in order.
inline __m256i first_halves8(const u8* blk, i64 rb) {
  __m256i z[4];
  for (int r = 0; r < 4; ++r)
    z[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + r * rb))),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (r + 4) * rb)), 1);
  const __m256i w = _mm256_unpacklo_epi64(_mm256_unpacklo_epi32(z[0], z[1]), _mm256_unpacklo_epi32(z[2], z[3]));
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,  //
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(w, split), 0xD8);
}

// The scales the packer stores from [d0..d7 | m0..m7] (fp16): d, and o = m (Q4_1), -8 d (Q4_0)
// or 0 (Q8_0).
template <QType t>
inline void halves_to_scales(__m256i x, __m256& d, __m256& o) {
  d = _mm256_cvtph_ps(_mm256_castsi256_si128(x));
  if constexpr (t == QType::Q4_1)
    o = _mm256_cvtph_ps(_mm256_extracti128_si256(x, 1));
  else if constexpr (t == QType::Q4_0)
    o = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
  else
    o = _mm256_setzero_ps();
}

// The scales of the blocks at blk + r * rb (r < 8) as the packer stores them.
template <QType t>
inline void scales8(const u8* blk, i64 rb, __m256& d, __m256& o) {
  halves_to_scales<t>(first_halves8(blk, rb), d, o);
}

template <QType t>
void q8_pack_t(const u8* W, i64 rb, i64 b0, i64 nb, u8* wq, float* ws, float* wo, const u8* pf) {
  constexpr int kNp = 16;
  constexpr int kBytes = kQ8Bytes<t>;
  const __m256i nib = _mm256_set1_epi8(0x0F);
  for (i64 b = 0; b < nb; ++b) {
    const u8* blk = W + (b0 + b) * kBytes;
    if (pf != nullptr)
      for (int o = 0; o < kNp * kBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(pf + (b0 + b) * kNp * kBytes + o), _MM_HINT_T1);
    for (int h = 0; h < 2; ++h) {  // columns 8h .. 8h + 7
      const u8* rows = blk + 8 * h * rb;
      __m256 d, o;
      scales8<t>(rows, rb, d, o);
      _mm256_storeu_ps(ws + b * kNp + 8 * h, d);
      _mm256_storeu_ps(wo + b * kNp + 8 * h, o);
      u8* out = wq + (8 * b * kNp + 8 * h) * 4;  // quad q of this block at out + q * kNp * 4
      __m256i v[4];
      if constexpr (t == QType::Q8_0) {
        for (int half = 0; half < 2; ++half) {
          transpose8x4(rows + 2 + 16 * half, rb, v);
          for (int q = 0; q < 4; ++q)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (4 * half + q) * kNp * 4), v[q]);
        }
      } else {
        transpose8x4(rows + (t == QType::Q4_1 ? 4 : 2), rb, v);
        for (int q = 0; q < 4; ++q) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * kNp * 4), _mm256_and_si256(v[q], nib));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (q + 4) * kNp * 4),
                              _mm256_and_si256(_mm256_srli_epi32(v[q], 4), nib));
        }
      }
    }
  }
}

// Bytes ahead of the stream that the decode rows of Q4_K, Q6_K and Q5_0 prefetch (bench_qgemm on
// the Xeon, one thread, cold rows8, medians of 3; read bandwidth ~16 GB/s: none 11.5 / 11.5 / 11.1
// GB/s on AVX-512 and 12.2 / 11.8 / 11.0 on AVX2, 1024 bytes 12.6 / 12.5 / 12.6 and 12.6 / 12.2 / 13.1).
constexpr int kKqAhead = 1024;

void q8_pack(QType t, const u8* W, i64 rb, i64 b0, i64 nb, u8* wq, float* ws, float* wo, const u8* pf) {
  switch (t) {
    case QType::Q8_0: return q8_pack_t<QType::Q8_0>(W, rb, b0, nb, wq, ws, wo, pf);
    case QType::Q4_0: return q8_pack_t<QType::Q4_0>(W, rb, b0, nb, wq, ws, wo, pf);
    case QType::Q4_1: return q8_pack_t<QType::Q4_1>(W, rb, b0, nb, wq, ws, wo, pf);
    case QType::Q4_K: return kq8::pack<QType::Q4_K, 16>(W, rb, b0, nb, wq, ws, wo);
    case QType::Q6_K: return kq8::pack<QType::Q6_K, 16>(W, rb, b0, nb, wq, ws, wo);
    case QType::Q5_0: return kq8::pack<QType::Q5_0, 16>(W, rb, b0, nb, wq, ws, wo);
    case QType::IQ4_NL: return kq8::pack<QType::IQ4_NL, 16>(W, rb, b0, nb, wq, ws, wo);
    case QType::MXFP4: return kq8::pack<QType::MXFP4, 16>(W, rb, b0, nb, wq, ws, wo);
    default: return;
  }
}

// The exact integer sums of one block for 8 rows against A's block a: v holds the rows' codes
// transposed (word q: code bytes 4q .. 4q + 3 of the 8 rows), 8 words of signed codes for Q8_0
// (vpmaddubsw on |code| and a signed by the code, one vpmaddwd per word, as q8_tile), else 4 words
// of 4-bit pairs (<= 15), whose 8 vpmaddubsw results add in int16 before one vpmaddwd (|sum| <=
// 8 * 2 * 15 * 127 = 30480: exact).
template <QType t>
inline __m256i block_sums(const __m256i* v, const std::int8_t* a) {
  const __m256i nib = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  auto quad = [&](int q) {
    std::int32_t a4;
    std::memcpy(&a4, a + 4 * q, 4);
    return _mm256_set1_epi32(a4);
  };
  if constexpr (t == QType::Q8_0) {
    __m256i acc = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q) {
      const __m256i aq = _mm256_sign_epi8(quad(q), v[q]);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(v[q]), aq), ones));
    }
    return acc;
  } else {
    __m256i s16 = _mm256_setzero_si256();
    for (int q = 0; q < 4; ++q) {
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(v[q], nib), quad(q)));
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi32(v[q], 4), nib), quad(q + 4)));
    }
    return _mm256_madd_epi16(s16, ones);
  }
}

// q8_row: one row of A against 16 rows of W, 8 rows at a time, from the blocks as stored. Per
// block, transpose8x4 gives the codes q8_pack would store (in registers), vpmaddubsw multiplies
// them by the broadcast quads of A, and the block's integer sums and float steps are q8_tile_mr<1>'s.
// The 4-bit codes (<= 15) add their 8 vpmaddubsw results in int16 before one vpmaddwd (|sum| <=
// 8 * 2 * 15 * 127 = 30480: exact), half the multiplies of the tile; Q8_0's signed codes take a
// vpmaddwd per quad as in the tile.
template <QType t>
void q8_row_t(const u8* W, i64 rb, i64 nblk, const qkv::kernels::detail::Q8Act* A, const float* asc, float* out,
              const u8* pf) {
  constexpr int kBytes = kQ8Bytes<t>;
  for (int h = 0; h < 2; ++h) {
    const u8* rows = W + 8 * h * rb;
    const u8* next = pf != nullptr ? pf + 8 * h * rb : nullptr;
    __m256 f = _mm256_setzero_ps();
    for (i64 b = 0; b < nblk; ++b) {
      const u8* blk = rows + b * kBytes;
      if (next != nullptr)
        for (int o = 0; o < 8 * kBytes; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(next + b * 8 * kBytes + o), _MM_HINT_T1);
      __m256 d, o;
      scales8<t>(blk, rb, d, o);
      __m256i v[8];
      if constexpr (t == QType::Q8_0) {
        transpose8x4(blk + 2, rb, v);
        transpose8x4(blk + 18, rb, v + 4);
      } else {
        transpose8x4(blk + (t == QType::Q4_1 ? 4 : 2), rb, v);
      }
      const __m256i acc = block_sums<t>(v, A[b].q);
      const __m256 da = _mm256_set1_ps(asc[2 * b]), sa = _mm256_set1_ps(asc[2 * b + 1]);
      f = _mm256_fmadd_ps(o, sa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(d, da), f));
    }
    _mm256_storeu_ps(out + 8 * h, f);
  }
}

void q8_row(QType t, const u8* W, i64 rb, i64 nblk, const qkv::kernels::detail::Q8Act* A, const float* asc, float* out,
            const u8* pf) {
  switch (t) {
    case QType::Q8_0: return q8_row_t<QType::Q8_0>(W, rb, nblk, A, asc, out, pf);
    case QType::Q4_0: return q8_row_t<QType::Q4_0>(W, rb, nblk, A, asc, out, pf);
    case QType::Q4_1: return q8_row_t<QType::Q4_1>(W, rb, nblk, A, asc, out, pf);
    case QType::Q4_K: return kq8::row<QType::Q4_K, 16>(W, rb, nblk, A, asc, out);
    case QType::Q6_K: return kq8::row<QType::Q6_K, 16>(W, rb, nblk, A, asc, out);
    case QType::Q5_0: return kq8::row<QType::Q5_0, 16>(W, rb, nblk, A, asc, out);
    case QType::IQ4_NL: return kq8::row<QType::IQ4_NL, 16>(W, rb, nblk, A, asc, out);
    case QType::MXFP4: return kq8::row<QType::MXFP4, 16>(W, rb, nblk, A, asc, out);
    default: return;
  }
}

// q8_row on the decode layout (qgemm_repack_rows8): the same scales, codes and arithmetic as
// q8_row_t, each 8-row group's blocks read in order from one stream (q8_row reads 8 rows at once,
// which the hardware prefetcher does not follow: 11.4 -> 16.7 GB/s on one thread and 21.4 ->
// 27.4 on two, Q4_1 1536 x 576 from DRAM, on an AVX2 Zen 2), prefetched kRows8Ahead bytes ahead.
constexpr int kRows8Ahead = 1024;

// The scales of one 8-row block of the decode layout at blk (its first 32 bytes: the halves
// first_halves8 gives, or d and the first codes): d, and o as scales8's.
template <QType t>
inline void rows8_scales(const u8* blk, __m256& d, __m256& o) {
  halves_to_scales<t>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)), d, o);
}

// Bytes of the scales before the codes in a block of the decode layout.
template <QType t>
constexpr int kRows8Codes = t == QType::Q4_1 ? 32 : 16;

template <QType t>
void q8_row8_t(const u8* P, i64 nblk, const qkv::kernels::detail::Q8Act* A, const float* asc, float* out) {
  constexpr int kBytes = kQ8Bytes<t>, kWords = t == QType::Q8_0 ? 8 : 4;
  for (int h = 0; h < 2; ++h) {
    const u8* g = P + h * nblk * 8 * kBytes;
    __m256 f = _mm256_setzero_ps();
    for (i64 b = 0; b < nblk; ++b) {
      const u8* blk = g + b * 8 * kBytes;
      for (int o = 0; o < 8 * kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kRows8Ahead + o), _MM_HINT_T0);
      __m256 d, o;
      rows8_scales<t>(blk, d, o);
      __m256i v[kWords];
      for (int q = 0; q < kWords; ++q)
        v[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kRows8Codes<t> + 32 * q));
      const __m256i acc = block_sums<t>(v, A[b].q);
      const __m256 da = _mm256_set1_ps(asc[2 * b]), sa = _mm256_set1_ps(asc[2 * b + 1]);
      f = _mm256_fmadd_ps(o, sa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(d, da), f));
    }
    _mm256_storeu_ps(out + 8 * h, f);
  }
}

// q8_pack_t on the decode layout: the same scales and code bytes, read in order.
template <QType t>
void q8_pack8_t(const u8* P, i64 nblk, i64 b0, i64 nb, u8* wq, float* ws, float* wo) {
  constexpr int kNp = 16;
  constexpr int kBytes = kQ8Bytes<t>;
  const __m256i nib = _mm256_set1_epi8(0x0F);
  for (i64 b = 0; b < nb; ++b)
    for (int h = 0; h < 2; ++h) {  // columns 8h .. 8h + 7
      const u8* blk = P + (h * nblk + b0 + b) * 8 * kBytes;
      __m256 d, o;
      rows8_scales<t>(blk, d, o);
      _mm256_storeu_ps(ws + b * kNp + 8 * h, d);
      _mm256_storeu_ps(wo + b * kNp + 8 * h, o);
      u8* out = wq + (8 * b * kNp + 8 * h) * 4;  // quad q of this block at out + q * kNp * 4
      const u8* codes = blk + kRows8Codes<t>;
      if constexpr (t == QType::Q8_0) {
        for (int q = 0; q < 8; ++q)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * kNp * 4),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * q)));
      } else {
        for (int q = 0; q < 4; ++q) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * q));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * kNp * 4), _mm256_and_si256(v, nib));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (q + 4) * kNp * 4),
                              _mm256_and_si256(_mm256_srli_epi32(v, 4), nib));
        }
      }
    }
}

void q8_pack8(QType t, const u8* P, i64 nblk, i64 b0, i64 nb, u8* wq, float* ws, float* wo) {
  switch (t) {
    case QType::Q8_0: return q8_pack8_t<QType::Q8_0>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q4_0: return q8_pack8_t<QType::Q4_0>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q4_1: return q8_pack8_t<QType::Q4_1>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q4_K: return kq8::pack8<QType::Q4_K, 16>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q6_K: return kq8::pack8<QType::Q6_K, 16>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q5_0: return kq8::pack8<QType::Q5_0, 16>(P, nblk, b0, nb, wq, ws, wo);
    case QType::IQ4_NL: return kq8::pack8<QType::IQ4_NL, 16>(P, nblk, b0, nb, wq, ws, wo);
    case QType::MXFP4: return kq8::pack8<QType::MXFP4, 16>(P, nblk, b0, nb, wq, ws, wo);
    default: return;
  }
}

// qgemm_repack_rows8 with the transposes q8_row does per call: each group's blocks read once.
template <QType t>
void q8_repack8_t(const u8* W, i64 rb, i64 nblk, i64 g0, i64 g1, u8* out) {
  constexpr int kBytes = kQ8Bytes<t>, kCode0 = t == QType::Q4_1 ? 4 : 2;
  for (i64 g = g0; g < g1; ++g)
    for (i64 b = 0; b < nblk; ++b) {
      const u8* blk = W + g * 8 * rb + b * kBytes;
      u8* dst = out + (g * nblk + b) * 8 * kBytes;
      const __m256i x = first_halves8(blk, rb);  // [d0..7 | m0..7]
      __m256i v[4];
      if constexpr (t == QType::Q4_1)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), x);
      else
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(x));
      for (int half = 0; half < (t == QType::Q8_0 ? 2 : 1); ++half) {
        transpose8x4(blk + kCode0 + 16 * half, rb, v);
        for (int q = 0; q < 4; ++q)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kRows8Codes<t> + 32 * (4 * half + q)), v[q]);
      }
    }
}

void q8_repack8(QType t, const u8* W, i64 rb, i64 nblk, i64 g0, i64 g1, u8* out) {
  switch (t) {
    case QType::Q8_0: return q8_repack8_t<QType::Q8_0>(W, rb, nblk, g0, g1, out);
    case QType::Q4_0: return q8_repack8_t<QType::Q4_0>(W, rb, nblk, g0, g1, out);
    case QType::Q4_1: return q8_repack8_t<QType::Q4_1>(W, rb, nblk, g0, g1, out);
    case QType::Q4_K: return kq8::repack8<QType::Q4_K>(W, rb, nblk, g0, g1, out);
    case QType::Q6_K: return kq8::repack8<QType::Q6_K>(W, rb, nblk, g0, g1, out);
    case QType::Q5_0: return kq8::repack8<QType::Q5_0>(W, rb, nblk, g0, g1, out);
    case QType::IQ4_NL: return kq8::repack8<QType::IQ4_NL>(W, rb, nblk, g0, g1, out);
    case QType::MXFP4: return kq8::repack8<QType::MXFP4>(W, rb, nblk, g0, g1, out);
    default: return;
  }
}

void q8_row8(QType t, const u8* P, i64 nblk, const qkv::kernels::detail::Q8Act* A, const float* asc, float* out) {
  switch (t) {
    case QType::Q8_0: return q8_row8_t<QType::Q8_0>(P, nblk, A, asc, out);
    case QType::Q4_0: return q8_row8_t<QType::Q4_0>(P, nblk, A, asc, out);
    case QType::Q4_1: return q8_row8_t<QType::Q4_1>(P, nblk, A, asc, out);
    case QType::Q4_K: return kq8::row8<QType::Q4_K, 16>(P, nblk, A, asc, out, kKqAhead);
    case QType::Q6_K: return kq8::row8<QType::Q6_K, 16>(P, nblk, A, asc, out, kKqAhead);
    case QType::Q5_0: return kq8::row8<QType::Q5_0, 16>(P, nblk, A, asc, out, kKqAhead);
    case QType::IQ4_NL: return kq8::row8<QType::IQ4_NL, 16>(P, nblk, A, asc, out, kKqAhead);
    case QType::MXFP4: return kq8::row8<QType::MXFP4, 16>(P, nblk, A, asc, out, kKqAhead);
    default: return;
  }
}

// quantize_q8, 32 values at a time: the same amax, the same float divisions, the same
// round-half-even (vcvtps2dq under the default rounding mode, as nearbyint) and clamp.
void q8_quantize(const float* a, i64 K, qkv::kernels::detail::Q8Act* out) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
  for (i64 b = 0; b < K / 32; ++b) {
    __m256 x[4], ax[4];
    for (int i = 0; i < 4; ++i) {
      x[i] = _mm256_loadu_ps(a + 32 * b + 8 * i);
      ax[i] = _mm256_and_ps(x[i], sign);
    }
    qkv::kernels::detail::Q8Act& q = out[b];
    // |x| <= FLT_MAX is false for NaN and infinity.
    const __m256 ok = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(ax[0], big, _CMP_LE_OQ), _mm256_cmp_ps(ax[1], big, _CMP_LE_OQ)),
                                    _mm256_and_ps(_mm256_cmp_ps(ax[2], big, _CMP_LE_OQ), _mm256_cmp_ps(ax[3], big, _CMP_LE_OQ)));
    if (_mm256_movemask_ps(ok) != 0xFF) {
      q.d = std::numeric_limits<float>::quiet_NaN();
      q.sum = 0;
      std::memset(q.q, 0, 32);
      continue;
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(ax[0], ax[1]), _mm256_max_ps(ax[2], ax[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    q.d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax == 0.0f ? 0.0f : 127.0f / amax);
    __m256i v[4];
    for (int i = 0; i < 4; ++i) v[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x[i], id)), lim), nlim);
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    q.sum = _mm_cvtsi128_si32(s4);
    // int32 -> int8 in order: packs works within 128-bit lanes, the permute puts the dwords back.
    const __m256i p01 = _mm256_packs_epi32(v[0], v[1]), p23 = _mm256_packs_epi32(v[2], v[3]);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q.q),
                        _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
}

}  // namespace

#pragma GCC pop_options
#endif

namespace qkv::kernels::detail {

QGemmKernels qgemm_kernels_avx2() {
  QGemmKernels k;
#ifdef QKV_QGEMM_HAVE_AVX2
  k.dot_rows = &dot_rows_any<V8, Dec>;
  k.dequant_rows = &dequant_rows_any<V8, Dec>;
  k.q8_np = 16;
  k.q8_mr = 2;
  k.q8_signed = kq_signed_bytes;
  k.q8_tile = &q8_tile;
  k.q8_pack = &q8_pack;
  k.q8_quantize = &q8_quantize;
  k.q8_row = &q8_row;
  k.q8_row8 = &q8_row8;
  k.q8_pack8 = &q8_pack8;
  k.q8_repack8 = &q8_repack8;
  k.q8_pack_types = qkv::kernels::detail::qtype_bit(QType::Q4_0) | qkv::kernels::detail::qtype_bit(QType::Q4_1) |
                    qkv::kernels::detail::qtype_bit(QType::Q8_0) | qkv::kernels::detail::qtype_bit(QType::Q4_K) |
                    qkv::kernels::detail::qtype_bit(QType::Q6_K) | qkv::kernels::detail::qtype_bit(QType::Q5_0) |
                    qkv::kernels::detail::qtype_bit(QType::IQ4_NL) | qkv::kernels::detail::qtype_bit(QType::MXFP4);
#endif
  return k;
}

}  // namespace qkv::kernels::detail
