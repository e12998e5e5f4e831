// The float16 KV cache (KVCacheOptions::dtype = KVType::F16): write() rounds each key and value
// to the nearest half once, and attend() — the decode kernel for few new queries, the tiled
// kernel for a prefill — gives bitwise what a float32 cache gives when handed the rounded
// values (the attention's arithmetic is float32's on them), for grouped heads, windows and
// mixed-length steps on every ISA; its accessors, size and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/half.h"
#include "testing/guards.h"

namespace {

using qkv::Tensor;
using qkv::infer::KVCache;
using qkv::infer::KVType;
using i64 = std::int64_t;

Tensor scaled(const Tensor& x, float s) {
  std::vector<float> v = x.contiguous().to_vector<float>();
  for (float& f : v) f *= s;
  return Tensor::from_vector(v, x.shape());
}

Tensor rounded_to_half(const Tensor& x) {
  std::vector<float> v = x.contiguous().to_vector<float>();
  for (float& f : v) f = qkv::kernels::f16_to_f32(qkv::kernels::f32_to_f16(f));
  return Tensor::from_vector(v, x.shape());
}

void check_steps(i64 H, i64 Hkv, i64 window) {
  const i64 B = 3, D = 24, layers = 2, T = 64;
  const qkv::infer::KVCacheOptions o{
      .num_layers = layers, .batch = B, .num_heads = H, .num_kv_heads = Hkv, .max_len = T, .head_dim = D};
  qkv::infer::KVCacheOptions oh = o;
  oh.dtype = KVType::F16;
  KVCache c32(o), c16(oh);
  ASSERT_EQ(c16.bytes() * 2, c32.bytes());
  // Prefills of 9 / 2 / 6 tokens (the tiled kernel), single tokens (the decode kernel), idle
  // sequences, a second prefill after decoding.
  const std::vector<std::vector<i64>> steps = {{9, 2, 6}, {1, 1, 0}, {1, 0, 1}, {3, 1, 1}, {1, 1, 1}, {5, 6, 7}, {1, 1, 1}};
  qkv::Generator g(static_cast<std::uint64_t>(H * 100 + Hkv * 10 + window));
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const std::vector<i64>& n = steps[s];
    const i64 Tn = *std::max_element(n.begin(), n.end());
    for (i64 l = 0; l < layers; ++l) {
      const Tensor q = Tensor::randn({B, H, Tn, D}, &g), k = scaled(Tensor::randn({B, Hkv, Tn, D}, &g), 3.f);
      const Tensor v = Tensor::randn({B, Hkv, Tn, D}, &g);
      c16.write(l, k, v, n);
      c32.write(l, rounded_to_half(k), rounded_to_half(v), n);
      const Tensor a = c16.attend(l, q, n, 0.2, window), b = c32.attend(l, q, n, 0.2, window);
      const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
      ASSERT_EQ(0, std::memcmp(av.data(), bv.data(), av.size() * sizeof(float)))
          << "H " << H << " H_kv " << Hkv << " window " << window << " step " << s << " layer " << l << " isa "
          << qkv::kernels::isa_name(qkv::kernels::active_isa());
    }
    c16.advance(n);
    c32.advance(n);
  }
  // The stored halves are the rounded values, position by position.
  std::vector<float> wide(static_cast<std::size_t>(2 * Hkv * c16.length(1) * D));
  c16.widen(1, 1, c16.length(1), wide.data(), wide.data() + Hkv * c16.length(1) * D);
  const std::vector<float> k32 = c32.keys(1).to_vector<float>();
  for (i64 h = 0; h < Hkv; ++h)
    for (i64 t = 0; t < c16.length(1); ++t)
      for (i64 d = 0; d < D; ++d)
        ASSERT_EQ(wide[static_cast<std::size_t>((h * c16.length(1) + t) * D + d)],
                  k32[static_cast<std::size_t>(((1 * Hkv + h) * T + t) * D + d)]);
}

TEST(KVCacheF16, AttendIsTheFloatCacheOnTheRoundedValues) {
  qkv::testing::ThreadsGuard tg;
  qkv::testing::IsaGuard ig;
  for (auto isa : qkv::testing::isas_up_to(qkv::kernels::Isa::Avx512)) {
    qkv::kernels::set_isa(isa);
    int n = 0;
    for (const auto& [H, Hkv] : std::vector<std::pair<i64, i64>>{{4, 4}, {9, 3}, {6, 1}})
      for (i64 window : {0, 5}) {
        qkv::set_num_threads(1 + n++ % 2);
        check_steps(H, Hkv, window);
        if (HasFailure()) return;
      }
  }
}

