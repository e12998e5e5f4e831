// sgemm / dgemm / *_batched against the naive references (gemm_ref.cpp) over
// awkward shapes, every transpose combination, alpha/beta, padded leading
// dimensions, each ISA forced through set_isa, 1 and 2 threads, and bitwise
// determinism.
//
// Tolerance, per element (the standard forward error bound of a dot product,
// gamma_K ~ K*eps, with a factor 4 of headroom for the alpha/beta roundings):
//   |c - ref| <= 4*K*eps*|alpha|*sum_k |a_ik||b_kj| + 4*eps*|beta*c0| + 1e-30
// Measured worst case over this file: 0.25 of the bound in fp32 (small K,
// where the alpha/beta roundings dominate) and 0.0013 in fp64 (the reference
// accumulates in long double); printed at the end of every run. A NaN where
// the reference is finite always fails (R4).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

// Restores the ISA cap and thread count a test changed.
struct EnvGuard {
  Isa isa = active_isa();
  int threads = num_threads();
  ~EnvGuard() {
    set_isa(isa);
    set_num_threads(threads);
  }
};

template <class T>
struct Problem {
  bool ta = false, tb = false;
  i64 M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  T alpha = 1, beta = 0;
  std::vector<T> A, B, C0;  // C0: C before the call
};

template <class T>
T nan_v() {
  return std::numeric_limits<T>::quiet_NaN();
}

// Operands with every element outside the logical matrices (row padding) set
// to NaN, so reading it would show in the result. C is NaN too when beta == 0.
template <class T>
Problem<T> make_problem(bool ta, bool tb, i64 M, i64 N, i64 K, T alpha, T beta, i64 pad, std::uint32_t seed) {
  Problem<T> p;
  p.ta = ta;
  p.tb = tb;
  p.M = M;
  p.N = N;
  p.K = K;
  p.alpha = alpha;
  p.beta = beta;
  const i64 a_rows = ta ? K : M, a_cols = ta ? M : K;
  const i64 b_rows = tb ? N : K, b_cols = tb ? K : N;
  p.lda = a_cols + pad;
  p.ldb = b_cols + pad;
  p.ldc = N + pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto fill = [&](std::vector<T>& v, i64 rows, i64 cols, i64 ld, bool nan_body) {
    v.assign(static_cast<std::size_t>(std::max<i64>(rows * ld, 1)), nan_v<T>());
    if (!nan_body)
      for (i64 r = 0; r < rows; ++r)
        for (i64 c = 0; c < cols; ++c) v[r * ld + c] = static_cast<T>(u(rng));
  };
  fill(p.A, a_rows, a_cols, p.lda, false);
  fill(p.B, b_rows, b_cols, p.ldb, false);
  fill(p.C0, M, N, p.ldc, beta == T(0));
  return p;
}

template <class T>
T at_a(const Problem<T>& p, i64 i, i64 k) {
  return p.ta ? p.A[k * p.lda + i] : p.A[i * p.lda + k];
}
template <class T>
T at_b(const Problem<T>& p, i64 k, i64 j) {
  return p.tb ? p.B[j * p.ldb + k] : p.B[k * p.ldb + j];
}

template <class T>
std::vector<T> run_ref(const Problem<T>& p) {
  std::vector<T> c = p.C0;
  if constexpr (std::is_same_v<T, float>)
    sgemm_ref(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc);
  else
    dgemm_ref(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc);
  return c;
}

template <class T>
std::vector<T> run_fast(const Problem<T>& p, bool threaded = true) {
  std::vector<T> c = p.C0;
  if constexpr (std::is_same_v<T, float>)
    sgemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc,
          threaded);
  else
    dgemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, p.A.data(), p.lda, p.B.data(), p.ldb, p.beta, c.data(), p.ldc,
          threaded);
  return c;
}

std::string describe(bool ta, bool tb, i64 M, i64 N, i64 K) {
  return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
         " K=" + std::to_string(K) + " isa=" + isa_name(active_isa()) + " threads=" + std::to_string(num_threads());
}

