// Grouped-query attention (H query heads on H_kv key/value heads, read in place) and sliding
// windows in the flash kernels (tiled and row kernels, forward and backward) against the naive
// float64 reference with rule R1, over group sizes 1, 2, 3, 4, 9 (multi-query: H_kv = 1), windows
// 1, 2, every tile size +-1 and at least the key count, Lq != Lk, key lengths, bias, dropout,
// strided layouts, every ISA and 1 / 2 threads (attention_test_util.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention_test_util.h"

namespace {

using namespace qkv_attention_test;  // NOLINT: the shared harness

// The reference itself: a key/value head shared by G query heads gives what G copies of it give,
// and its gradient is the sum of the copies' gradients (float64, every mask kind at once).
TEST(AttentionRefGqa, SharedHeadEqualsCopiesAndSumsTheirGradients) {
  Spec s;
  s.B = 2, s.H = 6, s.H_kv = 2, s.Lq = 7, s.Lk = 11, s.D = 5, s.Dv = 3, s.causal = true, s.window = 4;
  s.key_lengths = {11, 6}, s.bias = BiasKind::Full, s.bias_ninf_frac = 0.2f, s.dropout = 0.3f;
  const Problem gqa = make_problem(s);
  // The same problem with K and V copied to every query head (H_kv = H, BHLD layout).
  Problem mha = gqa;
  const i64 G = s.H / s.H_kv, D = s.D, Dv = 3;
  mha.p.H_kv = 0;
  mha.vk = make_view(Layout::BHLD, s.B, s.H, s.Lk, D);
  mha.vv = make_view(Layout::BHLD, s.B, s.H, s.Lk, Dv);
  mha.p.k_sb = mha.vk.sb, mha.p.k_sh = mha.vk.sh, mha.p.k_st = mha.vk.st;
  mha.p.v_sb = mha.vv.sb, mha.p.v_sh = mha.vv.sh, mha.p.v_st = mha.vv.st;
  mha.k.assign(static_cast<std::size_t>(mha.vk.size()), 0.f);
  mha.v.assign(static_cast<std::size_t>(mha.vv.size()), 0.f);
  for (i64 b = 0; b < s.B; ++b)
    for (i64 h = 0; h < s.H; ++h)
      for (i64 j = 0; j < s.Lk; ++j) {
        const i64 hk = h / G;
        for (i64 d = 0; d < D; ++d)
          mha.k[b * mha.p.k_sb + h * mha.p.k_sh + j * D + d] = gqa.k[b * gqa.p.k_sb + hk * gqa.p.k_sh + j * D + d];
        for (i64 d = 0; d < Dv; ++d)
          mha.v[b * mha.p.v_sb + h * mha.p.v_sh + j * Dv + d] = gqa.v[b * gqa.p.v_sb + hk * gqa.p.v_sh + j * Dv + d];
      }
  const auto a = run_ref<double>(gqa, true), c = run_ref<double>(mha, true);
  EXPECT_EQ(a.o, c.o);
  EXPECT_EQ(a.lse, c.lse);
  EXPECT_EQ(a.dq, c.dq);
  double worst = 0;
  for (i64 b = 0; b < s.B; ++b)
    for (i64 hk = 0; hk < s.H_kv; ++hk)
      for (i64 j = 0; j < s.Lk; ++j) {
        for (i64 d = 0; d < D; ++d) {
          double sum = 0;
          for (i64 g = 0; g < G; ++g) sum += c.dk[b * mha.p.k_sb + (hk * G + g) * mha.p.k_sh + j * D + d];
          worst = std::max(worst, std::fabs(sum - a.dk[b * gqa.p.k_sb + hk * gqa.p.k_sh + j * D + d]));
        }
        for (i64 d = 0; d < Dv; ++d) {
          double sum = 0;
          for (i64 g = 0; g < G; ++g) sum += c.dv[b * mha.p.v_sb + (hk * G + g) * mha.p.v_sh + j * Dv + d];
          worst = std::max(worst, std::fabs(sum - a.dv[b * gqa.p.v_sb + hk * gqa.p.v_sh + j * Dv + d]));
        }
      }
  EXPECT_LT(worst, 1e-13);
}

// The reference's window: query i (at position i + Lk - Lq) sees exactly the keys j with
// position - W < j <= position (causal) — weights checked against that rule directly.
TEST(AttentionRefGqa, WindowWeightsFollowTheRule) {
  for (i64 W : {1, 2, 5}) {
    Spec s;
    s.Lq = 6, s.Lk = 9, s.D = 4, s.causal = true, s.window = W;
    const Problem pr = make_problem(s);
    std::vector<double> o(static_cast<std::size_t>(pr.vo.size())), P(static_cast<std::size_t>(s.Lq * s.Lk));
    const std::vector<double> q(pr.q.begin(), pr.q.end()), k(pr.k.begin(), pr.k.end()), v(pr.v.begin(), pr.v.end());
    qkv::kernels::attention_ref_forward<double>(o.data(), nullptr, P.data(), q.data(), k.data(), v.data(), pr.p);
    for (i64 i = 0; i < s.Lq; ++i) {
      const i64 pos = i + s.Lk - s.Lq;
      for (i64 j = 0; j < s.Lk; ++j) {
        const bool seen = j <= pos && pos - j < W;
        EXPECT_EQ(P[i * s.Lk + j] > 0, seen) << "W " << W << " i " << i << " j " << j;
      }
    }
  }
}

// Group sizes 1, 2, 3, 4, 9 (H_kv = 1: multi-query) with causal, Lq != Lk, key lengths, a bias,
// dropout and strided layouts in rotation; head dims that take the row kernel's lane layout (4,
// 8, 16), the tiled kernel's register blocks (64) and odd ones (5, 59).
TEST(GroupedQueryAttention, GroupSizesAgainstTheReference) {
  struct C {
    i64 H, H_kv, Lq, Lk, D;
  };
  const C cases[] = {
      {4, 4, 9, 20, 8},     {6, 3, 17, 40, 16},  {9, 3, 33, 97, 64},  {9, 1, 8, 31, 4},   {6, 2, 1, 130, 59},
      {4, 1, 70, 45, 5},    {9, 3, 3, 257, 64},  {8, 2, 129, 129, 32}, {9, 9, 2, 17, 16}, {9, 1, 100, 300, 64},
  };
  int n = 0;
  for (const C& c : cases) {
    Spec s;
    s.B = 2, s.H = c.H, s.H_kv = c.H_kv, s.Lq = c.Lq, s.Lk = c.Lk, s.D = c.D, s.Dv = n % 4 == 3 ? 24 : c.D;
    s.causal = n % 2 == 0;
    if (n % 3 == 1) s.key_lengths = {c.Lk, std::max<i64>(c.Lk / 2, 1)}, s.nan_padding = true;
    if (n % 4 == 1) s.bias = BiasKind::Full, s.bias_ninf_frac = 0.2f;
    if (n % 4 == 2) s.bias = BiasKind::PerKey;
    if (n % 3 == 2) s.dropout = 0.2f;
    if (n % 5 == 3) s.layout = Layout::BLHD;
    if (n % 5 == 4) s.layout = Layout::Padded;
    s.seed = static_cast<std::uint64_t>(700 + n++);
    check_case(s);
    if (HasFailure()) return;
  }
}

// Decode-like heads (a few query rows read K and V in place) of SmolLM2's shape: 9 query heads
// on 3 key/value heads (and on 1), head dim 64, long keys.
TEST(GroupedQueryAttention, FewQueryRowsReadSharedHeadsInPlace) {
  for (i64 Hkv : {3, 1})
    for (i64 Lq : {1, 4, 16}) {
      Spec s;
      s.B = 2, s.H = 9, s.H_kv = Hkv, s.Lq = Lq, s.Lk = 333, s.D = 64, s.causal = true;
      s.key_lengths = {333, 200}, s.seed = static_cast<std::uint64_t>(Lq + 10 * Hkv);
      check_case(s);
      if (HasFailure()) return;
    }
}

// Windows 1, 2, every tile size of every ISA +-1 and at least the key count, causal and not,
// with Lq != Lk pairs (query rows bottom-right aligned) and key lengths.
TEST(SlidingWindow, WindowsAgainstTheReference) {
  IsaGuard ig;
  std::vector<i64> windows = {1, 2};
  for (Isa isa : isas_to_test()) {
    qkv::kernels::set_isa(isa);
    const auto t = qkv::kernels::flash_attention_tile_sizes();
    for (int v : {t.micro_rows, t.key_panel, t.fwd_k_block, t.bwd_q_block, t.bwd_k_block})
      for (int d : {-1, 0, 1}) windows.push_back(v + d);
  }
  std::sort(windows.begin(), windows.end());
  windows.erase(std::unique(windows.begin(), windows.end()), windows.end());
  const i64 pairs[][2] = {{150, 150}, {113, 203}, {3, 260}, {200, 130}, {20, 31}};
  int n = 0;
  for (i64 W : windows) {
    const auto& pq = pairs[n % 5];
    Spec s;
    s.B = 2, s.H = 2, s.Lq = pq[0], s.Lk = pq[1], s.window = W, s.causal = n % 3 != 2;
    s.D = n % 4 == 0 ? 8 : n % 4 == 1 ? 64 : n % 4 == 2 ? 21 : 32;
    if (n % 2) s.key_lengths = {s.Lk, s.Lk * 2 / 3};
    if (n % 5 == 3) s.H = 4, s.H_kv = 2;
    s.seed = static_cast<std::uint64_t>(900 + n++);
    check_case(s);
    if (HasFailure()) return;
  }
  for (i64 W : {129, 300, 1000}) {  // W >= every row's position: no key is cut
    Spec s;
    s.B = 1, s.H = 3, s.H_kv = 1, s.Lq = 97, s.Lk = 129, s.D = 16, s.window = W, s.causal = W != 300;
    s.seed = static_cast<std::uint64_t>(W);
    check_case(s);
    if (HasFailure()) return;
  }
}

// A window of at least Lk keys cuts nothing: bitwise the results of no window, for both kernels,
// with and without causal, and in the row kernel's lane layout (D = 8).
TEST(SlidingWindow, WindowOfAtLeastTheKeysIsNoWindow) {
  for (i64 D : {8, 64})
    for (bool causal : {false, true}) {
      Spec s;
      s.B = 2, s.H = 4, s.H_kv = 2, s.Lq = 40, s.Lk = 30, s.D = D, s.causal = causal, s.key_lengths = {30, 20};
      const Problem none = make_problem(s);
      for (i64 W : {30, 31, 1000}) {
        Problem win = none;
        win.p.window = W;
        for (AttnKernel kernel : {AttnKernel::Tiled, AttnKernel::Rows}) {
          const auto a = run_flash(none, true, kernel), b = run_flash(win, true, kernel);
          EXPECT_TRUE(same_bits(a.o, b.o) && same_bits(a.lse, b.lse) && same_bits(a.dq, b.dq) &&
                      same_bits(a.dk, b.dk) && same_bits(a.dv, b.dv))
              << "D " << D << " causal " << causal << " W " << W;
        }
      }
      // and a window one key short of that does cut (the test can fail)
      Problem cut = none;
      cut.p.window = 29;
      EXPECT_FALSE(same_bits(run_flash(none, false).o, run_flash(cut, false).o));
    }
}

// Rows whose window holds no key (non-causal window past a short key length; Lq > Lk causal):
// output exactly 0, LSE -inf, gradients exactly 0 — on every kernel and ISA, and R1 elsewhere.
TEST(SlidingWindow, RowsWithoutKeysAreExactlyZero) {
  IsaGuard ig;
  Spec s;
  s.B = 2, s.H = 3, s.H_kv = 1, s.Lq = 100, s.Lk = 100, s.D = 16, s.window = 10, s.key_lengths = {100, 30};
  const Problem pr = make_problem(s);
  const AttnParams& p = pr.p;
  for (AttnKernel kernel : {AttnKernel::Tiled, AttnKernel::Rows})
    for (Isa isa : isas_to_test()) {
      qkv::kernels::set_isa(isa);
      const auto r = run_flash(pr, true, kernel);
      for (i64 h = 0; h < s.H; ++h)
        for (i64 i = 0; i < s.Lq; ++i) {
          const bool empty = i - s.window + 1 >= 30;  // batch 1: keys [i - 9, 30) is empty
          const float lse = r.lse[(s.H + h) * s.Lq + i];
          ASSERT_EQ(lse == -kInf, empty) << "row " << i;
          if (!empty) continue;
          for (i64 d = 0; d < s.D; ++d) {
            ASSERT_EQ(r.o[p.o_sb + h * p.o_sh + i * p.o_st + d], 0.f);
            ASSERT_EQ(r.dq[p.q_sb + h * p.q_sh + i * p.q_st + d], 0.f);
          }
        }
    }
  check_case(s);
  Spec c;  // causal with Lq > Lk: the first rows see nothing; a window of 1 sees one key
  c.B = 1, c.H = 2, c.H_kv = 1, c.Lq = 50, c.Lk = 33, c.D = 32, c.causal = true, c.window = 1;
  check_case(c);
}

// Tiles entirely outside every row's window are skipped, not computed and masked: K and V rows
// there hold NaN (which any product would spread, even times a zero weight), and the results are
// bitwise those with zeros there. Packed (Lq = 200) and in-place (Lq = 5) forward paths, and the
// backward's key blocks; causal and not; keys 256 or more before the first row's window.
TEST(SlidingWindow, KeysOutsideEveryWindowAreNeverRead) {
  IsaGuard ig;
  ThreadsGuard tg;
  for (Isa isa : isas_to_test()) {
    qkv::kernels::set_isa(isa);
    for (i64 Lq : {200, 5})
      for (bool causal : {true, false}) {
        qkv::set_num_threads(causal ? 2 : 1);
        Spec s;
        s.B = 1, s.H = 6, s.H_kv = 2, s.Lq = Lq, s.Lk = 1500, s.D = 64, s.window = 64, s.causal = causal;
        Problem nans = make_problem(s);
        const i64 first = s.Lk - s.Lq - s.window + 1;  // row 0's first key
        for (i64 hk = 0; hk < 2; ++hk)
          for (i64 j = 0; j < first - 256; ++j)
            for (i64 d = 0; d < s.D; ++d) {
              nans.k[hk * nans.p.k_sh + j * nans.p.k_st + d] = std::numeric_limits<float>::quiet_NaN();
              nans.v[hk * nans.p.v_sh + j * nans.p.v_st + d] = std::numeric_limits<float>::quiet_NaN();
            }
        Problem zero_filled = nans;
        for (float& x : zero_filled.k)
          if (std::isnan(x)) x = 0.f;
        for (float& x : zero_filled.v)
          if (std::isnan(x)) x = 0.f;
        const auto a = run_flash(zero_filled, true, AttnKernel::Tiled), b = run_flash(nans, true, AttnKernel::Tiled);
        for (float x : b.o) ASSERT_FALSE(std::isnan(x)) << "Lq " << Lq;
        for (float x : b.dq) ASSERT_FALSE(std::isnan(x)) << "Lq " << Lq;
        EXPECT_TRUE(same_bits(a.o, b.o) && same_bits(a.lse, b.lse) && same_bits(a.dq, b.dq))
            << "Lq " << Lq << " causal " << causal;
        // dK, dV of the keys no row sees: exactly 0, the same bits as with zeros there
        EXPECT_TRUE(same_bits(a.dk, b.dk) && same_bits(a.dv, b.dv)) << "Lq " << Lq << " causal " << causal;
      }
  }
}

}  // namespace
