// qgemm (kernels/qgemm.h) against its naive twin qgemm_ref over awkward shapes, every weight type,
// every ISA (AVX2 forced through set_isa on AVX-512 machines), 1 and 2 threads, padded strides,
// the epilogue and accumulate; bitwise determinism over thread counts and qgemm_part splits.
//
// Tolerance of the default (F32 activation) path, per product (REFERENCES.md R1): with ref_hp the
// double-accumulated product of the exactly dequantized weights (qgemm_ref) and ref_lp the same
// product summed sequentially in float32,
//   max|qgemm - ref_hp| <= 2 * max|ref_lp - ref_hp| + 1e-5 * (1 + max|ref_hp|)
// and, per element, the forward error bound of a float32 dot product in any order,
//   |qgemm - ref_hp| <= 1.01 * K * eps * sum_k |a_k w_k| + 1e-30.
// Worst ratios of this run are printed at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../src/kernels/qgemm_internal.h"
#include "../../src/kernels/quant_internal.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/kernels/quant.h"
#include "testing/guards.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;
using u8 = std::uint8_t;

const QType kTypes[] = {QType::F32,  QType::F16,  QType::BF16, QType::Q8_0, QType::Q4_0,   QType::Q4_1,   QType::Q5_0,
                        QType::Q5_1, QType::Q4_K, QType::Q5_K, QType::Q6_K, QType::Q2_K, QType::Q3_K,
                        QType::IQ4_NL, QType::IQ4_XS, QType::MXFP4};

bool is_float_type(QType t) { return t == QType::F32 || t == QType::F16 || t == QType::BF16; }

// Byte offsets of a block's f16 scale fields (kernels/quant.h; MXFP4's scale is an exponent byte
// instead: make_weights sets it).
std::vector<int> scale_fields(QType t) {
  switch (t) {
    case QType::Q4_1:
    case QType::Q5_1:
    case QType::Q4_K:
    case QType::Q5_K: return {0, 2};
    case QType::Q6_K: return {208};
    case QType::Q2_K: return {80, 82};
    case QType::Q3_K: return {108};
    default: return {0};
  }
}

void put_half(u8* p, float x) {
  const std::uint16_t h = detail::f32_to_f16(x);
  std::memcpy(p, &h, 2);
}

// N rows of K values of type t, row_bytes = dense + pad (the padding bytes are 0xFF: read, they
// would show). Block types: random quant bytes, scales set so weights are O(1/sqrt(K)) (d > 0,
// offsets of either sign; MXFP4's d a power of two, a quarter of a unit to one); float types:
// uniform values converted.
struct Weights {
  QMatrix W;
  std::vector<u8> bytes;
};
Weights make_weights(QType t, i64 N, i64 K, i64 pad, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const i64 dense = qtype_row_bytes(t, K), rb = dense + pad;
  Weights w;
  w.bytes.assign(static_cast<std::size_t>(std::max<i64>(N * rb, 1)), 0xFF);
  const QTypeTraits tr = qtype_traits(t);
  const float s = 1.0f / std::sqrt(static_cast<float>(std::max<i64>(K, 1)));
  for (i64 n = 0; n < N; ++n) {
    u8* row = w.bytes.data() + n * rb;
    if (is_float_type(t)) {
      std::vector<float> x(static_cast<std::size_t>(K));
      for (float& v : x) v = u(rng) * 2.0f * s;
      quantize_row(t, x.data(), row, K);
      continue;
    }
    for (i64 i = 0; i < dense; ++i) row[i] = static_cast<u8>(rng());
    // Per-weight scale of the quants: Q8_0 |q| <= 127, 4/5-bit q <= 31, k-quants sc * q <= 63 * 31,
    // Q2_K sc * q <= 15 * 3, Q3_K |sc * q| <= 32 * 4, IQ4_NL |value| <= 127, IQ4_XS |sc * value| <= 32 * 127,
    // MXFP4 |value| <= 12.
    const float unit = t == QType::Q8_0 || t == QType::IQ4_NL ? s / 64
                       : (t == QType::Q4_K || t == QType::Q5_K) ? s / 600
                       : t == QType::Q6_K || t == QType::IQ4_XS ? s / 2000
                       : t == QType::Q2_K ? s / 24
                       : t == QType::Q3_K ? s / 64 : s / 8;
    for (i64 b = 0; b < K / tr.block; ++b) {
      u8* blk = row + b * tr.block_bytes;
      if (t == QType::MXFP4) {
        blk[0] = static_cast<u8>(128 + static_cast<int>(std::floor(std::log2(unit))) - static_cast<int>(rng() % 2));
        continue;
      }
      const std::vector<int> f = scale_fields(t);
      put_half(blk + f[0], unit * (0.5f + 0.5f * (u(rng) + 1.0f)));
      if (f.size() > 1)
        put_half(blk + f[1], (t == QType::Q4_K || t == QType::Q5_K || t == QType::Q2_K ? unit * 4 : s) * u(rng));
    }
  }
  w.W = QMatrix{t, w.bytes.data(), N, K, rb};
  return w;
}

// A [M, K] with row stride K + pad; padding NaN.
std::vector<float> make_a(i64 M, i64 K, i64 lda, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(std::max<i64>(M * lda, 1)), std::numeric_limits<float>::quiet_NaN());
  for (i64 m = 0; m < M; ++m)
    for (i64 k = 0; k < K; ++k) a[m * lda + k] = u(rng);
  return a;
}

std::vector<float> dequantized(const QMatrix& W) {
  std::vector<float> w(static_cast<std::size_t>(std::max<i64>(W.rows * W.cols, 1)));
  for (i64 n = 0; n < W.rows; ++n)
    dequantize_row(W.type, static_cast<const u8*>(W.data) + n * W.row_bytes, w.data() + n * W.cols, W.cols);
  return w;
}

double g_worst_r1 = 0, g_worst_elem = 0;
struct PrintWorst : ::testing::Environment {
  void TearDown() override {
    std::printf("[ qgemm    ] worst max|err| / (2 max|lp err| + floor): %.3g; worst per-element |err| / bound: %.3g\n",
                g_worst_r1, g_worst_elem);
  }
};
[[maybe_unused]] ::testing::Environment* const g_print = ::testing::AddGlobalTestEnvironment(new PrintWorst);

struct Case {
  QType t;
  i64 M, N, K;
  i64 pad = 0;  // of lda, ldc and row_bytes
};

std::string describe(const Case& c) {
  return std::string(qtype_name(c.t)) + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
         " K=" + std::to_string(c.K) + " pad=" + std::to_string(c.pad) + " isa=" + isa_name(active_isa()) +
         " threads=" + std::to_string(num_threads());
}

// The references of one case (shared by every ISA and thread count).
struct Refs {
  Weights w;
  std::vector<float> a, hp, absprod;
  double lp_err = 0, max_hp = 0;
  i64 lda = 0, ldc = 0;
};

