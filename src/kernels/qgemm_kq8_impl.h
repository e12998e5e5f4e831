// The Q8 path's kernels of the k-quants Q4_K and Q6_K, of Q5_0 and of the 4-bit table types IQ4_NL
// and MXFP4 on the decode layout (qgemm_repack_rows8: 8-row groups), written once over 256-bit
// vectors (a 32-bit lane per row of W) for qgemm_avx2.cpp and qgemm_avx512.cpp, which include it
// inside their target regions after defining
//   kq_isum<N, kMax, kSigned>(const __m256i* c, const std::int8_t* a): per lane, the exact sum over
//     q < N of the 4 codes in c[q] times a[4q .. 4q + 3]; the codes are uint8 (each <= kMax), or
//     int8 where kSigned (each |code| <= kMax)
//   kq_signed_bytes: whether the ISA's Q8 path takes the codes of the 8-bit-range types as int8
//     values (its QGemmKernels::q8_signed), else as uint8 (value + 128; MXFP4's value + 12)
// (AVX2: vpmaddubsw sums added in int16 as far as kMax allows, then vpmaddwd, int8 codes as |code|
// times a signed by the code; AVX-512: vpdpbusd, uint8 codes only). It is not a header of its own.
//
// The layout of a block (kBlock values of each of 8 rows, 8 * kBytes bytes): the rows' kFields
// scale fields of kFieldBytes bytes (8 * kFieldBytes bytes each: row r's at kFieldBytes * r; fp16
// halves, MXFP4's exponent byte), then the other bytes of the rows, in order, as 32-byte words
// (word w: bytes 4w .. 4w + 3 of each row, row r at 4r). Q4_K: d, dmin, then 3 words of the 12
// scale bytes and 32 of codes (bytes 32g .. 32g + 31: sub-block 2g in the low nibbles, 2g + 1 in
// the high). Q6_K: d, then 32 words of ql, 16 of qh, 4 of the int8 scales. Q5_0: d, then qh as one
// word, then 4 of nibbles. IQ4_NL: d, then 4 words of nibbles. MXFP4: the 8 exponent bytes, then 4
// words of nibbles.
//
// Per scale block j (the Q8 path's: 32 values, 16 for Q6_K) of a block, Blk<t> gives the codes of
// the 8 rows as q8_pack's panel holds them (word q: codes 4q .. 4q + 3 of each row: the decode
// codes of qgemm_q8.cpp's decode_codes, kMax the largest, int8 where kSigned) and the scales s, o
// of the 8 rows, computed as there (the same float products), so the decode rows (kq_row8) and the
// panels (kq_pack8) are bitwise the scalar packer's and q8_tile's.
#pragma once

