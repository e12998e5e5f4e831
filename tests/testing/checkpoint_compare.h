// Bitwise comparisons for the resume tests: two tensors, and everything a later training
// step depends on in two checkpoints (weights, optimiser state in order, extra tensors,
// RNG position). Metadata differs per model; the tests compare their own keys.
#pragma once
#include <gtest/gtest.h>

#include <cstring>

#include "qkv/io/checkpoint.h"
#include "qkv/qkv.h"

namespace qkv::testing {

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<std::size_t>(x.numel()) * dtype_size(x.dtype())) == 0;
}

inline void expect_same_checkpoint_tensors(const io::Checkpoint& x, const io::Checkpoint& y) {
  ASSERT_EQ(x.model.size(), y.model.size());
  for (const auto& [n, t] : x.model) EXPECT_TRUE(bitwise_equal(t, y.model.at(n))) << n;
  ASSERT_EQ(x.optimizer.size(), y.optimizer.size());
  for (std::size_t i = 0; i < x.optimizer.size(); ++i) {
    EXPECT_EQ(x.optimizer[i].first, y.optimizer[i].first);
    EXPECT_TRUE(bitwise_equal(x.optimizer[i].second, y.optimizer[i].second)) << x.optimizer[i].first;
  }
  ASSERT_EQ(x.extra.size(), y.extra.size());
  for (const auto& [n, t] : x.extra) EXPECT_TRUE(bitwise_equal(t, y.extra.at(n))) << "extra." << n;
  EXPECT_EQ(x.rng_seed, y.rng_seed);
  EXPECT_EQ(x.rng_offset, y.rng_offset);
}

}  // namespace qkv::testing