Refs make_refs(const Case& c, std::uint32_t seed) {
  Refs r;
  r.w = make_weights(c.t, c.N, c.K, c.pad, seed);
  r.lda = c.K + c.pad;
  r.ldc = c.N + c.pad;
  r.a = make_a(c.M, c.K, r.lda, seed + 1);
  r.hp.assign(static_cast<std::size_t>(std::max<i64>(c.M * r.ldc, 1)), 0.0f);
  qgemm_ref(c.M, r.a.data(), r.lda, r.w.W, r.hp.data(), r.ldc);
  const std::vector<float> w = dequantized(r.w.W);
  r.absprod.assign(r.hp.size(), 0.0f);
  for (i64 m = 0; m < c.M; ++m)
    for (i64 n = 0; n < c.N; ++n) {
      float lp = 0;
      double ap = 0, hp = 0;
      for (i64 k = 0; k < c.K; ++k) {
        const float x = r.a[m * r.lda + k], y = w[n * c.K + k];
        lp = lp + x * y;  // float32, sequential
        hp += static_cast<double>(x) * y;
        ap += std::fabs(static_cast<double>(x) * y);
      }
      const std::size_t i = static_cast<std::size_t>(m * r.ldc + n);
      r.lp_err = std::max(r.lp_err, std::fabs(static_cast<double>(lp) - hp));
      r.max_hp = std::max(r.max_hp, std::fabs(hp));
      r.absprod[i] = static_cast<float>(ap);
    }
  return r;
}

// Runs qgemm on the case and checks it against the references; returns C (padding included).
std::vector<float> run_and_check(const Case& c, const Refs& r) {
  std::vector<float> C(static_cast<std::size_t>(std::max<i64>(c.M * r.ldc, 1)), -7.0f);
  qgemm(c.M, r.a.data(), r.lda, r.w.W, C.data(), r.ldc);
  double err = 0;
  int bad = 0;
  const double eps = std::numeric_limits<float>::epsilon();
  for (i64 m = 0; m < c.M; ++m)
    for (i64 n = 0; n < r.ldc; ++n) {
      const std::size_t i = static_cast<std::size_t>(m * r.ldc + n);
      if (n >= c.N) {
        if (C[i] != -7.0f && bad++ < 3) ADD_FAILURE() << describe(c) << ": padding of C written at " << m << "," << n;
        continue;
      }
      const double d = std::fabs(static_cast<double>(C[i]) - r.hp[i]);
      const double bound = 1.01 * static_cast<double>(c.K) * eps * r.absprod[i] + 1e-30;
      g_worst_elem = std::max(g_worst_elem, d / bound);
      if (!(d <= bound) && bad++ < 3)
        ADD_FAILURE() << describe(c) << ": C(" << m << "," << n << ") = " << C[i] << ", reference " << r.hp[i]
                      << ", bound " << bound;
      err = std::max(err, std::isnan(d) ? HUGE_VAL : d);
    }
  const double tol = 2 * r.lp_err + 1e-5 * (1 + r.max_hp);
  g_worst_r1 = std::max(g_worst_r1, err / tol);
  EXPECT_LE(err, tol) << describe(c) << " (float32 sequential error " << r.lp_err << ")";
  return C;
}

std::vector<i64> k_values(QType t) {
  if (is_float_type(t)) return {40, 96, 256};
  if (qtype_traits(t).block == 256) return {256, 512};
  return {32, 96, 256};
}

class QGemmIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(detected_isa()))
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam());
    set_isa(GetParam());
    ASSERT_EQ(active_isa(), GetParam());
  }
  testing::IsaGuard isa_guard_;
  testing::ThreadsGuard threads_guard_;
};

// Every type, M on both sides of the decode / prefill switch, N off every tile size, 1 and 2
// threads (bitwise equal), padded strides on some shapes.
TEST_P(QGemmIsa, MatchesReferenceOverShapes) {
  std::uint32_t seed = 100;
  for (QType t : kTypes)
    for (i64 K : k_values(t))
      for (i64 M : {1, 2, 3, 5, 8, 17, 64, 100})
        for (i64 N : {1, 7, 37}) {
          const Case c{t, M, N, K, (M + N) % 3 == 0 ? 3 : 0};
          const Refs r = make_refs(c, seed++);
          set_num_threads(1);
          const std::vector<float> one = run_and_check(c, r);
          set_num_threads(2);
          const std::vector<float> two = run_and_check(c, r);
          ASSERT_EQ(std::memcmp(one.data(), two.data(), one.size() * 4), 0) << describe(c) << ": 1 vs 2 threads";
        }
}

// Larger products: several K blocks of the prefill GEMM, more than one decode row group per
// thread, N not a multiple of the micro-kernel's columns.
TEST_P(QGemmIsa, MatchesReferenceLarger) {
  std::uint32_t seed = 900;
  for (QType t : {QType::Q4_1, QType::Q8_0, QType::Q4_K, QType::Q6_K, QType::F16, QType::Q2_K, QType::Q3_K,
                  QType::IQ4_NL, QType::IQ4_XS, QType::MXFP4})
    for (i64 M : {1, 4, 8, 9, 77}) {
      const i64 K = t == QType::F16 ? 1000 : qtype_traits(t).block == 256 ? 768 : 576;
      const Case c{t, M, 131, K, 0};
      set_num_threads(2);
      run_and_check(c, make_refs(c, seed++));
    }
}

