// AVX-512 block decoders for the quantized-weight products (bodies in qgemm_impl.h and
// qgemm_q8_impl.h). Compiled with a target pragma (builds without -march flags), used only when
// active_isa() == Avx512.
//
// A decoder turns one block into 16-wide float vectors holding bitwise dequantize_row's values.
// The 4- and 5-bit types do it with a table lookup: the block's 16 (32) possible values
// table[i] = fma(d, i, m) are computed once (d * i is exact for a half d and i < 32, so the fma
// rounds like gguf-py's d * q + m), and vpermps / vpermt2ps picks them by the quant, whose low 4
// (5) index bits are all the permutes read, so the low nibble needs no mask.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "qgemm_internal.h"

#if defined(QKV_GEMM_AVX512_EMULATED)
// Test-only build (tests/kernels/gemm.cmake): the same kernels on SIMDe's portable AVX-512 and
// VNNI, so machines without AVX-512 still check this file.
#define QKV_QGEMM_HAVE_AVX512 1
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>

#include <cmath>
#include <cstdint>
// Debian 12's SIMDe (0.7.4) lacks these: built lane by lane from what it has (max and integer
// sums are exact in any order, so the results are the native instructions').
namespace qkv_simde_compat {
inline __m512 cvtph_ps(__m256i h) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_castsi256_si128(h)))),
                                             _mm256_castps_pd(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))), 1));
}
inline __m512i cvtepu16_epi32(__m256i x) {
  alignas(32) std::uint16_t in[16];
  alignas(64) std::int32_t out[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(in), x);
  for (int i = 0; i < 16; ++i) out[i] = in[i];
  return _mm512_load_si512(out);
}
inline __m128i cvtepi32_epi8(__m512i x) {
  alignas(64) std::int32_t in[16];
  alignas(16) std::int8_t out[16];
  _mm512_store_si512(in, x);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<std::int8_t>(in[i]);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(out));
}
inline int reduce_add_epi32(__m512i x) {
  alignas(64) std::int32_t in[16];
  _mm512_store_si512(in, x);
  std::uint32_t s = 0;
  for (int i = 0; i < 16; ++i) s += static_cast<std::uint32_t>(in[i]);
  return static_cast<int>(s);
}
inline float reduce_max_ps(__m512 x) {
  alignas(64) float in[16];
  _mm512_store_ps(in, x);
  float m = in[0];
  for (int i = 1; i < 16; ++i) m = in[i] > m ? in[i] : m;
  return m;
}
// Only the class set the quantizer asks (0x99: NaN or infinity).
inline __mmask16 fpclass_ps_mask(__m512 x, int imm) {
  alignas(64) float in[16];
  _mm512_store_ps(in, x);
  __mmask16 m = 0;
  for (int i = 0; i < 16; ++i)
    if (imm == 0x99 && !std::isfinite(in[i])) m = static_cast<__mmask16>(m | (1u << i));
  return m;
}
inline __mmask16 test_epi8_mask(__m128i a, __m128i b) {
  alignas(16) std::uint8_t x[16], y[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(x), a);
  _mm_store_si128(reinterpret_cast<__m128i*>(y), b);
  __mmask16 m = 0;
  for (int i = 0; i < 16; ++i)
    if ((x[i] & y[i]) != 0) m = static_cast<__mmask16>(m | (1u << i));
  return m;
}
inline __m512 cvtepi32_ps(__m512i x) {
  alignas(64) std::int32_t in[16];
  alignas(64) float out[16];
  _mm512_store_si512(in, x);
  for (int i = 0; i < 16; ++i) out[i] = static_cast<float>(in[i]);
  return _mm512_load_ps(out);
}
// Round to nearest even (the default mode), out of range -> INT_MIN, as vcvtps2dq.
inline __m512i cvtps_epi32(__m512 x) {
  alignas(64) float in[16];
  alignas(64) std::int32_t out[16];
  _mm512_store_ps(in, x);
  for (int i = 0; i < 16; ++i)
    out[i] = std::fabs(in[i]) < 2147483648.0f ? static_cast<std::int32_t>(std::nearbyint(in[i])) : INT32_MIN;
  return _mm512_load_si512(out);
}
template <class T>
inline __m512i widen8(__m128i x) {
  alignas(16) T in[16];
  alignas(64) std::int32_t out[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(in), x);
  for (int i = 0; i < 16; ++i) out[i] = in[i];
  return _mm512_load_si512(out);
}
inline __m512i cvtepi8_epi32(__m128i x) { return widen8<std::int8_t>(x); }
inline __m512i cvtepu8_epi32(__m128i x) { return widen8<std::uint8_t>(x); }
}  // namespace qkv_simde_compat
#define _mm512_cvtepi32_ps qkv_simde_compat::cvtepi32_ps
#define _mm512_cvtps_epi32 qkv_simde_compat::cvtps_epi32
#define _mm512_cvtepi8_epi32 qkv_simde_compat::cvtepi8_epi32
#define _mm512_cvtepu8_epi32 qkv_simde_compat::cvtepu8_epi32
#define _mm512_cvtph_ps qkv_simde_compat::cvtph_ps
#define _mm512_cvtepu16_epi32 qkv_simde_compat::cvtepu16_epi32
#define _mm512_cvtepi32_epi8 qkv_simde_compat::cvtepi32_epi8
#define _mm512_reduce_add_epi32 qkv_simde_compat::reduce_add_epi32
#define _mm512_reduce_max_ps qkv_simde_compat::reduce_max_ps
#define _mm512_fpclass_ps_mask qkv_simde_compat::fpclass_ps_mask
#define _mm_test_epi8_mask qkv_simde_compat::test_epi8_mask
// (clang ignores GCC's target pragma, so it builds these only when it targets AVX-512 already.)
#elif defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)))
#define QKV_QGEMM_HAVE_AVX512 1
#define QKV_QGEMM_AVX512_PRAGMA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni,avx2,fma,f16c")
// GCC 12's AVX-512 intrinsics trip a false -W(maybe-)uninitialized once inlined (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

