// Kernels that call parallel_for / parallel_claim, called from 8 user threads at once with a
// pool of 2 threads (core/parallel.h: the pool serves one call at a time; a call that finds it
// taken runs the same chunks on its own thread). Each call's result must equal, bit for bit,
// the same call made alone, and nothing may deadlock: threaded sgemm/dgemm, batched sgemm,
// the tiled FlashAttention forward (parallel_claim) and backward (per-thread dQ slots), the
// row kernel for short keys, and split-K decode attention. Also: concurrent draws from one
// Generator (the process-wide default one) get disjoint counters.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/gemm.h"
#include "testing/concurrent.h"
#include "testing/guards.h"

namespace {

using namespace qkv::kernels;
using qkv::testing::kPoolThreads;
using qkv::testing::kRequestsPerThread;
using qkv::testing::kUserThreads;
using qkv::testing::serve_concurrently;
using i64 = std::int64_t;

constexpr int kKinds = 6;

std::vector<float> normal(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Contiguous q [B,H,Lq,D], k/v [B,H,Lk,D], o [B,H,Lq,D].
AttnParams attn_params(i64 B, i64 H, i64 Lq, i64 Lk, i64 D, bool causal) {
  AttnParams p;
  p.B = B, p.H = H, p.Lq = Lq, p.Lk = Lk, p.D = D, p.Dv = D;
  p.q_sb = H * Lq * D, p.q_sh = Lq * D, p.q_st = D;
  p.k_sb = H * Lk * D, p.k_sh = Lk * D, p.k_st = D;
  p.v_sb = p.k_sb, p.v_sh = p.k_sh, p.v_st = p.k_st;
  p.o_sb = p.q_sb, p.o_sh = p.q_sh, p.o_st = p.q_st;
  p.scale = 1.f / std::sqrt(static_cast<float>(D));
  p.causal = causal;
  return p;
}

// Every output of call r, as raw bytes. Kind r % 6; the sizes vary with r so concurrent calls
// are of different shapes (and different workspace sizes).
std::vector<unsigned char> call(int r) {
  const auto seed = static_cast<std::uint32_t>(r);
  std::vector<unsigned char> out;
  auto keep = [&out](const void* p, std::size_t bytes) {
    const auto* c = static_cast<const unsigned char*>(p);
    out.insert(out.end(), c, c + bytes);
  };
  switch (r % kKinds) {
    case 0: {  // packed, threaded sgemm (big enough to fork on 2 threads)
      const i64 M = 150 + r % 13, N = 160, K = 128 + r % 5;
      const auto a = normal(static_cast<std::size_t>(M * K), seed), b = normal(static_cast<std::size_t>(K * N), seed + 1);
      std::vector<float> c(static_cast<std::size_t>(M * N));
      sgemm(false, r % 2 == 1, M, N, K, 1.f, a.data(), K, b.data(), r % 2 == 1 ? K : N, 0.f, c.data(), N);
      keep(c.data(), c.size() * sizeof(float));
      break;
    }
    case 1: {  // dgemm with transposed A
      const i64 M = 96 + r % 7, N = 120, K = 100;
      std::vector<double> a(static_cast<std::size_t>(M * K)), b(static_cast<std::size_t>(K * N)),
          c(static_cast<std::size_t>(M * N), 1.0);
      const auto fa = normal(a.size(), seed), fb = normal(b.size(), seed + 1);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = fa[i];
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = fb[i];
      dgemm(true, false, M, N, K, 0.5, a.data(), M, b.data(), N, 1.0, c.data(), N);
      keep(c.data(), c.size() * sizeof(double));
      break;
    }
    case 2: {  // batched small products (parallel over the batch)
      const i64 batch = 12, M = 17 + r % 5, N = 24, K = 33;
      const auto a = normal(static_cast<std::size_t>(batch * M * K), seed);
      const auto b = normal(static_cast<std::size_t>(batch * K * N), seed + 1);
      std::vector<float> c(static_cast<std::size_t>(batch * M * N));
      sgemm_batched(false, false, M, N, K, 1.f, a.data(), K, M * K, b.data(), N, K * N, 0.f, c.data(), N, M * N, batch);
      keep(c.data(), c.size() * sizeof(float));
      break;
    }
    case 3:    // tiled FlashAttention forward + backward (Lk > 32)
    case 4: {  // the row kernel (Lk <= 32) forward + backward
      const bool tiled = r % kKinds == 3;
      const i64 B = 2, H = 3, D = 32, Lq = tiled ? 60 + r % 11 : 9 + r % 7, Lk = tiled ? 70 + r % 9 : 20 + r % 13;
      AttnParams p = attn_params(B, H, Lq, Lk, D, r % 2 == 0);
      p.kernel = tiled ? AttnKernel::Tiled : AttnKernel::Rows;
      const auto q = normal(static_cast<std::size_t>(B * H * Lq * D), seed);
      const auto k = normal(static_cast<std::size_t>(B * H * Lk * D), seed + 1);
      const auto v = normal(k.size(), seed + 2);
      const auto dout = normal(q.size(), seed + 3);
      std::vector<float> o(q.size()), lse(static_cast<std::size_t>(B * H * Lq)), dq(q.size()), dk(k.size()),
          dv(v.size());
      flash_attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), p);
      flash_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), o.data(),
                               lse.data(), p);
      for (const auto* buf : {&o, &lse, &dq, &dk, &dv}) keep(buf->data(), buf->size() * sizeof(float));
      break;
    }
    default: {  // decode attention, one head pair over a long cache: split-K over threads
      const i64 B = 1, H = 2, Lq = 1 + r % 3, D = 64, T = 1500;
      const i64 q_len[1] = {Lq}, k_len[1] = {1000 + r % 400};
      EXPECT_GT(decode_attention_splits(B, H, k_len[0]), 1) << "this case should split the keys";
      DecodeParams p;
      p.B = B, p.H = H, p.Lq = Lq, p.D = D;
      p.q_sb = H * Lq * D, p.q_sh = Lq * D, p.q_st = D;
      p.o_sb = p.q_sb, p.o_sh = p.q_sh, p.o_st = p.q_st;
      p.k_sb = H * T * D, p.k_sh = T * D, p.k_st = D;
      p.v_sb = p.k_sb, p.v_sh = p.k_sh, p.v_st = p.k_st;
      p.q_len = q_len, p.k_len = k_len;
      p.scale = 1.f / std::sqrt(static_cast<float>(D));
      const auto q = normal(static_cast<std::size_t>(B * H * Lq * D), seed);
      const auto k = normal(static_cast<std::size_t>(B * H * T * D), seed + 1), v = normal(k.size(), seed + 2);
      std::vector<float> o(q.size());
      decode_attention_forward(o.data(), q.data(), k.data(), v.data(), p);
      keep(o.data(), o.size() * sizeof(float));
    }
  }
  return out;
}

