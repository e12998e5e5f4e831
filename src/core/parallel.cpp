// qkv's thread pool (see core/parallel.h for the contract).
//
// Shape of the work:
//   - One process-wide pool of num_threads() - 1 persistent workers; worker w
//     (1-based) always runs team member tid = w, the calling thread runs tid 0.
//   - A call takes the pool with one atomic flag (never blocks). It writes the
//     job, sets pending = nt - 1, bumps the sequence word of workers 1..nt-1
//     (waking those asleep), runs its own chunk, then waits for pending == 0.
//   - Waiting, on both sides, sleeps in the kernel (futex on Linux) at once, so an
//     idle worker never holds a core another process could use, whatever the
//     environment says (OMP_WAIT_POLICY plays no part). A bounded spin before
//     sleeping (kSpin) was measured and made things worse here (BENCHMARKS.md,
//     "Thread pool"), so it is 0.
//   - Sleeping is announced by a flag (seq_cst store, then re-check the word)
//     and the other side issues the futex wake only when the flag is set, so a
//     spinning or running waiter costs no system call.
//   - When the pool is taken by another thread's call, the new call runs the
//     same team's chunks itself, one after the other, each with its own
//     thread_index(): same chunk boundaries, so the same results bitwise, and
//     no thread ever waits for the pool (no deadlock).
#include "qkv/core/parallel.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "qkv/core/env.h"
#include "qkv/core/error.h"
#include "qkv/core/thread_signals.h"

namespace qkv {
namespace {

#ifndef QKV_POOL_SPIN_US
#define QKV_POOL_SPIN_US 0
#endif
// Longest busy wait before sleeping. Measured on the 2-vCPU KVM machine (BENCHMARKS.md,
// "Thread pool"): a 128^3 GEMM on 2 threads took 0.074 ms with no spin, 0.089 ms with
// 5 us, 0.124 ms with 20 us and 0.29 ms with 100 us, and the classifier training under
// load got slower too. A waiter that spins then sleeps is woken onto its partner's CPU
// and then spins there, taking the time the partner needs; sleeping at once avoids it.
// Kept as a build-time knob (-DQKV_POOL_SPIN_US=N) for re-measuring on other machines.
constexpr std::chrono::microseconds kSpin{QKV_POOL_SPIN_US};

int default_threads() {
  if (const auto v = env_integer("QKV_NUM_THREADS", 1, 1024)) return static_cast<int>(*v);  // ValueError if invalid
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

std::atomic<int> g_threads{0};
thread_local int t_index = 0;
thread_local bool t_in_parallel = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Sleep until *word != old (may return early: callers re-check).
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t old) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
#else
  word.wait(old, std::memory_order_acquire);
#endif
}

// Wakes one sleeper on `word`, or every sleeper (a team's barrier).
void futex_wake(std::atomic<std::uint32_t>& word, bool all = false) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, all ? 0x7fffffff : 1, nullptr,
          nullptr, 0);
#else
  if (all)
    word.notify_all();
  else
    word.notify_one();
#endif
}

// Waits until pred() is true: spins up to kSpin, then sleeps on `word` (announced in
// `sleeping`; the side that makes pred() true wakes the sleeper when it sees the flag).
template <class Pred>
void await(std::atomic<std::uint32_t>& word, std::atomic<std::uint32_t>& sleeping, Pred pred) {
  if (pred()) return;
  if (kSpin.count() > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (unsigned i = 1;; ++i) {
      cpu_relax();
      if (pred()) return;
      if ((i & 31) == 0 && std::chrono::steady_clock::now() - t0 >= kSpin) break;
    }
  }
  for (;;) {
    const std::uint32_t seen = word.load(std::memory_order_seq_cst);
    sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the flag is visible before pred() reads
    if (pred()) break;
    futex_wait(word, seen);  // returns at once if word changed since `seen`
    sleeping.store(0, std::memory_order_relaxed);
    if (pred()) return;
  }
  sleeping.store(0, std::memory_order_relaxed);
}

