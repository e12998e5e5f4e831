// KV cache with grouped key/value heads (num_kv_heads < num_heads) and sliding windows: the
// cache holds [B, H_kv, T, D]; attend() of H query heads against a float64 naive reference of
// the whole cached sequence (R1), through the decode kernel (few new queries) and the tiled
// kernel (prefill), mixed lengths, every ISA; and the errors, raised before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/cpu.h"
#include "qkv/ops/ops.h"
#include "testing/guards.h"

namespace {

using qkv::Tensor;
using qkv::infer::KVCache;
using i64 = std::int64_t;

// Reference of attend() for sequence b: its new queries q [H, n, D] against the cache's first
// len + n keys [H_kv, len + n, D] (naive kernel, T = float or double), bottom-right causal.
template <class T>
std::vector<T> reference(const KVCache& c, i64 layer, const Tensor& q, i64 b, i64 n, i64 window, double scale) {
  const auto& o = c.options();
  const i64 H = o.num_heads, Hkv = o.num_kv_heads, D = o.head_dim, Tm = o.max_len, L = c.length(b) + n;
  const Tensor qc = q.contiguous();
  const std::vector<float> qf = qc.to_vector<float>(), kf = c.keys(layer).to_vector<float>(),
                           vf = c.values(layer).to_vector<float>();
  const i64 Tn = q.size(2);
  std::vector<T> qq(static_cast<std::size_t>(H * n * D)), kk(static_cast<std::size_t>(Hkv * L * D)), vv(kk.size());
  for (i64 h = 0; h < H; ++h)
    for (i64 t = 0; t < n; ++t)
      for (i64 d = 0; d < D; ++d) qq[(h * n + t) * D + d] = qf[((b * H + h) * Tn + t) * D + d];
  for (i64 h = 0; h < Hkv; ++h)
    for (i64 t = 0; t < L; ++t)
      for (i64 d = 0; d < D; ++d) {
        kk[(h * L + t) * D + d] = kf[((b * Hkv + h) * Tm + t) * D + d];
        vv[(h * L + t) * D + d] = vf[((b * Hkv + h) * Tm + t) * D + d];
      }
  qkv::kernels::AttnParams p;
  p.B = 1, p.H = H, p.H_kv = Hkv, p.Lq = n, p.Lk = L, p.D = D, p.Dv = D, p.causal = true, p.window = window;
  p.q_sh = n * D, p.q_st = D, p.k_sh = L * D, p.k_st = D, p.v_sh = L * D, p.v_st = D, p.o_sh = n * D, p.o_st = D;
  p.q_sb = H * n * D, p.k_sb = Hkv * L * D, p.v_sb = p.k_sb, p.o_sb = p.q_sb;
  p.scale = static_cast<float>(scale);
  std::vector<T> out(qq.size());
  qkv::kernels::attention_ref_forward<T>(out.data(), nullptr, nullptr, qq.data(), kk.data(), vv.data(), p);
  return out;  // [H, n, D]
}

// Steps of a mixed-length batch (prefill of 9 / 2 / 6 tokens, then single tokens; one sequence
// idle at times) through a cache with H query heads on H_kv key/value heads: every attend()
// within R1 of the float64 reference.
void check_steps(i64 H, i64 Hkv, i64 window) {
  const i64 B = 3, D = 16, layers = 2;
  KVCache c({.num_layers = layers, .batch = B, .num_heads = H, .num_kv_heads = Hkv, .max_len = 40, .head_dim = D});
  EXPECT_EQ(c.keys(0).shape(), (qkv::Shape{B, Hkv, 40, D}));
  EXPECT_EQ(c.bytes(), 2 * layers * B * Hkv * 40 * D * 4);
  const std::vector<std::vector<i64>> steps = {{9, 2, 6}, {1, 1, 0}, {1, 0, 1}, {3, 1, 1}, {1, 1, 1}, {5, 6, 7}};
  qkv::Generator g(static_cast<std::uint64_t>(H * 100 + Hkv * 10 + window));
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const std::vector<i64>& n = steps[s];
    const i64 Tn = *std::max_element(n.begin(), n.end());
    for (i64 l = 0; l < layers; ++l) {
      const Tensor q = Tensor::randn({B, H, Tn, D}, &g), k = Tensor::randn({B, Hkv, Tn, D}, &g);
      const Tensor v = Tensor::randn({B, Hkv, Tn, D}, &g);
      c.write(l, k, v, n);
      const Tensor out = c.attend(l, q, n, scale, window);  // [B, Tn, H, D]
      ASSERT_EQ(out.shape(), (qkv::Shape{B, Tn, H, D}));
      const std::vector<float> got = out.to_vector<float>();
      for (i64 b = 0; b < B; ++b) {
        const std::vector<double> hp = reference<double>(c, l, q, b, n[b], window, scale);
        const std::vector<float> lp = reference<float>(c, l, q, b, n[b], window, scale);
        double err = 0, err_lp = 0;
        for (i64 h = 0; h < H; ++h)
          for (i64 t = 0; t < Tn; ++t)
            for (i64 d = 0; d < D; ++d) {
              const float x = got[((b * Tn + t) * H + h) * D + d];
              if (t >= n[b]) {
                ASSERT_EQ(x, 0.f) << "row past n_new";
                continue;
              }
              const std::size_t at = static_cast<std::size_t>((h * n[b] + t) * D + d);
              err = std::max(err, std::fabs(x - hp[at]));
              err_lp = std::max(err_lp, std::fabs(lp[at] - hp[at]));
            }
        EXPECT_LE(err, 2 * err_lp + 1e-5) << "H " << H << " H_kv " << Hkv << " window " << window << " step " << s
                                          << " layer " << l << " sequence " << b;
      }
    }
    c.advance(n);
  }
}

