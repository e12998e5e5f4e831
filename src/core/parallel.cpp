#include "qkv/core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

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
  std::exception_ptr err = nullptr;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    const int team = omp_get_num_threads();
    // Static, even split: chunk boundaries depend only on n and team size.
    const std::int64_t b = begin + n * tid / team;
    const std::int64_t e = begin + n * (tid + 1) / team;
    const int saved_index = t_index;
    const bool saved_in = t_in_parallel;
    t_index = tid;
    t_in_parallel = true;
    if (b < e) {
      try {
        fn(b, e);
      } catch (...) {
#pragma omp critical(qkv_parallel_err)
        {
          if (!failed.exchange(true)) err = std::current_exception();
        }
      }
    }
    t_index = saved_index;
    t_in_parallel = saved_in;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace qkv