// The job a call hands to its workers: run(ctx, tid) for tid in [1, nt).
struct Job {
  void (*run)(void* ctx, int tid) = nullptr;
  void* ctx = nullptr;
};

class Pool {
 public:
  // Takes the pool for one call; false when another call holds it.
  bool try_acquire() { return !busy_.exchange(true, std::memory_order_acquire); }
  void release() { busy_.store(false, std::memory_order_release); }

  // With the pool held: runs body(tid) for tid in [0, nt), tid 0 on the calling thread,
  // and returns when all are done. body must not throw.
  template <class Body>
  void run(int nt, Body& body) {
    sync_size(nt - 1);
    const int helpers = std::min<int>(nt - 1, static_cast<int>(workers_.size()));
    job_.run = [](void* ctx, int tid) { (*static_cast<Body*>(ctx))(tid); };
    job_.ctx = &body;
    pending_.store(static_cast<std::uint32_t>(helpers), std::memory_order_relaxed);
    for (int w = 0; w < helpers; ++w) {
      Worker& wk = *workers_[static_cast<std::size_t>(w)];
      wk.seq.fetch_add(1, std::memory_order_seq_cst);  // publishes job_ and pending_
      if (wk.sleeping.load(std::memory_order_seq_cst)) futex_wake(wk.seq);
    }
    body(0);
    for (int tid = helpers + 1; tid < nt; ++tid) body(tid);  // workers that could not be started
    await(pending_, caller_sleeping_, [this] { return pending_.load(std::memory_order_acquire) == 0; });
  }

  // With the pool held (or from set_num_threads when free): `n` workers.
  void resize(int n) {
    while (static_cast<int>(workers_.size()) > n) {
      std::unique_ptr<Worker> wk = std::move(workers_.back());
      workers_.pop_back();
      wk->stop.store(true, std::memory_order_relaxed);
      wk->seq.fetch_add(1, std::memory_order_seq_cst);
      futex_wake(wk->seq);
      wk->thread.join();
    }
    while (static_cast<int>(workers_.size()) < n) {
      auto wk = std::make_unique<Worker>();
      const int tid = static_cast<int>(workers_.size()) + 1;
      try {
        const StopSignalsBlocked quiet;  // workers leave SIGINT / SIGTERM to the program's threads
        wk->thread = std::thread([this, w = wk.get(), tid] { worker_main(*w, tid); });
      } catch (const std::system_error&) {
        return;  // no more threads: run() does the missing members' chunks on the caller
      }
      workers_.push_back(std::move(wk));
    }
  }

  int size() const { return static_cast<int>(workers_.size()); }

  // With the pool held: how many of nt members run() would run at once (the caller and the
  // workers it could start), after growing the pool as run() would.
  int concurrent(int nt) {
    sync_size(nt - 1);
    return std::min(nt, size() + 1);
  }

 private:
  struct alignas(64) Worker {
    std::atomic<std::uint32_t> seq{0};       // bumped by a call to hand this worker the job
    std::atomic<std::uint32_t> sleeping{0};  // 1 while the worker sleeps (or is about to)
    std::atomic<bool> stop{false};
    std::thread thread;
  };

  // The pool's size follows num_threads() - 1, and is at least what this call needs.
  void sync_size(int need) {
    const int want = std::max(need, num_threads() - 1);
    if (want != size()) resize(want);
  }

  void worker_main(Worker& w, int tid) {
    std::uint32_t seen = 0;
    for (;;) {
      await(w.seq, w.sleeping, [&] { return w.seq.load(std::memory_order_acquire) != seen; });
      seen = w.seq.load(std::memory_order_acquire);
      if (w.stop.load(std::memory_order_relaxed)) return;
      const Job job = job_;
      job.run(job.ctx, tid);
      // After this decrement the call may return: touch nothing of the job.
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping_.load(std::memory_order_seq_cst))
        futex_wake(pending_);
    }
  }

  std::atomic<bool> busy_{false};
  std::vector<std::unique_ptr<Worker>> workers_;
  Job job_;
  alignas(64) std::atomic<std::uint32_t> pending_{0};
  std::atomic<std::uint32_t> caller_sleeping_{0};
};