namespace kq8 {

using qkv::kernels::detail::Q8Act;

inline __m256i ld256(const u8* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i ld128(const u8* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline void st256(u8* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

template <QType t>
struct Fmt;
template <>
struct Fmt<QType::Q4_K> {
  static constexpr int kBlock = 256, kBytes = 144, kFields = 2, kFieldBytes = 2, kFieldAt = 0, kSb = 32;
};
template <>
struct Fmt<QType::Q6_K> {
  static constexpr int kBlock = 256, kBytes = 210, kFields = 1, kFieldBytes = 2, kFieldAt = 208, kSb = 16;
};
template <>
struct Fmt<QType::Q5_0> {
  static constexpr int kBlock = 32, kBytes = 22, kFields = 1, kFieldBytes = 2, kFieldAt = 0, kSb = 32;
};
template <>
struct Fmt<QType::IQ4_NL> {
  static constexpr int kBlock = 32, kBytes = 18, kFields = 1, kFieldBytes = 2, kFieldAt = 0, kSb = 32;
};
template <>
struct Fmt<QType::MXFP4> {
  static constexpr int kBlock = 32, kBytes = 17, kFields = 1, kFieldBytes = 1, kFieldAt = 0, kSb = 32;
};

template <QType t>
struct Blk;

// Q4_K: scale block j = sub-block j; s = d * sc_j, o = -(dmin * m_j) (as (-dmin) * m_j: the same
// bits). The 6-bit scales from the 3 words of scale bytes (lane = row): bytes 0-3 (w0), 4-7 (w1),
// 8-11 (w2): sc_j = w0 byte j & 63, m_j = w1 byte j & 63 (j < 4); for j = 4 + k: sc = (w2 byte k &
// 15) | (w0 byte k >> 6) << 4, m = (w2 byte k >> 4) | (w1 byte k >> 6) << 4.
template <>
struct Blk<QType::Q4_K> {
  static constexpr int kNsb = 8, kWords = 8, kMax = 15;
  static constexpr bool kSigned = false;
  const u8* p;
  __m256 d, ndm;
  __m256i w0, w1, w2;
  explicit Blk(const u8* blk) : p(blk + 128) {
    d = _mm256_cvtph_ps(ld128(blk));
    ndm = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_cvtph_ps(ld128(blk + 16)));
    w0 = ld256(blk + 32);
    w1 = ld256(blk + 64);
    w2 = ld256(blk + 96);
  }
  template <int j>
  inline void codes(__m256i* c) const {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const u8* q = p + 32 * 8 * (j / 2);
    for (int u = 0; u < 8; ++u) {
      const __m256i v = ld256(q + 32 * u);
      c[u] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, nib);
    }
  }
  template <int j>
  inline void scales(__m256& s, __m256& o) const {
    __m256i sc, m;
    if constexpr (j < 4) {
      const __m256i m63 = _mm256_set1_epi32(63);
      sc = _mm256_and_si256(_mm256_srli_epi32(w0, 8 * j), m63);
      m = _mm256_and_si256(_mm256_srli_epi32(w1, 8 * j), m63);
    } else {
      constexpr int k = j - 4;
      const __m256i m15 = _mm256_set1_epi32(15), m48 = _mm256_set1_epi32(48);
      sc = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 8 * k), m15),
                           _mm256_and_si256(_mm256_srli_epi32(w0, 8 * k + 2), m48));
      m = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 8 * k + 4), m15),
                          _mm256_and_si256(_mm256_srli_epi32(w1, 8 * k + 2), m48));
    }
    s = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
    o = _mm256_mul_ps(ndm, _mm256_cvtepi32_ps(m));
  }
  template <int j>
  static const std::int8_t* act(const Q8Act* a) {
    return a[j].q;
  }
};

// Q6_K: scale block j = sub-block j (16 values: 128h + 32t + 16c + l, j = 8h + 2t + c); its code
// quad u (l = 4u ..) is the nibble (t / 2) of ql word 16h + 8(t % 2) + 4c + u with bits 2t, 2t + 1
// of qh word 8h + 4c + u above it; s = d * sc_j (int8), o = -32 s.
template <>
struct Blk<QType::Q6_K> {
  static constexpr int kNsb = 16, kWords = 4, kMax = 63;
  static constexpr bool kSigned = false;
  const u8* p;
  __m256 d;
  explicit Blk(const u8* blk) : p(blk + 16) { d = _mm256_cvtph_ps(ld128(blk)); }
  template <int j>
  inline void codes(__m256i* c) const {
    constexpr int h = j / 8, t = (j % 8) / 2, cc = j % 2;
    const __m256i nib = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x30);
    for (int u = 0; u < 4; ++u) {
      const __m256i x = ld256(p + 32 * (16 * h + 8 * (t % 2) + 4 * cc + u));
      const __m256i hq = ld256(p + 32 * (32 + 8 * h + 4 * cc + u));
      const __m256i lo = _mm256_and_si256(t < 2 ? x : _mm256_srli_epi16(x, 4), nib);
      __m256i hi;
      if constexpr (t == 0)
        hi = _mm256_slli_epi16(hq, 4);
      else if constexpr (t == 1)
        hi = _mm256_slli_epi16(hq, 2);
      else if constexpr (t == 2)
        hi = hq;
      else
        hi = _mm256_srli_epi16(hq, 2);
      c[u] = _mm256_or_si256(lo, _mm256_and_si256(hi, two));
    }
  }
  template <int j>
  inline void scales(__m256& s, __m256& o) const {
    const __m256i w = ld256(p + 32 * (48 + j / 4));
    const __m256i sc = _mm256_srai_epi32(_mm256_slli_epi32(w, 24 - 8 * (j % 4)), 24);
    s = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
    o = _mm256_mul_ps(s, _mm256_set1_ps(-32.0f));
  }
  template <int j>
  static const std::int8_t* act(const Q8Act* a) {
    return a[j / 2].q + 16 * (j % 2);
  }
};