// Largest |c - ref| / bound seen by check() in this run, per precision;
// printed at the end so the tolerance's headroom stays visible.
double g_worst_ratio[2] = {0, 0};
struct PrintWorstRatio : ::testing::Environment {
  void TearDown() override {
    std::printf("[ gemm     ] worst |c - ref| / bound: fp32 %.3g, fp64 %.3g\n", g_worst_ratio[0], g_worst_ratio[1]);
  }
};
[[maybe_unused]] ::testing::Environment* const g_print_worst = ::testing::AddGlobalTestEnvironment(new PrintWorstRatio);

// Checks `got` against `ref` with the per-element bound; padding of C
// (columns >= N) must be untouched. Returns the number of bad elements.
template <class T>
int check(const Problem<T>& p, const std::vector<T>& got, const std::vector<T>& ref, double* worst_ratio = nullptr) {
  const double eps = std::numeric_limits<T>::epsilon();
  int bad = 0;
  for (i64 i = 0; i < p.M; ++i) {
    for (i64 j = 0; j < p.ldc; ++j) {
      const std::size_t idx = static_cast<std::size_t>(i * p.ldc + j);
      if (j >= p.N) {  // padding: bit-for-bit what it was
        if (std::memcmp(&got[idx], &p.C0[idx], sizeof(T)) != 0 && bad++ < 3)
          ADD_FAILURE() << describe(p.ta, p.tb, p.M, p.N, p.K) << ": C padding (" << i << "," << j << ") written";
        continue;
      }
      double absprod = 0;
      for (i64 k = 0; k < p.K; ++k)
        absprod += std::fabs(static_cast<double>(at_a(p, i, k))) * std::fabs(static_cast<double>(at_b(p, k, j)));
      const double c0 = p.beta == T(0) ? 0.0 : static_cast<double>(p.C0[idx]);
      const double bound = 4.0 * static_cast<double>(p.K) * eps * std::fabs(static_cast<double>(p.alpha)) * absprod +
                           4.0 * eps * std::fabs(static_cast<double>(p.beta) * c0) + 1e-30;
      const double diff = std::fabs(static_cast<double>(got[idx]) - static_cast<double>(ref[idx]));
      if (worst_ratio && bound > 0) *worst_ratio = std::max(*worst_ratio, diff / bound);
      double& w = g_worst_ratio[sizeof(T) == 4 ? 0 : 1];
      if (bound > 0 && diff / bound > w) w = diff / bound;
      if (!(diff <= bound)) {
        if (bad++ < 3)
          ADD_FAILURE() << describe(p.ta, p.tb, p.M, p.N, p.K) << " alpha=" << p.alpha << " beta=" << p.beta
                        << " lda=" << p.lda << ": C(" << i << "," << j << ") = " << got[idx] << ", reference "
                        << ref[idx] << ", bound " << bound;
      }
    }
  }
  return bad;
}

template <class T>
void expect_matches_ref(bool ta, bool tb, i64 M, i64 N, i64 K, T alpha, T beta, i64 pad, std::uint32_t seed,
                        double* worst = nullptr) {
  const Problem<T> p = make_problem<T>(ta, tb, M, N, K, alpha, beta, pad, seed);
  check(p, run_fast(p), run_ref(p), worst);
}

}  // namespace
// Readable test names in failure messages ("avx2", not "4-byte object").
void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }
namespace {

const i64 kSmall[] = {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33};

// ---------------------------------------------------------------- per ISA

class GemmIsa : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(detected_isa()))
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam()) << " (detected " << isa_name(detected_isa()) << ")";
    set_isa(GetParam());
    ASSERT_EQ(active_isa(), GetParam());
  }
  EnvGuard guard_;
};

TEST_P(GemmIsa, SmallShapeSweepEveryTranspose) {
  set_num_threads(1);
  double worst = 0;
  for (int t = 0; t < 4; ++t)
    for (i64 M : kSmall)
      for (i64 N : kSmall)
        for (i64 K : kSmall)
          expect_matches_ref<float>(t & 1, t & 2, M, N, K, 1.0f, 0.0f, 0, static_cast<std::uint32_t>(M * 7 + N * 3 + K),
                                    &worst);
  RecordProperty("worst_error_over_bound", std::to_string(worst));
}

