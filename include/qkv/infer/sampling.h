// Choosing the next token from logits: greedy, or sampling with temperature,
// top-k and top-p (nucleus) filtering, in Hugging Face's order (temperature, then
// top-k, then top-p, then a draw from the softmax of what is left).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "qkv/core/rng.h"

namespace qkv::infer {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax, first index on ties); else > 0
  std::int64_t top_k = 0;    // 0: off; else keep the k most likely
  double top_p = 1.0;        // in (0, 1]; 1: off; else the smallest set whose probability reaches top_p
  std::uint64_t seed = 0;    // same seed, same draws
};

// ValueError naming the option and its value: temperature < 0 or NaN, top_k < 0,
// top_p outside (0, 1] or NaN.
void check_sampling(const SamplingOptions& o);

// One sequence's sampler: its own random stream (seeded with o.seed), so a prompt
// gets the same tokens alone or in a batch.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);
  // logits [V] (float32) -> token id. NaN logits never win; all -inf or NaN -> id 0.
  std::int64_t next(const float* logits, std::int64_t V);

 private:
  SamplingOptions opt_;
  Generator gen_;
  std::vector<std::pair<float, std::int64_t>> scratch_;  // candidates, reused every token
  std::vector<double> probs_;
};

// Index of the largest logit (the first one on ties; NaN ignored).
std::int64_t argmax(const float* logits, std::int64_t V);

// Natural-log softmax of logits [V] at token `id`, and the `top` most likely tokens with theirs,
// best first (ties: lower id first), computed in double from the float32 logits. NaN logits count
// as -inf.
double token_logprob(const float* logits, std::int64_t V, std::int64_t id,
                     std::vector<std::pair<std::int64_t, double>>* top = nullptr, std::int64_t n_top = 0);

}  // namespace qkv::infer
