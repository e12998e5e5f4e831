// The fused GEMM of inference (kernels/gemm.h): sgemm_ex's epilogue (bias, GELU, residual) and
// sgemm_packed's pre-packed B, on every ISA, 1 and 2 threads, over shapes around the register
// tile and the K block.
//
//   - bitwise equal to the unfused ops (sgemm, then add bias, gelu_forward_f32, add residual):
//     the epilogue is those ops, in that order, on the same floats;
//   - pre-packed B bitwise equal to sgemm_ex on the same B read as [K, N] (a re-arrangement);
//   - both against the naive twin sgemm_epilogue_ref (float64 sums and epilogue) with the dot
//     product's error bound 4 K eps sum|a||b| (times GELU's largest slope, 1.13) plus a few
//     ulps of the terms the epilogue adds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/activation.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"
#include "testing/guards.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

// Restores the ISA and the thread count a test changed.
struct EnvGuard {
  qkv::testing::IsaGuard isa;
  qkv::testing::ThreadsGuard threads;
};

// The message of the ValueError fn throws ("" and a failure when it throws none).
template <class F>
std::string value_error_of(F&& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ValueError";
  return "";
}

std::vector<float> random_vec(std::size_t n, std::uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Case {
  i64 M, N, K;
  bool tb;
  GemmAct act;
  bool bias, residual;
};

std::string describe(const Case& c) {
  return "M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         (c.tb ? " B^T" : " B") + " act=" + std::to_string(static_cast<int>(c.act)) + (c.bias ? " bias" : "") +
         (c.residual ? " residual" : "") + " isa=" + isa_name(active_isa()) +
         " threads=" + std::to_string(num_threads());
}

struct Operands {
  std::vector<float> A, B, Bkn, bias, res;  // Bkn: op(B) as [K, N]
  i64 lda, ldb, ldc, ldr;
};

Operands make(const Case& c, std::uint32_t seed) {
  Operands o;
  o.lda = c.K + 3;
  o.ldb = (c.tb ? c.K : c.N) + 1;
  o.ldc = c.N + 2;
  o.ldr = c.N + 5;
  o.A = random_vec(static_cast<std::size_t>(c.M * o.lda + 1), seed);
  // Scaled so the GELU sees values over its whole bend (sums of K products of [-1,1] values).
  o.B = random_vec(static_cast<std::size_t>((c.tb ? c.N : c.K) * o.ldb + 1), seed + 1,
                   3.f / std::sqrt(static_cast<float>(std::max<i64>(c.K, 1))));
  o.Bkn.resize(static_cast<std::size_t>(std::max<i64>(c.K * c.N, 1)));
  for (i64 k = 0; k < c.K; ++k)
    for (i64 j = 0; j < c.N; ++j) o.Bkn[k * c.N + j] = c.tb ? o.B[j * o.ldb + k] : o.B[k * o.ldb + j];
  o.bias = random_vec(static_cast<std::size_t>(c.N + 1), seed + 2);
  o.res = random_vec(static_cast<std::size_t>(c.M * o.ldr + 1), seed + 3, 4.f);
  return o;
}

GemmEpilogue epilogue(const Case& c, const Operands& o) {
  GemmEpilogue e;
  if (c.bias) e.bias = o.bias.data();
  e.act = c.act;
  if (c.residual) {
    e.residual = o.res.data();
    e.ldr = o.ldr;
  }
  return e;
}

// sgemm, then the epilogue's ops one by one as the unfused layers run them.
std::vector<float> unfused(const Case& c, const Operands& o) {
  std::vector<float> C(static_cast<std::size_t>(std::max<i64>(c.M * o.ldc, 1)), 7.f);
  sgemm(false, c.tb, c.M, c.N, c.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, C.data(), o.ldc);
  for (i64 i = 0; i < c.M; ++i) {
    float* row = C.data() + i * o.ldc;
    if (c.bias)
      for (i64 j = 0; j < c.N; ++j) row[j] = row[j] + o.bias[j];
    if (c.act != GemmAct::None)
      gelu_forward_f32(row, row, c.N, c.act == GemmAct::GeluErf ? GeluForm::Erf : GeluForm::Tanh);
    if (c.residual)
      for (i64 j = 0; j < c.N; ++j) row[j] = o.res[i * o.ldr + j] + row[j];
  }
  return C;
}

// Compares got with the naive twin; padding columns of C (j >= N) must hold their 7.
int check_ref(const Case& c, const Operands& o, const std::vector<float>& got) {
  std::vector<float> ref(got.size(), 7.f);
  sgemm_epilogue_ref(false, c.tb, c.M, c.N, c.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, ref.data(), o.ldc,
                     epilogue(c, o));
  const double eps = std::numeric_limits<float>::epsilon();
  int bad = 0;
  for (i64 i = 0; i < c.M; ++i)
    for (i64 j = 0; j < o.ldc; ++j) {
      const float g = got[i * o.ldc + j];
      if (j >= c.N) {
        if (g != 7.f && bad++ < 3) ADD_FAILURE() << describe(c) << ": padding (" << i << "," << j << ") written";
        continue;
      }
      double absprod = 0;
      for (i64 k = 0; k < c.K; ++k) absprod += std::fabs(o.A[i * o.lda + k] * o.Bkn[k * c.N + j]);
      const double r = ref[i * o.ldc + j];
      const double terms = std::fabs(r) + (c.bias ? std::fabs(o.bias[j]) : 0.0) +
                           (c.residual ? std::fabs(o.res[i * o.ldr + j]) : 0.0);
      const double bound = 4.0 * static_cast<double>(c.K) * eps * 1.13 * absprod + 4.0 * eps * terms + 1e-30;
      if (!(std::fabs(g - r) <= bound) && bad++ < 3)
        ADD_FAILURE() << describe(c) << ": C(" << i << "," << j << ") = " << g << ", reference " << r << ", bound "
                      << bound;
    }
  return bad;
}

class GemmFused : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(detected_isa()))
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam());
    set_isa(GetParam());
  }
  EnvGuard guard_;
};

