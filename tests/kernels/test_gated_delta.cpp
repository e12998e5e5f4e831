// Gated DeltaNet kernels (kernels/gated_delta.h): the float64 references against hand-computed
// steps, then the recurrent and chunked kernels against the reference on every ISA over awkward
// shapes (Dk != Dv, dims that are not multiples of a vector, grouped and tiled key heads), token
// counts around the chunk size, chunk sizes 1, 7 and 64, decays near 0 and strongly negative,
// a nonzero initial state and row strides wider than dense with NaN in the gaps; sequences fed
// in pieces (and in the other form), head ranges split over a team (the same bits), a 2,000-token
// chunked prefill against the recurrence, and the causal convolution against its twin (short
// inputs, state carried over calls, channel splits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gated_delta.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::GatedDeltaParams;
using qkv::kernels::Isa;
using qkv::testing::IsaGuard;
using i64 = std::int64_t;

constexpr float kSentinel = -777.f;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<Isa> isas() { return qkv::testing::isas_up_to(Isa::Avx512); }

// ---------------------------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------------------------

enum class Gates { Mixed, NearZero, Strong };

struct Shape {
  i64 Hk, Hv, Dk, Dv;
  bool tiled;
};

std::string name(const Shape& s) {
  return "Hk=" + std::to_string(s.Hk) + " Hv=" + std::to_string(s.Hv) + " Dk=" + std::to_string(s.Dk) +
         " Dv=" + std::to_string(s.Dv) + (s.tiled ? " tiled" : " grouped");
}

// One sequence's inputs and initial state. Rows are wider than dense when padded, with NaN in the
// gaps (a kernel that reads them returns NaN); the output's gaps must keep kSentinel.
struct Seq {
  GatedDeltaParams p;
  std::vector<float> q, k, v, g, beta, state;  // state: the initial state [Hv, Dk, Dv]
};

Seq make(const Shape& s, i64 n, std::uint32_t seed, Gates gates = Gates::Mixed, bool padded = true, bool l2 = true) {
  Seq x;
  GatedDeltaParams& p = x.p;
  p.n = n, p.Hk = s.Hk, p.Hv = s.Hv, p.Dk = s.Dk, p.Dv = s.Dv, p.tiled = s.tiled, p.l2norm_qk = l2;
  const i64 pad = padded ? 3 : 0;
  p.q_st = s.Hk * s.Dk + pad;
  p.k_st = s.Hk * s.Dk + 2 * pad;
  p.v_st = s.Hv * s.Dv + pad;
  p.gb_st = s.Hv + pad;
  p.o_st = s.Hv * s.Dv + 2 * pad;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unif(0.f, 1.f);
  // Without the L2 norm the keys are scaled to about unit length, as the delta rule needs
  // (beta |k|^2 < 2) to stay bounded.
  const float qk_scale = l2 ? 1.f : 1.f / std::sqrt(static_cast<float>(s.Dk));
  auto fill = [&](std::vector<float>& a, i64 st, i64 used, auto gen) {
    a.assign(static_cast<std::size_t>(std::max<i64>(n, 1) * st), kNaN);
    for (i64 t = 0; t < n; ++t)
      for (i64 i = 0; i < used; ++i) a[t * st + i] = gen();
  };
  fill(x.q, p.q_st, s.Hk * s.Dk, [&] { return normal(rng) * qk_scale; });
  fill(x.k, p.k_st, s.Hk * s.Dk, [&] { return normal(rng) * qk_scale; });
  fill(x.v, p.v_st, s.Hv * s.Dv, [&] { return normal(rng); });
  fill(x.g, p.gb_st, s.Hv, [&] {
    const float u = unif(rng);
    switch (gates) {
      case Gates::NearZero: return -1e-3f * u;
      case Gates::Strong: return -4.f - 16.f * u;
      case Gates::Mixed: break;
    }
    // Mostly moderate, some near 0, some that wipe the state out.
    return u < 0.1f ? -30.f * unif(rng) : u < 0.3f ? -1e-4f * unif(rng) : -unif(rng);
  });
  fill(x.beta, p.gb_st, s.Hv, [&] { return 0.02f + 0.96f * unif(rng); });
  x.state.resize(static_cast<std::size_t>(s.Hv * s.Dk * s.Dv));
  for (float& f : x.state) f = 0.5f * normal(rng);
  return x;
}