// The epilogue (bias, GELU, residual) and accumulate on both paths: each element as qgemm_ref's
// (double, one rounding) within the product's bound plus the epilogue's float32 roundings.
TEST_P(QGemmIsa, EpilogueAndAccumulate) {
  std::uint32_t seed = 3000;
  for (QType t : {QType::Q4_1, QType::Q8_0, QType::Q6_K, QType::BF16, QType::IQ4_XS})
    for (i64 M : {1, 3, 40}) {
      const i64 K = qtype_traits(t).block == 256 ? 256 : 96, N = 37, ldc = N + 2;
      const Weights w = make_weights(t, N, K, 0, seed++);
      const std::vector<float> a = make_a(M, K, K, seed++);
      std::vector<float> bias = make_a(1, N, N, seed++), res = make_a(M, N, N + 1, seed++);
      for (const bool acc : {false, true})
        for (const GemmAct act : {GemmAct::None, GemmAct::GeluTanh, GemmAct::GeluErf}) {
          if (acc && act != GemmAct::None) continue;
          QGemmOptions o;
          o.accumulate = acc;
          if (!acc) o.epilogue = GemmEpilogue{bias.data(), act, res.data(), N + 1};
          std::vector<float> C(static_cast<std::size_t>(M * ldc)), R;
          for (std::size_t i = 0; i < C.size(); ++i) C[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
          R = C;
          qgemm(M, a.data(), K, w.W, C.data(), ldc, o);
          qgemm_ref(M, a.data(), K, w.W, R.data(), ldc, o);
          const std::vector<float> wd = dequantized(w.W);
          for (i64 m = 0; m < M; ++m)
            for (i64 n = 0; n < N; ++n) {
              double ap = 0;
              for (i64 k = 0; k < K; ++k) ap += std::fabs(static_cast<double>(a[m * K + k]) * wd[n * K + k]);
              const float r = R[m * ldc + n];
              const double tol = 1.01 * K * 1.2e-7 * ap * 1.2 + 4e-7 * (std::fabs(r) + 2);
              ASSERT_NEAR(C[m * ldc + n], r, tol) << qtype_name(t) << " M=" << M << " acc=" << acc
                                                  << " act=" << static_cast<int>(act) << " at " << m << "," << n;
            }
        }
    }
}

// qgemm_part over any number of parts writes bitwise what qgemm writes, on both paths.
TEST_P(QGemmIsa, PartsTogetherEqualTheWhole) {
  std::uint32_t seed = 4000;
  for (QType t : {QType::Q4_1, QType::Q5_K, QType::F16, QType::Q3_K})
    for (i64 M : {1, 5, 33})
      for (const QActivations act : {QActivations::F32, QActivations::Q8}) {
        const i64 K = qtype_traits(t).block == 256 ? 512 : 160, N = 43;
        const Weights w = make_weights(t, N, K, 0, seed++);
        const std::vector<float> a = make_a(M, K, K, seed++);
        QGemmOptions o;
        o.activations = act;
        std::vector<float> whole(static_cast<std::size_t>(M * N));
        set_num_threads(2);
        qgemm(M, a.data(), K, w.W, whole.data(), N, o);
        for (int parts : {1, 2, 3, 7}) {
          std::vector<float> C(whole.size(), std::numeric_limits<float>::quiet_NaN());
          for (int p = parts - 1; p >= 0; --p) qgemm_part(M, a.data(), K, w.W, C.data(), N, o, p, parts);
          ASSERT_EQ(std::memcmp(C.data(), whole.data(), C.size() * 4), 0)
              << qtype_name(t) << " M=" << M << " parts=" << parts << " q8=" << (act == QActivations::Q8);
        }
      }
}

// qgemm_part_columns names exactly the columns a part writes, in every row, where the path splits
// by columns (the Q8 path, the decode path, rows_alone); nullopt on the prefill path. Checked by
// writing each part alone over NaN: its columns are the product's, every other column untouched.
TEST_P(QGemmIsa, PartColumnsAreTheColumnsAPartWrites) {
  std::uint32_t seed = 4500;
  for (QType t : {QType::Q4_1, QType::Q8_0, QType::Q6_K, QType::F32})
    for (i64 M : {i64{1}, i64{3}, qgemm_decode_max_m() + 1, i64{40}})
      for (const QActivations act : {QActivations::F32, QActivations::Q8})
        for (const bool alone : {false, true}) {
          const i64 K = qtype_traits(t).block == 256 ? 256 : 96, N = 75;
          const Weights w = make_weights(t, N, K, 0, seed++);
          const std::vector<float> a = make_a(M, K, K, seed++);
          QGemmOptions o;
          o.activations = act;
          o.rows_alone = alone;
          std::vector<float> whole(static_cast<std::size_t>(M * N));
          qgemm(M, a.data(), K, w.W, whole.data(), N, o);
          const bool by_columns = qgemm_uses_q8(M, t, o) || M <= qgemm_decode_max_m() || alone;
          for (int parts : {1, 2, 3, 7}) {
            i64 covered = 0;
            for (int p = 0; p < parts; ++p) {
              const auto cols = qgemm_part_columns(M, w.W, o, p, parts);
              ASSERT_EQ(cols.has_value(), by_columns) << qtype_name(t) << " M=" << M;
              if (!cols) continue;
              const auto [n0, n1] = *cols;
              ASSERT_EQ(n0, covered) << "parts leave a gap or overlap";
              covered = n1;
              std::vector<float> C(whole.size(), std::numeric_limits<float>::quiet_NaN());
              qgemm_part(M, a.data(), K, w.W, C.data(), N, o, p, parts);
              for (i64 m = 0; m < M; ++m)
                for (i64 n = 0; n < N; ++n) {
                  const float c = C[static_cast<std::size_t>(m * N + n)];
                  if (n >= n0 && n < n1)
                    ASSERT_EQ(c, whole[static_cast<std::size_t>(m * N + n)])
                        << qtype_name(t) << " M=" << M << " part " << p << "/" << parts << " column " << n;
                  else
                    ASSERT_TRUE(std::isnan(c)) << qtype_name(t) << " M=" << M << " part " << p << "/" << parts
                                               << " wrote column " << n << " outside [" << n0 << ", " << n1 << ")";
                }
            }
            if (by_columns) {
              EXPECT_EQ(covered, N);
            }
          }
        }
  EXPECT_THROW(qgemm_part_columns(1, make_weights(QType::Q4_1, 8, 32, 0, 1).W, {}, 2, 2), ValueError);
}

// Q8 activations: against qgemm_ref's Q8 twin (the same quantized activations, exact integer
// block sums) within float32 summation of the block terms, and against the exact product within
// the activation quantization's error (|a| / 254 per value at most). Prefill rows, and decode rows
// (taken by the Q8 path for the types of qgemm_q8_every_m, by the exact path otherwise). N = 75:
// full panels of the ISA's width (32 or 16 columns: its vector packer, or for M = 1 its q8_row,
// where it has them) and a partial one.
TEST_P(QGemmIsa, Q8ActivationsMatchTheirTwin) {
  std::uint32_t seed = 5000;
  double worst = 0;
  for (QType t : kTypes)
    for (i64 M : {i64{1}, i64{3}, qgemm_decode_max_m() + 1, i64{37}, i64{100}}) {
      const i64 K = qtype_traits(t).block == 256 ? 512 : is_float_type(t) ? 96 : 160, N = 75, ldc = N + 1;
      const Weights w = make_weights(t, N, K, 0, seed++);
      const std::vector<float> a = make_a(M, K, K + 3, seed++);
      QGemmOptions o;
      o.activations = QActivations::Q8;
      std::vector<float> C(static_cast<std::size_t>(M * ldc), -7.0f), R(C), X(C);
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::vector<float> C2(C.size(), -7.0f);
        qgemm(M, a.data(), K + 3, w.W, C2.data(), ldc, o);
        if (threads == 2) {
          ASSERT_EQ(std::memcmp(C.data(), C2.data(), C.size() * 4), 0) << qtype_name(t) << " 1 vs 2 threads";
        }
        C = C2;
      }
      qgemm_ref(M, a.data(), K + 3, w.W, R.data(), ldc, o);
      qgemm_ref(M, a.data(), K + 3, w.W, X.data(), ldc, {});
      const std::vector<float> wd = dequantized(w.W);
      i64 differ = 0;  // elements where the Q8 path is not the exact one (it must be taken)
      for (i64 m = 0; m < M; ++m)
        for (i64 n = 0; n < ldc; ++n) {
          const std::size_t i = static_cast<std::size_t>(m * ldc + n);
          differ += n < N && std::fabs(C[i] - X[i]) > 1e-4 * (std::fabs(X[i]) + 1e-3);
          if (n == N) {
            ASSERT_EQ(C[i], -7.0f) << "padding of C written";
            continue;
          }
          double ap = 0, wsum = 0, amax = 0;
          for (i64 k = 0; k < K; ++k) {
            ap += std::fabs(static_cast<double>(a[m * (K + 3) + k]) * wd[n * K + k]);
            wsum += std::fabs(wd[n * K + k]);
            amax = std::max(amax, std::fabs(static_cast<double>(a[m * (K + 3) + k])));
          }
          // float32 sums of K/32 block terms, each |term| <= sum |w| |d_a q_a|.
          const double tol = (K / 32.0 + 4) * 1.2e-7 * (ap + wsum * amax / 127) + 1e-7;
          worst = std::max(worst, std::fabs(C[i] - R[i]) / tol);
          ASSERT_NEAR(C[i], R[i], tol) << qtype_name(t) << " M=" << M << " at " << m << "," << n;
          // Against the exact product: each activation is off by at most amax_block / 254.
          const double qtol = wsum * amax / 254.0 * 1.01 + tol;
          ASSERT_NEAR(C[i], X[i], qtol) << qtype_name(t) << " M=" << M << " (exact product) at " << m << "," << n;
        }
      const bool q8_taken = !is_float_type(t) && (M > qgemm_decode_max_m() || qgemm_q8_every_m(t));
      if (q8_taken) {
        EXPECT_GT(differ, M * N / 4) << qtype_name(t) << " M=" << M << ": the Q8 path was not taken";
      } else {  // the exact path: bitwise what qgemm gives without Q8
        std::vector<float> E(C.size(), -7.0f);
        qgemm(M, a.data(), K + 3, w.W, E.data(), ldc, {});
        EXPECT_EQ(std::memcmp(C.data(), E.data(), C.size() * 4), 0) << qtype_name(t) << " M=" << M << ": the exact path was not taken";
      }
    }
  std::printf("[ qgemm q8 ] worst |q8 - twin| / bound: %.3g\n", worst);
}

