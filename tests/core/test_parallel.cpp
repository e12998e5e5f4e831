// The threading primitives (core/parallel.h): parallel_for's static chunks, and
// parallel_claim's run-time balancing (every task exactly once, owners in
// order, idle workers stealing from the back of a slow worker's range).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "qkv/core/parallel.h"
#include "testing/guards.h"

namespace {

using i64 = std::int64_t;

using qkv::testing::ThreadsGuard;

TEST(Parallel, ForGivesStaticContiguousChunks) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3}) {
    qkv::set_num_threads(threads);
    for (i64 n : {0, 1, 2, 5, 100}) {
      std::mutex mu;
      std::vector<std::pair<i64, i64>> chunks;
      qkv::parallel_for(10, 10 + n, 1, [&](i64 b, i64 e) {
        std::lock_guard<std::mutex> lock(mu);
        chunks.emplace_back(b, e);
      });
      std::sort(chunks.begin(), chunks.end());
      const i64 nt = std::min<i64>(threads, n);
      ASSERT_EQ(static_cast<i64>(chunks.size()), n == 0 ? 0 : nt) << threads << " " << n;
      for (i64 w = 0; w < static_cast<i64>(chunks.size()); ++w) {  // the rule the header promises
        EXPECT_EQ(chunks[static_cast<std::size_t>(w)].first, 10 + n * w / nt);
        EXPECT_EQ(chunks[static_cast<std::size_t>(w)].second, 10 + n * (w + 1) / nt);
      }
    }
  }
}

TEST(Parallel, ClaimRunsEveryTaskOnce) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 4}) {
    qkv::set_num_threads(threads);
    for (i64 n : {0, 1, 2, 3, 7, 100, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
      std::atomic<int> workers{0}, bad_index{0}, out_of_range{0};
      qkv::parallel_claim(5, 5 + n, [&](const qkv::ClaimNext& next) {
        ++workers;
        if (qkv::thread_index() < 0 || qkv::thread_index() >= threads) ++bad_index;
        for (i64 t; next(t);) {
          if (t < 5 || t >= 5 + n) {
            ++out_of_range;
            continue;
          }
          runs[static_cast<std::size_t>(t - 5)]++;
        }
      });
      ASSERT_EQ(out_of_range.load(), 0);
      for (i64 i = 0; i < n; ++i) ASSERT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << threads << " " << n << " " << i;
      EXPECT_LE(workers.load(), std::max<i64>(1, std::min<i64>(threads, n)));
      EXPECT_EQ(bad_index.load(), 0);
    }
  }
}

// Worker 0 is slow (5 ms per task); worker 1 finishes its own range at once and then takes
// the back of worker 0's range, so worker 0 runs only a part of its own range.
TEST(Parallel, ClaimMovesTasksOffASlowWorker) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  const i64 n = 40;
  std::vector<int> ran_on(n, -1);
  qkv::parallel_claim(0, n, [&](const qkv::ClaimNext& next) {
    const int w = qkv::thread_index();
    for (i64 t; next(t);) {
      ran_on[static_cast<std::size_t>(t)] = w;
      if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  int moved = 0;
  for (i64 t = 0; t < n / 2; ++t) moved += ran_on[static_cast<std::size_t>(t)] == 1;
  for (i64 t = n / 2; t < n; ++t) EXPECT_EQ(ran_on[static_cast<std::size_t>(t)], 1) << t;  // nobody steals from 1
  EXPECT_GE(moved, 5) << "worker 1 should have taken tasks from the back of worker 0's range";
  // Stolen tasks are the back of the range: a contiguous tail.
  for (i64 t = 1; t < n / 2; ++t) {
    if (ran_on[static_cast<std::size_t>(t - 1)] == 1) {
      EXPECT_EQ(ran_on[static_cast<std::size_t>(t)], 1) << t;
    }
  }
  std::string who;
  for (int w : ran_on) who += static_cast<char>('0' + w);
  RecordProperty("ran_on", who);
}

TEST(Parallel, ClaimRethrowsAfterAllTasksAndRunsInlineWhenNested) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  std::vector<std::atomic<int>> runs(50);
  EXPECT_THROW(qkv::parallel_claim(0, 50,
                                   [&](const qkv::ClaimNext& next) {
                                     for (i64 t; next(t);) {
                                       runs[static_cast<std::size_t>(t)]++;
                                       if (t == 3) throw std::runtime_error("task 3");
                                     }
                                   }),
               std::runtime_error);
  int total = 0;
  for (auto& r : runs) total += r.load();
  EXPECT_GE(total, 4);  // the thrower stops; the other worker drains what is left
  for (auto& r : runs) EXPECT_LE(r.load(), 1);
  // Nested in a parallel_for: one worker, every task in order, on the caller's thread.
  std::atomic<int> bad{0};
  qkv::parallel_for(0, 2, 1, [&](i64, i64) {
    const int outer = qkv::thread_index();
    std::vector<i64> seen;
    qkv::parallel_claim(0, 9, [&](const qkv::ClaimNext& next) {
      for (i64 t; next(t);) seen.push_back(t);
      if (qkv::thread_index() != outer) ++bad;
    });
    if (seen != std::vector<i64>{0, 1, 2, 3, 4, 5, 6, 7, 8}) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
