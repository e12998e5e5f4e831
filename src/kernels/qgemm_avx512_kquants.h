// The AVX-512 block decoders of the k-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and the types of 4-bit
// codes into a table of 16 values (IQ4_NL, IQ4_XS, MXFP4): Dec<t> as qgemm_impl.h describes it,
// bitwise dequantize_row's values. Part of qgemm_avx512.cpp, which includes it inside its target
// region after its helpers (V16, half, load16, iota, lut16, lut32, with_bit4, low4, high4,
// convert_scales16, prep_scales): it is not a header of its own.
//
// The tables: a 16-entry float table of a sub-block's possible values (computed once per
// sub-block, each entry rounded as gguf-py rounds the weight) is indexed by the quants with
// vpermps, which reads only the low 4 bits of each index.
#pragma once

// Q4_K / Q5_K: scale d * sc_j and negated offset -(dmin * m_j) of the 8 sub-blocks, rounded as
// gguf-py, for nb blocks: s[16b + j] and s[16b + 8 + j].
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

template <>
struct Dec<QType::Q4_K> {
  static constexpr int kBlock = 256, kBytes = 144;
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
    const __m512 i0 = iota(0.0f);
    for (int g = 0; g < 4; ++g) {  // bytes 32g..32g+32: sub-block 2g (low nibbles), 2g+1 (high)
      const u8* q = p + 16 + 32 * g;
      const __m512i b0 = _mm512_cvtepu8_epi32(load16(q)), b1 = _mm512_cvtepu8_epi32(load16(q + 16));
      const __m512 t0 = _mm512_fmadd_ps(_mm512_set1_ps(ds[2 * g]), i0, _mm512_set1_ps(ndm[2 * g]));
      const __m512 t1 = _mm512_fmadd_ps(_mm512_set1_ps(ds[2 * g + 1]), i0, _mm512_set1_ps(ndm[2 * g + 1]));
      f(4 * g + 0, lut16(b0, t0));
      f(4 * g + 1, lut16(b1, t0));
      f(4 * g + 2, lut16(high4(b0), t1));
      f(4 * g + 3, lut16(high4(b1), t1));
    }
  }
};

template <>
struct Dec<QType::Q5_K> {
  static constexpr int kBlock = 256, kBytes = 176;
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
    const __m512 i0 = iota(0.0f), i16 = iota(16.0f);
    const __m128i qh0 = load16(p + 16), qh1 = load16(p + 32);  // bit j of qh[l]: sub-block j, weight l
    for (int g = 0; g < 4; ++g) {
      const u8* q = p + 48 + 32 * g;
      const __m512i b0 = _mm512_cvtepu8_epi32(load16(q)), b1 = _mm512_cvtepu8_epi32(load16(q + 16));
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * g + h;
        const __m512 s = _mm512_set1_ps(ds[j]), o = _mm512_set1_ps(ndm[j]);
        const __m512 lo = _mm512_fmadd_ps(s, i0, o), hi = _mm512_fmadd_ps(s, i16, o);
        const __m128i bit = _mm_set1_epi8(static_cast<char>(1 << j));
        const __m512i n0 = h ? high4(b0) : low4(b0), n1 = h ? high4(b1) : low4(b1);
        f(4 * g + 2 * h, lut32(with_bit4(n0, _mm_test_epi8_mask(qh0, bit)), lo, hi));
        f(4 * g + 2 * h + 1, lut32(with_bit4(n1, _mm_test_epi8_mask(qh1, bit)), lo, hi));
      }
    }
  }
};

// Q6_K: each 16-lane vector is one sub-block of 16 weights (scale d * scales[j]).
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
    const __m512i m3 = _mm512_set1_epi32(3), m15 = _mm512_set1_epi32(15), k32 = _mm512_set1_epi32(32);
    for (int h = 0; h < 2; ++h) {
      const u8* ql = p + 64 * h;
      const u8* qh = p + 128 + 32 * h;
      for (int c = 0; c < 2; ++c) {  // weights 128h + 32t + 16c + l, t = 0..3, l < 16
        const __m512i hb = _mm512_cvtepu8_epi32(load16(qh + 16 * c));
        const __m512i la = _mm512_cvtepu8_epi32(load16(ql + 16 * c));
        const __m512i lb = _mm512_cvtepu8_epi32(load16(ql + 32 + 16 * c));
        for (int t = 0; t < 4; ++t) {
          const __m512i l = t % 2 == 0 ? la : lb;
          const __m512i lo = t < 2 ? _mm512_and_si512(l, m15) : _mm512_srli_epi32(l, 4);
          const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hb, 2 * t), m3), 4);
          const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, hi), k32);
          const int j = 8 * h + 2 * t + c;
          f(j, _mm512_mul_ps(_mm512_set1_ps(ds[j]), _mm512_cvtepi32_ps(q)));
        }
      }
    }
  }
};

