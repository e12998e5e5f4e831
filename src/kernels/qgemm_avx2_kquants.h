// The AVX2 block decoders of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and the types of 4-bit
// codes into a table of 16 values (IQ4_NL, IQ4_XS, MXFP4): Dec<t> as qgemm_impl.h describes it,
// bitwise dequantize_row's values. Part of qgemm_avx2.cpp, which includes it inside its target
// region after its helpers (V8, half, u8x8, low4, high4, cvt, convert_scales16, prep_scales) and
// qgemm_kq8_impl.h: it is not a header of its own.
#pragma once

// d * sc_j and -(dmin * m_j) of the 8 sub-blocks of nb blocks: s[16b + j], s[16b + 8 + j].
template <int kBytes>
inline void k4_prep(const u8* p, i64 nb, float* s) {
  for (i64 b = 0; b < nb; ++b, p += kBytes, s += 16) {
    const float d = half(p), dmin = half(p + 2);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k4_scale_min(p + 4, j, sc, m);
      s[j] = d * static_cast<float>(sc);
      s[8 + j] = -(dmin * static_cast<float>(m));
    }
  }
}

// Q4_K (kQh = 0) and Q5_K: sub-block j = 2g + h is the low (h = 0) or high nibbles of bytes
// 32g..32g+32 of qs, plus bit j of qh[l] for Q5_K; w = fma(d * sc_j, q, -(dmin * m_j)).
template <int kQs, int kQh>
struct DecK {
  static constexpr int kBlock = 256, kBytes = kQh ? 176 : 144;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 16;
  template <int NR>
  static inline void prep(const u8* p, i64 rb, i64 nb, float* s, i64 ls) {
    for (int r = 0; r < NR; ++r) k4_prep<kBytes>(p + r * rb, nb, s + r * ls);
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    const float* ds = s;
    const float* ndm = s + 8;
    for (int g = 0; g < 4; ++g) {
      const __m256 s0 = _mm256_set1_ps(ds[2 * g]), o0 = _mm256_set1_ps(ndm[2 * g]);
      const __m256 s1 = _mm256_set1_ps(ds[2 * g + 1]), o1 = _mm256_set1_ps(ndm[2 * g + 1]);
      for (int c = 0; c < 4; ++c) {
        const __m256i b = u8x8(p + kQs + 32 * g + 8 * c);
        __m256i lo = low4(b), hi = high4(b);
        if constexpr (kQh != 0) {
          const __m256i h = u8x8(p + kQh + 8 * c);
          const __m256i one = _mm256_set1_epi32(1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * g), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * g + 1), one), 4));
        }
        f(8 * g + c, _mm256_fmadd_ps(s0, cvt(lo), o0));
        f(8 * g + 4 + c, _mm256_fmadd_ps(s1, cvt(hi), o1));
      }
    }
  }
};

template <>
struct Dec<QType::Q4_K> : DecK<16, 0> {};
template <>
struct Dec<QType::Q5_K> : DecK<48, 16> {};

template <>
struct Dec<QType::Q6_K> {
  static constexpr int kBlock = 256, kBytes = 210;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 16;
  template <int NR>
  static inline void prep(const u8* p0, i64 rb, i64 nb, float* s0, i64 ls) {
    for (int r = 0; r < NR; ++r) {
      const u8* p = p0 + r * rb;
      float* s = s0 + r * ls;
      for (i64 b = 0; b < nb; ++b, p += kBytes, s += 16) {
        const auto* sc = reinterpret_cast<const std::int8_t*>(p + 192);
        const float d = half(p + 208);
        for (int j = 0; j < 16; ++j) s[j] = d * static_cast<float>(sc[j]);
      }
    }
  }
  template <class F>
  static inline void block(const u8* p, const float* ds, F&& f) {
    const __m256i m3 = _mm256_set1_epi32(3), m15 = _mm256_set1_epi32(15), k32 = _mm256_set1_epi32(32);
    for (int h = 0; h < 2; ++h) {
      const u8* ql = p + 64 * h;
      const u8* qh = p + 128 + 32 * h;
      for (int c = 0; c < 4; ++c) {  // weights 128h + 32t + 8c + l, t = 0..3, l < 8
        const __m256i hb = u8x8(qh + 8 * c), la = u8x8(ql + 8 * c), lb = u8x8(ql + 32 + 8 * c);
        for (int t = 0; t < 4; ++t) {
          const __m256i l = t % 2 == 0 ? la : lb;
          const __m256i lo = t < 2 ? _mm256_and_si256(l, m15) : _mm256_srli_epi32(l, 4);
          const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hb, 2 * t), m3), 4);
          const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, hi), k32);
          const int r0 = 128 * h + 32 * t + 8 * c;
          f(r0 / 8, _mm256_mul_ps(_mm256_set1_ps(ds[r0 / 16]), cvt(q)));
        }
      }
    }
  }
};

