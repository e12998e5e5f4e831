// Dropout masks from the counter-based RNG (core/rng.h), vectorised.
//
// Element c of a dropout stream (seed, counters c0, c0+1, ...) is dropped iff
//   uniform_at(seed, c) < p   <=>   (random_bits(seed, c) >> 11) < dropout_threshold(p)
// (exact: random_bits >> 11 is an integer below 2^53 and uniform_at is it times 2^-53).
// ops::dropout, the attention kernels and their naive references all use this rule,
// so a mask can be recomputed anywhere (backward, another thread) from (seed, counter).
// The AVX2 path evaluates four 64-bit splitmix hashes per vector (64-bit products
// built from 32-bit ones); results are bitwise those of the scalar rule.
#pragma once
#include <cstdint>

namespace qkv::kernels {

// ceil(p * 2^53): elements whose 53 random bits are below it are dropped. p in [0, 1).
std::uint64_t dropout_threshold(double p);

// keep[i] = 1 if element c0 + i is kept, else 0; i < n.
void dropout_keep_mask(std::uint8_t* keep, std::uint64_t seed, std::uint64_t c0, std::int64_t n,
                       std::uint64_t threshold);

// mul[i] = keep ? keep_scale : 0 (keep_scale is usually 1 / (1 - p)); i < n.
void dropout_multipliers(float* mul, std::uint64_t seed, std::uint64_t c0, std::int64_t n, std::uint64_t threshold,
                         float keep_scale);

}  // namespace qkv::kernels