#ifdef QKV_QGEMM_HAVE_AVX512

#include "qgemm_impl.h"

namespace {

using qkv::kernels::detail::k4_scale_min;
using qkv::kernels::detail::load_u16;
using qkv::kernels::detail::load_u32;
using qkv::kernels::detail::i64;

struct V16 {
  using R = __m512;
  static constexpr int W = 16;
  // Rows of W per decode tile for MR rows of A: 2 * MR * NRW accumulators of the 32 registers.
  static constexpr int nrw(int mr) { return mr <= 2 ? 4 : mr <= 4 ? 2 : 1; }
  // Rows of A per tile when they fit in L1 beside the weights: each block of W, once dequantized,
  // feeds 8 rows (the dequantizing shuffles compete with the FMAs for the same two ports).
  static constexpr int kMrWide = 8;
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R loadu(const float* p) { return _mm512_loadu_ps(p); }
  static inline void storeu(float* p, R v) { _mm512_storeu_ps(p, v); }
  static inline R add(R a, R b) { return _mm512_add_ps(a, b); }
  static inline R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static inline float hsum(R v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))  /* SIMDe lacks extractf32x8 */);
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
};

inline __m128i load16(const std::uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline float half(const std::uint8_t* p) { return _cvtsh_ss(load_u16(p)); }
inline __m512 iota(float first) {
  return _mm512_add_ps(_mm512_set1_ps(first),
                       _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}
inline __m512 lut16(__m512i idx, __m512 table) { return _mm512_permutexvar_ps(idx, table); }
inline __m512 lut32(__m512i idx, __m512 lo, __m512 hi) { return _mm512_permutex2var_ps(lo, idx, hi); }
// idx | 16 in the lanes of `mask`.
inline __m512i with_bit4(__m512i idx, __mmask16 mask) {
  return _mm512_mask_or_epi32(idx, mask, idx, _mm512_set1_epi32(16));
}
inline __m512i low4(__m512i b) { return _mm512_and_si512(b, _mm512_set1_epi32(15)); }
inline __m512i high4(__m512i b) { return _mm512_srli_epi32(b, 4); }

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
    const auto* h = reinterpret_cast<const __m256i*>(raw[r]);
    for (i64 i = 0; i < 2 * nb; i += 16) _mm512_store_ps(s + r * ls + i, _mm512_cvtph_ps(_mm256_load_si256(h + i / 16)));
  }
}

// 16 blocks' raw scale words (two halves each) -> 32 floats.
inline void convert_scales16(const std::uint32_t* raw, float* s) {
  const auto* h = reinterpret_cast<const __m256i*>(raw);
  _mm512_store_ps(s, _mm512_cvtph_ps(_mm256_load_si256(h)));
  _mm512_store_ps(s + 16, _mm512_cvtph_ps(_mm256_load_si256(h + 1)));
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
    f(0, _mm512_loadu_ps(p));
    f(1, _mm512_loadu_ps(p + 64));
  }
};