TEST_P(GemmIsa, MediumShapesAndTileEdges) {
  // Around every blocking boundary of the active micro-kernel (mr, nr, kc,
  // mc and the direct-access thresholds), plus the awkward sizes of REFERENCES.md.
  const GemmTile tile = sgemm_tile();
  const i64 mr = tile.mr, nr = tile.nr;
  const std::vector<i64> Ms = {mr - 1, mr, mr + 1, 2 * mr + 1, 23, 24, 25, 63, 64, 65, 97, 145, 169};
  const std::vector<i64> Ns = {nr - 1, nr, nr + 1, 47, 48, 49, 63, 65, 97, 128};
  const std::vector<i64> Ks = {1, 63, 255, 256, 257, 513};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::uint32_t seed = 1;
    for (int t = 0; t < 4; ++t)
      for (i64 M : Ms)
        for (i64 N : Ns) {
          const i64 K = Ks[(seed++) % Ks.size()];  // every K for every (M, N) over the transposes
          expect_matches_ref<float>(t & 1, t & 2, M, N, K, 1.0f, 0.0f, 0, seed);
        }
  }
}

TEST_P(GemmIsa, LargeAwkwardShapes) {
  const i64 shapes[][3] = {{255, 257, 255}, {257, 255, 257}, {128, 255, 97}, {97, 128, 513}, {64, 257, 65}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int t = 0; t < 4; ++t)
      for (const auto& s : shapes) expect_matches_ref<float>(t & 1, t & 2, s[0], s[1], s[2], 1.0f, 0.0f, 0, 11);
  }
}

TEST_P(GemmIsa, AlphaBetaAndNaNFilledC) {
  const float alphas[] = {1.0f, -0.5f, 2.0f};
  const float betas[] = {0.0f, 1.0f, -1.5f, 0.25f};
  const i64 shapes[][3] = {{7, 17, 5}, {33, 65, 63}, {130, 70, 300}, {5, 33, 1}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int t = 0; t < 4; ++t)
      for (float alpha : alphas)
        for (float beta : betas)
          for (const auto& s : shapes) expect_matches_ref<float>(t & 1, t & 2, s[0], s[1], s[2], alpha, beta, 0, 3);
  }
}

TEST_P(GemmIsa, PaddedLeadingDimensionsNeverRead) {
  // Padding of A and B is NaN and C's padding is checked untouched.
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int t = 0; t < 4; ++t)
      for (i64 pad : {1, 3, 16})
        for (const auto& s : {std::array<i64, 3>{17, 33, 65}, std::array<i64, 3>{130, 97, 257},
                              std::array<i64, 3>{1600, 16, 16}, std::array<i64, 3>{16, 16, 1600}})
          expect_matches_ref<float>(t & 1, t & 2, s[0], s[1], s[2], 1.5f, -0.75f, pad, 5);
  }
}

TEST_P(GemmIsa, SkinnyModelShapes) {
  // What tiny models call: [1600,16]x[16,16] forward, [16,1600]x[1600,16] weight grads.
  const i64 shapes[][3] = {{1600, 16, 16}, {16, 16, 1600}, {1600, 16, 64}, {1, 512, 512}, {512, 1, 512}, {3, 3, 3000}};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int t = 0; t < 4; ++t)
      for (const auto& s : shapes) expect_matches_ref<float>(t & 1, t & 2, s[0], s[1], s[2], 1.0f, 0.5f, 0, 9);
  }
}

TEST_P(GemmIsa, SkinnyRowsOfBGenerationShapes) {
  // A few rows against B stored as rows, as a Linear layer runs during generation
  // (gemm_skinny.cpp on AVX2+): every M up to the skinny limit and one past it, K around
  // the 8-lane width, N around the 4- and 8-row groups and the 64-column thread blocks,
  // GPT-2's widths, alpha/beta, NaN in C (beta 0) and in the padding.
  const i64 Ks[] = {1, 7, 8, 9, 63, 64, 65, 768, 1001};
  const i64 Ns[] = {1, 3, 4, 5, 8, 9, 63, 64, 65, 129, 300};
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::uint32_t seed = 40;
    for (i64 M : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 23, 24, 25})
      for (i64 N : Ns)
        for (i64 K : Ks) {
          const i64 pad = (seed % 3 == 0) ? 3 : 0;
          expect_matches_ref<float>(false, true, M, N, K, seed % 2 ? 1.0f : -0.5f, seed % 4 < 2 ? 0.0f : 1.0f, pad, seed);
          ++seed;
        }
    expect_matches_ref<float>(false, true, 1, 2304, 768, 1.0f, 1.0f, 0, 7);
    expect_matches_ref<float>(false, true, 8, 768, 3072, 1.0f, 0.0f, 0, 8);
  }
}

