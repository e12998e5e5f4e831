// The block decoders of the exact path, ISA by ISA (the kernel sets of qgemm_internal.h), against
// dequantize_row bit for bit: the prefill path's slivers (dequant_rows) must hold exactly the
// dequantized weights, and a decode product (dot_rows) with one-hot rows of A must give exactly the
// weight it picks (every other term is a zero). qgemm's tests check whole products within their
// rounding bounds; these check that no decoder rounds a weight differently from gguf-py.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../src/kernels/qgemm_internal.h"
#include "../../src/kernels/quant_internal.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/quant.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;
using u8 = std::uint8_t;

const QType kTypes[] = {QType::F32,  QType::F16,  QType::BF16, QType::Q8_0, QType::Q4_0,   QType::Q4_1,   QType::Q5_0,
                        QType::Q5_1, QType::Q2_K, QType::Q3_K, QType::Q4_K, QType::Q5_K, QType::Q6_K, QType::IQ4_NL,
                        QType::IQ4_XS, QType::MXFP4};

bool is_float_type(QType t) { return t == QType::F32 || t == QType::F16 || t == QType::BF16; }

// Byte offsets of a block's f16 scale fields (kernels/quant.h; none for MXFP4, whose scale is an
// exponent byte).
std::vector<int> scale_fields(QType t) {
  switch (t) {
    case QType::Q4_1:
    case QType::Q5_1:
    case QType::Q4_K:
    case QType::Q5_K: return {0, 2};
    case QType::Q6_K: return {208};
    case QType::Q2_K: return {80, 82};
    case QType::Q3_K: return {108};
    case QType::MXFP4: return {};
    default: return {0};
  }
}

// N rows of K values: random quant bytes with finite random scales of either sign (the decoders
// promise dequantize_row's bits for finite scales), or random floats; rows rb = dense + 8 apart.
// MXFP4's exponent bytes are random too (every scale, 2^-128 to 2^127: the largest codes under
// 2^127 are inf).
std::vector<u8> random_rows(QType t, i64 N, i64 K, i64 rb, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<u8> w(static_cast<std::size_t>(N * rb), 0xEE);
  const QTypeTraits tr = qtype_traits(t);
  for (i64 n = 0; n < N; ++n) {
    u8* row = w.data() + n * rb;
    if (is_float_type(t)) {
      std::vector<float> x(static_cast<std::size_t>(K));
      for (float& v : x) v = u(rng) * (rng() % 8 == 0 ? 1e-6f : 1.0f);
      quantize_row(t, x.data(), row, K);
      continue;
    }
    for (i64 i = 0; i < qtype_row_bytes(t, K); ++i) row[i] = static_cast<u8>(rng());
    for (i64 b = 0; b < K / tr.block; ++b)
      for (int f : scale_fields(t)) {
        const std::uint16_t h = detail::f32_to_f16(u(rng) * (rng() % 5 == 0 ? 1e-4f : 0.05f));
        std::memcpy(row + b * tr.block_bytes + f, &h, 2);
      }
  }
  return w;
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

class QGemmDecoders : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(detected_isa()))
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam());
    ks_ = GetParam() == Isa::Avx512 ? detail::qgemm_kernels_avx512()
          : GetParam() == Isa::Avx2 ? detail::qgemm_kernels_avx2()
                                    : detail::qgemm_kernels_scalar();
    ASSERT_NE(ks_.dequant_rows, nullptr);
    ASSERT_NE(ks_.dot_rows, nullptr);
  }
  detail::QGemmKernels ks_;
};

