// Seeded, counter-based random numbers. Value i of a stream is a pure
// function of (seed, i), so any thread can compute any element: results do
// not depend on the thread count, and dropout masks can be recomputed in
// backward from (seed, offset) alone.
#pragma once
#include <atomic>
#include <cstdint>

namespace qkv {

// splitmix64 finaliser: a bijective 64-bit mix.
inline std::uint64_t mix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// 64 random bits at position `counter` of stream `seed`.
inline std::uint64_t random_bits(std::uint64_t seed, std::uint64_t counter) {
  return mix64(mix64(seed) ^ (counter * 0xD1B54A32D192ED03ull));
}
// Uniform in [0, 1) with 53 random bits.
inline double uniform_at(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(random_bits(seed, counter) >> 11) * 0x1.0p-53;
}
// Standard normal at `counter` (Box-Muller on two sub-draws).
double normal_at(std::uint64_t seed, std::uint64_t counter);

// Thread safety: draws (reserve, uniform, normal, next_u64, randint) may come from several
// threads at once; the position is one atomic counter, so every draw gets counters no other
// draw gets (in an order that depends on timing: for reproducible results give each thread or
// request its own Generator). manual_seed, set_offset and assignment must not race with draws.
class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  Generator(const Generator& o) : seed_(o.seed_), offset_(o.offset()) {}
  Generator& operator=(const Generator& o) {
    seed_ = o.seed_;
    offset_.store(o.offset(), std::memory_order_relaxed);
    return *this;
  }
  void manual_seed(std::uint64_t seed) { seed_ = seed; offset_.store(0, std::memory_order_relaxed); }
  std::uint64_t seed() const { return seed_; }
  // Number of values drawn so far; save and restore it to resume exactly.
  std::uint64_t offset() const { return offset_.load(std::memory_order_relaxed); }
  void set_offset(std::uint64_t off) { offset_.store(off, std::memory_order_relaxed); }
  // Reserves n consecutive counters and returns the first.
  std::uint64_t reserve(std::uint64_t n) { return offset_.fetch_add(n, std::memory_order_relaxed); }

  double uniform() { return uniform_at(seed_, reserve(1)); }
  double normal() { return normal_at(seed_, reserve(1)); }
  std::uint64_t next_u64() { return random_bits(seed_, reserve(1)); }
  // Uniform integer in [lo, hi) (hi > lo).
  std::int64_t randint(std::int64_t lo, std::int64_t hi);

 private:
  std::uint64_t seed_;
  std::atomic<std::uint64_t> offset_{0};
};

// The process-wide default generator (used when none is passed: Tensor::randn and friends,
// dropout in training mode). Inference in eval mode never draws from it.
Generator& default_generator();
void manual_seed(std::uint64_t seed);

}  // namespace qkv