template <>
struct Dec<QType::F16> {
  static constexpr int kBlock = 32, kBytes = 64;
  static constexpr bool kFloat = true;
  static constexpr int kScales = 0;
  template <class F>
  static inline void block(const u8* p, const float*, F&& f) {
    f(0, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
    f(1, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32))));
  }
};

template <>
struct Dec<QType::BF16> {
  static constexpr int kBlock = 32, kBytes = 64;
  static constexpr bool kFloat = true;
  static constexpr int kScales = 0;
  template <class F>
  static inline void block(const u8* p, const float*, F&& f) {
    for (int j = 0; j < 2; ++j) {
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * j)));
      f(j, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
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
    const __m512 d = _mm512_set1_ps(s[0]);
    f(0, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(p + 2))), d));
    f(1, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(p + 18))), d));
  }
};

template <>
struct Dec<QType::Q4_0> {
  static constexpr int kBlock = 32, kBytes = 18;
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
    const __m512 table = _mm512_mul_ps(_mm512_set1_ps(s[0]), iota(-8.0f));  // d * (q - 8)
    const __m512i b = _mm512_cvtepu8_epi32(load16(p + 2));
    f(0, lut16(b, table));
    f(1, lut16(high4(b), table));
  }
};

template <>
struct Dec<QType::Q4_1> {
  static constexpr int kBlock = 32, kBytes = 20;
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
    const __m512 table = _mm512_fmadd_ps(_mm512_set1_ps(s[0]), iota(0.0f), _mm512_set1_ps(s[1]));  // d * q + m
    const __m512i b = _mm512_cvtepu8_epi32(load16(p + 4));
    f(0, lut16(b, table));
    f(1, lut16(high4(b), table));
  }
};

template <>
struct Dec<QType::Q5_0> {
  static constexpr int kBlock = 32, kBytes = 22;
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
    const __m512 d = _mm512_set1_ps(s[0]);
    const __m512 lo = _mm512_mul_ps(d, iota(-16.0f)), hi = _mm512_mul_ps(d, iota(0.0f));  // d * (q - 16)
    const std::uint32_t qh = load_u32(p + 2);
    const __m512i b = _mm512_cvtepu8_epi32(load16(p + 6));
    f(0, lut32(with_bit4(low4(b), static_cast<__mmask16>(qh)), lo, hi));
    f(1, lut32(with_bit4(high4(b), static_cast<__mmask16>(qh >> 16)), lo, hi));
  }
};

template <>
struct Dec<QType::Q5_1> {
  static constexpr int kBlock = 32, kBytes = 24;
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
    const __m512 d = _mm512_set1_ps(s[0]), m = _mm512_set1_ps(s[1]);
    const __m512 lo = _mm512_fmadd_ps(d, iota(0.0f), m), hi = _mm512_fmadd_ps(d, iota(16.0f), m);
    const std::uint32_t qh = load_u32(p + 4);
    const __m512i b = _mm512_cvtepu8_epi32(load16(p + 8));
    f(0, lut32(with_bit4(low4(b), static_cast<__mmask16>(qh)), lo, hi));
    f(1, lut32(with_bit4(high4(b), static_cast<__mmask16>(qh >> 16)), lo, hi));
  }
};

// The k-quants' and the 4-bit table types' decoders (Q2_K .. Q6_K, IQ4_NL, IQ4_XS, MXFP4).
#include "qgemm_avx512_kquants.h"

// ---- the Q8 path's micro-kernel: MR rows of A x 32 columns, vpdpbusd (uint8 codes x int8 quants) ----

// acc += the products of the uint8 codes w and the int8 quants a, 4 per lane (vpdpbusd), in place:
// through the intrinsic GCC 12 copied every accumulator to a scratch register and back around each
// one (24 register moves per 12 products in the 6-row tile, ~40% of the VNNI ports' peak).
#ifdef QKV_GEMM_AVX512_EMULATED
inline void dpbusd(__m512i& acc, __m512i w, __m512i a) { acc = _mm512_dpbusd_epi32(acc, w, a); }
#else
inline void dpbusd(__m512i& acc, __m512i w, __m512i a) { asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a)); }
#endif