// Never destroyed (workers sleep until the process ends; a parallel_for from a static
// destructor still works). A forked child gets a fresh, empty pool: the parent's workers
// do not exist in it.
std::atomic<Pool*> g_pool{nullptr};

void reset_pool_in_child() { g_pool.store(nullptr, std::memory_order_relaxed); }  // the old one is leaked

Pool& pool() {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, reset_pool_in_child); });
  auto* fresh = new Pool();
  if (g_pool.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;
  return *p;
}

// The first exception any team member of one call throws, rethrown by the caller after the team ends.
struct WorkerErrors {
  std::mutex mu;
  std::exception_ptr err = nullptr;
  void rethrow() const {
    if (err) std::rethrow_exception(err);
  }
};

// Runs body() as team member tid of a parallel call: thread_index() and the nesting flag set
// for it and restored after, an exception caught into errs.
template <class Body>
void run_as_worker(int tid, WorkerErrors& errs, Body&& body) {
  const int saved_index = t_index;
  const bool saved_in = t_in_parallel;
  t_index = tid;
  t_in_parallel = true;
  try {
    body();
  } catch (...) {
    std::lock_guard<std::mutex> lock(errs.mu);
    if (!errs.err) errs.err = std::current_exception();
  }
  t_index = saved_index;
  t_in_parallel = saved_in;
}

// Runs member(tid) for tid in [0, nt) on the pool; false (nothing run) when the pool is
// taken by another call.
template <class Member>
bool run_on_pool(int nt, Member& member) {
  Pool& p = pool();
  if (!p.try_acquire()) return false;
  p.run(nt, member);
  p.release();
  return true;
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
  // Resize now when the pool is free; else the call holding it leaves it to the next call.
  Pool& p = pool();
  if (p.try_acquire()) {
    p.resize(n - 1);
    p.release();
  }
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
  // Static, even split: chunk boundaries depend only on n and nt.
  auto member = [&](int tid) {
    const std::int64_t b = begin + n * tid / nt;
    const std::int64_t e = begin + n * (tid + 1) / nt;
    if (b < e) run_as_worker(tid, errs, [&] { fn(b, e); });
  };
  if (!run_on_pool(nt, member))
    for (int tid = 0; tid < nt; ++tid) member(tid);  // pool taken: the same chunks, in order, here
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

// Every task of [begin, end) in order, to one fn call (a single worker).
void claim_in_order(std::int64_t begin, std::int64_t end, const std::function<void(const ClaimNext&)>& fn) {
  std::int64_t i = begin;
  fn([&i, end](std::int64_t& t) {
    if (i >= end) return false;
    t = i++;
    return true;
  });
}

}  // namespace

void parallel_claim(std::int64_t begin, std::int64_t end, const std::function<void(const ClaimNext&)>& fn) {
  if (end <= begin) return;
  const std::int64_t n = end - begin;
  const int nt = static_cast<int>(std::min<std::int64_t>(num_threads(), n));
  if (nt <= 1 || t_in_parallel) {
    claim_in_order(begin, end, fn);
    return;
  }
  if (n >= (std::int64_t{1} << 31)) {
    // Too many tasks for the packed ranges: static ranges as parallel_for gives them, each pulled in order.
    parallel_for(begin, end, 1, [&fn](std::int64_t b, std::int64_t e) { claim_in_order(b, e, fn); });
    return;
  }
  std::vector<ClaimRange> ranges(static_cast<std::size_t>(nt));
  for (int w = 0; w < nt; ++w)
    ranges[static_cast<std::size_t>(w)].fb.store(
        ClaimRange::pack(static_cast<std::uint64_t>(n * w / nt), static_cast<std::uint64_t>(n * (w + 1) / nt)));
  WorkerErrors errs;
  auto member = [&](int tid) {
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
  };
  if (!run_on_pool(nt, member)) {
    // Pool taken by another call: one worker (index 0), every task in order, here.
    run_as_worker(0, errs, [&] { claim_in_order(begin, end, fn); });
  }
  errs.rethrow();
}

// ---- teams ----

