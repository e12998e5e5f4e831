// Decode attention (kernels/decode_attention.h) against its float64 naive twin:
// awkward head dims, new-query counts and per-sequence cache lengths, NaN in the
// unused cache slots, grouped-query heads (groups 1, 2, 3, 9), sliding windows, split-K
// heads, every ISA, and bitwise reproducibility over thread counts and over the other
// sequences of the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/half.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::DecodeParams;
using i64 = std::int64_t;

struct Case {
  i64 B, H, Lq, D, T;
  std::vector<i64> q_len, k_len;
  i64 H_kv = 0;    // 0: = H
  i64 window = 0;  // 0: none
  bool sinks = false;  // attention sinks per query head (gpt-oss)
  i64 kv_heads() const { return H_kv > 0 ? H_kv : H; }
};

struct Buffers {
  std::vector<float> q, k, v, sinks;
  DecodeParams p;  // sinks: set from `sinks` where it is used (a copy of Buffers must not dangle)
  DecodeParams params(const Case& c) const {
    DecodeParams r = p;
    r.q_len = c.q_len.data();
    r.k_len = c.k_len.data();
    r.sinks = sinks.empty() ? nullptr : sinks.data();
    return r;
  }
};

// Q/O [B,H,Lq,D] contiguous; K/V [B,H_kv,T,D] with slots at or past k_len[b] set to NaN, and
// also those before every query's window when nan_outside_window.
Buffers make(const Case& c, std::uint32_t seed, float spread = 1.f, bool nan_outside_window = false) {
  Buffers x;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, spread);
  const i64 Hkv = c.kv_heads();
  x.q.resize(static_cast<std::size_t>(c.B * c.H * c.Lq * c.D));
  x.k.resize(static_cast<std::size_t>(c.B * Hkv * c.T * c.D));
  x.v.resize(x.k.size());
  for (float& f : x.q) f = n(rng);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (i64 b = 0; b < c.B; ++b) {
    const i64 first = c.window > 0 ? c.k_len[b] - c.q_len[b] - c.window + 1 : 0;  // query 0's first key
    for (i64 h = 0; h < Hkv; ++h)
      for (i64 t = 0; t < c.T; ++t)
        for (i64 d = 0; d < c.D; ++d) {
          const std::size_t i = static_cast<std::size_t>(((b * Hkv + h) * c.T + t) * c.D + d);
          const bool used = t < c.k_len[b] && !(nan_outside_window && t < first);
          x.k[i] = used ? n(rng) : nan;
          x.v[i] = used ? n(rng) : nan;
        }
  }
  // Sinks from far below the scores (no effect) to far above (most of the weight), so the
  // running max is the sink's in some rows and a key's in others.
  if (c.sinks)
    for (i64 h = 0; h < c.H; ++h) x.sinks.push_back(h % 3 == 0 ? 6.f * spread : h % 3 == 1 ? -30.f : n(rng));
  DecodeParams& p = x.p;
  p.B = c.B, p.H = c.H, p.Lq = c.Lq, p.D = c.D, p.H_kv = c.H_kv, p.window = c.window;
  p.q_sb = c.H * c.Lq * c.D, p.q_sh = c.Lq * c.D, p.q_st = c.D;
  p.o_sb = p.q_sb, p.o_sh = p.q_sh, p.o_st = p.q_st;
  p.k_sb = Hkv * c.T * c.D, p.k_sh = c.T * c.D, p.k_st = c.D;
  p.v_sb = p.k_sb, p.v_sh = p.k_sh, p.v_st = p.k_st;
  p.scale = 1.f / std::sqrt(static_cast<float>(c.D));
  return x;
}

template <class T>
std::vector<T> ref(const Buffers& x, const Case& c) {
  std::vector<T> q(x.q.begin(), x.q.end()), k(x.k.begin(), x.k.end()), v(x.v.begin(), x.v.end());
  std::vector<T> o(q.size(), T(0));
  const DecodeParams p = x.params(c);
  qkv::kernels::decode_attention_ref<T>(o.data(), q.data(), k.data(), v.data(), p);
  return o;
}

std::vector<float> fast(const Buffers& x, const Case& c) {
  std::vector<float> o(x.q.size(), -7.f);  // rows past q_len must stay untouched
  const DecodeParams p = x.params(c);
  qkv::kernels::decode_attention_forward(o.data(), x.q.data(), x.k.data(), x.v.data(), p);
  return o;
}