template <int MR>
void q8_tile_mr(i64 nsb, int sb, const u8* wq, const float* ws, const float* wo, const qkv::kernels::detail::Q8Act* A,
                i64 lda, const float* asc, i64 ldas, float* out, i64 ldo, bool resume) {
  __m512 f[MR][2];
  for (int m = 0; m < MR; ++m) {
    f[m][0] = resume ? _mm512_loadu_ps(out + ldo * m) : _mm512_setzero_ps();
    f[m][1] = resume ? _mm512_loadu_ps(out + ldo * m + 16) : _mm512_setzero_ps();
  }
  const int nq = sb / 4;
  for (i64 b = 0; b < nsb; ++b) {
    __m512i acc[MR][2];
    for (int m = 0; m < MR; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_si512();
    const i64 k0 = b * sb;
    const std::int8_t* ap[MR];
    for (int m = 0; m < MR; ++m) ap[m] = A[m * lda + k0 / 32].q + k0 % 32;
    const u8* w = wq + k0 / 4 * 128;
    for (int q = 0; q < nq; ++q) {
      const __m512i w0 = _mm512_loadu_si512(w + 128 * q), w1 = _mm512_loadu_si512(w + 128 * q + 64);
#pragma GCC unroll 6
      for (int m = 0; m < MR; ++m) {
        std::int32_t a4;
        std::memcpy(&a4, ap[m] + 4 * q, 4);
        const __m512i a = _mm512_set1_epi32(a4);
        dpbusd(acc[m][0], w0, a);
        dpbusd(acc[m][1], w1, a);
      }
    }
    const __m512 s0 = _mm512_loadu_ps(ws + 32 * b), s1 = _mm512_loadu_ps(ws + 32 * b + 16);
    const __m512 o0 = _mm512_loadu_ps(wo + 32 * b), o1 = _mm512_loadu_ps(wo + 32 * b + 16);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m512 da = _mm512_set1_ps(asc[m * ldas + 2 * b]), sa = _mm512_set1_ps(asc[m * ldas + 2 * b + 1]);
      f[m][0] = _mm512_fmadd_ps(o0, sa, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][0]), _mm512_mul_ps(s0, da), f[m][0]));
      f[m][1] = _mm512_fmadd_ps(o1, sa, _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[m][1]), _mm512_mul_ps(s1, da), f[m][1]));
    }
  }
  for (int m = 0; m < MR; ++m) {
    _mm512_storeu_ps(out + ldo * m, f[m][0]);
    _mm512_storeu_ps(out + ldo * m + 16, f[m][1]);
  }
}

