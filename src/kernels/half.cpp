// Rows of float32 <-> IEEE half (kernels/half.h): AVX-512 (16 at a time), AVX2 with F16C (8 at a
// time), else one by one as numpy converts. vcvtps2ph rounds to nearest even, as f32_to_f16 does.
// In test_attention_avx512_emulated (QKV_FLASH_AVX512_EMULATED: an AVX-512 CPU pretended, maybe
// on one without it) only the scalar conversions run.
#include "qkv/kernels/half.h"

#include "qkv/kernels/cpu.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_FLASH_AVX512_EMULATED)
#include <immintrin.h>
#endif

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_FLASH_AVX512_EMULATED)
__attribute__((target("avx512f"))) void to_half_avx512(const float* x, std::uint16_t* y, i64 n) {
  i64 i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
__attribute__((target("avx512f"))) void to_float_avx512(const std::uint16_t* x, float* y, i64 n) {
  i64 i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}
__attribute__((target("avx2,f16c"))) void to_half_f16c(const float* x, std::uint16_t* y, i64 n) {
  i64 i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) y[i] = f32_to_f16(x[i]);
}
__attribute__((target("avx2,f16c"))) void to_float_f16c(const std::uint16_t* x, float* y, i64 n) {
  i64 i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
  for (; i < n; ++i) y[i] = f16_to_f32(x[i]);
}
#endif

}  // namespace

void float_to_half_rows(const float* x, std::uint16_t* y, i64 n) {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_FLASH_AVX512_EMULATED)
  switch (active_isa()) {
    case Isa::Avx512: return to_half_avx512(x, y, n);
    case Isa::Avx2: return to_half_f16c(x, y, n);  // (the AVX2 tier includes F16C: kernels/cpu.h)
    case Isa::Scalar: break;
  }
#endif
  for (i64 i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
}

void half_to_float_rows(const std::uint16_t* x, float* y, i64 n) {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(QKV_FLASH_AVX512_EMULATED)
  switch (active_isa()) {
    case Isa::Avx512: return to_float_avx512(x, y, n);
    case Isa::Avx2: return to_float_f16c(x, y, n);
    case Isa::Scalar: break;
  }
#endif
  for (i64 i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
}

}  // namespace qkv::kernels
