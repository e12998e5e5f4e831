// Naive GEMM references: the triple loop, accumulated in a wider type
// (float -> double, double -> long double). They are the test oracle for the
// packed kernels in gemm.cpp, so they are written to be obviously right.
//   A  trans_a=false: [M,K] (lda >= K)   trans_a=true: [K,M] (lda >= M)
//   B  trans_b=false: [K,N] (ldb >= N)   trans_b=true: [N,K] (ldb >= K)
//   C  [M,N] (ldc >= N); beta == 0: C is not read.
#include <cstdint>

#include "gemm_internal.h"
#include "qkv/kernels/gemm.h"

namespace qkv::kernels {
namespace {

template <class T, class Acc>
void gemm_ref_impl(const char* name, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K,
                   T alpha, const T* A, std::int64_t lda, const T* B, std::int64_t ldb, T beta, T* C,
                   std::int64_t ldc) {
  detail::check_gemm_args(name, trans_a, trans_b, M, N, K, lda, ldb, ldc);
  for (std::int64_t i = 0; i < M; ++i) {
    for (std::int64_t j = 0; j < N; ++j) {
      Acc sum = 0;
      if (alpha != T(0)) {
        for (std::int64_t k = 0; k < K; ++k) {
          const T a = trans_a ? A[k * lda + i] : A[i * lda + k];
          const T b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
          sum += static_cast<Acc>(a) * static_cast<Acc>(b);
        }
      }
      Acc c = static_cast<Acc>(alpha) * sum;
      if (beta != T(0)) c += static_cast<Acc>(beta) * static_cast<Acc>(C[i * ldc + j]);
      C[i * ldc + j] = static_cast<T>(c);
    }
  }
}

}  // namespace

void sgemm_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc) {
  gemm_ref_impl<float, double>("sgemm_ref", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void dgemm_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
               const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
               std::int64_t ldc) {
  gemm_ref_impl<double, long double>("dgemm_ref", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
                                     ldc);
}

}  // namespace qkv::kernels