void q8_tile(int mr, i64 nsb, int sb, bool, const u8* wq, const float* ws, const float* wo,
             const qkv::kernels::detail::Q8Act* A, i64 lda, const float* asc, i64 ldas, float* out, i64 ldo, bool resume) {
  switch (mr) {
    case 1: return q8_tile_mr<1>(nsb, sb, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
    case 2: return q8_tile_mr<2>(nsb, sb, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
    case 3: return q8_tile_mr<3>(nsb, sb, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
    case 4: return q8_tile_mr<4>(nsb, sb, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
    case 5: return q8_tile_mr<5>(nsb, sb, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
    default: return q8_tile_mr<6>(nsb, sb, wq, ws, wo, A, lda, asc, ldas, out, ldo, resume);
  }
}

// ---- the Q8 path's packer (Q4_0, Q4_1, Q8_0): a full panel of 32 rows of W, vectorised ----
//
// The layout of qgemm_q8.cpp's pack_panel, bitwise: codes [K/4][32][4] (column j's 4 codes of
// k-quad q at (q*32 + j)*4), ws/wo [K/32][32]. Per block, 16 rows at a time: row r + 4l's 16
// bytes go to 128-bit lane l of register r (r, l < 4), and a 4 x 4 transpose of dwords within
// the lanes (unpack 32, then 64) leaves dword q of the 16 rows in register q, in row order;
// 4-bit codes are its low nibbles (quads 0-3) and its high nibbles (quads 4-7), Q8_0's bytes
// x ^ 0x80 (uint8 codes, wo = -128 d). The scales: each row's first 4 bytes copied as one word,
// converted 16 halves at a time and split into d (ws) and m (wo; -8 d, -128 d by type).

// Dwords q = 0..3 of the 16 bytes at p + r * rb (r < 16) -> out[q] (16 rows each, in order).
inline void transpose16x4(const u8* p, i64 rb, __m512i out[4]) {
  __m512i z[4];
  for (int r = 0; r < 4; ++r) {
    __m512i v = _mm512_castsi128_si512(load16(p + r * rb));
    v = _mm512_inserti32x4(v, load16(p + (r + 4) * rb), 1);
    v = _mm512_inserti32x4(v, load16(p + (r + 8) * rb), 2);
    z[r] = _mm512_inserti32x4(v, load16(p + (r + 12) * rb), 3);
  }
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// wo / ws of Q4_0 and Q8_0 (no stored m): the codes are stored as uint8, x + 8 and x ^ 0x80 (x + 128).
template <QType t>
constexpr float kQ8CodeOffset = t == QType::Q8_0 ? -128.0f : -8.0f;

template <QType t>
void q8_pack_t(const u8* W, i64 rb, i64 b0, i64 nb, u8* wq, float* ws, float* wo, const u8* pf) {
  constexpr int kNp = 32;
  constexpr int kBytes = t == QType::Q8_0 ? 34 : t == QType::Q4_1 ? 20 : 18;
  const __m512i nib = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (i64 b = 0; b < nb; ++b) {
    const u8* blk = W + (b0 + b) * kBytes;
    if (pf != nullptr)
      for (int o = 0; o < kNp * kBytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + (b0 + b) * kNp * kBytes + o), _MM_HINT_T1);
    alignas(64) std::uint32_t raw[kNp];
    for (int j = 0; j < kNp; ++j) {
      std::uint32_t v;
      std::memcpy(&v, blk + j * rb, 4);
      asm("" : "+r"(v));
      raw[j] = v;
    }
    asm("" ::: "memory");
    for (int h = 0; h < 2; ++h) {  // columns 16h .. 16h + 15
      const __m512 lo = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(raw + 16 * h)));
      const __m512 hi = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(raw + 16 * h + 8)));
      const __m512 d = _mm512_permutex2var_ps(lo, even, hi);
      __m512 o;
      if constexpr (t == QType::Q4_1)
        o = _mm512_permutex2var_ps(lo, odd, hi);
      else
        o = _mm512_mul_ps(d, _mm512_set1_ps(kQ8CodeOffset<t>));
      _mm512_storeu_ps(ws + b * kNp + 16 * h, d);
      _mm512_storeu_ps(wo + b * kNp + 16 * h, o);
      const u8* rows = blk + 16 * h * rb;
      u8* out = wq + (8 * b * kNp + 16 * h) * 4;  // quad q of this block at out + q * kNp * 4
      __m512i v[4];
      if constexpr (t == QType::Q8_0) {
        for (int half = 0; half < 2; ++half) {
          transpose16x4(rows + 2 + 16 * half, rb, v);
          for (int q = 0; q < 4; ++q)
            _mm512_storeu_si512(out + (4 * half + q) * kNp * 4, _mm512_xor_si512(v[q], flip));
        }
      } else {
        transpose16x4(rows + (t == QType::Q4_1 ? 4 : 2), rb, v);
        for (int q = 0; q < 4; ++q) {
          _mm512_storeu_si512(out + q * kNp * 4, _mm512_and_si512(v[q], nib));
          _mm512_storeu_si512(out + (q + 4) * kNp * 4, _mm512_and_si512(_mm512_srli_epi32(v[q], 4), nib));
        }
      }
    }
  }
}

// quantize_q8, 32 values at a time: the same amax, the same float divisions, the same
// round-half-even (vcvtps2dq under the default rounding mode, as nearbyint) and clamp.
void q8_quantize(const float* a, i64 K, qkv::kernels::detail::Q8Act* out) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (i64 b = 0; b < K / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(a + 32 * b), x1 = _mm512_loadu_ps(a + 32 * b + 16);
    qkv::kernels::detail::Q8Act& q = out[b];
    // NaN (quiet 0x01, signalling 0x80) or infinity (0x08, 0x10).
    if ((_mm512_fpclass_ps_mask(x0, 0x99) | _mm512_fpclass_ps_mask(x1, 0x99)) != 0) {
      q.d = std::numeric_limits<float>::quiet_NaN();
      q.sum = 0;
      std::memset(q.q, 0, 32);
      continue;
    }
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(x0, sign), _mm512_and_ps(x1, sign)));
    q.d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax == 0.0f ? 0.0f : 127.0f / amax);
    const __m512i lim = _mm512_set1_epi32(127), nlim = _mm512_set1_epi32(-127);
    const __m512i i0 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), lim), nlim);
    const __m512i i1 = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x1, id)), lim), nlim);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q.q), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q.q + 16), _mm512_cvtepi32_epi8(i1));
    q.sum = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  }
}