// Longest spin of a member waiting at a barrier before it sleeps. Unlike the pool's idle wait
// (kSpin, 0), the members of a team are all running the same call, each on its own core, so
// the wait is only the others' share of one step; sleeping at once would cost a futex wake-up
// (tens of us on a VM) per step. Once a member's spin has run out (a member that was late by more
// than that: its core is most likely taken by another process), the team's members sleep at once
// at every later barrier of the call, so a busy machine costs at most one spin per call.
constexpr std::chrono::microseconds kBarrierSpin{200};

// Thrown inside the other members when one member has thrown; parallel_team swallows it and
// rethrows the original error.
struct TeamAborted {};

struct Team::Shared {
  alignas(64) std::atomic<std::uint32_t> arrived{0};
  alignas(64) std::atomic<std::uint32_t> gen{0};
  std::atomic<std::uint32_t> sleepers{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> no_spin{false};  // a spin ran out: sleep at once from now on
  WorkerErrors errs;

  void fail() {
    failed.store(true, std::memory_order_seq_cst);
    gen.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(gen, true);
  }
};

void Team::barrier() {
  if (size_ <= 1) return;
  Shared& s = *shared_;
  const std::uint32_t g = s.gen.load(std::memory_order_acquire);
  if (s.failed.load(std::memory_order_acquire)) throw TeamAborted{};
  if (s.arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<std::uint32_t>(size_)) {
    // Last to arrive: reset the count (nobody can arrive at the next barrier before gen moves),
    // then release the others.
    s.arrived.store(0, std::memory_order_relaxed);
    s.gen.fetch_add(1, std::memory_order_seq_cst);
    if (s.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(s.gen, true);
    return;
  }
  auto moved = [&] { return s.gen.load(std::memory_order_acquire) != g; };
  const auto t0 = std::chrono::steady_clock::now();
  const bool spin = !s.no_spin.load(std::memory_order_relaxed);
  for (unsigned i = 1; !moved(); ++i) {
    if (spin) cpu_relax();
    if (!spin || ((i & 63) == 0 && std::chrono::steady_clock::now() - t0 >= kBarrierSpin)) {
      if (spin) s.no_spin.store(true, std::memory_order_relaxed);
      s.sleepers.fetch_add(1, std::memory_order_seq_cst);
      while (!moved()) futex_wait(s.gen, g);
      s.sleepers.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  }
  if (s.failed.load(std::memory_order_acquire)) throw TeamAborted{};
}

std::pair<std::int64_t, std::int64_t> Team::part(std::int64_t begin, std::int64_t end, std::int64_t align) const {
  const std::int64_t n = std::max<std::int64_t>(end - begin, 0);
  align = std::max<std::int64_t>(align, 1);
  auto edge = [&](int r) {
    if (r >= size_) return end;
    return begin + n * r / size_ / align * align;
  };
  return {edge(rank_), edge(rank_ + 1)};
}

void parallel_team(int max_size, const std::function<void(Team&)>& fn) {
  Team::Shared shared;
  const int nt = std::max(1, std::min(num_threads(), max_size));
  if (nt <= 1 || t_in_parallel) {
    Team solo(&shared, 0, 1);
    fn(solo);
    return;
  }
  Pool& p = pool();
  if (p.try_acquire()) {
    // Only members that run at once can meet at a barrier: as many as the pool could start.
    const int size = p.concurrent(nt);
    auto sized = [&](int tid) {
      run_as_worker(tid, shared.errs, [&] {
        Team team(&shared, tid, size);
        try {
          fn(team);
        } catch (const TeamAborted&) {
          // another member failed first: its error is the one reported
        } catch (...) {
          shared.fail();
          throw;
        }
      });
    };
    p.run(size, sized);
    p.release();
  } else {
    // Pool taken by another call: a team of one, here (a barrier cannot wait for members that
    // would run after this one on the same thread).
    run_as_worker(0, shared.errs, [&] {
      Team solo(&shared, 0, 1);
      fn(solo);
    });
  }
  shared.errs.rethrow();
}

}  // namespace qkv