TEST(ConcurrentKernels, EightUserThreadsOnATwoThreadPoolGiveTheResultsOfCallsAlone) {
  qkv::testing::ThreadsGuard guard;
  qkv::set_num_threads(kPoolThreads);
  constexpr int n = kUserThreads * kRequestsPerThread;
  std::vector<std::vector<unsigned char>> alone(n), together(n);
  for (int r = 0; r < n; ++r) alone[r] = call(r);
  const auto errors = serve_concurrently(kUserThreads, n, [&](int r) { together[r] = call(r); });
  EXPECT_TRUE(errors.empty()) << errors.size() << " calls threw, first: " << errors.front();
  int wrong = 0;
  for (int r = 0; r < n; ++r)
    if (alone[r].empty() || alone[r] != together[r]) {
      ++wrong;
      ADD_FAILURE() << "call " << r << " (kind " << r % kKinds << ") differs from the same call alone";
    }
  EXPECT_EQ(wrong, 0);
}

// Kernels called from inside a user thread's own parallel_for chunk run inline (nested calls
// are serial), while other user threads hold the pool: still the results of calls alone.
TEST(ConcurrentKernels, KernelsInsideParallelForChunksOfSeveralUserThreads) {
  qkv::testing::ThreadsGuard guard;
  qkv::set_num_threads(kPoolThreads);
  constexpr int n = kUserThreads * 6;
  std::vector<std::vector<unsigned char>> alone(n), together(n);
  for (int r = 0; r < n; ++r) alone[r] = call(r);
  const auto errors = serve_concurrently(kUserThreads, n / 2, [&](int r) {
    qkv::parallel_for(0, 2, 1, [&](i64 b, i64 e) {
      for (i64 i = b; i < e; ++i) together[static_cast<std::size_t>(2 * r + i)] = call(static_cast<int>(2 * r + i));
    });
  });
  EXPECT_TRUE(errors.empty()) << errors.size() << " calls threw, first: " << errors.front();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(alone[r] == together[r]) << "call " << r << " (kind " << r % kKinds << ")";
}

// Dropout in training mode and Tensor::randn without a generator draw from the process-wide
// generator; from several threads at once every draw must get counters of its own (two
// dropout masks from the same counters would be silently identical).
TEST(ConcurrentRng, DrawsFromOneGeneratorInSeveralThreadsGetDisjointCounters) {
  qkv::Generator& g = qkv::default_generator();
  const std::uint64_t saved_seed = g.seed(), saved_offset = g.offset();
  const std::uint64_t start = g.offset();
  constexpr int kDraws = 4000;
  std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>> got(kUserThreads);  // (first counter, count)
  const auto errors = serve_concurrently(kUserThreads, kUserThreads, [&](int t) {
    auto& mine = got[static_cast<std::size_t>(t)];
    for (int i = 0; i < kDraws; ++i) {
      const std::uint64_t n = 1 + static_cast<std::uint64_t>((i + t) % 5);
      mine.emplace_back(g.reserve(n), n);
      const std::uint64_t before = g.offset();
      g.uniform();  // one more counter, somewhere at or after `before`
      EXPECT_GE(g.offset(), before + 1);
    }
  });
  EXPECT_TRUE(errors.empty());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> all;
  std::uint64_t total = 0;
  for (const auto& v : got)
    for (const auto& [first, n] : v) all.emplace_back(first, n), total += n;
  std::sort(all.begin(), all.end());
  int overlaps = 0;
  for (std::size_t i = 1; i < all.size(); ++i) overlaps += all[i - 1].first + all[i - 1].second > all[i].first;
  EXPECT_EQ(overlaps, 0) << "concurrent reserve() calls got overlapping counters";
  EXPECT_EQ(g.offset(), start + total + static_cast<std::uint64_t>(kUserThreads) * kDraws) << "draws were lost";
  g.manual_seed(saved_seed);
  g.set_offset(saved_offset);
}

}  // namespace
