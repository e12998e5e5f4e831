// A small random GPT-2 for the cache and generation tests, and a float64 twin.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/infer/generate.h"
#include "qkv/models/gpt2.h"

namespace qkv::testing {

inline models::GPT2Config tiny_gpt2_config() {
  models::GPT2Config c;
  c.vocab_size = 61;
  c.n_positions = 64;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.eos_token_id = 60;
  return c;
}

// Weights from qkv's default initialisers with a fixed seed, so two calls give the same model.
// The token embedding is scaled by 0.3 (logits of a few units, far from uniform and from ties).
inline std::shared_ptr<models::GPT2LMHeadModel> tiny_gpt2(std::uint64_t seed = 0,
                                                          const models::GPT2Config& c = tiny_gpt2_config()) {
  manual_seed(seed);
  auto m = std::make_shared<models::GPT2LMHeadModel>(c);
  {
    const Tensor w = m->wte->weight;
    std::vector<float> v = w.to_vector<float>();
    for (float& x : v) x *= 0.3f;  // N(0, 1) init -> N(0, 0.09): logits of a few units
    w.copy_(Tensor::from_vector(v, w.shape()));
  }
  m->eval();
  return m;
}

// Prompts of mixed lengths (1 to 7 tokens) for batched generation tests, and each result's new ids.
inline const std::vector<std::vector<std::int64_t>> kPrompts = {{1, 2, 3}, {9, 8, 7, 6, 5, 4, 3}, {11}, {20, 21, 22, 23, 24}};
inline std::vector<std::vector<std::int64_t>> tokens(const std::vector<infer::GenerationResult>& r) {
  std::vector<std::vector<std::int64_t>> out;
  for (const auto& x : r) out.push_back(x.new_ids);
  return out;
}

}  // namespace qkv::testing
