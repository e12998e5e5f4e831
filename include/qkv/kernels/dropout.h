// Dropout masks from a counter-based hash, vectorised.
//
// Element c of a dropout stream (seed, counters c0, c0+1, ...) is dropped iff
//   dropout_bits(seed, c) < dropout_threshold(p) = ceil(p * 2^32),
// so the drop rate is p to within 2^-32. dropout_bits is a Weyl sequence in the low 32 bits
// of the counter (step 0x9E3779B9), offset by a key drawn from the seed and the counter's
// high 32 bits (splitmix64), through murmur3's 32-bit finaliser (a bijection): over any
// 2^32 consecutive counters of one key every 32-bit value occurs exactly once.
// ops::dropout, the attention kernels and the naive attention reference all use this rule,
// so a mask can be recomputed anywhere (backward, another thread) from (seed, counter).
// The AVX2 path hashes eight counters per vector with 32-bit products; results are
// bitwise those of the scalar rule.
#pragma once
#include <cstdint>

#include "qkv/core/rng.h"

namespace qkv::kernels {

// The key of counters [hi * 2^32, (hi + 1) * 2^32) of stream `seed`.
inline std::uint32_t dropout_key(std::uint64_t seed, std::uint64_t hi) {
  return static_cast<std::uint32_t>(mix64(seed ^ (hi * 0xD1B54A32D192ED03ull)) >> 32);
}
// murmur3's 32-bit finaliser.
inline std::uint32_t fmix32(std::uint32_t h) {
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  return h ^ (h >> 16);
}
// 32 random bits of element c of stream `seed`.
inline std::uint32_t dropout_bits(std::uint64_t seed, std::uint64_t c) {
  return fmix32(dropout_key(seed, c >> 32) + static_cast<std::uint32_t>(c) * 0x9E3779B9u);
}

// ceil(p * 2^32): elements whose 32 random bits are below it are dropped. p in [0, 1).
std::uint64_t dropout_threshold(double p);

// The definition every path implements.
inline bool dropout_dropped(std::uint64_t seed, std::uint64_t c, std::uint64_t threshold) {
  return dropout_bits(seed, c) < threshold;
}

// keep[i] = 1 if element c0 + i is kept, else 0; i < n.
void dropout_keep_mask(std::uint8_t* keep, std::uint64_t seed, std::uint64_t c0, std::int64_t n,
                       std::uint64_t threshold);

// mul[i] = keep ? keep_scale : 0 (keep_scale is usually 1 / (1 - p)); i < n.
void dropout_multipliers(float* mul, std::uint64_t seed, std::uint64_t c0, std::int64_t n, std::uint64_t threshold,
                         float keep_scale);

}  // namespace qkv::kernels
