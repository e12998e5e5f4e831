// qkv's thread pool under parallel_for / parallel_claim (core/parallel.h): many small
// calls, exceptions, nesting, several outside threads calling at once, resizing, the
// grain rule, thread_index(), idle workers sleeping, and a forked child.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "testing/guards.h"

namespace {

using i64 = std::int64_t;
using qkv::testing::ThreadsGuard;

// The chunks parallel_for promises for n items on nt threads (nt already capped by the grain).
std::vector<std::pair<i64, i64>> expected_chunks(i64 begin, i64 n, i64 nt) {
  std::vector<std::pair<i64, i64>> c;
  for (i64 w = 0; w < nt; ++w)
    if (n * w / nt < n * (w + 1) / nt) c.emplace_back(begin + n * w / nt, begin + n * (w + 1) / nt);
  return c;
}

// A float reduction whose rounding depends on the chunk boundaries: per-chunk sums in
// increasing order, then the chunk sums in thread order.
float chunked_sum(const std::vector<float>& x, std::vector<float>& part) {
  std::fill(part.begin(), part.end(), 0.0f);
  qkv::parallel_for(0, static_cast<i64>(x.size()), 1, [&](i64 b, i64 e) {
    float s = 0;
    for (i64 i = b; i < e; ++i) s += x[static_cast<std::size_t>(i)];
    part[static_cast<std::size_t>(qkv::thread_index())] = s;
  });
  float total = 0;
  for (float p : part) total += p;
  return total;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

TEST(ThreadPool, ManySmallCallsRunEveryChunkOnDistinctThreads) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  std::atomic<i64> items{0};
  int bad = 0;
  for (int call = 0; call < 20000; ++call) {
    std::thread::id ids[2];
    std::atomic<int> chunks{0};
    qkv::parallel_for(0, 2, 1, [&](i64 b, i64 e) {
      items += e - b;
      ids[qkv::thread_index()] = std::this_thread::get_id();
      ++chunks;
    });
    if (chunks.load() != 2 || ids[0] == ids[1] || ids[0] != std::this_thread::get_id()) ++bad;
  }
  EXPECT_EQ(items.load(), 40000);
  EXPECT_EQ(bad, 0) << "calls whose two chunks did not run on the caller and one worker";
  EXPECT_EQ(qkv::thread_index(), 0);
}

TEST(ThreadPool, GrainCapsTheChunkCountAndNonPositiveGrainIsOne) {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 4}) {
    qkv::set_num_threads(threads);
    for (i64 n : {1, 3, 7, 10, 64}) {
      for (i64 grain : {-5, 0, 1, 2, 4, 100}) {
        std::mutex mu;
        std::vector<std::pair<i64, i64>> got;
        std::set<int> idx;
        qkv::parallel_for(3, 3 + n, grain, [&](i64 b, i64 e) {
          std::lock_guard<std::mutex> lock(mu);
          got.emplace_back(b, e);
          idx.insert(qkv::thread_index());
        });
        std::sort(got.begin(), got.end());
        const i64 g = std::max<i64>(grain, 1), nt = std::min<i64>(threads, (n + g - 1) / g);
        EXPECT_EQ(got, expected_chunks(3, n, nt)) << threads << " threads, n " << n << ", grain " << grain;
        EXPECT_EQ(static_cast<i64>(idx.size()), nt);
        for (int t : idx) EXPECT_TRUE(t >= 0 && t < nt) << t;
        if (nt > 1) {
          for (const auto& [b, e] : got) EXPECT_GE(e - b, std::min<i64>(g, n / nt)) << "chunk below the grain";
        }
      }
    }
  }
}

TEST(ThreadPool, ExceptionsAreRethrownOnTheCallerAfterEveryChunk) {
  ThreadsGuard guard;
  qkv::set_num_threads(3);
  for (int thrower : {0, 1, 2}) {
    std::atomic<int> done{0};
    try {
      qkv::parallel_for(0, 3, 1, [&](i64 b, i64) {
        if (b == thrower) throw std::out_of_range("chunk " + std::to_string(b));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // still running when the thrower throws
        ++done;
      });
      ADD_FAILURE() << "no exception from chunk " << thrower;
    } catch (const std::out_of_range& e) {
      EXPECT_EQ(std::string(e.what()), "chunk " + std::to_string(thrower));
      EXPECT_EQ(done.load(), 2) << "rethrown before the other chunks finished";
    }
  }
  // Every chunk throws: one of them arrives, and the pool goes on working.
  EXPECT_THROW(qkv::parallel_for(0, 3, 1, [](i64, i64) { throw std::runtime_error("all"); }), std::runtime_error);
  std::atomic<int> chunks{0};
  qkv::parallel_for(0, 3, 1, [&](i64, i64) { ++chunks; });
  EXPECT_EQ(chunks.load(), 3);
  EXPECT_EQ(qkv::thread_index(), 0);
}