// R1 (REFERENCES.md): |fast - ref64| <= 2 |ref32 - ref64| + 1e-5, rows past q_len untouched.
void expect_r1(const Case& c, std::uint32_t seed, float spread = 1.f, bool nan_outside_window = false) {
  const Buffers x = make(c, seed, spread, nan_outside_window);
  const std::vector<float> got = fast(x, c), lp = ref<float>(x, c);
  const std::vector<double> hp = ref<double>(x, c);
  double err_lp = 0, err = 0;
  for (i64 b = 0; b < c.B; ++b)
    for (i64 h = 0; h < c.H; ++h)
      for (i64 i = 0; i < c.Lq; ++i)
        for (i64 d = 0; d < c.D; ++d) {
          const std::size_t at = static_cast<std::size_t>(((b * c.H + h) * c.Lq + i) * c.D + d);
          if (i >= c.q_len[b]) {
            ASSERT_EQ(got[at], -7.f) << "row " << i << " of sequence " << b << " past q_len was written";
            continue;
          }
          ASSERT_TRUE(std::isfinite(got[at])) << "b " << b << " h " << h << " i " << i << " d " << d;
          err_lp = std::max(err_lp, std::fabs(lp[at] - hp[at]));
          err = std::max(err, std::fabs(got[at] - hp[at]));
        }
  EXPECT_LE(err, 2 * err_lp + 1e-5) << "B " << c.B << " H " << c.H << " H_kv " << c.kv_heads() << " Lq " << c.Lq
                                    << " D " << c.D << " T " << c.T << " window " << c.window << " isa "
                                    << qkv::kernels::isa_name(qkv::kernels::active_isa());
}

std::vector<qkv::kernels::Isa> isas() { return qkv::testing::isas_up_to(qkv::kernels::Isa::Avx512); }

TEST(DecodeAttention, AwkwardShapesMatchTheFloat64Reference) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  std::uint32_t seed = 1;
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (int threads : {1, 2}) {
      qkv::set_num_threads(threads);
      for (i64 D : {1, 3, 8, 16, 21, 32, 59, 64, 96, 128})
        for (i64 Lq : {1, 2, 3, 4})
          for (i64 T : {4, 17, 113, 300}) {
            if ((D + Lq + T + threads) % 2) continue;  // a reduced sweep: half the combinations per ISA
            // Mixed per-sequence lengths: the shortest holds exactly its new queries.
            Case c{3, 2, Lq, D, T, {Lq, std::max<i64>(Lq - 1, 0), 1}, {Lq, T, std::min<i64>(T, Lq + 5)}};
            expect_r1(c, seed++);
            if (HasFailure()) return;
          }
    }
  }
}

// Grouped-query heads: group sizes 1, 2, 3, 9 (H_kv = 1: multi-query), SmolLM2's 9 on 3 at D = 64,
// with 1..4 new queries, mixed lengths, odd head dims, every ISA.
TEST(DecodeAttention, GroupedQueryHeadsMatchTheReference) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  struct G {
    i64 H, H_kv, D;
  };
  const G groups[] = {{4, 4, 16}, {4, 2, 21}, {9, 3, 64}, {9, 1, 64}, {6, 3, 3}, {9, 1, 128}};
  std::uint32_t seed = 100;
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (const G& g : groups)
      for (i64 Lq : {1, 3, 4}) {
        qkv::set_num_threads(Lq % 2 ? 1 : 2);
        Case c{3, g.H, Lq, g.D, 300, {Lq, 1, std::max<i64>(Lq - 1, 0)}, {300, 70, Lq + 2}, g.H_kv};
        expect_r1(c, seed++);
        if (HasFailure()) return;
      }
  }
}

// Sliding windows 1, 2, the key block (64) +-1, longer than the context; with grouped heads, a
// few new queries, mixed lengths, and split-K heads (long context, one sequence). Keys before
// every query's window hold NaN: they are never read.
TEST(DecodeAttention, SlidingWindowsMatchTheReference) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  std::uint32_t seed = 200;
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (i64 W : {1, 2, 63, 64, 65, 299, 5000}) {
      qkv::set_num_threads(W % 2 ? 2 : 1);
      Case c{3, 6, 3, 64, 300, {3, 1, 2}, {300, 170, 4}, 2, W};
      expect_r1(c, seed++, 1.f, true);
      Case split{1, 9, 2, 64, 4000, {2}, {3999}, 3, W};  // split-K when the window is long
      expect_r1(split, seed++, 1.f, true);
      if (HasFailure()) return;
    }
  }
}