// Q5_0: one scale block; code quad q (values 4q ..) is the nibble (q / 4) of word 1 + q % 4 with
// bits 4q .. 4q + 3 of qh (word 0) at bit 4 of its bytes (each lane's qh byte q / 2 copied to its 4
// bytes, tested against the byte's bit); s = d, o = -16 d.
template <>
struct Blk<QType::Q5_0> {
  static constexpr int kNsb = 1, kWords = 8, kMax = 31;
  static constexpr bool kSigned = false;
  const u8* p;
  __m256 d;
  explicit Blk(const u8* blk) : p(blk + 16) { d = _mm256_cvtph_ps(ld128(blk)); }
  template <int j>
  inline void codes(__m256i* c) const {
    const __m256i nib = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const __m256i qh = ld256(p);
    const __m256i bits_lo = _mm256_set1_epi32(0x08040201), bits_hi = _mm256_set1_epi32(static_cast<int>(0x80402010u));
    for (int q = 0; q < 8; ++q) {
      const __m256i x = ld256(p + 32 * (1 + q % 4));
      const __m256i lo = _mm256_and_si256(q < 4 ? x : _mm256_srli_epi16(x, 4), nib);
      const int byte = q / 2;
      const __m256i rep = _mm256_shuffle_epi8(
          qh, _mm256_setr_epi8(byte, byte, byte, byte, 4 + byte, 4 + byte, 4 + byte, 4 + byte, 8 + byte, 8 + byte, 8 + byte,
                               8 + byte, 12 + byte, 12 + byte, 12 + byte, 12 + byte, byte, byte, byte, byte, 4 + byte,
                               4 + byte, 4 + byte, 4 + byte, 8 + byte, 8 + byte, 8 + byte, 8 + byte, 12 + byte, 12 + byte,
                               12 + byte, 12 + byte));
      const __m256i bits = q % 2 ? bits_hi : bits_lo;
      const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(rep, bits), bits);
      c[q] = _mm256_or_si256(lo, _mm256_and_si256(set, b4));
    }
  }
  template <int j>
  inline void scales(__m256& s, __m256& o) const {
    s = d;
    o = _mm256_mul_ps(d, _mm256_set1_ps(-16.0f));
  }
  template <int j>
  static const std::int8_t* act(const Q8Act* a) {
    return a[0].q;
  }
};

// MXFP4's scales 2^(e - 128) of 8 lanes of exponent bytes e, bitwise detail::e8m0_half: e - 1 in
// the exponent field, or the subnormal 0x00200000 << e for e < 2.
inline __m256 e8m0_half8(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

// IQ4_NL and MXFP4: one scale block; code quad q (values 4q ..) is the low (q < 4) or high nibbles
// of word q % 4 looked up in the type's 16 values (vpshufb, the table in both 128-bit lanes): the
// values as int8 where kq_signed_bytes, else value + kOffset (uint8). s = d (IQ4_NL's fp16) or
// 2^(e - 128) (MXFP4's exponent byte); o = 0 (int8 codes) or -kOffset s (for MXFP4 -inf from
// e = 253 on, as the scalar packer's: see decode_codes).
template <QType t>
struct BlkNibbles {
  static constexpr int kNsb = 1, kWords = 8;
  static constexpr int kMax = t == QType::MXFP4 ? 12 : 127;  // the largest |value|
  static constexpr int kOffset = t == QType::MXFP4 ? 12 : 128;
  static constexpr bool kSigned = kq_signed_bytes;
  const u8* p;
  __m256 d;
  __m256i table;
  explicit BlkNibbles(const u8* blk) {
    if constexpr (t == QType::MXFP4) {
      p = blk + 8;
      d = e8m0_half8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk))));
    } else {
      p = blk + 16;
      d = _mm256_cvtph_ps(ld128(blk));
    }
    const auto* values = reinterpret_cast<const u8*>(t == QType::MXFP4 ? qkv::kernels::kMXFP4 : qkv::kernels::kIQ4NL);
    table = _mm256_broadcastsi128_si256(ld128(values));
    if constexpr (!kSigned) table = _mm256_add_epi8(table, _mm256_set1_epi8(static_cast<char>(kOffset)));
  }
  template <int j>
  inline void codes(__m256i* c) const {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    for (int q = 0; q < 4; ++q) {
      const __m256i v = ld256(p + 32 * q);
      c[q] = _mm256_shuffle_epi8(table, _mm256_and_si256(v, nib));
      c[q + 4] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib));
    }
  }
  template <int j>
  inline void scales(__m256& s, __m256& o) const {
    s = d;
    o = kSigned ? _mm256_setzero_ps() : _mm256_mul_ps(d, _mm256_set1_ps(-static_cast<float>(kOffset)));
  }
  template <int j>
  static const std::int8_t* act(const Q8Act* a) {
    return a[0].q;
  }
};
template <>
struct Blk<QType::IQ4_NL> : BlkNibbles<QType::IQ4_NL> {
  using BlkNibbles::BlkNibbles;
};
template <>
struct Blk<QType::MXFP4> : BlkNibbles<QType::MXFP4> {
  using BlkNibbles::BlkNibbles;
};