// The Q8 kernels of the k-quants, Q5_0, IQ4_NL and MXFP4 (qgemm_kq8_impl.h): their per-row integer
// sums with vpdpbusd on 256-bit registers, two accumulators. The codes are uint8 here (q8_signed is
// false: the 8-bit-range types' values + 128, as q8_tile takes them), so kMax does not matter.
#ifdef QKV_GEMM_AVX512_EMULATED
inline void kq_dpbusd8(__m256i& acc, __m256i w, __m256i a) { acc = _mm256_dpbusd_epi32(acc, w, a); }
#else
inline void kq_dpbusd8(__m256i& acc, __m256i w, __m256i a) { asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a)); }
#endif
template <int N, int kMax, bool kSigned>
inline __m256i kq_isum(const __m256i* c, const std::int8_t* a) {
  static_assert(!kSigned);
  __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int q = 0; q < N; ++q) {
    std::int32_t a4;
    std::memcpy(&a4, a + 4 * q, 4);
    kq_dpbusd8(acc[q % 2], c[q], _mm256_set1_epi32(a4));
  }
  return _mm256_add_epi32(acc[0], acc[1]);
}
constexpr bool kq_signed_bytes = false;
#include "qgemm_kq8_impl.h"

// Bytes ahead of the stream that the decode rows of Q4_K, Q6_K and Q5_0 prefetch (bench_qgemm on
// the Xeon, one thread, cold rows8, medians of 3; read bandwidth ~16 GB/s: none 11.5 / 11.5 / 11.1
// GB/s on AVX-512 and 12.2 / 11.8 / 11.0 on AVX2, 1024 bytes 12.6 / 12.5 / 12.6 and 12.6 / 12.2 / 13.1).
constexpr int kKqAhead = 1024;

void q8_pack(QType t, const u8* W, i64 rb, i64 b0, i64 nb, u8* wq, float* ws, float* wo, const u8* pf) {
  switch (t) {
    case QType::Q8_0: return q8_pack_t<QType::Q8_0>(W, rb, b0, nb, wq, ws, wo, pf);
    case QType::Q4_0: return q8_pack_t<QType::Q4_0>(W, rb, b0, nb, wq, ws, wo, pf);
    case QType::Q4_1: return q8_pack_t<QType::Q4_1>(W, rb, b0, nb, wq, ws, wo, pf);
    case QType::Q4_K: return kq8::pack<QType::Q4_K, 32>(W, rb, b0, nb, wq, ws, wo);
    case QType::Q6_K: return kq8::pack<QType::Q6_K, 32>(W, rb, b0, nb, wq, ws, wo);
    case QType::Q5_0: return kq8::pack<QType::Q5_0, 32>(W, rb, b0, nb, wq, ws, wo);
    case QType::IQ4_NL: return kq8::pack<QType::IQ4_NL, 32>(W, rb, b0, nb, wq, ws, wo);
    case QType::MXFP4: return kq8::pack<QType::MXFP4, 32>(W, rb, b0, nb, wq, ws, wo);
    default: return;
  }
}

// ---- the Q8 path on the decode layout (qgemm_repack_rows8): Q4_0, Q4_1, Q8_0 ----
//
// A block of an 8-row group in the layout: the 8 rows' fp16 d (16 bytes), for Q4_1 their fp16 m
// (16 bytes), then code words: word q (32 bytes) holds code bytes 4q .. 4q + 3 of the 8 rows in
// row order. vpdpbusd (VNNI on 256-bit registers) multiplies a word's uint8 codes by the broadcast
// quad of A and sums each row's four products: the integers q8_tile sums (4-bit codes as they are,
// Q8_0's x ^ 0x80), exact in any order. The float steps per row are q8_tile_mr<1>'s:
// f = fma(o, sa, fma(float(sum), d * da, f)).

// Bytes of the scales before the codes in a block of the decode layout.
template <QType t>
constexpr int kRows8Codes = t == QType::Q4_1 ? 32 : 16;
template <QType t>
constexpr int kRows8Bytes = 8 * (t == QType::Q8_0 ? 34 : t == QType::Q4_1 ? 20 : 18);
// Bytes ahead of the stream that q8_row8 prefetches (measured on a Xeon, Q4_1 1536 x 576 from
// DRAM, one thread: none 9.3 GB/s, 1 KiB 11.6, 2 KiB 12.7, 4 KiB 12.9, 6-16 KiB 12.9-13.2; read
// bandwidth 16.2).
constexpr int kRows8Ahead = 4096;