std::vector<Case> cases() {
  const GemmTile t = sgemm_tile();
  std::vector<Case> out;
  const i64 Ms[] = {1, 2, t.mr - 1, t.mr, t.mr + 1, 2 * t.mr + 5, 24, 25, 33, 97};
  const i64 Ns[] = {1, t.nr - 1, t.nr, t.nr + 1, 3 * t.nr, 100};
  const i64 Ks[] = {1, 7, 64, 255, 256, 257, 600};
  const GemmAct acts[] = {GemmAct::None, GemmAct::GeluErf, GemmAct::GeluTanh};
  std::uint32_t s = 0;
  for (i64 M : Ms)
    for (i64 N : Ns) {
      ++s;
      const i64 K = Ks[s % 7];
      out.push_back({M, N, K, s % 2 == 0, acts[s % 3], s % 4 != 1, s % 3 != 2});
    }
  out.push_back({40, 384, 384, true, GemmAct::None, true, true});      // BERT's attention output + residual
  out.push_back({40, 1536, 384, true, GemmAct::GeluErf, true, false});  // BERT's intermediate
  out.push_back({40, 384, 1536, true, GemmAct::None, true, true});     // BERT's output + residual
  return out;
}

TEST_P(GemmFused, EpilogueIsBitwiseTheUnfusedOps) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::uint32_t seed = 100;
    for (const Case& c : cases()) {
      const Operands o = make(c, seed++);
      std::vector<float> C(static_cast<std::size_t>(std::max<i64>(c.M * o.ldc, 1)), 7.f);
      sgemm_ex(false, c.tb, c.M, c.N, c.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, C.data(), o.ldc,
               epilogue(c, o));
      const std::vector<float> u = unfused(c, o);
      ASSERT_EQ(0, std::memcmp(C.data(), u.data(), C.size() * sizeof(float))) << describe(c);
      EXPECT_EQ(0, check_ref(c, o, C));
    }
  }
}

