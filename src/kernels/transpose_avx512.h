// A 16 x 16 float transpose in AVX-512 registers, shared by the GEMM's A packing
// (gemm_avx512.cpp) and flash attention's key panels (flash_attention_avx512.cpp).
// Include it after the AVX-512 intrinsics are set up (the target pragma with <immintrin.h>, or
// SIMDe's native aliases in the emulated test builds). Internal linkage: every including file
// compiles its own copy for its own target.
#pragma once

namespace {

// _mm512_shuffle_f32x4, which SIMDe (0.7) lacks: the emulated test builds, on a CPU without
// AVX-512, take the integer shuffle it has (the same lanes moved).
#if defined(QKV_FLASH_AVX512_EMULATED) || defined(QKV_GEMM_AVX512_EMULATED)
#define QKV_SHUFFLE_F32X4(a, b, imm) \
  _mm512_castsi512_ps(_mm512_shuffle_i32x4(_mm512_castps_si512(a), _mm512_castps_si512(b), (imm)))
#else
#define QKV_SHUFFLE_F32X4(a, b, imm) _mm512_shuffle_f32x4((a), (b), (imm))
#endif

// On return r[j] holds column j of the input rows r[0..15].
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i + 0], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  // u[4i + c] holds, in each 128-bit lane L, column 4L + c of rows 4i..4i+3.
  for (int c = 0; c < 4; ++c) {
    t[c] = QKV_SHUFFLE_F32X4(u[c], u[4 + c], 0x88);       // lanes 0, 2 of rows 0-3 | 4-7
    t[4 + c] = QKV_SHUFFLE_F32X4(u[c], u[4 + c], 0xDD);   // lanes 1, 3
    t[8 + c] = QKV_SHUFFLE_F32X4(u[8 + c], u[12 + c], 0x88);
    t[12 + c] = QKV_SHUFFLE_F32X4(u[8 + c], u[12 + c], 0xDD);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = QKV_SHUFFLE_F32X4(t[c], t[8 + c], 0x88);            // column c
    r[8 + c] = QKV_SHUFFLE_F32X4(t[c], t[8 + c], 0xDD);        // column 8 + c
    r[4 + c] = QKV_SHUFFLE_F32X4(t[4 + c], t[12 + c], 0x88);   // column 4 + c
    r[12 + c] = QKV_SHUFFLE_F32X4(t[4 + c], t[12 + c], 0xDD);  // column 12 + c
  }
}

}  // namespace