// Attention sinks (gpt-oss): one more term of each head's softmax denominator, counted once
// whether the keys are split over threads or not; with windows, groups, several new queries,
// every ISA, 1 and 2 threads.
TEST(DecodeAttention, SinksMatchTheReference) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  const std::vector<Case> cases = {
      {2, 6, 1, 64, 300, {1, 1}, {300, 7}, 2, 0, true},
      {3, 4, 3, 21, 113, {3, 2, 1}, {3, 113, 8}, 0, 0, true},
      {2, 6, 3, 64, 300, {3, 1}, {300, 170}, 2, 64, true},  // window of 64 (gpt-oss: 128)
      {1, 9, 2, 64, 4000, {2}, {3999}, 3, 0, true},         // split-K: the sink joins at the merge
      {1, 8, 1, 64, 4000, {1}, {3000}, 1, 128, true},       // one query, window 128, multi-query
  };
  std::uint32_t seed = 400;
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (int threads : {1, 2}) {
      qkv::set_num_threads(threads);
      for (const Case& c : cases) {
        expect_r1(c, seed++, 1.f, c.window > 0);
        if (HasFailure()) return;
      }
    }
  }
  // A sink far above every score takes nearly all the weight: O ~ 0, not the values' average.
  Case c{1, 3, 1, 8, 20, {1}, {20}, 0, 0, true};
  Buffers x = make(c, 5);
  x.sinks = {40.f, 40.f, 40.f};
  const std::vector<float> o = fast(x, c);
  for (float f : o) EXPECT_LT(std::fabs(f), 1e-9f);
}

TEST(DecodeAttention, LongContextSplitAcrossThreadsMatchesAndIsBitwiseStable) {
  // One sequence, few heads, long cache: the keys of a head are split into chunks merged by LSE.
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (const Case& c : {Case{1, 2, 2, 64, 3001, {2}, {2999}}, Case{1, 9, 1, 64, 2100, {1}, {2048}, 3},
                          Case{2, 4, 4, 59, 1500, {4, 1}, {1500, 900}, 1, 700}}) {
      ASSERT_GT(qkv::kernels::decode_attention_splits(c.B, c.kv_heads(), c.k_len[0]), 1)
          << "this case must exercise split-K";
      qkv::set_num_threads(1);
      expect_r1(c, 5);
      expect_r1(c, 6, 4.f);  // peaked softmax: chunk maxima differ a lot
      const Buffers x = make(c, 7);
      const std::vector<float> one = fast(x, c);
      for (int threads : {2, 3}) {
        qkv::set_num_threads(threads);
        const std::vector<float> again = fast(x, c);
        EXPECT_EQ(0, std::memcmp(one.data(), again.data(), one.size() * sizeof(float))) << threads << " threads";
      }
      if (HasFailure()) return;
    }
  }
}

TEST(DecodeAttention, SplitsDependOnlyOnSizes) {
  using qkv::kernels::decode_attention_splits;
  EXPECT_EQ(decode_attention_splits(1, 12, 100), 1);      // short: never split
  EXPECT_EQ(decode_attention_splits(1, 12, 2048), 2);     // GPT-2 small at 2048 keys
  EXPECT_EQ(decode_attention_splits(8, 12, 2048), 1);     // enough heads already
  EXPECT_EQ(decode_attention_splits(1, 1, 100000), 16);
  EXPECT_EQ(decode_attention_splits(1, 3, 2048), 6);      // SmolLM2: 9 query heads on 3 key/value heads
}

TEST(DecodeAttention, HugeLogitsStayFinite) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  qkv::set_num_threads(2);
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    Case c{2, 3, 1, 16, 700, {1, 1}, {700, 650}};
    expect_r1(c, 9, 60.f);  // |q.k| ~ 1e4
    Case g{2, 6, 2, 32, 700, {2, 1}, {700, 650}, 2, 100};
    expect_r1(g, 10, 60.f);
  }
}

TEST(DecodeAttention, ZeroNewQueriesWriteNothing) {
  Case c{2, 1, 2, 8, 10, {0, 0}, {5, 0}};
  const Buffers x = make(c, 3);
  const std::vector<float> got = fast(x, c);
  for (float f : got) EXPECT_EQ(f, -7.f);
}

}  // namespace

