// Helpers of the concurrency tests (label `concurrency`): serve numbered requests from
// several user threads at once, and compare results bit for bit.
#pragma once
#include <cstring>
#include <exception>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::testing {

// Runs request(r) for r in [0, n) from `threads` user threads released together; thread t
// serves r = t, t + threads, t + 2 * threads, ... (so every thread gets a mix of request
// kinds). Returns "request r: message" for every request that threw (empty when none).
template <class Fn>
std::vector<std::string> serve_concurrently(int threads, int n, const Fn& request) {
  std::latch start(threads);
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> users;
  for (int t = 0; t < threads; ++t)
    users.emplace_back([&, t] {
      start.arrive_and_wait();
      for (int r = t; r < n; r += threads) {
        try {
          request(r);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lock(mu);
          errors.push_back("request " + std::to_string(r) + ": " + e.what());
        }
      }
    });
  for (auto& u : users) u.join();
  return errors;
}

// Same dtype, same shape and the same bytes (a defined tensor never equals an undefined one).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  return std::memcmp(ac.raw_data(), bc.raw_data(), static_cast<std::size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

// The thread-count knobs of the concurrency tests: user threads x requests per thread, and the
// pool's size during the test (2: each user thread's kernels really fork, and most calls find
// the pool taken by another user thread).
inline constexpr int kUserThreads = 8;
inline constexpr int kRequestsPerThread = 50;
inline constexpr int kPoolThreads = 2;

}  // namespace qkv::testing