TEST_P(GemmFused, PackedBIsBitwiseTheUnpackedProduct) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::uint32_t seed = 300;
    for (const Case& c : cases()) {
      const Operands o = make(c, seed++);
      const PackedB pb = PackedB::pack(c.tb, c.K, c.N, o.B.data(), o.ldb);
      ASSERT_TRUE(pb.matches_active_isa());
      std::vector<float> C(static_cast<std::size_t>(std::max<i64>(c.M * o.ldc, 1)), 7.f), D = C;
      sgemm_packed(c.M, o.A.data(), o.lda, pb, C.data(), o.ldc, epilogue(c, o));
      // B as [K, N] is never taken by the skinny kernel: the same micro-kernel on the same values.
      sgemm_ex(false, false, c.M, c.N, c.K, 1.f, o.A.data(), o.lda, o.Bkn.data(), c.N, 0.f, D.data(), o.ldc,
               epilogue(c, o));
      ASSERT_EQ(0, std::memcmp(C.data(), D.data(), C.size() * sizeof(float))) << describe(c);
      EXPECT_EQ(0, check_ref(c, o, C));
    }
  }
}

TEST_P(GemmFused, RowsOfAPackedProductDoNotDependOnTheOtherRows) {
  // A sentence's rows give the same bits whatever batch they are in (edge-row kernels included).
  set_num_threads(2);
  const Case c{61, 384, 384, true, GemmAct::GeluErf, true, true};
  const Operands o = make(c, 9);
  const PackedB pb = PackedB::pack(true, c.K, c.N, o.B.data(), o.ldb);
  std::vector<float> all(static_cast<std::size_t>(c.M * o.ldc));
  sgemm_packed(c.M, o.A.data(), o.lda, pb, all.data(), o.ldc, epilogue(c, o));
  for (i64 r0 : {0, 1, 13, 29, 60})
    for (i64 m : {1, 3, 14, 15}) {
      if (r0 + m > c.M) continue;
      GemmEpilogue e = epilogue(c, o);
      e.residual += r0 * o.ldr;
      std::vector<float> part(static_cast<std::size_t>(m * o.ldc));
      sgemm_packed(m, o.A.data() + r0 * o.lda, o.lda, pb, part.data(), o.ldc, e);
      for (i64 i = 0; i < m; ++i)
        ASSERT_EQ(0, std::memcmp(part.data() + i * o.ldc, all.data() + (r0 + i) * o.ldc, c.N * sizeof(float)))
            << "rows " << r0 << "+" << m << ", row " << i;
    }
}