// independent = true: each (sequence, key/value head) splits its keys by its own length, so its
// output is bitwise that of a call for it alone (B = 1, H_kv = 1), whatever the batch holds;
// and it stays within R1 of the float64 reference. Lengths on both sides of the split sizes.
TEST(DecodeAttention, IndependentSequencesEqualTheirCallsAlone) {
  for (qkv::kernels::Isa isa : isas()) {
    qkv::testing::IsaGuard guard;
    qkv::kernels::set_isa(isa);
    for (int threads : {1, 2}) {
      qkv::testing::ThreadsGuard tg;
      qkv::set_num_threads(threads);
      const i64 T = 2300, H = 6, Hkv = 2, G = H / Hkv, Lq = 2, D = 40;
      Case c{4, H, Lq, D, T, {1, 2, 1, 2}, {2300, 300, 700, 5}, Hkv};
      const Buffers x = make(c, 77);
      DecodeParams p = x.p;
      p.q_len = c.q_len.data();
      p.k_len = c.k_len.data();
      p.independent = true;
      std::vector<float> all(x.q.size(), -7.f);
      qkv::kernels::decode_attention_forward(all.data(), x.q.data(), x.k.data(), x.v.data(), p);
      for (i64 b = 0; b < c.B; ++b)
        for (i64 j = 0; j < Hkv; ++j) {
          DecodeParams one = p;
          one.B = 1, one.H = G, one.H_kv = 1, one.independent = false;
          one.q_len = c.q_len.data() + b;
          one.k_len = c.k_len.data() + b;
          const i64 qo = (b * H + j * G) * Lq * D, ko = (b * Hkv + j) * T * D;
          std::vector<float> alone(static_cast<std::size_t>(G * Lq * D), -7.f);
          qkv::kernels::decode_attention_forward(alone.data(), x.q.data() + qo, x.k.data() + ko, x.v.data() + ko, one);
          for (i64 i = 0; i < G * Lq * D; ++i)
            ASSERT_EQ(std::memcmp(&alone[static_cast<std::size_t>(i)], &all[static_cast<std::size_t>(qo + i)], 4), 0)
                << "sequence " << b << " head " << j << " element " << i << " isa " << qkv::kernels::isa_name(isa)
                << " threads " << threads;
        }
      // Against the reference (rows past q_len untouched).
      const std::vector<double> hp = ref<double>(x, c);
      const std::vector<float> lp = ref<float>(x, c);
      double err = 0, err_lp = 0;
      for (i64 b = 0; b < c.B; ++b)
        for (i64 h = 0; h < H; ++h)
          for (i64 i = 0; i < Lq; ++i)
            for (i64 d = 0; d < D; ++d) {
              const std::size_t at = static_cast<std::size_t>(((b * H + h) * Lq + i) * D + d);
              if (i >= c.q_len[b]) {
                ASSERT_EQ(all[at], -7.f);
                continue;
              }
              err = std::max(err, std::fabs(all[at] - hp[at]));
              err_lp = std::max(err_lp, std::fabs(lp[at] - hp[at]));
            }
      EXPECT_LE(err, 2 * err_lp + 1e-5);
    }
  }
}