// rows_alone: every row of C is bitwise the row a product of its own (M = 1) gives, for M past
// the decode path's rows, with the epilogue or accumulate, over parts and threads, Q8 asked or
// not (used for the types of qgemm_q8_every_m); and within the reference's bound. Short rows take the AVX-512 path's
// wide tiles (8 rows of A), long ones (over 32 KiB for 8 rows) its 4-row tiles.
TEST_P(QGemmIsa, RowsAloneGiveEachRowItsOwnBits) {
  std::uint32_t seed = 6000;
  for (QType t : {QType::Q4_1, QType::Q8_0, QType::Q4_0, QType::Q6_K, QType::F16, QType::Q2_K, QType::IQ4_NL,
                  QType::MXFP4})
    for (const bool long_rows : {false, true})
    for (i64 M : {qgemm_decode_max_m() + 1, i64{12}, i64{33}}) {
      if (long_rows && M == 12) continue;
      const bool k256 = qtype_traits(t).block == 256;
      const i64 K = long_rows ? (k256 ? 1280 : 1056) : (k256 ? 512 : 160), N = 41, ldc = N + 1;
      const Weights w = make_weights(t, N, K, 0, seed++);
      const std::vector<float> a = make_a(M, K, K + 2, seed++), bias = make_a(1, N, N, seed++);
      for (const bool acc : {false, true})
        for (const QActivations act : {QActivations::F32, QActivations::Q8}) {
          QGemmOptions o;
          o.accumulate = acc;
          o.activations = act;
          if (!acc) o.epilogue = GemmEpilogue{bias.data(), GemmAct::GeluTanh, nullptr, 0};
          std::vector<float> init(static_cast<std::size_t>(M * ldc));
          for (std::size_t i = 0; i < init.size(); ++i) init[i] = 0.125f * static_cast<float>(i % 5);
          std::vector<float> alone = init;
          set_num_threads(1);
          for (i64 m = 0; m < M; ++m) qgemm(1, a.data() + m * (K + 2), K + 2, w.W, alone.data() + m * ldc, ldc, o);
          o.rows_alone = true;
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            std::vector<float> C = init;
            qgemm(M, a.data(), K + 2, w.W, C.data(), ldc, o);
            ASSERT_EQ(std::memcmp(C.data(), alone.data(), C.size() * 4), 0)
                << qtype_name(t) << " M=" << M << " acc=" << acc << " q8=" << (act == QActivations::Q8) << " threads=" << threads;
            std::vector<float> P = init;
            for (int p = 0; p < 3; ++p) qgemm_part(M, a.data(), K + 2, w.W, P.data(), ldc, o, p, 3);
            ASSERT_EQ(std::memcmp(P.data(), alone.data(), P.size() * 4), 0) << qtype_name(t) << " M=" << M << " parts";
          }
        }
      // The products themselves are right (the shapes' check against the reference, rows_alone).
      const Case c{t, M, N, K, 2};
      const Refs r = make_refs(c, seed++);
      std::vector<float> C(static_cast<std::size_t>(M * r.ldc));
      QGemmOptions o;
      o.rows_alone = true;
      qgemm(M, r.a.data(), r.lda, r.w.W, C.data(), r.ldc, o);
      for (i64 m = 0; m < M; ++m)
        for (i64 n = 0; n < N; ++n) {
          const std::size_t i = static_cast<std::size_t>(m * r.ldc + n);
          ASSERT_LE(std::fabs(static_cast<double>(C[i]) - r.hp[i]), 1.01 * K * 1.2e-7 * r.absprod[i] + 1e-30)
              << describe(c) << " rows_alone at " << m << "," << n;
        }
    }
}

// The Q8 path's packers: a full panel of 32 rows of W (the ISA's vector packer, for the types it
// has one for) gives bitwise the products the same rows give in a partial panel (the scalar
// packer): W rows [32, 63) of a 64-row matrix against the 31-row matrix of those rows alone.
TEST_P(QGemmIsa, Q8VectorPackerEqualsTheScalarOne) {
  std::uint32_t seed = 7000;
  for (QType t : {QType::Q4_0, QType::Q4_1, QType::Q8_0, QType::Q5_1, QType::Q4_K, QType::Q6_K, QType::Q5_0,
                  QType::IQ4_NL, QType::MXFP4})
    for (i64 M : {1, 7, 13}) {
      const i64 K = qtype_traits(t).block == 256 ? 512 : 352, N = 64;
      const Weights w = make_weights(t, N, K, 0, seed++);
      const std::vector<float> a = make_a(M, K, K, seed++);
      QGemmOptions o;
      o.activations = QActivations::Q8;
      o.rows_alone = true;
      std::vector<float> full(static_cast<std::size_t>(M * N)), part(static_cast<std::size_t>(M * 31));
      qgemm(M, a.data(), K, w.W, full.data(), N, o);
      QMatrix rows = w.W;
      rows.data = static_cast<const std::uint8_t*>(w.W.data) + 32 * w.W.row_bytes;
      rows.rows = 31;
      qgemm(M, a.data(), K, rows, part.data(), 31, o);
      for (i64 m = 0; m < M; ++m)
        ASSERT_EQ(std::memcmp(full.data() + m * N + 32, part.data() + m * 31, 31 * 4), 0)
            << qtype_name(t) << " M=" << M << " row " << m;
    }
}

