// Skinny fp32 products with B stored as rows, AVX2 + FMA (8 lanes; blocks of up to 3 rows of
// A x 4 rows of B in the 16 ymm registers). See gemm_skinny_impl.h. Compiled with a target
// pragma, used only when active_isa() >= Avx2 (the AVX-512 machines use gemm_skinny_avx512.cpp).
#include <cstdint>

#include "gemm_internal.h"

// (clang ignores GCC's target pragma, so it builds these only when it targets AVX2 already.)
#if defined(__x86_64__) && ((defined(__GNUC__) && !defined(__clang__)) || (defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)))
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

#include "gemm_skinny_impl.h"

namespace qkv::kernels::detail {
namespace {

struct F32x8 {
  using R = __m256;
  static constexpr int W = 8, kMR = 3;
  static inline R zero() { return _mm256_setzero_ps(); }
  static inline R loadu(const float* p) { return _mm256_loadu_ps(p); }
  static inline R load_first(const float* p, std::int64_t r) {  // r in [1, 7]
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), idx));
  }
  static inline R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static inline float hsum(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // (0+4, 1+5, 2+6, 3+7)
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

bool sgemm_skinny_nt_available() { return true; }

void sgemm_skinny_nt(std::int64_t M, std::int64_t N, std::int64_t K, float alpha, const float* A, std::int64_t lda,
                     const float* B, std::int64_t ldb, float beta, float* C, std::int64_t ldc, bool threaded) {
  skinny::run<F32x8>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
}

}  // namespace qkv::kernels::detail
#pragma GCC pop_options

#else  // no AVX2 code on this compiler / target: the packed path serves every shape

namespace qkv::kernels::detail {
bool sgemm_skinny_nt_available() { return false; }
void sgemm_skinny_nt(std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
                     std::int64_t, float, float*, std::int64_t, bool) {}
}  // namespace qkv::kernels::detail

#endif
