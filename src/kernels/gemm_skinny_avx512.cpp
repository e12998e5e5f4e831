// Skinny fp32 products with B stored as rows, AVX-512F (16 lanes; blocks of up to 4 rows of A x
// 4 rows of B: 16 accumulators + 4 + 1 of the 32 zmm registers). See gemm_skinny_impl.h.
// Compiled with a target pragma (or on SIMDe in the emulated test build, like gemm_avx512.cpp);
// used only when active_isa() == Avx512.
#include <cstdint>

#include "gemm_internal.h"

#if defined(QKV_GEMM_AVX512_EMULATED)
#define QKV_SKINNY_HAVE_AVX512 1
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
// (clang ignores GCC's target pragma, so it builds these only when it targets AVX-512 already.)
#elif defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)))
#define QKV_SKINNY_HAVE_AVX512 1
#define QKV_SKINNY_AVX512_PRAGMA 1
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")
#include <immintrin.h>
#endif

#ifdef QKV_SKINNY_HAVE_AVX512
#include "gemm_skinny_impl.h"

namespace qkv::kernels::detail {
namespace {

struct F32x16 {
  using R = __m512;
  static constexpr int W = 16, kMR = 4;
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R loadu(const float* p) { return _mm512_loadu_ps(p); }
  static inline R load_first(const float* p, std::int64_t r) {  // r in [1, 15]
#if defined(QKV_GEMM_AVX512_EMULATED)
    // Debian's SIMDe has no _mm512_maskz_loadu_ps: the same lanes through a zeroed buffer
    // (never reading past p[r - 1], as the masked load does not).
    alignas(64) float tmp[16] = {};
    for (std::int64_t i = 0; i < r; ++i) tmp[i] = p[i];
    return _mm512_load_ps(tmp);
#else
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << r) - 1u), p);
#endif
  }
  static inline R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static inline float hsum(R v) {
#if defined(QKV_GEMM_AVX512_EMULATED)
    // Debian's SIMDe lacks _mm512_extractf32x8_ps: the same sums in the same order, lane by lane.
    alignas(64) float x[16];
    _mm512_store_ps(x, v);
    float h[8], q[4];
    for (int i = 0; i < 8; ++i) h[i] = x[i] + x[i + 8];  // i + (i+8)
    for (int i = 0; i < 4; ++i) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
#else
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));  // i + (i+8)
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
#endif
  }
};

}  // namespace

bool sgemm_skinny_nt_avx512_available() { return true; }

void sgemm_skinny_nt_avx512(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A,
                            std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc,
                            bool threaded) {
  skinny::run<F32x16>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
}

}  // namespace qkv::kernels::detail

#ifdef QKV_SKINNY_AVX512_PRAGMA
#pragma GCC pop_options
#endif

#else

namespace qkv::kernels::detail {
bool sgemm_skinny_nt_avx512_available() { return false; }
void sgemm_skinny_nt_avx512(std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
                            std::int64_t, float, float*, std::int64_t, bool) {}
}  // namespace qkv::kernels::detail

#endif