// The decode layout (qgemm_repack_rows8): a product reading it gives bitwise the product of the
// blocks as stored, on every path (decode rows, several rows, rows_alone, prefill rows packed
// from it, accumulate and the epilogue, parts), with N off the 16-row panels and 8-row groups and
// K from one block to past a packing stretch; where the ISA reads it (qgemm_rows8_wanted),
// zeroing it zeroes a full panel's products for a decode row and for prefill rows (it is read,
// not the blocks), it is written group by group as in one call, and each of its rows reads back as
// stored. Other types, padded rows (for the layout, and for a product given one) and rows or
// groups outside it are refused, the message naming them.
TEST_P(QGemmIsa, DecodeLayoutGivesTheSameBits) {
  std::uint32_t seed = 9000;
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no ValueError";
  };
  for (QType t : {QType::Q4_0, QType::Q4_1, QType::Q8_0, QType::Q5_0, QType::Q4_K, QType::Q6_K, QType::IQ4_NL,
                  QType::MXFP4})
    for (i64 K : qtype_traits(t).block == 256 ? std::vector<i64>{256, 768} : std::vector<i64>{32, 160, 576})
      for (i64 N : {i64{8}, i64{40}, i64{75}, i64{200}}) {
        const Weights w = make_weights(t, N, K, 0, seed++);
        const i64 bytes = qgemm_rows8_bytes(w.W);
        ASSERT_EQ(bytes, N / 8 * 8 * w.W.row_bytes);
        std::vector<std::uint8_t> r8(static_cast<std::size_t>(std::max<i64>(bytes, 1)), 0xAB), r8b(r8);
        qgemm_repack_rows8(w.W, r8.data(), 0, N / 8);
        for (i64 g = N / 8; g > 0; --g) qgemm_repack_rows8(w.W, r8b.data(), g - 1, g);
        ASSERT_EQ(r8, r8b) << qtype_name(t) << " written group by group";
        QMatrix W8 = w.W;
        W8.rows8 = r8.data();
        std::vector<std::uint8_t> row(static_cast<std::size_t>(w.W.row_bytes));
        for (i64 r = 0; r < N / 8 * 8; ++r) {  // each row read back as stored
          qgemm_rows8_row(W8, r, row.data());
          ASSERT_EQ(std::memcmp(row.data(), w.bytes.data() + r * w.W.row_bytes, row.size()), 0) << qtype_name(t) << " row " << r;
        }
        EXPECT_NE(message([&] { qgemm_rows8_row(W8, N / 8 * 8, row.data()); })
                      .find("row " + std::to_string(N / 8 * 8) + " is not in the decode layout (" +
                            std::to_string(N / 8 * 8) + " rows)"),
                  std::string::npos);
        EXPECT_NE(message([&] { qgemm_rows8_row(w.W, 0, row.data()); }).find("(0 rows)"), std::string::npos);  // none
        const std::vector<float> bias = make_a(1, N, N, seed++);
        for (i64 M : {i64{1}, i64{3}, i64{5}, i64{40}})
          for (int variant = 0; variant < 3; ++variant) {
            const std::vector<float> a = make_a(M, K, K + 1, seed++);
            QGemmOptions o;
            o.activations = QActivations::Q8;
            o.rows_alone = M == 5;
            o.accumulate = variant == 1;
            if (variant == 2) o.epilogue = GemmEpilogue{bias.data(), GemmAct::GeluTanh, nullptr, 0};
            std::vector<float> init(static_cast<std::size_t>(M * N));
            for (std::size_t i = 0; i < init.size(); ++i) init[i] = 0.25f * static_cast<float>(i % 3);
            std::vector<float> plain = init, with = init, parts = init;
            qgemm(M, a.data(), K + 1, w.W, plain.data(), N, o);
            qgemm(M, a.data(), K + 1, W8, with.data(), N, o);
            ASSERT_EQ(std::memcmp(plain.data(), with.data(), plain.size() * 4), 0)
                << qtype_name(t) << " N=" << N << " K=" << K << " M=" << M << " variant " << variant;
            for (int p = 0; p < 3; ++p) qgemm_part(M, a.data(), K + 1, W8, parts.data(), N, o, p, 3);
            ASSERT_EQ(std::memcmp(plain.data(), parts.data(), plain.size() * 4), 0)
                << qtype_name(t) << " N=" << N << " K=" << K << " M=" << M << " parts";
          }
        if (qgemm_rows8_wanted(t) && N >= 16) {  // a full panel reads the layout, not the blocks
          std::vector<std::uint8_t> zero(r8.size(), 0);
          QMatrix Z = w.W;
          Z.rows8 = zero.data();
          for (i64 M : {i64{1}, i64{40}}) {
            const std::vector<float> a = make_a(M, K, K, seed++);
            QGemmOptions o;
            o.activations = QActivations::Q8;
            std::vector<float> C(static_cast<std::size_t>(M * N), 1.0f);
            qgemm(M, a.data(), K, Z, C.data(), N, o);
            // (0, or for MXFP4 on AVX-512 a subnormal residue: a zero byte is the exponent of 2^-128, and
            // its unsigned codes' offset -12 s and their sums round apart that far down.)
            EXPECT_LE(std::fabs(C[0]), 1e-30f) << qtype_name(t) << " M=" << M << ": the decode layout was not read";
            EXPECT_LE(std::fabs(C[(M - 1) * N + 15]), 1e-30f)
                << qtype_name(t) << " M=" << M << ": the decode layout was not read";
          }
        }
      }
  const Weights k = make_weights(QType::Q2_K, 16, 256, 0, seed++);
  EXPECT_NE(
      message([&] { qgemm_rows8_bytes(k.W); }).find("for Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, IQ4_NL and MXFP4, not Q2_K"),
      std::string::npos);
  const Weights pad = make_weights(QType::Q4_1, 16, 64, 4, seed++);
  EXPECT_NE(message([&] { qgemm_rows8_bytes(pad.W); }).find("needs dense rows (rows=16, cols=64, row_bytes=44)"),
            std::string::npos);
  std::vector<std::uint8_t> some(64);
  QMatrix padded = pad.W;  // a layout beside padded rows: the product refuses it
  padded.rows8 = some.data();
  const std::vector<float> a1 = make_a(1, 64, 64, seed++);
  std::vector<float> c1(16);
  EXPECT_NE(message([&] { qgemm(1, a1.data(), 64, padded, c1.data(), 16, {}); })
                .find("a decode layout (rows8) needs dense rows: row_bytes must be 40 (M=1, N=16, K=64"),
            std::string::npos);
  const Weights ok = make_weights(QType::Q4_1, 16, 64, 0, seed++);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(qgemm_rows8_bytes(ok.W)));
  EXPECT_NE(message([&] { qgemm_repack_rows8(ok.W, out.data(), 0, 3); }).find("groups [0, 3) not in [0, 2]"),
            std::string::npos);
  EXPECT_NE(message([&] { qgemm_repack_rows8(ok.W, out.data(), 1, 0); }).find("groups [1, 0) not in [0, 2]"),
            std::string::npos);
  EXPECT_FALSE(qgemm_rows8_wanted(QType::Q2_K));
}