// Q2_K: s[b*32 + j] = d * (sc_j & 15), s[b*32 + 16 + j] = -(dmin * (sc_j >> 4)) (j < 16 sub-blocks).
// Sub-block j = 8h + 2s + t holds weights 128h + 32s + 16t + (0..15): the 2 bits 2s.. of bytes
// 32h + 16t.. of qs. Its 4 values fma(scale, q, -offset) (rounded as gguf-py's dl * q - ml: dl * q is
// exact) in an 8-entry table, period 4, so vpermps (3 index bits) picks them from the bytes shifted,
// no mask: 2 instructions a vector where widening and converting the codes took 4 (1536 x 1536, one
// row of A, one thread on a Xeon: 9.2 -> 22.2 GFLOP/s; BENCHMARKS.md).
template <>
struct Dec<QType::Q2_K> {
  static constexpr int kBlock = 256, kBytes = 84;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 32;
  template <int NR>
  static inline void prep(const u8* p0, i64 rb, i64 nb, float* s0, i64 ls) {
    for (int r = 0; r < NR; ++r) {
      const u8* p = p0 + r * rb;
      float* s = s0 + r * ls;
      for (i64 b = 0; b < nb; ++b, p += kBytes, s += 32) {
        const float d = half(p + 80), dmin = half(p + 82);
        for (int j = 0; j < 16; ++j) {
          s[j] = d * static_cast<float>(p[j] & 0x0F);
          s[16 + j] = -(dmin * static_cast<float>(p[j] >> 4));
        }
      }
    }
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    const __m256 i4 = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    for (int h = 0; h < 2; ++h) {
      __m256i b[4];
      for (int c = 0; c < 4; ++c) b[c] = u8x8(p + 16 + 32 * h + 8 * c);
      for (int sh = 0; sh < 4; ++sh)
        for (int t = 0; t < 2; ++t) {
          const int j = 8 * h + 2 * sh + t;
          const __m256 table = _mm256_fmadd_ps(_mm256_set1_ps(s[j]), i4, _mm256_set1_ps(s[16 + j]));
          f(2 * j, _mm256_permutevar8x32_ps(table, _mm256_srli_epi32(b[2 * t], 2 * sh)));
          f(2 * j + 1, _mm256_permutevar8x32_ps(table, _mm256_srli_epi32(b[2 * t + 1], 2 * sh)));
        }
    }
  }
};

// Q3_K: s[b*16 + j] = d * (scale_j - 32). Weight 128h + 32s + l has the 2 bits 2s.. of qs[32h + l]
// and, as bit 2, bit 4h + s of hmask[l]; w = scale * (that - 4), one product as gguf-py's, taken by
// vpermps from the sub-block's table of its 8 values (the codes and mask bits shifted one step at
// a time: shifts by constants. 14.6 -> 18.9 GFLOP/s at M = 1 against widening and converting).
template <>
struct Dec<QType::Q3_K> {
  static constexpr int kBlock = 256, kBytes = 110;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 16;
  template <int NR>
  static inline void prep(const u8* p0, i64 rb, i64 nb, float* s0, i64 ls) {
    for (int r = 0; r < NR; ++r) {
      const u8* p = p0 + r * rb;
      float* s = s0 + r * ls;
      for (i64 b = 0; b < nb; ++b, p += kBytes, s += 16) {
        const float d = half(p + 108);
        const u8* sc = p + 96;
        for (int j = 0; j < 16; ++j) {
          const int lo = j < 8 ? sc[j] & 0x0F : sc[j - 8] >> 4, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
          s[j] = d * static_cast<float>((lo | (hi << 4)) - 32);
        }
      }
    }
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    const __m256i m3 = _mm256_set1_epi32(3), four = _mm256_set1_epi32(4);
    const __m256 im4 = _mm256_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3);
    // hmask[8c..8c+8] widened, shifted so that bit 4h + s of lane l (weight 128h + 32s + 8c + l's
    // high bit) sits at bit 2, one position further for each (h, s) in turn.
    __m256i hm[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) hm[c] = _mm256_slli_epi32(u8x8(p + 8 * c), 2);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i b[4];  // the codes' bytes, shifted 2 bits further for each s in turn
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) b[c] = u8x8(p + 32 + 32 * h + 8 * c);
#pragma GCC unroll 4
      for (int sh = 0; sh < 4; ++sh) {
#pragma GCC unroll 2
        for (int t = 0; t < 2; ++t) {
          const int j = 8 * h + 2 * sh + t;
          const __m256 table = _mm256_mul_ps(_mm256_set1_ps(s[j]), im4);  // d_j * (i - 4)
#pragma GCC unroll 2
          for (int c = 2 * t; c < 2 * t + 2; ++c) {
            const __m256i idx = _mm256_or_si256(_mm256_and_si256(b[c], m3), _mm256_and_si256(hm[c], four));
            f(2 * j + c - 2 * t, _mm256_permutevar8x32_ps(table, idx));
          }
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          b[c] = _mm256_srli_epi32(b[c], 2);
          hm[c] = _mm256_srli_epi32(hm[c], 1);
        }
      }
    }
  }
};