TEST_P(GemmIsa, SkinnyRowResultDoesNotDependOnOtherRowsOrThreads) {
  // Batched generation must give each sequence the bits it gets alone: row m of a skinny
  // product equals the one-row product of that row, for every M and thread count.
  const i64 N = 197, K = 333;
  const Problem<float> p = make_problem<float>(false, true, 24, N, K, 1.0f, 0.0f, 0, 77);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (i64 M : {1, 2, 3, 5, 8, 16, 24}) {
      std::vector<float> c(static_cast<std::size_t>(M * N));
      sgemm(false, true, M, N, K, 1.0f, p.A.data(), p.lda, p.B.data(), p.ldb, 0.0f, c.data(), N);
      for (i64 m = 0; m < M; ++m) {
        std::vector<float> one(static_cast<std::size_t>(N));
        sgemm(false, true, 1, N, K, 1.0f, p.A.data() + m * p.lda, p.lda, p.B.data(), p.ldb, 0.0f, one.data(), N);
        EXPECT_EQ(0, std::memcmp(one.data(), c.data() + m * N, N * sizeof(float)))
            << "row " << m << " of M=" << M << ", " << threads << " threads";
      }
    }
  }
}

TEST_P(GemmIsa, DoublePrecision) {
  set_num_threads(2);
  const i64 sizes[] = {1, 3, 8, 17, 65, 130};
  for (int t = 0; t < 4; ++t)
    for (i64 M : sizes)
      for (i64 N : sizes)
        expect_matches_ref<double>(t & 1, t & 2, M, N, sizes[(M + N) % 6] + 255, 0.5, t == 3 ? 0.0 : 2.0, 1, 13);
}

TEST_P(GemmIsa, BitwiseDeterministicAcrossRunsAndThreadCounts) {
  const Problem<float> p = make_problem<float>(false, true, 300, 260, 600, 1.0f, 0.5f, 0, 21);
  const Problem<float> q = make_problem<float>(true, false, 1024, 64, 512, 1.0f, 0.0f, 0, 22);
  for (const Problem<float>* pp : {&p, &q}) {
    set_num_threads(1);
    const std::vector<float> one = run_fast(*pp);
    set_num_threads(2);
    const std::vector<float> two_a = run_fast(*pp);
    const std::vector<float> two_b = run_fast(*pp);
    EXPECT_EQ(0, std::memcmp(two_a.data(), two_b.data(), two_a.size() * sizeof(float))) << "2 threads, two runs";
    // Not required by the contract, but true by construction (K is never split
    // and its blocking depends on K alone): any thread count gives the same bits.
    EXPECT_EQ(0, std::memcmp(one.data(), two_a.data(), one.size() * sizeof(float))) << "1 vs 2 threads";
    EXPECT_EQ(0, check(*pp, two_a, run_ref(*pp)));
  }
}