// The integer decode rows and vector packers of the k-quants in Q4_K_M files (Q4_K, Q6_K), of
// Q5_0 (their fallback) and of the 4-bit table types IQ4_NL and MXFP4 (gpt-oss's experts): every M
// from 1 to 17 (decode rows, the tiles' remainders, prefill rows), K of one block and of three
// (512 + 256), N off the panels and the 8-row groups, with and without the decode layout, 1 and 2
// threads: bitwise the same C in every case, each row bitwise the row a product of its own gives,
// and within the Q8 twin's bound (qgemm_ref with Q8 activations).
TEST_P(QGemmIsa, KQuantQ8RowsMatchTheTwinOverShapes) {
  std::uint32_t seed = 9500;
  double worst = 0;
  for (QType t : {QType::Q4_K, QType::Q6_K, QType::Q5_0, QType::IQ4_NL, QType::MXFP4})
    for (i64 K : qtype_traits(t).block == 256 ? std::vector<i64>{256, 768} : std::vector<i64>{32, 352})
      for (i64 N : {i64{8}, i64{40}, i64{75}}) {
        const Weights w = make_weights(t, N, K, 0, seed++);
        std::vector<std::uint8_t> r8;
        QMatrix W8 = w.W;
        if (qgemm_rows8_wanted(t)) {
          r8.assign(static_cast<std::size_t>(std::max<i64>(qgemm_rows8_bytes(w.W), 1)), 0);
          qgemm_repack_rows8(w.W, r8.data(), 0, N / 8);
          W8.rows8 = r8.data();
        }
        const std::vector<float> wd = dequantized(w.W);
        for (i64 M = 1; M <= 17; ++M) {
          const i64 lda = K + 3, ldc = N + 1;
          const std::vector<float> a = make_a(M, K, lda, seed++);
          QGemmOptions o;
          o.activations = QActivations::Q8;
          std::vector<float> R(static_cast<std::size_t>(M * ldc), -7.0f), first;
          qgemm_ref(M, a.data(), lda, w.W, R.data(), ldc, o);
          for (const QMatrix* W : std::initializer_list<const QMatrix*>{&w.W, &W8})
            for (int threads : {1, 2}) {
              set_num_threads(threads);
              std::vector<float> C(R.size(), -7.0f);
              qgemm(M, a.data(), lda, *W, C.data(), ldc, o);
              if (first.empty()) {
                first = C;
              } else {
                ASSERT_EQ(std::memcmp(first.data(), C.data(), C.size() * 4), 0)
                    << qtype_name(t) << " K=" << K << " N=" << N << " M=" << M << " threads=" << threads
                    << " layout=" << (W->rows8 != nullptr);
              }
            }
          set_num_threads(1);
          // (Without vector kernels, the scalar ISA's: the exact path below the Q8 path's rows.)
          const bool every_m = qgemm_q8_every_m(t), q8 = qgemm_uses_q8(M, t, o);
          EXPECT_EQ(every_m, active_isa() != Isa::Scalar) << qtype_name(t);
          for (i64 m = 0; m < M; ++m) {
            std::vector<float> one(static_cast<std::size_t>(ldc), -7.0f);
            qgemm(1, a.data() + m * lda, lda, W8, one.data(), ldc, o);
            if (every_m) {
              ASSERT_EQ(std::memcmp(one.data(), first.data() + m * ldc, static_cast<std::size_t>(ldc) * 4), 0)
                  << qtype_name(t) << " K=" << K << " N=" << N << " M=" << M << ": row " << m << " alone";
            }
            for (i64 n = 0; q8 && n < N; ++n) {
              double ap = 0, wsum = 0, amax = 0;
              for (i64 k = 0; k < K; ++k) {
                ap += std::fabs(static_cast<double>(a[m * lda + k]) * wd[n * K + k]);
                wsum += std::fabs(wd[n * K + k]);
                amax = std::max(amax, std::fabs(static_cast<double>(a[m * lda + k])));
              }
              const double tol = (K / 32.0 + 4) * 1.2e-7 * (ap + wsum * amax / 127) + 1e-7;
              const std::size_t i = static_cast<std::size_t>(m * ldc + n);
              worst = std::max(worst, std::fabs(first[i] - R[i]) / tol);
              ASSERT_NEAR(first[i], R[i], tol) << qtype_name(t) << " K=" << K << " N=" << N << " M=" << M << " at " << m
                                               << "," << n;
            }
            ASSERT_EQ(first[static_cast<std::size_t>(m * ldc + N)], -7.0f) << "padding of C written";
          }
        }
      }
  std::printf("[ qgemm kq8 ] worst |q8 - twin| / bound: %.3g\n", worst);
}

// The Q8 path's scalar reference of a product: W's rows 7 at a time (a partial panel for every
// ISA, so qgemm_q8.cpp's scalar packer, decode_codes, packs them for q8_tile), each row of C
// written by a product of its own columns.
std::vector<float> q8_scalar_packer_product(i64 M, const float* a, i64 lda, const QMatrix& W, i64 ldc) {
  std::vector<float> C(static_cast<std::size_t>(M * ldc), -7.0f);
  QGemmOptions o;
  o.activations = QActivations::Q8;
  for (i64 n0 = 0; n0 < W.rows; n0 += 7) {
    QMatrix part = W;
    part.rows8 = nullptr;
    part.data = static_cast<const u8*>(W.data) + n0 * W.row_bytes;
    part.rows = std::min<i64>(7, W.rows - n0);
    qgemm(M, a, lda, part, C.data() + n0, ldc, o);
  }
  return C;
}