// ---------------------------------------------------------------------------------------------
// Runs and comparisons
// ---------------------------------------------------------------------------------------------

enum class Form { Recurrent, Chunked };

struct Out {
  std::vector<float> o, state;
};
struct Ref {
  std::vector<double> o, state;
};

// Tokens [t0, t0 + n) of x with value heads [h0, h1) into r (o and state), by one form.
void run_part(Form f, const Seq& x, Out& r, i64 t0, i64 n, i64 chunk, i64 h0, i64 h1) {
  GatedDeltaParams p = x.p;
  p.n = n;
  p.chunk = chunk;
  const auto& P = x.p;
  float* o = r.o.data() + t0 * P.o_st;
  const float *q = x.q.data() + t0 * P.q_st, *k = x.k.data() + t0 * P.k_st, *v = x.v.data() + t0 * P.v_st;
  const float *g = x.g.data() + t0 * P.gb_st, *b = x.beta.data() + t0 * P.gb_st;
  if (f == Form::Recurrent)
    qkv::kernels::gated_delta_recurrent(o, r.state.data(), q, k, v, g, b, p, h0, h1);
  else
    qkv::kernels::gated_delta_chunked(o, r.state.data(), q, k, v, g, b, p, h0, h1);
}

Out fresh(const Seq& x) {
  Out r;
  r.o.assign(static_cast<std::size_t>(std::max<i64>(x.p.n, 1) * x.p.o_st), kSentinel);
  r.state = x.state;
  return r;
}

Out run(Form f, const Seq& x, i64 chunk = 64) {
  Out r = fresh(x);
  run_part(f, x, r, 0, x.p.n, chunk, 0, x.p.Hv);
  return r;
}

Ref reference(const Seq& x) {
  Ref r;
  r.o.assign(static_cast<std::size_t>(std::max<i64>(x.p.n, 1) * x.p.o_st), 0.0);
  r.state.assign(x.state.begin(), x.state.end());
  qkv::kernels::gated_delta_ref(r.o.data(), r.state.data(), x.q.data(), x.k.data(), x.v.data(), x.g.data(),
                                x.beta.data(), x.p);
  return r;
}

// max |got - want| / max(max |want|, 1e-3) over the outputs (every token, value head and value
// dim), and over the state.
struct Errors {
  double o = 0, state = 0;
};
template <class T>
Errors errors(const Seq& x, const Out& got, const std::vector<T>& want_o, const std::vector<T>& want_state) {
  const auto& p = x.p;
  double eo = 0, mo = 0, es = 0, ms = 0;
  for (i64 t = 0; t < p.n; ++t)
    for (i64 i = 0; i < p.Hv * p.Dv; ++i) {
      const double a = got.o[t * p.o_st + i], b = want_o[t * p.o_st + i];
      eo = std::isfinite(a) ? std::max(eo, std::fabs(a - b)) : INFINITY;
      mo = std::max(mo, std::fabs(b));
    }
  for (std::size_t i = 0; i < got.state.size(); ++i) {
    const double a = got.state[i], b = want_state[i];
    es = std::isfinite(a) ? std::max(es, std::fabs(a - b)) : INFINITY;
    ms = std::max(ms, std::fabs(b));
  }
  return {eo / std::max(mo, 1e-3), es / std::max(ms, 1e-3)};
}

