// The one threading primitive. Work is split into contiguous chunks by a
// static rule that depends only on (begin, end, grain, num_threads()), so a
// kernel that writes disjoint outputs per chunk, or reduces per chunk in a
// fixed order, gives bitwise-identical results for a given thread count.
#pragma once
#include <cstdint>
#include <functional>

namespace qkv {

// Threads used by parallel_for. Default: $QKV_NUM_THREADS if set, else the
// number of cores.
int num_threads();
// Sets the thread count (n >= 1, else ValueError).
void set_num_threads(int n);

// Calls fn(chunk_begin, chunk_end) over [begin, end), in at most
// num_threads() chunks of at least `grain` items each. Runs inline (one
// chunk) when the range is small, one thread is set, or when already inside
// a parallel_for (nested calls are serial). An exception thrown by fn is
// rethrown on the calling thread after all chunks finish.
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& fn);

// Index of the calling worker inside parallel_for (0 outside), in
// [0, num_threads()); use it to pick a per-thread workspace.
int thread_index();

}  // namespace qkv