TEST_P(GemmIsa, BatchedWithBroadcastStrides) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int t = 0; t < 4; ++t)
      for (const auto& s : {std::array<i64, 3>{17, 9, 33}, std::array<i64, 3>{64, 64, 64}, std::array<i64, 3>{130, 129, 200}}) {
        const bool ta = t & 1, tb = t & 2;
        const i64 M = s[0], N = s[1], K = s[2], batch = 5;
        for (int mode = 0; mode < 3; ++mode) {  // 0: all strided, 1: A broadcast, 2: B broadcast
          const Problem<float> p = make_problem<float>(ta, tb, M, N, K, 1.0f, 0.0f, 2, 31);
          const i64 sa_elems = static_cast<i64>(p.A.size()), sb_elems = static_cast<i64>(p.B.size());
          const i64 sc = static_cast<i64>(p.C0.size());
          std::vector<float> A(p.A.size() * batch), B(p.B.size() * batch), C(p.C0.size() * batch, nan_v<float>());
          std::mt19937 rng(7 + mode);
          std::uniform_real_distribution<float> u(-1, 1);
          for (i64 b = 0; b < batch; ++b) {
            for (std::size_t i = 0; i < p.A.size(); ++i) A[b * sa_elems + i] = std::isnan(p.A[i]) ? p.A[i] : u(rng);
            for (std::size_t i = 0; i < p.B.size(); ++i) B[b * sb_elems + i] = std::isnan(p.B[i]) ? p.B[i] : u(rng);
          }
          const i64 sa = mode == 1 ? 0 : sa_elems, sb = mode == 2 ? 0 : sb_elems;
          sgemm_batched(ta, tb, M, N, K, 1.0f, A.data(), p.lda, sa, B.data(), p.ldb, sb, 0.0f, C.data(), p.ldc, sc,
                        batch);
          std::vector<float> again(C.size(), nan_v<float>());
          sgemm_batched(ta, tb, M, N, K, 1.0f, A.data(), p.lda, sa, B.data(), p.ldb, sb, 0.0f, again.data(), p.ldc,
                        sc, batch);
          EXPECT_EQ(0, std::memcmp(C.data(), again.data(), C.size() * sizeof(float))) << "batched determinism";
          for (i64 b = 0; b < batch; ++b) {
            Problem<float> pb = p;
            std::copy(A.begin() + b * sa, A.begin() + b * sa + sa_elems, pb.A.begin());
            std::copy(B.begin() + b * sb, B.begin() + b * sb + sb_elems, pb.B.begin());
            std::vector<float> got(C.begin() + b * sc, C.begin() + (b + 1) * sc);
            for (i64 i = 0; i < M; ++i)  // padding columns of C were NaN before, as in pb.C0
              for (i64 j = N; j < p.ldc; ++j) got[i * p.ldc + j] = pb.C0[i * p.ldc + j];
            EXPECT_EQ(0, check(pb, got, run_ref(pb))) << "batch " << b << " mode " << mode;
          }
        }
      }
  }
}

TEST_P(GemmIsa, ConcurrentCallersGetTheSingleThreadedResult) {
  // Several user threads calling sgemm at once (thread_local workspaces).
  set_num_threads(1);
  std::vector<Problem<float>> ps;
  std::vector<std::vector<float>> expect;
  for (int i = 0; i < 4; ++i) {
    ps.push_back(make_problem<float>(i & 1, i & 2, 100 + 37 * i, 90 + 11 * i, 300 - 40 * i, 1.0f, 0.0f, 0, 40 + i));
    expect.push_back(run_fast(ps.back(), false));
  }
  std::vector<std::vector<float>> got(4);
  std::vector<std::thread> th;
  for (int i = 0; i < 4; ++i)
    th.emplace_back([&, i] {
      for (int r = 0; r < 5; ++r) got[i] = run_fast(ps[i], false);
    });
  for (auto& t : th) t.join();
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(0, std::memcmp(got[i].data(), expect[i].data(), got[i].size() * sizeof(float))) << "caller " << i;
}

#ifdef QKV_GEMM_AVX512_EMULATED
// test_gemm_avx512_emulated: only the (SIMDe-emulated) AVX-512 kernels.
INSTANTIATE_TEST_SUITE_P(, GemmIsa, ::testing::Values(Isa::Avx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });
#else
INSTANTIATE_TEST_SUITE_P(, GemmIsa, ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });
#endif

// ---------------------------------------------------------------- contract edges

