// Seeded, counter-based random numbers. Value i of a stream is a pure
// function of (seed, i), so any thread can compute any element: results do
// not depend on the thread count, and dropout masks can be recomputed in
// backward from (seed, offset) alone.
#pragma once
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

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : seed_(seed) {}
  void manual_seed(std::uint64_t seed) { seed_ = seed; offset_ = 0; }
  std::uint64_t seed() const { return seed_; }
  // Number of values drawn so far; save and restore it to resume exactly.
  std::uint64_t offset() const { return offset_; }
  void set_offset(std::uint64_t off) { offset_ = off; }
  // Reserves n consecutive counters and returns the first.
  std::uint64_t reserve(std::uint64_t n) { std::uint64_t o = offset_; offset_ += n; return o; }

  double uniform() { return uniform_at(seed_, offset_++); }
  double normal() { return normal_at(seed_, offset_++); }
  std::uint64_t next_u64() { return random_bits(seed_, offset_++); }
  // Uniform integer in [lo, hi) (hi > lo).
  std::int64_t randint(std::int64_t lo, std::int64_t hi);

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};

// The process-wide default generator (used when none is passed).
Generator& default_generator();
void manual_seed(std::uint64_t seed);

}  // namespace qkv