TEST_P(GemmFused, PartsOfAPackedProductTogetherAreBitwiseTheWhole) {
  // sgemm_packed_part for every part of 1..4 parts (what the members of a team compute) writes
  // all of C, bitwise as one sgemm_packed call, small products (one tile) included.
  set_num_threads(2);
  for (const Case& c : {Case{34, 1152, 384, true, GemmAct::None, true, false}, Case{61, 384, 1536, true, GemmAct::None, true, true},
                        Case{700, 384, 384, true, GemmAct::GeluErf, true, false}, Case{3, 40, 5, false, GemmAct::None, false, false}}) {
    const Operands o = make(c, 77);
    const PackedB pb = PackedB::pack(c.tb, c.K, c.N, o.B.data(), o.ldb);
    std::vector<float> whole(static_cast<std::size_t>(c.M * o.ldc), 7.f);
    sgemm_packed(c.M, o.A.data(), o.lda, pb, whole.data(), o.ldc, epilogue(c, o));
    for (int parts = 1; parts <= 4; ++parts) {
      std::vector<float> got(whole.size(), 7.f);
      for (int p = parts - 1; p >= 0; --p)  // any order
        sgemm_packed_part(c.M, o.A.data(), o.lda, pb, got.data(), o.ldc, epilogue(c, o), p, parts);
      ASSERT_EQ(0, std::memcmp(got.data(), whole.data(), got.size() * sizeof(float))) << describe(c) << " parts " << parts;
    }
  }
  const std::string empty = value_error_of([] { sgemm_packed_part(1, nullptr, 1, PackedB(), nullptr, 1, {}, 0, 1); });
  EXPECT_NE(empty.find("sgemm_packed_part: B is empty"), std::string::npos) << empty;
  float x[64] = {};
  const PackedB pb = PackedB::pack(false, 2, 2, x, 2);
  for (const std::pair<int, int>& pp : {std::pair{2, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    const int part = pp.first, parts = pp.second;  // not a structured binding: clang 14 cannot capture one
    const std::string msg = value_error_of([&] { sgemm_packed_part(2, x, 2, pb, x + 32, 2, {}, part, parts); });
    EXPECT_NE(msg.find("part " + std::to_string(part) + " of " + std::to_string(parts) + " is not in [0, parts)"),
              std::string::npos)
        << msg;
  }
}

#ifdef QKV_GEMM_AVX512_EMULATED
INSTANTIATE_TEST_SUITE_P(, GemmFused, ::testing::Values(Isa::Avx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });
#else
INSTANTIATE_TEST_SUITE_P(, GemmFused, ::testing::Values(Isa::Scalar, Isa::Avx2, Isa::Avx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });
#endif

TEST(GemmFusedArgs, BadArgumentsAreNamed) {
  EnvGuard guard;
  float x[64] = {};
  GemmEpilogue e;
  e.bias = x;
  try {
    sgemm_ex(false, false, 2, 2, 2, 1.f, x, 2, x, 2, 1.f, x + 32, 2, e);
    ADD_FAILURE() << "beta != 0 with an epilogue was accepted";
  } catch (const ValueError& err) {
    EXPECT_NE(std::string(err.what()).find("beta must be 0"), std::string::npos) << err.what();
  }
  e.residual = x;
  e.ldr = 1;
  std::string msg = value_error_of([&] { sgemm_ex(false, false, 2, 2, 2, 1.f, x, 2, x, 2, 0.f, x + 32, 2, e); });
  EXPECT_NE(msg.find("sgemm_ex: ldr 1 must be >= N 2"), std::string::npos) << msg;
  msg = value_error_of([&] { sgemm_packed(2, x, 2, PackedB::pack(false, 2, 2, x, 2), x + 32, 2, e); });
  EXPECT_NE(msg.find("sgemm_packed: ldr 1 must be >= N 2"), std::string::npos) << msg;
  msg = value_error_of([&] { sgemm_packed(2, x, 2, PackedB(), x + 32, 2); });
  EXPECT_NE(msg.find("sgemm_packed: B is empty"), std::string::npos) << msg;
  if (detected_isa() != Isa::Scalar) {
    set_isa(Isa::Scalar);
    const PackedB pb = PackedB::pack(false, 2, 2, x, 2);
    set_isa(detected_isa());
    EXPECT_FALSE(pb.matches_active_isa());
    try {
      sgemm_packed(2, x, 2, pb, x + 32, 2);
      ADD_FAILURE() << "a B packed for another ISA was accepted";
    } catch (const ValueError& err) {
      EXPECT_NE(std::string(err.what()).find("pack it again"), std::string::npos) << err.what();
    }
  }
}

TEST(GemmFusedArgs, KZeroGivesTheEpilogueOfZero) {
  const float bias[3] = {1.f, -2.f, 0.5f};
  float C[6];
  for (float& v : C) v = std::numeric_limits<float>::quiet_NaN();
  GemmEpilogue e;
  e.bias = bias;
  sgemm_ex(false, false, 2, 3, 0, 1.f, nullptr, 0, nullptr, 3, 0.f, C, 3, e);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_EQ(C[i * 3 + j], bias[j]);
}

}  // namespace
}  // namespace qkv::kernels