// Called by the members of a team together (decode_attention_forward(Team&, ...), a model's
// one-team decoding step): bitwise the call outside a team, for teams of 1, 2 and 3 members,
// split heads or not, windows, `independent`, float and half caches; rows past q_len untouched;
// no scratch needed when no head is split.
TEST(DecodeAttention, TeamCallsGiveTheBitsOfTheCallOutsideATeam) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  const std::vector<std::pair<Case, bool>> cases = {
      {Case{1, 9, 1, 64, 2100, {1}, {2048}, 3}, false},             // SmolLM2 at depth 2048: 6 chunks per head
      {Case{1, 9, 1, 64, 2100, {1}, {2048}, 3}, true},
      {Case{1, 9, 1, 64, 200, {1}, {144}, 3}, false},  // SmolLM2 at a short depth: 3 tasks
      {Case{2, 6, 3, 24, 90, {3, 2}, {90, 40}, 2}, false},  // several queries per sequence
      {Case{4, 6, 2, 40, 2300, {1, 2, 0, 2}, {2300, 300, 700, 5}, 2}, true},  // mixed, one sequence idle
      {Case{2, 4, 4, 59, 1500, {4, 1}, {1500, 900}, 1, 700}, false},  // window, multi-query
      {Case{3, 2, 3, 21, 113, {3, 2, 1}, {3, 113, 8}}, false},       // short: no split
      {Case{2, 1, 0, 8, 10, {0, 0}, {5, 0}}, false},                  // no queries: a barrier alone
      {Case{1, 8, 1, 64, 2100, {1}, {2048}, 2, 128, true}, false},    // sinks, window
      {Case{1, 8, 1, 64, 2100, {1}, {2048}, 2, 0, true}, true},       // sinks on split heads
  };
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (const auto& [c, independent] : cases) {
      const Buffers x = make(c, 21);
      DecodeParams p = x.params(c);
      p.independent = independent;
      const i64 need = qkv::kernels::decode_attention_team_scratch(p);
      const bool split = c.k_len[0] >= 1000 && (c.window == 0 || c.window >= 700);  // a window of 128 is not split
      EXPECT_EQ(need > 0, split) << "scratch " << need;
      std::vector<std::uint16_t> kh(x.k.size()), vh(x.v.size());
      qkv::kernels::float_to_half_rows(x.k.data(), kh.data(), static_cast<i64>(x.k.size()));
      qkv::kernels::float_to_half_rows(x.v.data(), vh.data(), static_cast<i64>(x.v.size()));
      qkv::set_num_threads(1);
      std::vector<float> want(x.q.size(), -7.f), want16(x.q.size(), -7.f);
      qkv::kernels::decode_attention_forward(want.data(), x.q.data(), x.k.data(), x.v.data(), p);
      qkv::kernels::decode_attention_forward_f16(want16.data(), x.q.data(), kh.data(), vh.data(), p);
      for (int threads : {1, 2, 3}) {
        qkv::set_num_threads(threads);
        std::vector<float> got(x.q.size(), -7.f), got16(x.q.size(), -7.f);
        std::vector<float> scratch(static_cast<std::size_t>(std::max<i64>(need, 1)), std::nanf(""));
        int members = 0;
        qkv::parallel_team(threads, [&](qkv::Team& tm) {
          if (tm.rank() == 0) members = tm.size();
          qkv::kernels::decode_attention_forward(tm, scratch.data(), got.data(), x.q.data(), x.k.data(), x.v.data(), p);
          qkv::kernels::decode_attention_forward_f16(tm, scratch.data(), got16.data(), x.q.data(), kh.data(), vh.data(),
                                                     p);
        });
        if (threads > 1) {
          EXPECT_GT(members, 1) << "the pool must run a real team here";
        }
        EXPECT_TRUE(want.empty() ? got.empty() : std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0)
            << threads << " members, B " << c.B << " T " << c.T << " isa " << qkv::kernels::isa_name(isa);
        EXPECT_TRUE(want16.empty() ? got16.empty()
                                   : std::memcmp(want16.data(), got16.data(), want16.size() * sizeof(float)) == 0)
            << threads << " members (f16), B " << c.B << " T " << c.T << " isa " << qkv::kernels::isa_name(isa);
      }
      if (HasFailure()) return;
    }
  }
}

