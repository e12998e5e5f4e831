// The one threading primitive: qkv's own pool of persistent workers, one
// thread-count knob, two ways to hand out work. parallel_for splits work into
// contiguous chunks by a static rule that depends only on (begin, end, grain,
// num_threads()), so a kernel that writes disjoint outputs per chunk, or
// reduces per chunk in a fixed order, gives bitwise-identical results for a
// given thread count. parallel_claim starts from the same chunks but moves
// tasks off a worker that falls behind; it is for tasks whose results do not
// depend on which worker runs them (then they are bitwise identical too).
//
// Waiting: an idle worker (and a caller waiting for its workers) sleeps in the
// kernel (futex) at once, no spinning, so no thread holds a core it does not
// use; no environment variable (OMP_WAIT_POLICY or other) changes this.
//
// Several threads may call parallel_for / parallel_claim at once. The pool
// serves one call at a time; a call that finds it taken by another thread's
// call does not wait: it runs the same chunks itself, one after the other
// (each with its own thread_index()), so its results are the same bitwise as
// on the pool, and no call ever blocks on another.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>

namespace qkv {

// Threads used by parallel_for (the caller and num_threads() - 1 pool workers).
// Default: $QKV_NUM_THREADS if set, else the number of cores.
int num_threads();
// Sets the thread count (n >= 1, else ValueError). The pool grows or shrinks to
// n - 1 workers now, or when the call holding it (if any) is done.
void set_num_threads(int n);

// Calls fn(chunk_begin, chunk_end) over [begin, end) (n items), in
// nt = min(num_threads(), ceil(n / grain)) chunks (grain < 1 counts as 1):
// chunk w of nt is [begin + n*w/nt, begin + n*(w+1)/nt), run as thread_index() w. Runs inline (one
// chunk) when the range is small, one thread is set, or when already inside
// a parallel_for (nested calls are serial). An exception thrown by fn is
// rethrown on the calling thread after all chunks finish (the first one, if
// several chunks throw).
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

// Next-task source handed to each worker by parallel_claim: next(t) stores the
// worker's next task in t and returns true, or returns false when no task is left.
using ClaimNext = std::function<bool(std::int64_t&)>;

// Runs the tasks [begin, end) on up to num_threads() workers, each task exactly
// once, balancing the load at run time: every worker starts on its own
// contiguous range (the ranges parallel_for would give, tasks in increasing
// order), and a worker whose range is done takes tasks one at a time from the
// back of the range with the most tasks left. fn(next) runs once per worker and
// pulls its tasks with next, so state kept across a worker's tasks (a packed
// operand, say) lives in fn's locals. On a shared machine a worker slowed by
// another process then costs only its own share instead of holding up the call.
// Which worker runs a task depends on timing: use it only where each task's
// result does not depend on who runs it or on the other tasks of its worker.
// Serial, inline and exception behaviour as parallel_for.
void parallel_claim(std::int64_t begin, std::int64_t end, const std::function<void(const ClaimNext&)>& fn);

// Index of the calling worker inside parallel_for, parallel_claim or parallel_team (0
// outside), in [0, num_threads()); use it to pick a per-thread workspace.
int thread_index();

// The members of one parallel_team call. Each runs the same function; barrier() separates its
// steps, so a pipeline of small parallel steps (the layers of one short sentence) costs one
// wake-up of the workers instead of one per step.
class Team {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Returns when every member has arrived. Members run on their own cores during a call, so a
  // waiting member spins for a bounded time (the others are busy with their part of the same
  // step), then sleeps. Every member must call barrier() the same number of times. If another
  // member has thrown, barrier() unwinds this one too (parallel_team rethrows the first error).
  void barrier();
  // This member's share [b, e) of [begin, end): the static, even split of parallel_for, each
  // boundary rounded down to a multiple of `align` (except `end`).
  std::pair<std::int64_t, std::int64_t> part(std::int64_t begin, std::int64_t end, std::int64_t align = 1) const;

  struct Shared;
  Team(Shared* shared, int rank, int size) : shared_(shared), rank_(rank), size_(size) {}

 private:
  Shared* shared_;
  int rank_, size_;
};

// Runs fn(team) on min(num_threads(), max_size) members at once, member 0 on the calling
// thread. Inside, parallel_for and parallel_claim run inline. When the pool is taken by
// another thread's call, or when called inside a parallel call, or with one thread, fn runs
// once, here, as a team of size 1 (barrier() returns at once): fn must be correct for any team
// size, and gives bitwise the same results for any size when each output's arithmetic does not
// depend on which member computes it. An exception from any member is rethrown here after all
// members have left fn.
void parallel_team(int max_size, const std::function<void(Team&)>& fn);

}  // namespace qkv