// The vector kernels of the Q8 path (full panels: the decode rows q8_row / q8_row8 for M = 1, the
// packers q8_pack / q8_pack8 for prefill rows) give bitwise the scalar packer's products
// (q8_scalar_packer_product), for Q4_K, Q6_K, Q5_0, IQ4_NL and MXFP4 (and the types that had them
// before), with and without the decode layout, 1 and 2 threads, M from a decode row to past several
// tiles, K of one block to past the 256-value packing stretch, N off the panels and 8-row groups.
// Once more on extreme blocks (every code at its largest, activations all +-127: AVX2's int16 sums
// of products at their bound) and on blocks whose scales are 0 or negative (MXFP4: exponents at
// the format's ends, 0 to 255, where the unsigned codes' offset -12 s overflows from 253 on: the
// same infinities and NaNs on every path).
TEST_P(QGemmIsa, Q8VectorKernelsEqualTheScalarPackerBitwise) {
  std::uint32_t seed = 9900;
  i64 cases = 0;
  for (QType t : {QType::Q4_K, QType::Q6_K, QType::Q5_0, QType::Q4_0, QType::Q4_1, QType::Q8_0, QType::IQ4_NL,
                  QType::MXFP4})
    for (int kind = 0; kind < 3; ++kind) {  // 0: random blocks, 1: extreme codes, 2: zero / negative scales
      const bool k256 = qtype_traits(t).block == 256;
      const std::vector<i64> Ks = kind > 0 ? std::vector<i64>{k256 ? i64{512} : i64{96}}
                                  : k256   ? std::vector<i64>{256, 512, 768, 1280}
                                           : std::vector<i64>{32, 352, 800};
      for (i64 K : Ks)
        for (i64 N : kind > 0 ? std::vector<i64>{64} : std::vector<i64>{8, 17, 40, 75, 100}) {
          Weights w = make_weights(t, N, K, 0, seed++);
          const QTypeTraits tr = qtype_traits(t);
          const std::vector<int> f = scale_fields(t);
          const int fb = t == QType::MXFP4 ? 1 : 2;  // bytes of a scale field (MXFP4's exponent)
          std::mt19937 rng(seed++);
          for (i64 n = 0; kind > 0 && n < N; ++n)
            for (i64 b = 0; b < K / tr.block; ++b) {
              u8* blk = w.bytes.data() + n * w.W.row_bytes + b * tr.block_bytes;
              if (kind == 1) {  // codes at their largest (Q8_0: -1 as 0xFF; Q6_K scales -1; IQ4_NL -127 as
                                // code 0, MXFP4 -12 as 0xF)
                std::vector<u8> fields;
                for (int h : f) fields.insert(fields.end(), blk + h, blk + h + fb);
                std::memset(blk, t == QType::IQ4_NL ? 0x00 : 0xFF, static_cast<std::size_t>(tr.block_bytes));
                for (std::size_t h = 0; h < f.size(); ++h)
                  std::memcpy(blk + f[h], fields.data() + fb * h, static_cast<std::size_t>(fb));
              } else if (t == QType::MXFP4) {  // exponents at the ends, and where -128 s overflows
                const u8 ends[] = {0, 1, 2, 127, 128, 249, 252, 253, 254, 255};
                if (rng() % 2 == 0) blk[0] = ends[rng() % std::size(ends)];
              } else {  // some d / dmin 0 or negative, some 6-bit and int8 sub-block scales 0
                for (int h : f)
                  if (rng() % 3 == 0) put_half(blk + h, rng() % 2 ? 0.0f : -0.01f);
                if (t == QType::Q6_K && rng() % 2) std::memset(blk + 192, 0, 8);
                if (t == QType::Q4_K && rng() % 2) std::memset(blk + 4, 0, 12);
              }
            }
          std::vector<std::uint8_t> r8;
          QMatrix W8 = w.W;
          if (qgemm_rows8_wanted(t)) {
            r8.assign(static_cast<std::size_t>(std::max<i64>(qgemm_rows8_bytes(w.W), 1)), 0);
            qgemm_repack_rows8(w.W, r8.data(), 0, N / 8);
            W8.rows8 = r8.data();
          }
          for (i64 M : kind > 0 ? std::vector<i64>{1, 7, 17} : std::vector<i64>{1, 2, 3, 7, 17, 64}) {
            const i64 lda = K + 5, ldc = N + 2;
            std::vector<float> a = make_a(M, K, lda, seed++);
            if (kind == 1)
              for (i64 m = 0; m < M; ++m)
                for (i64 k = 0; k < K; ++k) a[m * lda + k] = (m + k / 32) % 2 ? 1.0f : -1.0f;
            const std::vector<float> ref = q8_scalar_packer_product(M, a.data(), lda, w.W, ldc);
            QGemmOptions o;
            o.activations = QActivations::Q8;
            for (const QMatrix* W : std::initializer_list<const QMatrix*>{&w.W, &W8})
              for (int threads : {1, 2}) {
                set_num_threads(threads);
                std::vector<float> C(ref.size(), -7.0f);
                qgemm(M, a.data(), lda, *W, C.data(), ldc, o);
                for (std::size_t i = 0; i < C.size(); ++i)
                  ASSERT_EQ(std::memcmp(&C[i], &ref[i], 4), 0)
                      << qtype_name(t) << " kind " << kind << " K=" << K << " N=" << N << " M=" << M
                      << " threads=" << threads << " layout=" << (W->rows8 != nullptr) << " at "
                      << static_cast<i64>(i) / ldc << "," << static_cast<i64>(i) % ldc << ": " << C[i]
                      << " vs the scalar packer's " << ref[i];
                ++cases;
              }
            set_num_threads(1);
          }
        }
    }
  // The vector kernels were there to be compared: every type takes the Q8 path for a decode row
  // on the vector ISAs, and reads the decode layout.
  for (QType t : {QType::Q4_K, QType::Q6_K, QType::Q5_0, QType::IQ4_NL, QType::MXFP4}) {
    EXPECT_EQ(qgemm_q8_every_m(t), active_isa() != Isa::Scalar) << qtype_name(t);
    EXPECT_EQ(qgemm_rows8_wanted(t), active_isa() != Isa::Scalar) << qtype_name(t);
  }
  EXPECT_GT(cases, 0);
}