// dequant_rows of rows [1, 4) and values [k0, K) (k0 one block in) holds dequantize_row's bits.
TEST_P(QGemmDecoders, SliversAreDequantizeRowsBits) {
  std::uint32_t seed = 1;
  for (QType t : kTypes)
    for (i64 blocks : {1, 3, 9}) {
      const i64 block = is_float_type(t) ? 32 : qtype_traits(t).block;
      const i64 K = block * blocks + (is_float_type(t) ? 7 : 0), N = 5;  // float rows: a tail past the last 32
      const i64 rb = qtype_row_bytes(t, K) + 8;
      const std::vector<u8> w = random_rows(t, N, K, rb, seed++);
      const i64 k0 = blocks > 1 ? block : 0, kc = K - k0, ldo = kc + 3;
      std::vector<float> out(static_cast<std::size_t>(3 * ldo), -9.0f), want(static_cast<std::size_t>(K));
      ks_.dequant_rows(t, w.data(), rb, 1, 3, k0, kc, out.data(), ldo);
      for (i64 r = 0; r < 3; ++r) {
        dequantize_row(t, w.data() + (1 + r) * rb, want.data(), K);
        for (i64 k = 0; k < kc; ++k)
          ASSERT_EQ(bits(out[static_cast<std::size_t>(r * ldo + k)]), bits(want[static_cast<std::size_t>(k0 + k)]))
              << qtype_name(t) << " K=" << K << " row " << 1 + r << " value " << k0 + k << ": "
              << out[static_cast<std::size_t>(r * ldo + k)] << " vs " << want[static_cast<std::size_t>(k0 + k)];
        ASSERT_EQ(out[static_cast<std::size_t>(r * ldo + kc)], -9.0f) << qtype_name(t) << ": wrote past kc";
      }
    }
}

// dot_rows with row m of A one-hot at k_m gives C[m][n] = W[n][k_m] exactly, for M = 1, 3 and 8
// (the decode tiles of every height) and N = 7 (groups of 4 rows and single rows). K is 3 blocks,
// or 35 for the 32-weight block types: past two of the groups of 16 blocks whose scales their
// decode converts together.
TEST_P(QGemmDecoders, DecodeRowsPickExactWeights) {
  std::uint32_t seed = 100;
  for (QType t : kTypes) {
    const i64 block = is_float_type(t) ? 32 : qtype_traits(t).block;
    const i64 blocks = block == 32 && !is_float_type(t) ? 35 : 3;
    const i64 K = block * blocks + (is_float_type(t) ? 5 : 0), N = 7, rb = qtype_row_bytes(t, K) + 8;
    std::vector<u8> w = random_rows(t, N, K, rb, seed++);
    // MXFP4: exponents up to 240 (finite weights, subnormal scales included): an inf weight would
    // make the one-hot product's other terms inf * 0 = NaN.
    if (t == QType::MXFP4)
      for (i64 n = 0; n < N; ++n)
        for (i64 b = 0; b < K / 32; ++b) w[static_cast<std::size_t>(n * rb + 17 * b)] %= 241;
    std::vector<float> wd(static_cast<std::size_t>(N * K));
    for (i64 n = 0; n < N; ++n) dequantize_row(t, w.data() + n * rb, wd.data() + n * K, K);
    for (i64 M : {1, 3, 8})
      for (i64 start = 0; start < K; start += 5) {
        std::vector<float> a(static_cast<std::size_t>(M * K), 0.0f), c(static_cast<std::size_t>(M * N), -9.0f);
        std::vector<i64> pick(static_cast<std::size_t>(M));
        for (i64 m = 0; m < M; ++m) {
          pick[static_cast<std::size_t>(m)] = (start + 37 * m) % K;
          a[static_cast<std::size_t>(m * K + pick[static_cast<std::size_t>(m)])] = 1.0f;
        }
        ks_.dot_rows(t, M, K, a.data(), K, w.data(), rb, 0, N, c.data(), N, false);
        for (i64 m = 0; m < M; ++m)
          for (i64 n = 0; n < N; ++n) {
            const float want = wd[static_cast<std::size_t>(n * K + pick[static_cast<std::size_t>(m)])];
            ASSERT_EQ(c[static_cast<std::size_t>(m * N + n)], want)
                << qtype_name(t) << " M=" << M << " row " << m << " (one-hot at " << pick[static_cast<std::size_t>(m)]
                << ") x W row " << n;
          }
      }
  }
}

#ifdef QKV_GEMM_AVX512_EMULATED
#define QKV_DECODER_ISAS Isa::Avx512
#else
#define QKV_DECODER_ISAS Isa::Scalar, Isa::Avx2, Isa::Avx512
#endif
INSTANTIATE_TEST_SUITE_P(AllIsas, QGemmDecoders, ::testing::Values(QKV_DECODER_ISAS),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace qkv::kernels