TEST(Gemm, KZeroScalesCAndAlphaZeroDoesNotReadAB) {
  std::vector<float> C = {1, 2, 3, 4, 5, 6};
  sgemm(false, false, 2, 3, 0, 1.0f, nullptr, 0, nullptr, 3, 2.0f, C.data(), 3);
  EXPECT_EQ(C, (std::vector<float>{2, 4, 6, 8, 10, 12}));
  std::vector<float> Cn(6, nan_v<float>());
  sgemm(false, false, 2, 3, 0, 1.0f, nullptr, 0, nullptr, 3, 0.0f, Cn.data(), 3);
  EXPECT_EQ(Cn, std::vector<float>(6, 0.0f));
  const std::vector<float> A(8, nan_v<float>()), B(12, nan_v<float>());
  std::vector<float> C2 = {1, 2, 3, 4, 5, 6}, R2 = C2;
  sgemm(false, false, 2, 3, 4, 0.0f, A.data(), 4, B.data(), 3, -1.0f, C2.data(), 3);
  sgemm_ref(false, false, 2, 3, 4, 0.0f, A.data(), 4, B.data(), 3, -1.0f, R2.data(), 3);
  EXPECT_EQ(C2, (std::vector<float>{-1, -2, -3, -4, -5, -6}));
  EXPECT_EQ(R2, C2);
}

TEST(Gemm, EmptyOutputsTouchNothing) {
  std::vector<float> C(4, 7.0f);
  sgemm(false, false, 0, 4, 5, 1.0f, nullptr, 5, nullptr, 4, 0.0f, C.data(), 4);
  sgemm(true, true, 4, 0, 5, 1.0f, nullptr, 4, nullptr, 5, 0.0f, C.data(), 0);
  sgemm_batched(false, false, 2, 2, 2, 1.0f, nullptr, 2, 4, nullptr, 2, 4, 0.0f, C.data(), 2, 4, 0);
  EXPECT_EQ(C, std::vector<float>(4, 7.0f));
}

TEST(Gemm, BadArgumentsThrowValueError) {
  float x[64] = {};
  EXPECT_THROW(sgemm(false, false, -1, 2, 2, 1.0f, x, 2, x, 2, 0.0f, x, 2), ValueError);
  EXPECT_THROW(sgemm(false, false, 2, 2, 4, 1.0f, x, 3, x, 2, 0.0f, x, 2), ValueError);  // lda < K
  EXPECT_THROW(sgemm(true, false, 5, 2, 4, 1.0f, x, 4, x, 2, 0.0f, x, 2), ValueError);   // lda < M for A^T
  EXPECT_THROW(sgemm(false, true, 2, 2, 4, 1.0f, x, 4, x, 2, 0.0f, x, 2), ValueError);   // ldb < K for B^T
  EXPECT_THROW(sgemm(false, false, 2, 3, 2, 1.0f, x, 2, x, 3, 0.0f, x, 2), ValueError);  // ldc < N
  EXPECT_THROW(dgemm_batched(false, false, 2, 2, 2, 1.0, nullptr, 2, 4, nullptr, 2, 4, 0.0, nullptr, 2, 0, 3),
               ValueError);  // stride_c == 0 with batch > 1
  try {
    sgemm(false, false, 2, 2, 4, 1.0f, x, 3, x, 2, 0.0f, x, 2);
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("sgemm: lda"), std::string::npos) << e.what();
  }
}

TEST(Gemm, ThreadedFalseInsideParallelFor) {
  EnvGuard guard;
  set_num_threads(2);
  const Problem<float> p = make_problem<float>(false, false, 96, 80, 130, 1.0f, 0.0f, 0, 77);
  const std::vector<float> ref = run_ref(p);
  std::vector<std::vector<float>> out(4);
  parallel_for(0, 4, 1, [&](i64 b, i64 e) {
    for (i64 i = b; i < e; ++i) out[i] = run_fast(p, false);
  });
  for (const auto& o : out) EXPECT_EQ(0, check(p, o, ref));
}

TEST(Gemm, TileMatchesIsa) {
  EnvGuard guard;
  set_isa(Isa::Scalar);
  const GemmTile t = sgemm_tile();
  EXPECT_GT(t.mr, 0);
  EXPECT_GT(t.nr, 0);
  if (detected_isa() == Isa::Avx2) {
    set_isa(Isa::Avx2);
    EXPECT_EQ(sgemm_tile().mr, 6);
    EXPECT_EQ(sgemm_tile().nr, 16);
  }
  if (detected_isa() == Isa::Avx512) {
    set_isa(Isa::Avx512);
    EXPECT_EQ(sgemm_tile().mr, 14);
    EXPECT_EQ(sgemm_tile().nr, 32);
  }
}

}  // namespace
}  // namespace qkv::kernels
