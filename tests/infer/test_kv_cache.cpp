// KV cache: in-place appends, bounds, and cached decoding against full recomputation
// (R1 against a float64 model, REFERENCES.md), batch 1 and mixed-length batch 4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "gpt2_test_util.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/ops/ops.h"
#include "testing/guards.h"

namespace {

using qkv::Tensor;
using qkv::infer::KVCache;
using qkv::infer::KVCacheOptions;
using i64 = std::int64_t;

Tensor ids_tensor(const std::vector<std::vector<i64>>& rows) {
  std::size_t w = 1;
  for (const auto& r : rows) w = std::max(w, r.size());
  Tensor t = Tensor::zeros({static_cast<i64>(rows.size()), static_cast<i64>(w)}, qkv::DType::I64);
  for (std::size_t b = 0; b < rows.size(); ++b)
    for (std::size_t j = 0; j < rows[b].size(); ++j) t.data<i64>()[b * w + j] = rows[b][j];
  return t;
}

TEST(KVCache, AppendsAreBitwiseCopiesInPlaceAndOldEntriesStay) {
  KVCache c({.num_layers = 2, .batch = 2, .num_heads = 3, .max_len = 9, .head_dim = 5});
  const float* kbuf = c.keys(1).data<float>();
  Tensor k1 = Tensor::randn({2, 3, 4, 5}), v1 = Tensor::randn({2, 3, 4, 5});
  c.write(1, k1, v1, {4, 2});
  c.advance({4, 2});
  Tensor k2 = Tensor::randn({2, 3, 1, 5}), v2 = Tensor::randn({2, 3, 1, 5});
  c.write(1, k2, v2, {1, 1});
  c.advance({1, 1});
  EXPECT_EQ(c.keys(1).data<float>(), kbuf) << "the cache buffer must never move";
  EXPECT_EQ(c.length(0), 5);
  EXPECT_EQ(c.length(1), 3);
  const float* K = c.keys(1).data<float>();
  const float* V = c.values(1).data<float>();
  for (i64 b = 0; b < 2; ++b)
    for (i64 h = 0; h < 3; ++h) {
      const i64 first = b == 0 ? 4 : 2;
      for (i64 t = 0; t < first; ++t) {
        EXPECT_EQ(0, std::memcmp(K + ((b * 3 + h) * 9 + t) * 5, k1.data<float>() + ((b * 3 + h) * 4 + t) * 5, 20));
        EXPECT_EQ(0, std::memcmp(V + ((b * 3 + h) * 9 + t) * 5, v1.data<float>() + ((b * 3 + h) * 4 + t) * 5, 20));
      }
      EXPECT_EQ(0, std::memcmp(K + ((b * 3 + h) * 9 + first) * 5, k2.data<float>() + (b * 3 + h) * 5, 20));
    }
  // A strided (transposed) source is copied the same way, at the sequence's length (shared by every layer).
  Tensor kt = Tensor::randn({2, 1, 3, 5}).transpose(1, 2);
  c.write(0, kt, kt, {1, 0});
  for (i64 h = 0; h < 3; ++h)
    EXPECT_EQ(0, std::memcmp(c.keys(0).data<float>() + (h * 9 + 5) * 5, kt.contiguous().data<float>() + h * 5, 5 * 4));
}

// Resident pages of this process, in bytes (/proc/self/statm's second field).
double resident_bytes() {
  std::ifstream f("/proc/self/statm");
  double size = 0, resident = 0;
  f >> size >> resident;
  return resident * 4096.0;
}

// populate: the cache's pages are resident (written) once it is built; without it they are not
// until positions are written. 2 x 2 layers x [1, 1, 8191, 257] floats (~33.7 MB, an odd size no
// earlier block of this process can supply).
TEST(KVCache, PopulateMakesEveryPageResidentUpFront) {
  KVCacheOptions o;
  o.num_layers = 2, o.batch = 1, o.num_heads = 1, o.max_len = 8191, o.head_dim = 257;
  const double bytes = 2.0 * 2 * 8191 * 257 * 4;
  const double before = resident_bytes();
  KVCache lazy(o);
  const double after_lazy = resident_bytes();
  EXPECT_LT(after_lazy - before, 0.25 * bytes) << "a lazy cache's pages are resident at once";
  o.populate = true;
  KVCache ready(o);
  EXPECT_GT(resident_bytes() - after_lazy, 0.9 * bytes) << "populate left pages untouched";
  for (i64 l = 0; l < 2; ++l) {
    const float* k = ready.keys(l).data<float>();
    for (i64 i = 0; i < ready.keys(l).numel(); i += 4099) ASSERT_EQ(k[i], 0.0f);
  }
}

TEST(KVCache, PassingMaxLenFailsBeforeAnyWrite) {
  KVCache c({.num_layers = 1, .batch = 2, .num_heads = 1, .max_len = 4, .head_dim = 2});
  Tensor k = Tensor::ones({2, 1, 3, 2});
  c.write(0, k, k, {3, 1});
  c.advance({3, 1});
  std::vector<float> before = c.keys(0).to_vector<float>();
  Tensor k2 = Tensor::full({2, 1, 2, 2}, 5.0);
  try {
    c.write(0, k2, k2, {2, 1});
    FAIL() << "expected ValueError";
  } catch (const qkv::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("sequence 0 holds 3 positions; 2 more would pass the cache's max_len 4"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c.advance({2, 1}), qkv::ValueError);
  EXPECT_EQ(before, c.keys(0).to_vector<float>()) << "a failed write changed the cache";
  EXPECT_EQ(c.length(0), 3);
  c.reset(0);
  EXPECT_EQ(c.length(0), 0);
  EXPECT_EQ(c.length(1), 1);
  EXPECT_NO_THROW(c.write(0, k2, k2, {2, 1}));
  EXPECT_THROW(c.reset(2), qkv::IndexError);
  EXPECT_THROW(KVCache({.num_layers = 1, .batch = 0, .num_heads = 1, .max_len = 4, .head_dim = 2}), qkv::ValueError);
  EXPECT_THROW(KVCache({.num_layers = 1 << 20, .batch = 1 << 20, .num_heads = 1 << 20, .max_len = 4, .head_dim = 2}),
               qkv::AllocError);
}

// The cached model's logits at every step against a float64 recomputation of the whole
// sequence (ref_hp) and a float32 one (ref_lp): |cached - hp| <= 3 |lp - hp| + 1e-5 (R1).
void check_cached_steps(const std::vector<std::vector<i64>>& prompts, int steps) {
  auto m32 = qkv::testing::tiny_gpt2(3);
  auto m64 = qkv::testing::tiny_gpt2(3);
  m64->to(qkv::DType::F64);
  qkv::autograd::NoGradGuard ng;
  const i64 B = static_cast<i64>(prompts.size()), V = m32->vocab_size();
  KVCache cache(m32->cache_options(B, 40));
  std::vector<std::vector<i64>> seq = prompts, feed = prompts;
  for (int s = 0; s < steps; ++s) {
    std::vector<i64> n(static_cast<std::size_t>(B));
    for (i64 b = 0; b < B; ++b) n[b] = static_cast<i64>(feed[b].size());
    const Tensor logits = m32->forward_cached(ids_tensor(feed), n, cache);
    ASSERT_EQ(logits.shape(), (qkv::Shape{B, V}));
    for (i64 b = 0; b < B; ++b) {
      const Tensor full = ids_tensor({seq[b]});
      const i64 T = static_cast<i64>(seq[b].size());
      const Tensor hp = m64->forward(full).select(1, T - 1).select(0, 0);
      const Tensor lp = m32->forward(full).select(1, T - 1).select(0, 0).to(qkv::DType::F64);
      const Tensor got = logits.select(0, b).to(qkv::DType::F64);
      const double e_lp = qkv::max_abs_diff(lp, hp), e = qkv::max_abs_diff(got, hp);
      EXPECT_LE(e, 3 * e_lp + 1e-5) << "step " << s << " sequence " << b << " (length " << T << ")";
      // Next token: the float64 argmax, fed to every path alike.
      const std::vector<double> h = hp.to_vector<double>();
      const i64 next = std::max_element(h.begin(), h.end()) - h.begin();
      seq[b].push_back(next);
      feed[b] = {next};
    }
  }
}

TEST(KVCache, CachedLogitsEqualFullRecomputationBatch1) {
  qkv::testing::ThreadsGuard tg;
  for (int t : {1, 2}) {
    qkv::set_num_threads(t);
    check_cached_steps({{5, 17, 3, 40, 2}}, 12);
  }
}

TEST(KVCache, CachedLogitsEqualFullRecomputationBatch4MixedLengths) {
  // Prompt lengths 3, 7, 1, 5; the 7-token prefill runs the tiled kernel, single steps the decode kernel.
  check_cached_steps({{1, 2, 3}, {9, 8, 7, 6, 5, 4, 3}, {11}, {20, 21, 22, 23, 24}}, 10);
}

TEST(KVCache, NaNInUnusedSlotsNeverChangesAnOutput) {
  auto m = qkv::testing::tiny_gpt2(4);
  auto run = [&](float fill) {
    KVCache cache(m->cache_options(2, 30));
    for (i64 l = 0; l < cache.options().num_layers; ++l) {
      cache.keys(l).fill_(fill);
      cache.values(l).fill_(fill);
    }
    std::vector<float> all;
    std::vector<std::vector<i64>> feed = {{3, 4, 5, 6, 7, 8}, {9, 10}};
    for (int s = 0; s < 6; ++s) {
      std::vector<i64> n = {static_cast<i64>(feed[0].size()), static_cast<i64>(feed[1].size())};
      const std::vector<float> l = m->forward_cached(ids_tensor(feed), n, cache).to_vector<float>();
      all.insert(all.end(), l.begin(), l.end());
      feed = {{static_cast<i64>(s + 1)}, {static_cast<i64>(2 * s + 1)}};
    }
    return all;
  };
  const std::vector<float> zero = run(0.f), nan = run(std::numeric_limits<float>::quiet_NaN());
  ASSERT_EQ(zero.size(), nan.size());
  EXPECT_EQ(0, std::memcmp(zero.data(), nan.data(), zero.size() * sizeof(float)));
}

TEST(KVCache, ForwardCachedChecksBeforeWriting) {
  auto m = qkv::testing::tiny_gpt2(5);
  KVCache cache(m->cache_options(1, 8));
  EXPECT_THROW(m->forward_cached(ids_tensor({{1, 2, 3, 4, 5, 6, 7, 8, 9}}), {9}, cache), qkv::ValueError);
  EXPECT_THROW(m->forward_cached(ids_tensor({{1, 61}}), {2}, cache), qkv::IndexError);
  EXPECT_THROW(m->forward_cached(ids_tensor({{1, -1}}), {2}, cache), qkv::IndexError);
  EXPECT_EQ(cache.length(0), 0);
  KVCache other({.num_layers = 3, .batch = 1, .num_heads = 4, .max_len = 8, .head_dim = 8});
  EXPECT_THROW(m->forward_cached(ids_tensor({{1}}), {1}, other), qkv::ShapeError);
}

}  // namespace

// Layers with a recurrent state (Qwen3.5's Gated DeltaNet) keep no keys or values; a sequence's
// states start at zeros, rewind only to 0, to their length or to their checkpoint, and the
// memory counts both kinds.
TEST(KVCache, RecurrentStatesBesideKeysAndValues) {
  qkv::infer::KVCacheOptions o{.num_layers = 3, .batch = 2, .num_heads = 2, .max_len = 8, .head_dim = 4};
  o.state_floats = {5, 0, 7};
  qkv::infer::KVCache cache(o);
  EXPECT_TRUE(cache.has_state());
  EXPECT_FALSE(cache.layer_has_kv(0));
  EXPECT_TRUE(cache.layer_has_kv(1));
  // One layer of keys and values, [2, 2, 8, 4] twice, and 12 state floats per sequence.
  EXPECT_EQ(cache.bytes(), 2 * (2 * 2 * 8 * 4) * 4 + 2 * 12 * 4);
  EXPECT_THROW(cache.keys(0), qkv::ValueError);
  EXPECT_THROW(cache.state(1, 0), qkv::ValueError);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(cache.state(2, 1)[i], 0.f);

  auto fill = [&](float v) {
    for (int i = 0; i < 5; ++i) cache.state(0, 0)[i] = v;
    for (int i = 0; i < 7; ++i) cache.state(2, 0)[i] = v;
  };
  fill(1.f);
  cache.advance({3, 0});
  EXPECT_EQ(cache.rewind_point(0, 2), 0);  // no checkpoint: only the start
  cache.checkpoint(0);
  fill(2.f);
  cache.advance({2, 0});
  EXPECT_EQ(cache.rewind_point(0, 4), 3);
  EXPECT_EQ(cache.rewind_point(0, 5), 5);
  EXPECT_EQ(cache.rewind_point(0, 2), 0);
  const auto refused = [&](std::int64_t n) {
    try {
      cache.truncate(0, n);
    } catch (const qkv::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(refused(4).find("can go back to position 0 or to its checkpoint at 3, not to 4 of its 5"), std::string::npos)
      << refused(4);
  EXPECT_EQ(cache.length(0), 5);
  cache.truncate(0, 5);  // its length: nothing changes
  EXPECT_EQ(cache.state(2, 0)[6], 2.f);
  cache.truncate(0, 3);  // the checkpoint's states back
  EXPECT_EQ(cache.length(0), 3);
  EXPECT_EQ(cache.state(0, 0)[4], 1.f);
  EXPECT_EQ(cache.state(2, 0)[0], 1.f);
  cache.truncate(0, 0);  // the start: zeros
  EXPECT_EQ(cache.state(2, 0)[3], 0.f);
  EXPECT_EQ(cache.rewind_point(0, 0), 0);
  fill(3.f);
  cache.advance({1, 0});
  cache.reset(0);
  EXPECT_EQ(cache.state(0, 0)[0], 0.f);
  EXPECT_EQ(cache.length(0), 0);

  qkv::infer::KVCacheOptions bad = o;
  bad.state_floats = {1, 2};
  EXPECT_THROW(qkv::infer::KVCache{bad}, qkv::ValueError);
}