// a_q8 (A quantized once by quantize_rows_q8, for products sharing it) gives bitwise the products
// qgemm gives quantizing A itself, on every path and part; a_q8 of another A's shape is refused.
TEST_P(QGemmIsa, PrequantizedRowsGiveTheSameBits) {
  std::uint32_t seed = 8000;
  for (QType t : {QType::Q4_1, QType::Q8_0, QType::Q6_K, QType::F16})
    for (i64 M : {1, 9, 40}) {
      const i64 K = qtype_traits(t).block == 256 ? 512 : 192, N = 70;
      const Weights w = make_weights(t, N, K, 0, seed++);
      const std::vector<float> a = make_a(M, K, K + 5, seed++);
      Q8Rows rows;
      quantize_rows_q8(M, a.data(), K + 5, K, rows);
      for (const bool alone : {false, true}) {
        QGemmOptions o;
        o.activations = QActivations::Q8;
        o.rows_alone = alone;
        std::vector<float> own(static_cast<std::size_t>(M * N)), pre(own.size(), -1.0f);
        qgemm(M, a.data(), K + 5, w.W, own.data(), N, o);
        o.a_q8 = &rows;
        for (int p = 0; p < 2; ++p) qgemm_part(M, a.data(), K + 5, w.W, pre.data(), N, o, p, 2);
        ASSERT_EQ(std::memcmp(own.data(), pre.data(), own.size() * 4), 0) << qtype_name(t) << " M=" << M << " alone=" << alone;
      }
    }
  Q8Rows rows;
  std::vector<float> a(64 * 3, 0.5f), c(3 * 5);
  quantize_rows_q8(3, a.data(), 64, 64, rows);
  std::vector<std::uint8_t> wb(static_cast<std::size_t>(5 * qtype_row_bytes(QType::Q8_0, 32)));
  QGemmOptions o;
  o.activations = QActivations::Q8;
  o.a_q8 = &rows;
  try {
    qgemm(3, a.data(), 64, qmatrix(QType::Q8_0, wb.data(), 5, 32), c.data(), 5, o);
    FAIL() << "a_q8 of K = 64 taken for a product of K = 32";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("a_q8 holds 3 x 64 quantized values"), std::string::npos) << e.what();
  }
  try {
    quantize_rows_q8(2, a.data(), 64, 40, rows);
    FAIL() << "K = 40 (not a multiple of 32) accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(M=2, K=40, lda=64)"), std::string::npos) << e.what();
  }
}

// The vector activation quantizers of the Q8 path (AVX2, and AVX-512 where the CPU has VNNI) write
// bitwise what quantize_q8 writes: random blocks, blocks of halves that round to even (x * 127 /
// amax = k + 0.5), zeros, one NaN or infinity.
class QGemmQ8Quantizer : public ::testing::TestWithParam<Isa> {};

TEST_P(QGemmQ8Quantizer, EqualsTheScalarOne) {
  const bool avx512 = GetParam() == Isa::Avx512;
  if (detected_isa() < GetParam()) GTEST_SKIP() << "this CPU has no " << isa_name(GetParam());
  const detail::QGemmKernels ks = avx512 ? detail::qgemm_kernels_avx512() : detail::qgemm_kernels_avx2();
  if (avx512 && ks.q8_quantize == nullptr) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  ASSERT_NE(ks.q8_quantize, nullptr);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const i64 K = 32 * 40;
  std::vector<float> a(static_cast<std::size_t>(K));
  for (float& x : a) x = u(rng);
  for (int i = 0; i < 32; ++i) a[32 + i] = 0.0f;                                    // block 1: zeros
  for (int i = 0; i < 32; ++i) a[64 + i] = (i == 0 ? 127.0f : static_cast<float>(i % 9) + 0.5f);  // block 2: ties
  for (int i = 0; i < 32; ++i) a[96 + i] = -(static_cast<float>(i) + 0.5f) * (i == 31 ? 1.0f : 0.5f);
  a[130] = std::numeric_limits<float>::quiet_NaN();
  a[170] = -std::numeric_limits<float>::infinity();
  a[200] = 1e-40f;  // a subnormal
  std::vector<detail::Q8Act> fast(static_cast<std::size_t>(K / 32)), ref(fast.size());
  ks.q8_quantize(a.data(), K, fast.data());
  detail::quantize_q8(a.data(), K, ref.data());
  for (std::size_t b = 0; b < fast.size(); ++b) {
    EXPECT_EQ(std::memcmp(&fast[b].d, &ref[b].d, 4), 0) << "block " << b << ": d " << fast[b].d << " vs " << ref[b].d;
    EXPECT_EQ(fast[b].sum, ref[b].sum) << "block " << b;
    EXPECT_EQ(std::memcmp(fast[b].q, ref[b].q, 32), 0) << "block " << b;
  }
}

#ifdef QKV_GEMM_AVX512_EMULATED
// test_gemm_avx512_emulated: only the (SIMDe-emulated) AVX-512 kernels; test_qgemm runs the others.
#define QKV_QGEMM_VECTOR_ISAS Isa::Avx512
#define QKV_QGEMM_ISAS Isa::Avx512
#else
#define QKV_QGEMM_VECTOR_ISAS Isa::Avx2, Isa::Avx512
#define QKV_QGEMM_ISAS Isa::Scalar, Isa::Avx2, Isa::Avx512
#endif
INSTANTIATE_TEST_SUITE_P(VectorIsas, QGemmQ8Quantizer, ::testing::Values(QKV_QGEMM_VECTOR_ISAS),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

INSTANTIATE_TEST_SUITE_P(AllIsas, QGemmIsa, ::testing::Values(QKV_QGEMM_ISAS),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

// Every bad argument is a ValueError naming the argument and the shape.
TEST(QGemmErrors, BadArgumentsAreNamed) {
  std::vector<float> a(64, 1.0f), c(64);
  std::vector<std::uint8_t> w(1024);
  auto msg = [&](auto f) {
    try {
      f();
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const QMatrix ok = qmatrix(QType::Q8_0, w.data(), 2, 32);
  EXPECT_NE(msg([&] { qgemm(1, a.data(), 32, QMatrix{QType::Q8_0, w.data(), 2, 40, 64}, c.data(), 2); }).find("multiple of Q8_0's block of 32"), std::string::npos);
  EXPECT_NE(msg([&] { qgemm(1, a.data(), 16, ok, c.data(), 2); }).find("lda must be >= K"), std::string::npos);
  EXPECT_NE(msg([&] { qgemm(1, a.data(), 32, ok, c.data(), 1); }).find("ldc must be >= N"), std::string::npos);
  EXPECT_NE(msg([&] { qgemm(1, a.data(), 32, QMatrix{QType::Q8_0, w.data(), 2, 32, 8}, c.data(), 2); }).find("row_bytes must be >= 34"), std::string::npos);
  EXPECT_NE(msg([&] { qgemm(-1, a.data(), 32, ok, c.data(), 2); }).find("sizes must be >= 0"), std::string::npos);
  EXPECT_NE(msg([&] { qgemm(1, nullptr, 32, ok, c.data(), 2); }).find("must not be null"), std::string::npos);
  QGemmOptions o;
  o.accumulate = true;
  o.epilogue.act = GemmAct::GeluTanh;
  EXPECT_NE(msg([&] { qgemm(1, a.data(), 32, ok, c.data(), 2, o); }).find("accumulate needs an empty epilogue"), std::string::npos);
  EXPECT_NE(msg([&] { qgemm_part(1, a.data(), 32, ok, c.data(), 2, {}, 2, 2); }).find("part 2 of 2"), std::string::npos);
  EXPECT_NE(msg([&] { qmatrix(QType::Q4_K, w.data(), 1, 100); }), "no error");
}

}  // namespace
}  // namespace qkv::kernels