TEST(KVCacheGqa, AttendMatchesTheReferenceForEveryGroupAndWindow) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  for (auto isa : qkv::testing::isas_up_to(qkv::kernels::Isa::Avx512)) {
    qkv::kernels::set_isa(isa);
    int n = 0;
    for (const auto& [H, Hkv] : std::vector<std::pair<i64, i64>>{{4, 4}, {6, 2}, {9, 3}, {9, 1}})
      for (i64 window : {0, 1, 4}) {
        qkv::set_num_threads(1 + n++ % 2);
        check_steps(H, Hkv, window);
        if (HasFailure()) return;
      }
  }
}

// num_kv_heads = 0 (the default) stores one key/value head per query head, as before GQA.
TEST(KVCacheGqa, DefaultIsOneKeyValueHeadPerQueryHead) {
  KVCache c({.num_layers = 1, .batch = 2, .num_heads = 3, .max_len = 5, .head_dim = 4});
  EXPECT_EQ(c.options().num_kv_heads, 3);
  EXPECT_EQ(c.keys(0).shape(), (qkv::Shape{2, 3, 5, 4}));
}

template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    FAIL() << "expected an error containing " << needles[0];
  } catch (const E& e) {
    for (const std::string& s : needles) EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
  }
}

// Bad head counts and windows: one clear message naming them, and nothing written.
TEST(KVCacheGqa, BadHeadsAndWindowsFailBeforeAnyWrite) {
  expect_error<qkv::ValueError>(
      [] { KVCache({.num_layers = 1, .batch = 1, .num_heads = 9, .num_kv_heads = 4, .max_len = 4, .head_dim = 2}); },
      {"KVCache", "num_kv_heads 4", "divide num_heads 9"});
  expect_error<qkv::ValueError>(
      [] { KVCache({.num_layers = 1, .batch = 1, .num_heads = 9, .num_kv_heads = -3, .max_len = 4, .head_dim = 2}); },
      {"num_kv_heads -3"});
  KVCache c({.num_layers = 1, .batch = 2, .num_heads = 6, .num_kv_heads = 2, .max_len = 8, .head_dim = 4});
  const Tensor k = Tensor::ones({2, 2, 3, 4});
  c.write(0, k, k, {3, 2});
  c.advance({3, 2});
  const std::vector<float> before = c.keys(0).to_vector<float>(), vbefore = c.values(0).to_vector<float>();
  const Tensor per_query_head = Tensor::full({2, 6, 1, 4}, 7.0);  // H heads where H_kv are stored
  expect_error<qkv::ShapeError>([&] { c.write(0, per_query_head, k.narrow(2, 0, 1), {1, 1}); },
                                {"KVCache::write", "keys", "[2, 2, Tn, 4]", "2 key/value heads", "[2,6,1,4]"});
  expect_error<qkv::ShapeError>([&] { c.write(0, k.narrow(2, 0, 1), per_query_head, {1, 1}); },
                                {"KVCache::write", "values", "2 key/value heads"});
  EXPECT_EQ(before, c.keys(0).to_vector<float>()) << "a failed write changed the keys";
  EXPECT_EQ(vbefore, c.values(0).to_vector<float>()) << "a failed write changed the values";
  const Tensor q = Tensor::ones({2, 6, 1, 4});
  expect_error<qkv::ShapeError>([&] { c.attend(0, Tensor::ones({2, 2, 1, 4}), {1, 1}, 0.5); },
                                {"KVCache::attend", "q must be float32 [2, 6, Tn, 4]", "6 query heads", "[2,2,1,4]"});
  expect_error<qkv::ValueError>([&] { c.attend(0, q, {1, 1}, 0.5, -1); }, {"KVCache::attend", "window", "-1"});
}

}  // namespace
