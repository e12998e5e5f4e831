#include "qkv/core/rng.h"

#include <cmath>
#include <string>

#include "qkv/core/error.h"

namespace qkv {

double normal_at(std::uint64_t seed, std::uint64_t counter) {
  // Box-Muller with two independent uniforms derived from one counter.
  double u1 = uniform_at(seed ^ 0x5851F42D4C957F2Dull, counter);
  double u2 = uniform_at(seed ^ 0x14057B7EF767814Full, counter);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::int64_t Generator::randint(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) throw ValueError("randint: need hi > lo, got lo=" + std::to_string(lo) + " hi=" + std::to_string(hi));
  const std::uint64_t range = static_cast<std::uint64_t>(hi - lo);
  // Multiply-shift mapping; bias is < range / 2^64, negligible.
  const unsigned __int128 prod = static_cast<unsigned __int128>(next_u64()) * range;
  return lo + static_cast<std::int64_t>(prod >> 64);
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace qkv
