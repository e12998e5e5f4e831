#include "qkv/core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/error.h"

namespace qkv {
namespace {

int default_threads() {
  if (const char* env = std::getenv("QKV_NUM_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 1 && v <= 1024) return static_cast<int>(v);
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

std::atomic<int> g_threads{0};
thread_local int t_index = 0;
thread_local bool t_in_parallel = false;

// The first exception any worker of one call throws, rethrown by the caller after the team ends.
struct WorkerErrors {
  std::exception_ptr err = nullptr;
  std::atomic<bool> failed{false};
  void rethrow() const {
    if (err) std::rethrow_exception(err);
  }
};

// Runs body() as worker tid of a parallel call: thread_index() and the nesting flag set for it
// and restored after, an exception caught into errs.
template <class Body>
void run_as_worker(int tid, WorkerErrors& errs, Body&& body) {
  const int saved_index = t_index;
  const bool saved_in = t_in_parallel;
  t_index = tid;
  t_in_parallel = true;
  try {
    body();
  } catch (...) {
#pragma omp critical(qkv_parallel_err)
    {
      if (!errs.failed.exchange(true)) errs.err = std::current_exception();
    }
  }
  t_index = saved_index;
  t_in_parallel = saved_in;
}

}  // namespace

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_num_threads(int n) {
  if (n < 1) throw ValueError("set_num_threads: n must be >= 1, got " + std::to_string(n));
  g_threads.store(n, std::memory_order_relaxed);
}

int thread_index() { return t_index; }

void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (end <= begin) return;
  const std::int64_t n = end - begin;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  const int nt = static_cast<int>(std::min<std::int64_t>(num_threads(), max_chunks));
  if (nt <= 1 || t_in_parallel) {
    fn(begin, end);
    return;
  }
  WorkerErrors errs;
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    const int team = omp_get_num_threads();
    // Static, even split: chunk boundaries depend only on n and team size.
    const std::int64_t b = begin + n * tid / team;
    const std::int64_t e = begin + n * (tid + 1) / team;
    if (b < e) run_as_worker(tid, errs, [&] { fn(b, e); });
  }
  errs.rethrow();
}

namespace {

// A worker's range of tasks as one atomic word: front in the low 32 bits, back
// (one past the last) in the high 32 bits, both relative to the call's begin.
struct alignas(64) ClaimRange {
  std::atomic<std::uint64_t> fb{0};
  static std::uint64_t pack(std::uint64_t f, std::uint64_t b) { return f | (b << 32); }
  // The front task, for the owner.
  bool take_front(std::int64_t& t) {
    std::uint64_t cur = fb.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t f = cur & 0xffffffffu, b = cur >> 32;
      if (f >= b) return false;
      if (fb.compare_exchange_weak(cur, pack(f + 1, b), std::memory_order_relaxed)) {
        t = static_cast<std::int64_t>(f);
        return true;
      }
    }
  }
  // The back task, for a worker whose own range is done.
  bool take_back(std::int64_t& t) {
    std::uint64_t cur = fb.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t f = cur & 0xffffffffu, b = cur >> 32;
      if (f >= b) return false;
      if (fb.compare_exchange_weak(cur, pack(f, b - 1), std::memory_order_relaxed)) {
        t = static_cast<std::int64_t>(b - 1);
        return true;
      }
    }
  }
  std::int64_t left() const {
    const std::uint64_t cur = fb.load(std::memory_order_relaxed), f = cur & 0xffffffffu, b = cur >> 32;
    return f < b ? static_cast<std::int64_t>(b - f) : 0;
  }
};

}  // namespace

void parallel_claim(std::int64_t begin, std::int64_t end, const std::function<void(const ClaimNext&)>& fn) {
  if (end <= begin) return;
  const std::int64_t n = end - begin;
  const int nt = static_cast<int>(std::min<std::int64_t>(num_threads(), n));
  if (nt <= 1 || t_in_parallel || n >= (std::int64_t{1} << 31)) {
    // One worker (or too many tasks for the packed ranges): every task in order, here.
    std::int64_t i = begin;
    if (nt <= 1 || t_in_parallel) {
      fn([&i, end](std::int64_t& t) {
        if (i >= end) return false;
        t = i++;
        return true;
      });
      return;
    }
    // Static ranges as parallel_for gives them, each pulled in order.
    parallel_for(begin, end, 1, [&fn](std::int64_t b, std::int64_t e) {
      std::int64_t j = b;
      fn([&j, e](std::int64_t& t) {
        if (j >= e) return false;
        t = j++;
        return true;
      });
    });
    return;
  }
  std::vector<ClaimRange> ranges(static_cast<std::size_t>(nt));
  for (int w = 0; w < nt; ++w)
    ranges[static_cast<std::size_t>(w)].fb.store(
        ClaimRange::pack(static_cast<std::uint64_t>(n * w / nt), static_cast<std::uint64_t>(n * (w + 1) / nt)));
  WorkerErrors errs;
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    // The team may be smaller than nt: ranges without an owner are stolen.
    ClaimRange& own = ranges[static_cast<std::size_t>(tid)];
    const ClaimNext next = [&](std::int64_t& t) {
      if (own.take_front(t)) {
        t += begin;
        return true;
      }
      for (;;) {  // steal from the back of the range with the most left
        int victim = -1;
        std::int64_t most = 0;
        for (int w = 0; w < nt; ++w) {
          const std::int64_t l = ranges[static_cast<std::size_t>(w)].left();
          if (l > most) most = l, victim = w;
        }
        if (victim < 0) return false;
        if (ranges[static_cast<std::size_t>(victim)].take_back(t)) {
          t += begin;
          return true;
        }
      }
    };
    run_as_worker(tid, errs, [&] { fn(next); });
  }
  errs.rethrow();
}

}  // namespace qkv
