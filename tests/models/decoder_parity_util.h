// What the decoder parity tests (test_llama_parity.cpp, test_arch_parity.cpp) share: a prompt's
// logits from one cached call, and greedy tokens compared with transformers' up to a near-tie.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/tensor.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/models/decoder.h"
#include "testing/fixture.h"

namespace qkv::testing {

// A divergence from transformers' greedy tokens is allowed only where its top-2 margin is below this.
constexpr double kNearTie = 1e-3;

// A JSON fixture (tests/fixtures/<name>), parsed.
inline nlohmann::json json_fixture(const std::string& name) {
  std::ifstream f(fixture_path(name));
  return nlohmann::json::parse(f);
}

// Logits of every prompt position, the prompt fed in one cached call: [T, V].
inline Tensor prompt_logits(const models::DecoderLM& m, const std::vector<std::int64_t>& ids) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  infer::KVCache cache(m.cache_options(1, n));
  return m.forward_cached(Tensor::from_vector(ids, {1, n}), {n}, cache, /*all_logits=*/true).select(0, 0);
}

// Generated tokens against transformers' until the first divergence, which must come at a
// near-tie of the reference (the rest depends on that tie and is not compared).
inline void expect_same_tokens(const std::vector<std::int64_t>& got, const nlohmann::json& want,
                               const nlohmann::json& margins, const std::string& what) {
  const auto w = want.get<std::vector<std::int64_t>>();
  const auto m = margins.get<std::vector<double>>();
  ASSERT_EQ(got.size(), w.size()) << what;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (got[i] == w[i]) continue;
    EXPECT_LT(m[i], kNearTie) << what << ": token " << i << " is " << got[i] << ", transformers gives " << w[i]
                              << " with a top-2 margin of " << m[i];
    return;
  }
}

}  // namespace qkv::testing