// Calls f.template operator()<j>() for j = 0 .. N - 1, in order.
template <int N, class F, int... J>
inline void for_j(F&& f, std::integer_sequence<int, J...>) {
  (f.template operator()<J>(), ...);
}
template <int N, class F>
inline void for_j(F&& f) {
  for_j<N>(f, std::make_integer_sequence<int, N>{});
}

// Dwords q = 0..3 of the 16 bytes at p + r * rb (r < 8) -> out[q] (8 rows each, in order).
inline void transpose8x4(const u8* p, i64 rb, __m256i out[4]) {
  __m256i z[4];
  for (int r = 0; r < 4; ++r) z[r] = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(p + r * rb)), ld128(p + (r + 4) * rb), 1);
  const __m256i t0 = _mm256_unpacklo_epi32(z[0], z[1]), t1 = _mm256_unpackhi_epi32(z[0], z[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(z[2], z[3]), t3 = _mm256_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm256_unpacklo_epi64(t0, t2);
  out[1] = _mm256_unpackhi_epi64(t0, t2);
  out[2] = _mm256_unpacklo_epi64(t1, t3);
  out[3] = _mm256_unpackhi_epi64(t1, t3);
}

// One block of 8 rows (row r's block at src + r * rb) -> the layout's 8 * kBytes bytes at dst.
template <QType t>
inline void repack_group(const u8* src, i64 rb, u8* dst) {
  using F = Fmt<t>;
  constexpr int kFB = F::kFieldBytes, kScaleBytes = kFB * F::kFields;
  constexpr int kWordsAll = (F::kBytes - kScaleBytes) / 4, kFirst = F::kFieldAt == 0 ? kScaleBytes : 0;
  for (int r = 0; r < 8; ++r)
    for (int h = 0; h < F::kFields; ++h)
      std::memcpy(dst + 8 * kFB * h + kFB * r, src + r * rb + F::kFieldAt + kFB * h, kFB);
  u8* words = dst + 8 * kScaleBytes;
  constexpr int kFull = kWordsAll / 4 * 4;
  for (int w = 0; w < kFull; w += 4) {
    __m256i v[4];
    transpose8x4(src + kFirst + 4 * w, rb, v);
    for (int q = 0; q < 4; ++q) st256(words + 32 * (w + q), v[q]);
  }
  if constexpr (kFull < kWordsAll)
    for (int w = kFull; w < kWordsAll; ++w)
      for (int r = 0; r < 8; ++r) std::memcpy(words + 32 * w + 4 * r, src + r * rb + kFirst + 4 * w, 4);
}

// q8_repack8's groups [g0, g1) (nblk32 blocks of 32 values per row).
template <QType t>
void repack8(const u8* W, i64 rb, i64 nblk32, i64 g0, i64 g1, u8* out) {
  using F = Fmt<t>;
  const i64 nb = nblk32 * 32 / F::kBlock;
  for (i64 g = g0; g < g1; ++g)
    for (i64 b = 0; b < nb; ++b) repack_group<t>(W + g * 8 * rb + b * F::kBytes, rb, out + (g * nb + b) * 8 * F::kBytes);
}

// q8_row8: one row of A against kNp rows (kNp / 8 groups, one after the other: one stream in
// memory order, prefetched `ahead` bytes ahead), bitwise q8_tile's mr = 1 on kq_pack8's panel:
// per scale block f = fma(o, d_a * sum q_a, fma(float(codes . q_a), s * d_a, f)).
template <QType t, int kNp>
void row8(const u8* P, i64 nblk32, const Q8Act* A, const float* asc, float* out, int ahead) {
  using F = Fmt<t>;
  using B = Blk<t>;
  constexpr int kGB = 8 * F::kBytes;
  const i64 nb = nblk32 * 32 / F::kBlock;
  for (int h = 0; h < kNp / 8; ++h) {
    const u8* g = P + h * nb * kGB;
    __m256 f = _mm256_setzero_ps();
    for (i64 b = 0; b < nb; ++b) {
      const u8* blk = g + b * kGB;
      if (ahead > 0)
        for (int o = 0; o < kGB; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + o), _MM_HINT_T0);
      const B k(blk);
      const Q8Act* a = A + b * (F::kBlock / 32);
      const float* sc = asc + 2 * b * B::kNsb;
      for_j<B::kNsb>([&]<int j>() {
        __m256i c[B::kWords];
        k.template codes<j>(c);
        const __m256i acc = kq_isum<B::kWords, B::kMax, B::kSigned>(c, B::template act<j>(a));
        __m256 s, o;
        k.template scales<j>(s, o);
        const __m256 da = _mm256_set1_ps(sc[2 * j]), sa = _mm256_set1_ps(sc[2 * j + 1]);
        f = _mm256_fmadd_ps(o, sa, _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc), _mm256_mul_ps(s, da), f));
      });
    }
    _mm256_storeu_ps(out + 8 * h, f);
  }
}