// The output rows' gaps (past Hv Dv) keep the sentinel.
void expect_gaps_untouched(const Seq& x, const Out& r, const std::string& ctx) {
  for (i64 t = 0; t < x.p.n; ++t)
    for (i64 i = x.p.Hv * x.p.Dv; i < x.p.o_st; ++i)
      ASSERT_EQ(r.o[t * x.p.o_st + i], kSentinel) << "wrote into the gap of row " << t << " (" << ctx << ")";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Tolerances, relative to the largest magnitude of the float64 reference's tensor. Measured worst
// over these tests (GCC 12, -march=native, AVX-512 / AVX2 / scalar alike): recurrent 8.0e-7,
// chunked 6.1e-6 (chunk 64 with the mixed decays: the solve and the products sum up to 64 and
// 128 terms, and the pairwise decays exp(cum_i - cum_j) carry the float cumulative sums' error);
// the bounds leave ~10x room. A recurrence with the decay after the delta instead of before
// misses by > 1e-2 (GatedDeltaRef.KernelsTellTheDecayOrderApart), and so do a chunk that forgets
// the state's decay, an unzeroed upper triangle of P, or a skipped column tail (each made these
// tests fail when tried).
constexpr double kTolRecurrent = 1e-5;
constexpr double kTolChunked = 5e-5;

// The shapes of the kernel-vs-reference tests: Dk != Dv, dims that are not multiples of 8 or 16
// (5, 13, 24), the full 128, one key head for three value heads in both orders, Hk == Hv, and
// two key heads for six value heads (grouped and tiled pick different key heads).
const std::vector<Shape> kShapes = {
    {1, 3, 5, 13, false}, {1, 3, 13, 5, true}, {2, 2, 24, 24, false}, {2, 6, 16, 7, true},
    {2, 6, 7, 16, false}, {1, 2, 128, 24, false}, {2, 2, 24, 128, true}, {1, 1, 128, 128, false},
};

// ---------------------------------------------------------------------------------------------
// The references
// ---------------------------------------------------------------------------------------------

// Two tokens worked by hand. Dk = Dv = 2, one key head for two value heads.
// Without the L2 norm: head 0, S0 = [[1, 2], [3, 4]], g = ln 1/2, beta = 1/2, k = (1, 0),
// v = (10, 20), q = (1, 1) (times 1/sqrt 2): S = S0/2 = [[.5, 1], [1.5, 2]]; kv = S^T k = (.5, 1);
// delta = (v - kv)/2 = (4.75, 9.5); S = [[5.25, 10.5], [1.5, 2]]; o = S^T q / sqrt 2 =
// (6.75, 12.5) / sqrt 2.
TEST(GatedDeltaRef, HandComputedStep) {
  GatedDeltaParams p;
  p.n = 1, p.Hk = 1, p.Hv = 2, p.Dk = 2, p.Dv = 2, p.l2norm_qk = false;
  p.q_st = p.k_st = 2, p.v_st = 4, p.gb_st = 2, p.o_st = 4;
  const float q[2] = {1, 1}, k[2] = {1, 0}, v[4] = {10, 20, 0, 0};
  const float g[2] = {std::log(0.5f), 0.f}, beta[2] = {0.5f, 1.f};
  std::vector<double> S = {1, 2, 3, 4, 0, 0, 0, 0}, o(4);
  qkv::kernels::gated_delta_ref(o.data(), S.data(), q, k, v, g, beta, p);
  // (exp of the float nearest ln 1/2 is 1/2 within 3e-8.)
  const double r2 = std::sqrt(2.0);
  EXPECT_NEAR(S[0], 5.25, 1e-6);
  EXPECT_NEAR(S[1], 10.5, 1e-6);
  EXPECT_NEAR(S[2], 1.5, 1e-6);
  EXPECT_NEAR(S[3], 2.0, 1e-6);
  EXPECT_NEAR(o[0], 6.75 / r2, 1e-6);
  EXPECT_NEAR(o[1], 12.5 / r2, 1e-6);
  // Head 1 (the same key head): zero state, g = 0, beta = 1, v = 0: nothing to write.
  for (int i = 4; i < 8; ++i) EXPECT_EQ(S[i], 0.0);
  EXPECT_EQ(o[2], 0.0);
  EXPECT_EQ(o[3], 0.0);
}

// With the L2 norm (eps = 0): q = (0, 3) -> (0, 1) / sqrt 2, k = (3, 4) -> (.6, .8); zero state,
// g = 0, beta = 1/2, v = (2, 4): delta = (1, 2), S = k delta^T = [[.6, 1.2], [.8, 1.6]],
// o = S^T q = (.8, 1.6) / sqrt 2. Value head 1 of two with one key head, tiled or not.
TEST(GatedDeltaRef, HandComputedStepL2) {
  GatedDeltaParams p;
  p.n = 1, p.Hk = 1, p.Hv = 2, p.Dk = 2, p.Dv = 2, p.eps = 0.f;
  p.q_st = p.k_st = 2, p.v_st = 4, p.gb_st = 2, p.o_st = 4;
  const float q[2] = {0, 3}, k[2] = {3, 4}, v[4] = {0, 0, 2, 4};
  const float g[2] = {0.f, 0.f}, beta[2] = {0.f, 0.5f};
  for (bool tiled : {false, true}) {
    p.tiled = tiled;
    std::vector<double> S(8, 0.0), o(4);
    qkv::kernels::gated_delta_ref(o.data(), S.data(), q, k, v, g, beta, p);
    const double r2 = std::sqrt(2.0);
    EXPECT_NEAR(S[4], 0.6, 1e-12);
    EXPECT_NEAR(S[5], 1.2, 1e-12);
    EXPECT_NEAR(S[6], 0.8, 1e-12);
    EXPECT_NEAR(S[7], 1.6, 1e-12);
    EXPECT_NEAR(o[2], 0.8 / r2, 1e-12);
    EXPECT_NEAR(o[3], 1.6 / r2, 1e-12);
  }
}

// K = 3, one channel: w = (1, 2, 3), state (1, 2), x = (3, 4): x' = 1 2 3 4, sums 1 + 4 + 9 = 14
// and 2 + 6 + 12 = 20, the new state (3, 4).
TEST(CausalConv1dRef, HandComputed) {
  const float w[3] = {1, 2, 3}, x[2] = {3, 4};
  double state[2] = {1, 2}, out[2];
  qkv::kernels::causal_conv1d_silu_ref(out, x, 1, 2, 1, w, 3, state);
  EXPECT_NEAR(out[0], 14 / (1 + std::exp(-14.0)), 1e-12);
  EXPECT_NEAR(out[1], 20 / (1 + std::exp(-20.0)), 1e-12);
  EXPECT_EQ(state[0], 3.0);
  EXPECT_EQ(state[1], 4.0);
}

// The tolerances separate the right recurrence from a plausible wrong one: applying the decay
// after the delta (S = exp(g) (S + k delta^T), kv read from the undecayed state) moves the
// kernels' outputs by far more than kTolChunked.
TEST(GatedDeltaRef, KernelsTellTheDecayOrderApart) {
  const Seq x = make({1, 2, 16, 16, false}, 40, 7);
  const auto& p = x.p;
  Ref wrong;
  wrong.o.assign(static_cast<std::size_t>(p.n * p.o_st), 0.0);
  wrong.state.assign(x.state.begin(), x.state.end());
  for (i64 t = 0; t < p.n; ++t)
    for (i64 h = 0; h < p.Hv; ++h) {
      std::vector<double> qn(16), kn(16);
      double sq = 0, sk = 0;
      for (int d = 0; d < 16; ++d) sq += double(x.q[t * p.q_st + d]) * x.q[t * p.q_st + d];
      for (int d = 0; d < 16; ++d) sk += double(x.k[t * p.k_st + d]) * x.k[t * p.k_st + d];
      for (int d = 0; d < 16; ++d) qn[d] = x.q[t * p.q_st + d] / std::sqrt(sq + 1e-6) / 4.0;
      for (int d = 0; d < 16; ++d) kn[d] = x.k[t * p.k_st + d] / std::sqrt(sk + 1e-6);
      double* S = wrong.state.data() + h * 256;
      const double b = x.beta[t * p.gb_st + h], e = std::exp(double(x.g[t * p.gb_st + h]));
      for (int c = 0; c < 16; ++c) {
        double kv = 0;
        for (int i = 0; i < 16; ++i) kv += S[i * 16 + c] * kn[i];
        const double delta = (x.v[t * p.v_st + h * 16 + c] - kv) * b;
        double o = 0;
        for (int i = 0; i < 16; ++i) {
          S[i * 16 + c] = e * (S[i * 16 + c] + kn[i] * delta);
          o += S[i * 16 + c] * qn[i];
        }
        wrong.o[t * p.o_st + h * 16 + c] = o;
      }
    }
  for (Form f : {Form::Recurrent, Form::Chunked}) {
    const Errors e = errors(x, run(f, x, 7), wrong.o, wrong.state);
    EXPECT_GT(e.o, 1e-2);
    EXPECT_GT(e.state, 1e-2);
  }
}

// ---------------------------------------------------------------------------------------------
// Kernels against the reference
// ---------------------------------------------------------------------------------------------

TEST(GatedDelta, RecurrentMatchesRef) {
  IsaGuard guard;
  int seed = 100;
  for (const Shape& s : kShapes)
    for (i64 n : {0, 1, 2, 9, 65}) {
      ++seed;
      const Gates gates = static_cast<Gates>(seed % 3);
      const Seq x = make(s, n, seed, gates, /*padded=*/true, /*l2=*/seed % 4 != 0);
      const Ref ref = reference(x);
      for (Isa isa : isas()) {
        qkv::kernels::set_isa(isa);
        const std::string ctx = name(s) + " n=" + std::to_string(n) + " gates=" + std::to_string(int(gates)) +
                                " l2=" + std::to_string(x.p.l2norm_qk) + " " + qkv::kernels::isa_name(isa);
        const Out r = run(Form::Recurrent, x);
        expect_gaps_untouched(x, r, ctx);
        const Errors e = errors(x, r, ref.o, ref.state);
        EXPECT_LE(e.o, kTolRecurrent) << ctx;
        EXPECT_LE(e.state, kTolRecurrent) << ctx;
        if (n == 0) {
          EXPECT_TRUE(same_bits(r.state, x.state)) << ctx;
        }
      }
    }
}

TEST(GatedDelta, ChunkedMatchesRef) {
  IsaGuard guard;
  int seed = 200;
  for (const Shape& s : kShapes)
    for (i64 c : {1, 7, 64}) {
      std::set<i64> ns = {1, 2, c - 1, c, c + 1, 3 * c + 7};
      for (i64 n : ns) {
        ++seed;
        const Gates gates = static_cast<Gates>(seed % 3);
        const Seq x = make(s, n, seed, gates, /*padded=*/true, /*l2=*/seed % 4 != 0);
        const Ref ref = reference(x);
        for (Isa isa : isas()) {
          qkv::kernels::set_isa(isa);
          const std::string ctx = name(s) + " chunk=" + std::to_string(c) + " n=" + std::to_string(n) +
                                  " gates=" + std::to_string(int(gates)) + " l2=" + std::to_string(x.p.l2norm_qk) +
                                  " " + qkv::kernels::isa_name(isa);
          const Out r = run(Form::Chunked, x, c);
          expect_gaps_untouched(x, r, ctx);
          const Errors e = errors(x, r, ref.o, ref.state);
          EXPECT_LE(e.o, kTolChunked) << ctx;
          EXPECT_LE(e.state, kTolChunked) << ctx;
          if (n == 0) {
          EXPECT_TRUE(same_bits(r.state, x.state)) << ctx;
        }
        }
      }
    }
}

// A sequence fed in two pieces: the same form split where its work splits (the recurrence
// anywhere, the chunked form at a chunk boundary) gives the one call's bits; mixed forms
// (recurrent then chunked, chunked then recurrent, split mid-chunk) give the one call's result
// within the tolerance, and the reference's.
TEST(GatedDelta, PiecesEqualOneCall) {
  IsaGuard guard;
  int seed = 300;
  for (const Shape& s : {Shape{1, 3, 13, 24, false}, Shape{2, 2, 128, 128, true}})
    for (i64 c : {7, 64}) {
      const i64 n = 3 * c + 7;
      const Seq x = make(s, n, ++seed);
      const Ref ref = reference(x);
      for (Isa isa : isas()) {
        qkv::kernels::set_isa(isa);
        const std::string ctx = name(s) + " chunk=" + std::to_string(c) + " " + qkv::kernels::isa_name(isa);
        const Out rec = run(Form::Recurrent, x), chk = run(Form::Chunked, x, c);
        {  // recurrent, split at 5
          Out r = fresh(x);
          run_part(Form::Recurrent, x, r, 0, 5, c, 0, s.Hv);
          run_part(Form::Recurrent, x, r, 5, n - 5, c, 0, s.Hv);
          EXPECT_TRUE(same_bits(r.o, rec.o) && same_bits(r.state, rec.state)) << "recurrent 5 + rest, " << ctx;
        }
        {  // chunked, split after two chunks
          Out r = fresh(x);
          run_part(Form::Chunked, x, r, 0, 2 * c, c, 0, s.Hv);
          run_part(Form::Chunked, x, r, 2 * c, n - 2 * c, c, 0, s.Hv);
          EXPECT_TRUE(same_bits(r.o, chk.o) && same_bits(r.state, chk.state)) << "chunked 2c + rest, " << ctx;
        }
        for (i64 a : {i64{3}, c + 2}) {
          for (Form first : {Form::Recurrent, Form::Chunked}) {
            const Form second = first == Form::Recurrent ? Form::Chunked : Form::Recurrent;
            Out r = fresh(x);
            run_part(first, x, r, 0, a, c, 0, s.Hv);
            run_part(second, x, r, a, n - a, c, 0, s.Hv);
            const std::string what = std::string(first == Form::Recurrent ? "recurrent" : "chunked") + " " +
                                     std::to_string(a) + " + rest, " + ctx;
            const Errors e1 = errors(x, r, chk.o, chk.state);
            EXPECT_LE(e1.o, kTolChunked) << what;
            EXPECT_LE(e1.state, kTolChunked) << what;
            const Errors e2 = errors(x, r, ref.o, ref.state);
            EXPECT_LE(e2.o, kTolChunked) << what;
            EXPECT_LE(e2.state, kTolChunked) << what;
          }
        }
      }
    }
}

// Value heads split over a team ([0, a) and [a, Hv), or one at a time in reverse) give the
// whole range's bits, in both forms.
TEST(GatedDelta, HeadRangesGiveTheSameBits) {
  IsaGuard guard;
  const Seq x = make({2, 6, 24, 13, true}, 71, 400);
  for (Isa isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (Form f : {Form::Recurrent, Form::Chunked}) {
      const std::string ctx = std::string(f == Form::Recurrent ? "recurrent " : "chunked ") + qkv::kernels::isa_name(isa);
      const Out whole = run(f, x, 16);
      for (i64 a : {1, 3, 5}) {
        Out r = fresh(x);
        run_part(f, x, r, 0, x.p.n, 16, a, 6);
        run_part(f, x, r, 0, x.p.n, 16, 0, a);
        EXPECT_TRUE(same_bits(r.o, whole.o) && same_bits(r.state, whole.state)) << "split at " << a << ", " << ctx;
      }
      Out r = fresh(x);
      for (i64 h = 5; h >= 0; --h) run_part(f, x, r, 0, x.p.n, 16, h, h + 1);
      EXPECT_TRUE(same_bits(r.o, whole.o) && same_bits(r.state, whole.state)) << "one head at a time, " << ctx;
    }
  }
}

// A 2,000-token prefill by chunks of 64 against the recurrence (and both against the reference),
// Dk = Dv = 32, two heads, decays from near 0 (a long memory) to strong.
//
// Tolerance 1e-4 of the largest magnitude: each token's update does not amplify the state's
// error (exp(g) <= 1 times I - beta k k^T, whose eigenvalues are 1 - beta and 1 for a unit k), so
// float rounding does not compound over the 2,000 tokens (at worst it adds up, and the decays
// forget it); what remains is the per-chunk rounding, sums of up to 64 (chunk) and 32 (Dk) terms (measured, chunked vs recurrent, every ISA:
// 5.9e-7 with decays near 0, 4.7e-6 with the mixed ones, whose pairwise decays exp(cum_i - cum_j)
// carry the float cumulative sums' error). 1e-4 leaves 20x room for other compilers' contraction
// choices, while a wrong chunk boundary (the state's decay dropped) misses by far more.
TEST(GatedDelta, LongPrefillChunkedMatchesRecurrence) {
  IsaGuard guard;
  // (Chunks of 256 as well: the decoder's prefill takes them, models/decoder/step.cpp.)
  for (const auto& [gates, chunk] : {std::pair{Gates::NearZero, 64}, {Gates::Mixed, 64}, {Gates::NearZero, 256},
                                     {Gates::Mixed, 256}, {Gates::Strong, 256}}) {
    const Seq x = make({2, 2, 32, 32, false}, 2000, 500 + int(gates), gates, /*padded=*/false);
    const Ref ref = reference(x);
    for (Isa isa : isas()) {
      qkv::kernels::set_isa(isa);
      const std::string ctx = std::string(qkv::kernels::isa_name(isa)) + " gates=" + std::to_string(int(gates)) +
                              " chunk=" + std::to_string(chunk);
      const Out rec = run(Form::Recurrent, x), chk = run(Form::Chunked, x, chunk);
      const Errors e = errors(x, chk, rec.o, rec.state);
      EXPECT_LE(e.o, 1e-4) << ctx;
      EXPECT_LE(e.state, 1e-4) << ctx;
      const Errors er = errors(x, rec, ref.o, ref.state), ec = errors(x, chk, ref.o, ref.state);
      EXPECT_LE(std::max(er.o, er.state), 1e-4) << "recurrent vs ref, " << ctx;
      EXPECT_LE(std::max(ec.o, ec.state), 1e-4) << "chunked vs ref, " << ctx;
    }
  }
}

TEST(GatedDelta, RejectsBadArguments) {
  const Seq x = make({2, 4, 8, 8, false}, 3, 600);
  Out r = fresh(x);
  auto call = [&](Form f, GatedDeltaParams p, i64 h0, i64 h1) {
    float* o = r.o.data();
    if (f == Form::Recurrent)
      qkv::kernels::gated_delta_recurrent(o, r.state.data(), x.q.data(), x.k.data(), x.v.data(), x.g.data(),
                                          x.beta.data(), p, h0, h1);
    else
      qkv::kernels::gated_delta_chunked(o, r.state.data(), x.q.data(), x.k.data(), x.v.data(), x.g.data(),
                                        x.beta.data(), p, h0, h1);
  };
  for (Form f : {Form::Recurrent, Form::Chunked}) {
    GatedDeltaParams p = x.p;
    p.Hk = 3;  // does not divide Hv = 4
    EXPECT_THROW(call(f, p, 0, 4), qkv::ValueError);
    EXPECT_THROW(call(f, x.p, 0, 5), qkv::ValueError);
    EXPECT_THROW(call(f, x.p, 3, 2), qkv::ValueError);
    p = x.p;
    p.n = -1;
    EXPECT_THROW(call(f, p, 0, 4), qkv::ValueError);
  }
  GatedDeltaParams p = x.p;
  p.chunk = 0;
  EXPECT_THROW(call(Form::Chunked, p, 0, 4), qkv::ValueError);
  float out[4], state[4] = {0, 0, 0, 0};
  const float xin[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1};
  EXPECT_THROW(qkv::kernels::causal_conv1d_silu(out, 4, xin, 4, 1, 4, w, 0, state, 0, 4), qkv::ValueError);
  EXPECT_THROW(qkv::kernels::causal_conv1d_silu(out, 4, xin, 4, 1, 4, w, 1, state, 0, 5), qkv::ValueError);
}

// ---------------------------------------------------------------------------------------------
// Causal convolution + SiLU
// ---------------------------------------------------------------------------------------------

struct Conv {
  i64 n, Cc, K, ldx, ldo;
  std::vector<float> x, w, state;  // x with NaN in the row gaps; state [K - 1, Cc]
};

Conv make_conv(i64 n, i64 Cc, i64 K, std::uint32_t seed) {
  Conv c{n, Cc, K, Cc + 3, Cc + 5, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  c.x.assign(static_cast<std::size_t>(std::max<i64>(n, 1) * c.ldx), kNaN);
  for (i64 t = 0; t < n; ++t)
    for (i64 i = 0; i < Cc; ++i) c.x[t * c.ldx + i] = 2.f * normal(rng);
  c.w.resize(static_cast<std::size_t>(Cc * K));
  for (float& f : c.w) f = normal(rng);
  c.state.resize(static_cast<std::size_t>((K - 1) * Cc));
  for (float& f : c.state) f = 2.f * normal(rng);
  return c;
}

// Channels [c0, c1) of tokens [t0, t0 + n) into out (row stride c.ldo) and state.
void conv_part(const Conv& c, std::vector<float>& out, std::vector<float>& state, i64 t0, i64 n, i64 c0, i64 c1) {
  qkv::kernels::causal_conv1d_silu(out.data() + t0 * c.ldo, c.ldo, c.x.data() + t0 * c.ldx, c.ldx, n, c.Cc,
                                   c.w.data(), c.K, state.data(), c0, c1);
}

std::vector<float> conv_out(const Conv& c) {
  return std::vector<float>(static_cast<std::size_t>(std::max<i64>(c.n, 1) * c.ldo), kSentinel);
}

TEST(CausalConv1dSilu, MatchesRef) {
  IsaGuard guard;
  int seed = 700;
  for (i64 Cc : {1, 5, 37, 100})
    for (i64 K : {1, 2, 4})
      for (i64 n : {0, 1, 2, 3, 9}) {
        const Conv c = make_conv(n, Cc, K, ++seed);
        std::vector<double> ref_out(static_cast<std::size_t>(std::max<i64>(n, 1) * Cc));
        std::vector<double> ref_state(c.state.begin(), c.state.end());
        qkv::kernels::causal_conv1d_silu_ref(ref_out.data(), c.x.data(), c.ldx, n, Cc, c.w.data(), K,
                                             ref_state.data());
        for (Isa isa : isas()) {
          qkv::kernels::set_isa(isa);
          const std::string ctx = "Cc=" + std::to_string(Cc) + " K=" + std::to_string(K) + " n=" + std::to_string(n) +
                                  " " + qkv::kernels::isa_name(isa);
          std::vector<float> out = conv_out(c), state = c.state;
          conv_part(c, out, state, 0, n, 0, Cc);
          // Sums of K <= 4 float products, then SiLU: a few float roundings of the largest term.
          for (i64 t = 0; t < n; ++t) {
            for (i64 i = 0; i < Cc; ++i) {
              const double want = ref_out[t * Cc + i];
              EXPECT_NEAR(out[t * c.ldo + i], want, 1e-5 * std::max(1.0, std::fabs(want))) << t << "," << i << " " << ctx;
            }
            for (i64 i = Cc; i < c.ldo; ++i) ASSERT_EQ(out[t * c.ldo + i], kSentinel) << ctx;
          }
          // The state holds copies of inputs: exact.
          for (std::size_t i = 0; i < state.size(); ++i) ASSERT_EQ(double(state[i]), ref_state[i]) << i << " " << ctx;
        }
      }
}

// A sequence fed in pieces, some shorter than K - 1 (the state shifts) and some empty, gives the
// one call's bits; so do channel ranges split over a team.
TEST(CausalConv1dSilu, PiecesAndChannelSplitsGiveTheSameBits) {
  IsaGuard guard;
  const i64 n = 13, Cc = 45, K = 4;
  const Conv c = make_conv(n, Cc, K, 800);
  for (Isa isa : isas()) {
    qkv::kernels::set_isa(isa);
    const std::string ctx = qkv::kernels::isa_name(isa);
    std::vector<float> whole = conv_out(c), whole_state = c.state;
    conv_part(c, whole, whole_state, 0, n, 0, Cc);
    for (const std::vector<i64>& pieces : {std::vector<i64>{1, 1, 1, 10}, {2, 0, 5, 6}, {0, 13}, {12, 1}}) {
      std::vector<float> out = conv_out(c), state = c.state;
      i64 t0 = 0;
      for (i64 len : pieces) conv_part(c, out, state, t0, len, 0, Cc), t0 += len;
      EXPECT_TRUE(same_bits(out, whole) && same_bits(state, whole_state)) << "pieces " << pieces[0] << "," << pieces[1] << " " << ctx;
    }
    for (i64 a : {1, 16, 17, 44}) {
      std::vector<float> out = conv_out(c), state = c.state;
      conv_part(c, out, state, 0, n, a, Cc);
      conv_part(c, out, state, 0, n, 0, a);
      EXPECT_TRUE(same_bits(out, whole) && same_bits(state, whole_state)) << "channels split at " << a << " " << ctx;
    }
  }
}

}  // namespace