TEST(ThreadPool, NestedCallsRunInlineOnTheWorker) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  std::atomic<int> bad{0};
  qkv::parallel_for(0, 2, 1, [&](i64, i64) {
    const int outer = qkv::thread_index();
    const auto me = std::this_thread::get_id();
    int calls = 0;
    qkv::parallel_for(0, 100, 1, [&](i64 b, i64 e) {
      ++calls;
      if (b != 0 || e != 100 || qkv::thread_index() != outer || std::this_thread::get_id() != me) ++bad;
    });
    if (calls != 1) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
}

// Several outside threads call at once: each call gets the static chunks (on the pool or,
// when another call holds it, on the caller), the same float sums bitwise, indices in range.
TEST(ThreadPool, ConcurrentCallersGetTheSameResultsAsAlone) {
  ThreadsGuard guard;
  for (int threads : {2, 3}) {
    qkv::set_num_threads(threads);
    std::vector<float> x(1001);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = 1.0f / static_cast<float>(i + 1) * (i % 3 ? 1.0f : -3.0f);
    std::vector<float> part(static_cast<std::size_t>(threads));
    const float alone = chunked_sum(x, part);
    std::atomic<int> wrong_sum{0}, wrong_chunks{0}, wrong_index{0}, wrong_claim{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < 4; ++c) {
      callers.emplace_back([&, c] {
        std::vector<float> my_part(static_cast<std::size_t>(threads));
        for (int call = 0; call < 300; ++call) {
          if (chunked_sum(x, my_part) != alone) ++wrong_sum;
          const i64 n = 1 + (call * 7 + c) % 50;
          std::mutex mu;
          std::vector<std::pair<i64, i64>> got;
          qkv::parallel_for(0, n, 1, [&](i64 b, i64 e) {
            if (qkv::thread_index() < 0 || qkv::thread_index() >= threads) ++wrong_index;
            std::lock_guard<std::mutex> lock(mu);
            got.emplace_back(b, e);
          });
          std::sort(got.begin(), got.end());
          if (got != expected_chunks(0, n, std::min<i64>(threads, n))) ++wrong_chunks;
          std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
          qkv::parallel_claim(0, n, [&](const qkv::ClaimNext& next) {
            for (i64 t; next(t);) runs[static_cast<std::size_t>(t)]++;
          });
          for (auto& r : runs)
            if (r.load() != 1) ++wrong_claim;
        }
      });
    }
    for (auto& t : callers) t.join();
    EXPECT_EQ(wrong_sum.load(), 0) << threads << " threads";
    EXPECT_EQ(wrong_chunks.load(), 0);
    EXPECT_EQ(wrong_index.load(), 0);
    EXPECT_EQ(wrong_claim.load(), 0);
  }
}

// A call that finds the pool taken does not wait for it: it runs its chunks itself.
TEST(ThreadPool, ACallWhileThePoolIsTakenRunsOnItsCaller) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  std::atomic<bool> inside{false}, release{false};
  std::thread holder([&] {
    qkv::parallel_for(0, 2, 1, [&](i64 b, i64) {
      if (b == 0) {
        inside = true;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  });
  while (!inside) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::vector<std::pair<int, std::thread::id>> ran;  // (thread_index, thread) per chunk, in call order
  qkv::parallel_for(0, 10, 1, [&](i64, i64) { ran.emplace_back(qkv::thread_index(), std::this_thread::get_id()); });
  release = true;
  holder.join();
  ASSERT_EQ(ran.size(), 2u);
  EXPECT_EQ(ran[0].first, 0);
  EXPECT_EQ(ran[1].first, 1);
  EXPECT_EQ(ran[0].second, std::this_thread::get_id());
  EXPECT_EQ(ran[1].second, std::this_thread::get_id());
}

TEST(ThreadPool, ResizesUpAndDown) {
  ThreadsGuard guard;
  for (int threads : {1, 4, 2, 3, 1, 3, 2}) {
    qkv::set_num_threads(threads);
    EXPECT_EQ(qkv::num_threads(), threads);
    std::mutex mu;
    std::set<std::thread::id> os_threads;
    std::set<int> idx;
    qkv::parallel_for(0, 1000, 1, [&](i64, i64) {
      std::lock_guard<std::mutex> lock(mu);
      os_threads.insert(std::this_thread::get_id());
      idx.insert(qkv::thread_index());
    });
    EXPECT_EQ(static_cast<int>(os_threads.size()), threads);
    EXPECT_EQ(static_cast<int>(idx.size()), threads);
    EXPECT_EQ(*idx.rbegin(), threads - 1);
  }
  EXPECT_THROW(qkv::set_num_threads(0), qkv::ValueError);
}

// Idle workers sleep: over 300 ms of idling after a burst of calls the process uses a
// small fraction of one core (a spinning worker would use all of it).
TEST(ThreadPool, IdleWorkersUseNoCpu) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  for (int i = 0; i < 1000; ++i) qkv::parallel_for(0, 2, 1, [](i64, i64) {});
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = process_cpu_seconds() - cpu0;
  EXPECT_LT(cpu, 0.1 * wall) << "process used " << cpu << " s of CPU in " << wall << " s of idling";
}

// A child forked after the pool ran gets a working pool of its own (the parent's workers
// do not exist in it); alarm() turns a hang into a failure.
TEST(ThreadPool, WorksInAForkedChild) {
  ThreadsGuard guard;
  qkv::set_num_threads(2);
  qkv::parallel_for(0, 2, 1, [](i64, i64) {});
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    std::atomic<int> chunks{0};
    std::set<std::thread::id> os_threads;
    std::mutex mu;
    for (int i = 0; i < 100; ++i)
      qkv::parallel_for(0, 2, 1, [&](i64, i64) {
        ++chunks;
        std::lock_guard<std::mutex> lock(mu);
        os_threads.insert(std::this_thread::get_id());
      });
    _exit(chunks.load() == 200 && os_threads.size() == 2 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