// q8_pack8: blocks [b0, b0 + nb32) (of 32 values; whole blocks of the type) of the panel's kNp rows
// from the layout at P (nblk32 per row) -> q8_pack's panel (codes [K/4][kNp][4], ws / wo [K/sb][kNp]).
template <QType t, int kNp>
void pack8(const u8* P, i64 nblk32, i64 b0, i64 nb32, u8* wq, float* ws, float* wo) {
  using F = Fmt<t>;
  using B = Blk<t>;
  constexpr int kGB = 8 * F::kBytes, kPer = F::kBlock / 32;
  const i64 nb = nblk32 / kPer;
  for (i64 i = 0; i < nb32 / kPer; ++i)
    for (int h = 0; h < kNp / 8; ++h) {
      const B k(P + (h * nb + b0 / kPer + i) * kGB);
      for_j<B::kNsb>([&]<int j>() {
        __m256i c[B::kWords];
        k.template codes<j>(c);
        const i64 q0 = (i * F::kBlock + j * F::kSb) / 4;  // the panel's first quad of scale block j
        for (int u = 0; u < B::kWords; ++u) st256(wq + ((q0 + u) * kNp + 8 * h) * 4, c[u]);
        __m256 s, o;
        k.template scales<j>(s, o);
        const i64 sbi = i * B::kNsb + j;
        _mm256_storeu_ps(ws + sbi * kNp + 8 * h, s);
        _mm256_storeu_ps(wo + sbi * kNp + 8 * h, o);
      });
    }
}

// q8_pack from the blocks as stored: each block of the panel's rows laid out (in L1), then packed.
template <QType t, int kNp>
void pack(const u8* W, i64 rb, i64 b0, i64 nb32, u8* wq, float* ws, float* wo) {
  using F = Fmt<t>;
  constexpr int kPer = F::kBlock / 32;
  alignas(64) u8 buf[kNp * F::kBytes];
  for (i64 i = 0; i < nb32 / kPer; ++i) {
    const i64 b = b0 / kPer + i;
    for (int h = 0; h < kNp / 8; ++h) repack_group<t>(W + 8 * h * rb + b * F::kBytes, rb, buf + h * 8 * F::kBytes);
    pack8<t, kNp>(buf, kPer, 0, kPer, wq + i * F::kBlock * kNp, ws + i * Blk<t>::kNsb * kNp, wo + i * Blk<t>::kNsb * kNp);
  }
}

// q8_row from the blocks as stored: the panel's rows laid out in a scratch buffer, then row8.
template <QType t, int kNp>
void row(const u8* W, i64 rb, i64 nblk32, const Q8Act* A, const float* asc, float* out) {
  thread_local std::vector<u8> buf;
  buf.resize(static_cast<std::size_t>(kNp * rb));
  repack8<t>(W, rb, nblk32, 0, kNp / 8, buf.data());
  row8<t, kNp>(buf.data(), nblk32, A, asc, out, 0);
}

}  // namespace kq8