// A prefill behind a sliding window over a long prefix (attend_prefill): bitwise the float32
// cache on the rounded values, every ISA, and within rounding of the naive reference (a window
// of 30 after 300 cached tokens).
TEST(KVCacheF16, WindowedPrefillOverALongPrefixIsTheFloatCacheBitwise) {
  qkv::testing::IsaGuard ig;
  const i64 B = 2, H = 4, Hkv = 2, D = 32, T = 400, window = 30;
  const qkv::infer::KVCacheOptions o{.num_layers = 1, .batch = B, .num_heads = H, .num_kv_heads = Hkv, .max_len = T,
                                     .head_dim = D};
  qkv::infer::KVCacheOptions oh = o;
  oh.dtype = KVType::F16;
  for (auto isa : qkv::testing::isas_up_to(qkv::kernels::Isa::Avx512)) {
    qkv::kernels::set_isa(isa);
    KVCache c32(o), c16(oh);
    qkv::Generator g(5);
    for (const std::vector<i64>& n : {std::vector<i64>{300, 250}, std::vector<i64>{9, 40}}) {
      const i64 Tn = *std::max_element(n.begin(), n.end());
      const Tensor q = Tensor::randn({B, H, Tn, D}, &g), k = Tensor::randn({B, Hkv, Tn, D}, &g);
      const Tensor v = Tensor::randn({B, Hkv, Tn, D}, &g);
      c16.write(0, k, v, n);
      c32.write(0, rounded_to_half(k), rounded_to_half(v), n);
      const Tensor a = c16.attend(0, q, n, 0.3, window), b = c32.attend(0, q, n, 0.3, window);
      const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
      ASSERT_EQ(0, std::memcmp(av.data(), bv.data(), av.size() * sizeof(float)))
          << "prefill of " << n[0] << " / " << n[1] << " isa " << qkv::kernels::isa_name(isa);
      // Against the naive reference: query t of sequence b at position len + t sees keys
      // (position - window, position].
      if (n[0] == 9) {
        const i64 b0 = 0, len = 300, h = 3, hk = h / (H / Hkv), t = 8, pos = len + t;
        const std::vector<float> kk = c32.keys(0).to_vector<float>(), vv = c32.values(0).to_vector<float>();
        const std::vector<float> qv = q.contiguous().to_vector<float>();
        std::vector<double> s;
        double mx = -1e300;
        for (i64 j = pos - window + 1; j <= pos; ++j) {
          double dot = 0;
          for (i64 d = 0; d < D; ++d)
            dot += static_cast<double>(qv[static_cast<std::size_t>(((b0 * H + h) * Tn + t) * D + d)]) *
                   kk[static_cast<std::size_t>(((b0 * Hkv + hk) * T + j) * D + d)];
          s.push_back(0.3 * dot);
          mx = std::max(mx, s.back());
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (i64 d = 0; d < D; ++d) {
          double want = 0;
          for (i64 j = 0; j < window; ++j)
            want += s[static_cast<std::size_t>(j)] *
                    vv[static_cast<std::size_t>(((b0 * Hkv + hk) * T + pos - window + 1 + j) * D + d)];
          EXPECT_NEAR(av[static_cast<std::size_t>(((b0 * Tn + t) * H + h) * D + d)], want / sum, 1e-5) << "d " << d;
        }
      }
      c16.advance(n);
      c32.advance(n);
    }
  }
}

TEST(KVCacheF16, AccessorsOfTheOtherTypeAreRefusedByName) {
  KVCache h({.num_layers = 2, .batch = 1, .num_heads = 2, .max_len = 4, .head_dim = 8, .dtype = KVType::F16});
  KVCache f({.num_layers = 2, .batch = 1, .num_heads = 2, .max_len = 4, .head_dim = 8});
  EXPECT_EQ(h.dtype(), KVType::F16);
  EXPECT_NE(h.keys_f16(1), nullptr);
  EXPECT_NE(h.keys_f16(0), h.values_f16(0));
  try {
    (void)h.keys(0);
    FAIL() << "keys() of a float16 cache";
  } catch (const qkv::TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("float16"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)f.values_f16(0), qkv::TypeError);
  EXPECT_THROW((void)h.keys_f16(2), qkv::IndexError);
  std::vector<float> out(64);
  EXPECT_THROW(h.widen(0, 0, 5, out.data(), out.data()), qkv::ValueError);
  EXPECT_THROW(h.widen(0, 1, 1, out.data(), out.data()), qkv::IndexError);
  EXPECT_EQ(qkv::infer::parse_kv_type("f16", "--kv-cache"), KVType::F16);
  EXPECT_EQ(qkv::infer::parse_kv_type("f32", "--kv-cache"), KVType::F32);
  try {
    qkv::infer::parse_kv_type("fp16", "--kv-cache");
    FAIL() << "fp16 accepted";
  } catch (const qkv::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "--kv-cache must be f32 or f16, got 'fp16'");
  }
}

// A populated float16 cache is written up front (zeros), an unpopulated one is not touched.
TEST(KVCacheF16, PopulateZeroesEveryPosition) {
  KVCache h({.num_layers = 1, .batch = 2, .num_heads = 3, .max_len = 33, .head_dim = 5, .populate = true,
             .dtype = KVType::F16});
  const std::uint16_t* k = h.keys_f16(0);
  for (i64 i = 0; i < 2 * 3 * 33 * 5; ++i) ASSERT_EQ(k[i], 0);
}

}  // namespace