// A float16 cache (decode_attention_forward_f16): bitwise the float kernel on the halves' values
// (each key and value rounded to half, then widened exactly), every ISA, awkward head dims, groups,
// windows, long contexts split over threads, NaN in the unused slots.
TEST(DecodeAttention, HalfCacheEqualsTheFloatKernelOnTheRoundedValues) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  const std::vector<Case> cases = {
      {2, 3, 1, 1, 9, {1, 1}, {9, 2}},
      {3, 9, 2, 64, 300, {2, 1, 2}, {300, 77, 2}, 3},
      {1, 4, 4, 21, 113, {4}, {113}, 2, 40},
      {2, 2, 3, 59, 700, {3, 1}, {700, 650}, 1},
      {1, 9, 1, 64, 2600, {1}, {2600}, 3},  // split across threads
  };
  std::uint32_t seed = 91;
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    for (int threads : {1, 2}) {
      qkv::set_num_threads(threads);
      for (const Case& c : cases) {
        Buffers x = make(c, seed++, 2.f);
        std::vector<std::uint16_t> kh(x.k.size()), vh(x.v.size());
        for (std::size_t i = 0; i < x.k.size(); ++i) {
          kh[i] = qkv::kernels::f32_to_f16(x.k[i]);
          vh[i] = qkv::kernels::f32_to_f16(x.v[i]);
          x.k[i] = qkv::kernels::f16_to_f32(kh[i]);
          x.v[i] = qkv::kernels::f16_to_f32(vh[i]);
        }
        const std::vector<float> want = fast(x, c);
        std::vector<float> got(x.q.size(), -7.f);
        DecodeParams p = x.p;
        p.q_len = c.q_len.data();
        p.k_len = c.k_len.data();
        qkv::kernels::decode_attention_forward_f16(got.data(), x.q.data(), kh.data(), vh.data(), p);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << "D " << c.D << " T " << c.T << " H_kv " << c.kv_heads() << " threads " << threads << " isa "
            << qkv::kernels::isa_name(isa);
        // And within R1-style bounds of the float64 reference on those values.
        const std::vector<double> hp = ref<double>(x, c);
        for (i64 b = 0; b < c.B; ++b)
          for (i64 h = 0; h < c.H; ++h)
            for (i64 i = 0; i < c.q_len[b]; ++i)
              for (i64 d = 0; d < c.D; ++d) {
                const std::size_t at = static_cast<std::size_t>(((b * c.H + h) * c.Lq + i) * c.D + d);
                ASSERT_NEAR(got[at], hp[at], 1e-4) << "b " << b << " h " << h << " i " << i << " d " << d;
              }
      }
    }
  }
}

// kernels/half.h's row conversions: the scalar functions' bits (numpy's conversions) on every ISA,
// for every half (widening) and for floats around every rounding case (ties to even, the
// subnormal range, overflow to inf); NaN stays NaN with its sign; any length (vector tails).
TEST(HalfRows, EveryIsaGivesTheScalarConversionsBits) {
  qkv::testing::IsaGuard ig;
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> xs;
  std::mt19937 rng(5);
  for (std::uint16_t h : all) {
    const float f = qkv::kernels::f16_to_f32(h);
    if (std::isnan(f)) continue;
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    for (std::uint32_t d : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu}) {  // exact, near and on the ties
      const std::uint32_t c = b + d;
      float g;
      std::memcpy(&g, &c, 4);
      if (!std::isnan(g)) xs.push_back(g);  // (past inf's bits: NaNs, checked on their own below)
    }
  }
  for (float f : {1e-8f, 3e-8f, 5.96e-8f, 65504.f, 65519.f, 65520.f, 1e9f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()})
    xs.push_back(f), xs.push_back(-f);
  std::normal_distribution<float> n(0.f, 100.f);
  for (int i = 0; i < 4099; ++i) xs.push_back(n(rng));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto isa : isas()) {
    qkv::kernels::set_isa(isa);
    std::vector<float> wide(all.size());
    qkv::kernels::half_to_float_rows(all.data(), wide.data(), static_cast<i64>(all.size()));
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float want = qkv::kernels::f16_to_f32(all[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(wide[i])) << i;
        ASSERT_EQ(std::signbit(want), std::signbit(wide[i])) << i;
      } else {
        ASSERT_EQ(0, std::memcmp(&want, &wide[i], 4)) << "half " << i << " isa " << qkv::kernels::isa_name(isa);
      }
    }
    for (i64 len : {i64{0}, i64{1}, i64{7}, i64{15}, i64{17}, static_cast<i64>(xs.size())}) {
      std::vector<std::uint16_t> h(static_cast<std::size_t>(len) + 1, 0xABCD);
      qkv::kernels::float_to_half_rows(xs.data(), h.data(), len);
      for (i64 i = 0; i < len; ++i)
        ASSERT_EQ(h[static_cast<std::size_t>(i)], qkv::kernels::f32_to_f16(xs[static_cast<std::size_t>(i)]))
            << "x " << xs[static_cast<std::size_t>(i)] << " isa " << qkv::kernels::isa_name(isa);
      ASSERT_EQ(h.back(), 0xABCD) << "wrote past n";
    }
    std::vector<float> nans = {nan, -nan};
    std::vector<std::uint16_t> hn(2);
    qkv::kernels::float_to_half_rows(nans.data(), hn.data(), 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(std::isnan(qkv::kernels::f16_to_f32(hn[i])));
      EXPECT_EQ(std::signbit(nans[i]), (hn[i] & 0x8000) != 0);
    }
  }
}