// The scales of two groups' blocks at ba and bb (rows 0-7 from ba, 8-15 from bb), as q8_pack_t
// stores them: d, and o = m (Q4_1), -8 d (Q4_0) or -128 d (Q8_0).
template <QType t>
inline void rows8_scales2(const u8* ba, const u8* bb, __m512& d, __m512& o) {
  d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(load16(ba)), load16(bb), 1));
  if constexpr (t == QType::Q4_1)
    o = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(load16(ba + 16)), load16(bb + 16), 1));
  else
    o = _mm512_mul_ps(d, _mm512_set1_ps(kQ8CodeOffset<t>));
}

#ifdef QKV_GEMM_AVX512_EMULATED
inline void dpbusd8(__m256i& acc, __m256i w, __m256i a) { acc = _mm256_dpbusd_epi32(acc, w, a); }
#else
inline void dpbusd8(__m256i& acc, __m256i w, __m256i a) { asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(a)); }
#endif

// q8_row on the decode layout: one row of A against a full panel (32 rows = 4 groups), bitwise
// q8_tile_mr<1>'s out on q8_pack's panel. One group after the other: the panel (and the panels
// after it) is read as one stream in memory order, prefetched kRows8Ahead bytes ahead.
template <QType t>
void q8_row8_t(const u8* P, i64 nblk, const qkv::kernels::detail::Q8Act* A, const float* asc, float* out) {
  constexpr int kB = kRows8Bytes<t>;
  const __m256i nib = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int h = 0; h < 4; ++h) {
    const u8* g = P + h * nblk * kB;
    __m256 f = _mm256_setzero_ps();
    for (i64 b = 0; b < nblk; ++b) {
      const u8* blk = g + b * kB;
      for (int o = 0; o < kB; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + kRows8Ahead + o), _MM_HINT_T0);
      const u8* codes = blk + kRows8Codes<t>;
      auto quad = [&](int q) {
        std::int32_t a4;
        std::memcpy(&a4, A[b].q + 4 * q, 4);
        return _mm256_set1_epi32(a4);
      };
      // Four accumulators (short chains: the integer sums are exact in any order).
      __m256i acc4[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
      if constexpr (t == QType::Q8_0) {
        for (int q = 0; q < 8; ++q)
          dpbusd8(acc4[q % 4], _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * q)), flip), quad(q));
      } else {
        for (int q = 0; q < 4; ++q) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * q));
          dpbusd8(acc4[q % 2], _mm256_and_si256(v, nib), quad(q));
          dpbusd8(acc4[2 + q % 2], _mm256_and_si256(_mm256_srli_epi32(v, 4), nib), quad(q + 4));
        }
      }
      const __m256i acc = _mm256_add_epi32(_mm256_add_epi32(acc4[0], acc4[1]), _mm256_add_epi32(acc4[2], acc4[3]));
      const __m256 d = _mm256_cvtph_ps(load16(blk));
      __m256 o;
      if constexpr (t == QType::Q4_1)
        o = _mm256_cvtph_ps(load16(blk + 16));
      else
        o = _mm256_mul_ps(d, _mm256_set1_ps(kQ8CodeOffset<t>));
      const __m256 da = _mm256_set1_ps(asc[2 * b]), sa = _mm256_set1_ps(asc[2 * b + 1]);
      f = _mm256_fmadd_ps(o, sa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(d, da), f));
    }
    _mm256_storeu_ps(out + 8 * h, f);
  }
}

void q8_row8(QType t, const u8* P, i64 nblk, const qkv::kernels::detail::Q8Act* A, const float* asc, float* out) {
  switch (t) {
    case QType::Q8_0: return q8_row8_t<QType::Q8_0>(P, nblk, A, asc, out);
    case QType::Q4_0: return q8_row8_t<QType::Q4_0>(P, nblk, A, asc, out);
    case QType::Q4_1: return q8_row8_t<QType::Q4_1>(P, nblk, A, asc, out);
    case QType::Q4_K: return kq8::row8<QType::Q4_K, 32>(P, nblk, A, asc, out, kKqAhead);
    case QType::Q6_K: return kq8::row8<QType::Q6_K, 32>(P, nblk, A, asc, out, kKqAhead);
    case QType::Q5_0: return kq8::row8<QType::Q5_0, 32>(P, nblk, A, asc, out, kKqAhead);
    case QType::IQ4_NL: return kq8::row8<QType::IQ4_NL, 32>(P, nblk, A, asc, out, kKqAhead);
    case QType::MXFP4: return kq8::row8<QType::MXFP4, 32>(P, nblk, A, asc, out, kKqAhead);
    default: return;
  }
}