// Q2_K: each 16-lane vector is one sub-block j (weights 16j..16j+15 = 128h + 32s + 16t + l, the 2
// bits 2s.. of qs[32h + 16t + l]); the 16-entry table holds fma(d * sc_j, i & 3, -(dmin * m_j)) so
// the permute's 4 index bits need no mask. s[32b + j] = d * sc_j, s[32b + 16 + j] = -(dmin * m_j).
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
    const __m512 i4 = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 2; ++t) {
        const __m512i b = _mm512_cvtepu8_epi32(load16(p + 16 + 32 * h + 16 * t));
        for (int sh = 0; sh < 4; ++sh) {
          const int j = 8 * h + 2 * sh + t;
          const __m512 table = _mm512_fmadd_ps(_mm512_set1_ps(s[j]), i4, _mm512_set1_ps(s[16 + j]));
          f(j, lut16(_mm512_srli_epi32(b, 2 * sh), table));
        }
      }
  }
};

// Q3_K: one sub-block j per vector as Q2_K's; the index is the 2 low bits plus, as bit 2, the
// weight's hmask bit (4h + s of hmask[16t + l]), merged by one vpternlogd, into the table
// d_j * (i - 4). s[16b + j] = d_j.
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
    const __m512i m3 = _mm512_set1_epi32(3);
    // d_j * ((i & 7) - 4): the index's bit 3 (a bit of the next weight's hmask) is ignored.
    const __m512 im4 = _mm512_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3);
    for (int t = 0; t < 2; ++t) {
      const __m512i hm = _mm512_cvtepu8_epi32(load16(p + 16 * t));  // bit 4h + s: weight 128h + 32s + 16t + l
      for (int h = 0; h < 2; ++h) {
        const __m512i b = _mm512_cvtepu8_epi32(load16(p + 32 + 32 * h + 16 * t));
        for (int sh = 0; sh < 4; ++sh) {
          const int j = 8 * h + 2 * sh + t, k = 4 * h + sh;
          const __m512i hb = k >= 2 ? _mm512_srli_epi32(hm, k - 2) : _mm512_slli_epi32(hm, 2 - k);
          // bits 0-1 from the shifted codes, the others from hb (its bit 2: the hmask bit): vpternlogd
          const __m512i idx = _mm512_ternarylogic_epi32(_mm512_srli_epi32(b, 2 * sh), m3, hb, 0xE2);
          f(j, lut16(idx, _mm512_mul_ps(_mm512_set1_ps(s[j]), im4)));
        }
      }
    }
  }
};

// A 4-bit type's 16 values (kIQ4NL or kMXFP4) as floats, and the 32 weights of one block of
// nibbles at q (low nibbles weights 0..15, high 16..31) from the table scale * value (one product
// each, exact).
inline __m512 values16(const std::int8_t* values) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(reinterpret_cast<const u8*>(values))));
}
template <class F>
inline void nibble_block32(__m512 values, const u8* q, float scale, int j0, F&& f) {
  const __m512 table = _mm512_mul_ps(_mm512_set1_ps(scale), values);
  const __m512i b = _mm512_cvtepu8_epi32(load16(q));
  f(j0, lut16(b, table));
  f(j0 + 1, lut16(high4(b), table));
}

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
    nibble_block32(values16(qkv::kernels::kIQ4NL), p + 2, s[0], 0, f);
  }
};

// IQ4_XS: s[8b + j] = d * (scale_j - 32); sub-block j as an IQ4_NL block at 8 + 16 j.
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
    const __m512 values = values16(qkv::kernels::kIQ4NL);
    for (int j = 0; j < 8; ++j) {
      const __m512 table = _mm512_mul_ps(_mm512_set1_ps(s[j]), values);
      const __m512i b = _mm512_cvtepu8_epi32(load16(p + 8 + 16 * j));
      f(2 * j, lut16(b, table));
      f(2 * j + 1, lut16(high4(b), table));
    }
  }
};

// MXFP4: w = d * kMXFP4[nibble], d = 2^(e - 128) converted ahead (rolling) from the exponent byte
// (e - 1 in the exponent field, or the subnormal 0x00200000 << e for e < 2: bitwise
// detail::e8m0_half), stored at s[2b] as the other 32-weight types' d (s[2b + 1] unused).
template <>
struct Dec<QType::MXFP4> {
  static constexpr int kBlock = 32, kBytes = 17;
  static constexpr bool kFloat = false;
  static constexpr int kScales = 2;
  static constexpr bool kRolling = true;
  // 16 blocks' raw words (the exponent in the low byte) -> s[2i] = s[2i + 1] = d_i.
  static inline void convert16(const std::uint32_t* raw, float* s) {
    const __m512i e = _mm512_and_si512(_mm512_load_si512(raw), _mm512_set1_epi32(0xFF));
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __m512 d = _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(_mm512_set1_epi32(2), e), normal, sub));
    const __m512i pairs = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    _mm512_store_ps(s, _mm512_permutexvar_ps(pairs, d));
    _mm512_store_ps(s + 16, _mm512_permutexvar_ps(_mm512_add_epi32(pairs, _mm512_set1_epi32(8)), d));
  }
  template <int NR>
  static inline void prep(const u8* p, i64 rb, i64 nb, float* s, i64 ls) {
    for (int r = 0; r < NR; ++r)
      for (i64 b = 0; b < nb; ++b) s[r * ls + 2 * b] = qkv::kernels::detail::e8m0_half(p[r * rb + b * kBytes]);
  }
  template <class F>
  static inline void block(const u8* p, const float* s, F&& f) {
    nibble_block32(values16(qkv::kernels::kMXFP4), p + 1, s[0], 0, f);
  }
};
