// Portable kernels of the quantized-weight products (bodies in qgemm_impl.h): each block is
// dequantized by dequantize_row into a small buffer, then used one value at a time. The
// reference path for CPUs without AVX2 and the check that the templates do not depend on SIMD.
#include <cstdint>
#include <cstring>

#include "qgemm_impl.h"
#include "qgemm_internal.h"

namespace {

struct V1 {
  using R = float;
  static constexpr int W = 1;
  static constexpr int nrw(int mr) { return mr <= 2 ? 4 : 2; }
  static inline R zero() { return 0.0f; }
  static inline R loadu(const float* p) { return *p; }
  static inline void storeu(float* p, R v) { *p = v; }
  static inline R add(R a, R b) { return a + b; }
  static inline R fma(R a, R b, R c) { return a * b + c; }
  static inline float hsum(R v) { return v; }
};

constexpr int elem_bytes(QType t) { return t == QType::F32 ? 4 : 2; }
constexpr bool is_float(QType t) { return t == QType::F32 || t == QType::F16 || t == QType::BF16; }

// Weights and bytes per block of the block types (quant.h's table, as constants).
constexpr int block_of(QType t) {
  switch (t) {
    case QType::Q2_K:
    case QType::Q3_K:
    case QType::Q4_K:
    case QType::Q5_K:
    case QType::Q6_K:
    case QType::IQ4_XS: return 256;
    default: return 32;
  }
}
constexpr int bytes_of(QType t) {
  switch (t) {
    case QType::Q8_0: return 34;
    case QType::Q4_0: return 18;
    case QType::Q4_1: return 20;
    case QType::Q5_0: return 22;
    case QType::Q5_1: return 24;
    case QType::Q2_K: return 84;
    case QType::Q3_K: return 110;
    case QType::Q4_K: return 144;
    case QType::Q5_K: return 176;
    case QType::Q6_K: return 210;
    case QType::IQ4_NL: return 18;
    case QType::IQ4_XS: return 136;
    case QType::MXFP4: return 17;
    default: return 32 * elem_bytes(t);  // F32, F16, BF16: "blocks" of 32 values
  }
}

template <QType t>
struct Dec {
  static constexpr bool kFloat = is_float(t);
  static constexpr int kBlock = kFloat ? 32 : block_of(t);
  static constexpr int kBytes = bytes_of(t);
  static constexpr int kScales = 0;
  template <class F>
  static inline void block(const u8* p, const float*, F&& f) {
    float y[kBlock];
    qkv::kernels::dequantize_row(t, p, y, kBlock);
    for (int j = 0; j < kBlock; ++j) f(j, y[j]);
  }
};

// The Q8 path's micro-kernel in plain loops (kernels layout in qgemm_internal.h), 16 columns.
constexpr int kQ8Np = 16;
void q8_tile(int mr, i64 nsb, int sb, bool signed_codes, const u8* wq, const float* ws, const float* wo,
             const qkv::kernels::detail::Q8Act* A, i64 lda, const float* asc, i64 ldas, float* out, i64 ldo, bool resume) {
  for (int m = 0; m < mr; ++m)
    for (int j = 0; j < kQ8Np; ++j) {
      float acc = resume ? out[m * ldo + j] : 0.0f;
      for (i64 b = 0; b < nsb; ++b) {
        std::int32_t isum = 0;
        for (i64 k = b * sb; k < (b + 1) * sb; ++k) {
          const u8 c = wq[((k / 4) * kQ8Np + j) * 4 + k % 4];
          const int w = signed_codes ? static_cast<std::int8_t>(c) : c;
          isum += w * A[m * lda + k / 32].q[k % 32];
        }
        const float da = asc[m * ldas + 2 * b], sa = asc[m * ldas + 2 * b + 1];
        acc += static_cast<float>(isum) * (ws[b * kQ8Np + j] * da);
        acc += wo[b * kQ8Np + j] * sa;
      }
      out[m * ldo + j] = acc;
    }
}

}  // namespace

namespace qkv::kernels::detail {

QGemmKernels qgemm_kernels_scalar() {
  QGemmKernels k;
  k.dot_rows = &dot_rows_any<V1, Dec>;
  k.dequant_rows = &dequant_rows_any<V1, Dec>;
  k.q8_np = kQ8Np;
  k.q8_mr = kQ8MaxRows;
  k.q8_tile = &q8_tile;
  return k;
}

}  // namespace qkv::kernels::detail