// q8_pack_t on the decode layout: the same scales and code bytes (the panel's quad q of a block
// is the 4 groups' word q side by side), read in order.
template <QType t>
void q8_pack8_t(const u8* P, i64 nblk, i64 b0, i64 nb, u8* wq, float* ws, float* wo) {
  constexpr int kNp = 32, kB = kRows8Bytes<t>;
  const __m256i nib = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (i64 b = 0; b < nb; ++b)
    for (int h = 0; h < 4; h += 2) {  // columns 8h .. 8h + 15
      const u8* ba = P + (h * nblk + b0 + b) * kB;
      const u8* bb = ba + nblk * kB;
      __m512 d, o;
      rows8_scales2<t>(ba, bb, d, o);
      _mm512_storeu_ps(ws + b * kNp + 8 * h, d);
      _mm512_storeu_ps(wo + b * kNp + 8 * h, o);
      for (int g = 0; g < 2; ++g) {
        u8* out = wq + (8 * b * kNp + 8 * (h + g)) * 4;  // quad q of this block at out + q * kNp * 4
        const u8* codes = (g == 0 ? ba : bb) + kRows8Codes<t>;
        if constexpr (t == QType::Q8_0) {
          for (int q = 0; q < 8; ++q)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * kNp * 4),
                                _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * q)), flip));
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
}

void q8_pack8(QType t, const u8* P, i64 nblk, i64 b0, i64 nb, u8* wq, float* ws, float* wo) {
  switch (t) {
    case QType::Q8_0: return q8_pack8_t<QType::Q8_0>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q4_0: return q8_pack8_t<QType::Q4_0>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q4_1: return q8_pack8_t<QType::Q4_1>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q4_K: return kq8::pack8<QType::Q4_K, 32>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q6_K: return kq8::pack8<QType::Q6_K, 32>(P, nblk, b0, nb, wq, ws, wo);
    case QType::Q5_0: return kq8::pack8<QType::Q5_0, 32>(P, nblk, b0, nb, wq, ws, wo);
    case QType::IQ4_NL: return kq8::pack8<QType::IQ4_NL, 32>(P, nblk, b0, nb, wq, ws, wo);
    case QType::MXFP4: return kq8::pack8<QType::MXFP4, 32>(P, nblk, b0, nb, wq, ws, wo);
    default: return;
  }
}

}  // namespace

#ifdef QKV_QGEMM_AVX512_PRAGMA
#pragma GCC pop_options
#endif
#endif

namespace qkv::kernels::detail {

QGemmKernels qgemm_kernels_avx512() {
  QGemmKernels k;
#ifdef QKV_QGEMM_HAVE_AVX512
  k.dot_rows = &dot_rows_any<V16, Dec>;
  k.dequant_rows = &dequant_rows_any<V16, Dec>;
  // vpdpbusd is AVX-512 VNNI: without it the Q8 path runs on the AVX2 kernel (qgemm.cpp).
#ifdef QKV_GEMM_AVX512_EMULATED
  const bool vnni = true;  // SIMDe's
#else
  const bool vnni = __builtin_cpu_supports("avx512vnni");
#endif
  if (vnni) {
    k.q8_np = 32;
    k.q8_mr = 6;
    k.q8_tile = &q8_tile;
    k.q8_pack = &q8_pack;
    k.q8_quantize = &q8_quantize;
    k.q8_row8 = &q8_row8;
    k.q8_pack8 = &q8_pack8;
    // The layout is the same bytes whatever reads it: AVX2's vectorised writer (every AVX-512 CPU
    // has AVX2).
    k.q8_repack8 = qgemm_kernels_avx2().q8_repack8;
    k.q8_pack_types = qkv::kernels::detail::qtype_bit(QType::Q4_0) | qkv::kernels::detail::qtype_bit(QType::Q4_1) |
                      qkv::kernels::detail::qtype_bit(QType::Q8_0) | qkv::kernels::detail::qtype_bit(QType::Q4_K) |
                      qkv::kernels::detail::qtype_bit(QType::Q6_K) | qkv::kernels::detail::qtype_bit(QType::Q5_0) |
                      qkv::kernels::detail::qtype_bit(QType::IQ4_NL) | qkv::kernels::detail::qtype_bit(QType::MXFP4);
  }
#endif
  return k;
}

}  // namespace qkv::kernels::detail