// A 4-bit type's 16 values as int8 (vpshufb picks them by nibble): kIQ4NL or kMXFP4.
inline __m128i table16(const std::int8_t* values) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(values)); }
// 16 bytes of nibbles -> their values, low nibbles (weights 0..15) and high (16..31), as int8.
inline void nibble_values(__m128i table, const u8* q, __m128i& lo, __m128i& hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), m = _mm_set1_epi8(0x0F);
  lo = _mm_shuffle_epi8(table, _mm_and_si128(b, m));
  hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), m));
}
// f(j0 + 0..3, scale * value) for the 32 weights of one block of nibbles at q (IQ4_NL's layout).
template <class F>
inline void nibble_block32(__m128i table, const u8* q, float scale, int j0, F&& f) {
  __m128i lo, hi;
  nibble_values(table, q, lo, hi);
  const __m256 d = _mm256_set1_ps(scale);
  f(j0 + 0, _mm256_mul_ps(d, cvt(_mm256_cvtepi8_epi32(lo))));
  f(j0 + 1, _mm256_mul_ps(d, cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
  f(j0 + 2, _mm256_mul_ps(d, cvt(_mm256_cvtepi8_epi32(hi))));
  f(j0 + 3, _mm256_mul_ps(d, cvt(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

// IQ4_NL: w = d * kIQ4NL[nibble], the block's d converted ahead as the 32-weight types' (rolling).
template <>
struct Dec<QType::IQ4_NL> {
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
    nibble_block32(table16(qkv::kernels::kIQ4NL), p + 2, s[0], 0, f);
  }
};

// IQ4_XS: s[b*8 + j] = d * (scale_j - 32); sub-block j as an IQ4_NL block at 8 + 16 j.
template <>
struct Dec<QType::IQ4_XS> {
  static constexpr int kBlock = 256, kBytes = 136;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 8;
  template <int NR>
  static inline void prep(const u8* p0, i64 rb, i64 nb, float* s0, i64 ls) {
    for (int r = 0; r < NR; ++r) {
      const u8* p = p0 + r * rb;
      float* s = s0 + r * ls;
      for (i64 b = 0; b < nb; ++b, p += kBytes, s += 8) {
        const float d = half(p);
        const int h = load_u16(p + 2);
        for (int j = 0; j < 8; ++j)
          s[j] = d * static_cast<float>((((p[4 + j / 2] >> (4 * (j % 2))) & 0x0F) | (((h >> (2 * j)) & 3) << 4)) - 32);
      }
    }
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    const __m128i table = table16(qkv::kernels::kIQ4NL);
    for (int j = 0; j < 8; ++j) nibble_block32(table, p + 8 + 16 * j, s[j], 4 * j, f);
  }
};

// MXFP4: w = d * kMXFP4[nibble], d = 2^(e - 128) converted ahead (rolling) from the exponent byte
// (kq8::e8m0_half8, qgemm_kq8_impl.h),
// stored at s[2b] as the other 32-weight types' d (s[2b + 1] unused).
template <>
struct Dec<QType::MXFP4> {
  static constexpr int kBlock = 32, kBytes = 17;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 2;
  static constexpr bool kRolling = true;
  // 16 blocks' raw words (the exponent in the low byte) -> s[2i] = s[2i + 1] = d_i.
  static inline void convert16(const std::uint32_t* raw, float* s) {
    for (int h = 0; h < 2; ++h) {
      const __m256i w = _mm256_load_si256(reinterpret_cast<const __m256i*>(raw + 8 * h));
      const __m256 d = kq8::e8m0_half8(_mm256_and_si256(w, _mm256_set1_epi32(0xFF)));
      const __m256 lo = _mm256_unpacklo_ps(d, d), hi = _mm256_unpackhi_ps(d, d);  // d0 d0 d1 d1 | d4 d4 d5 d5, ...
      _mm256_store_ps(s + 16 * h, _mm256_permute2f128_ps(lo, hi, 0x20));
      _mm256_store_ps(s + 16 * h + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
  }
  template <int NR>
  static inline void prep(const u8* p, i64 rb, i64 nb, float* s, i64 ls) {
    for (int r = 0; r < NR; ++r)
      for (i64 b = 0; b < nb; ++b) s[r * ls + 2 * b] = qkv::kernels::detail::e8m0_half(p[r * rb + b * kBytes]);
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    nibble_block32(table16(qkv::kernels::kMXFP4), p + 1, s[0], 0, f);
  }
};
