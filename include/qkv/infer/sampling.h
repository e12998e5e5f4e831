// Choosing the next token from logits: greedy, or sampling with temperature,
// top-k, top-p (nucleus) and min-p filtering, in Hugging Face's order (temperature, then
// top-k, then top-p, then min-p, then a draw from the softmax of what is left). Before
// either, the logits may be adjusted: a bias per token (OpenAI's logit_bias), the repetition
// penalty over the sequence's last tokens (llama.cpp's repeat_penalty, transformers'
// repetition_penalty) and OpenAI's frequency and presence penalties over the generated tokens.
#pragma once
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qkv/core/rng.h"

namespace qkv::infer {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy (argmax, first index on ties); else > 0
  std::int64_t top_k = 0;    // 0: off; else keep the k most likely
  double top_p = 1.0;        // in (0, 1]; 1: off; else the smallest set whose probability reaches top_p
  std::uint64_t seed = 0;    // same seed, same draws
  // In [0, 1]; 0: off; else drop the tokens whose probability (after temperature, top-k and
  // top-p) is below min_p times the most likely one's (transformers' MinPLogitsWarper).
  double min_p = 0.0;
  // Penalties, applied to the logits before greedy or sampled choice, in this order:
  //  - logit_bias: (token, bias) pairs added to those tokens' logits (OpenAI: bias in [-100, 100]);
  //  - repeat_penalty > 0 (1: off): a token among the sequence's last repeat_last_n tokens (the
  //    prompt's included; -1: all of them) has its logit divided by it when positive, multiplied
  //    when negative (CTRL's penalty, as llama.cpp's repeat_penalty and transformers');
  //  - frequency_penalty and presence_penalty in [-2, 2] (0: off): a token generated c > 0 times
  //    so far loses c x frequency_penalty + presence_penalty from its logit (OpenAI's).
  std::vector<std::pair<std::int64_t, double>> logit_bias;
  double repeat_penalty = 1.0;
  std::int64_t repeat_last_n = 64;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;

  // True when some adjustment of the logits is on.
  bool adjusts_logits() const {
    return !logit_bias.empty() || repeat_penalty != 1.0 || frequency_penalty != 0.0 || presence_penalty != 0.0;
  }
};

// ValueError naming the option and its value: temperature < 0 or NaN, top_k < 0, top_p outside
// (0, 1] or NaN, min_p outside [0, 1], repeat_penalty <= 0 or not finite, repeat_last_n < -1,
// frequency / presence penalties outside [-2, 2], a bias that is not finite or a negative token.
void check_sampling(const SamplingOptions& o);

// One sequence's sampler: its own random stream (seeded with o.seed), so a prompt
// gets the same tokens alone or in a batch; and the sequence's tokens the penalties look at.
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& o);
  // The prompt's tokens (before the first next()), for repeat_penalty; a later call adds more
  // (a conversation's next turn).
  void add_prompt(const std::int64_t* ids, std::int64_t n);
  // logits [V] (float32) -> token id, which counts as generated from then on. NaN logits never
  // win; all -inf or NaN -> id 0.
  std::int64_t next(const float* logits, std::int64_t V);

  // Speculative decoding (infer/speculative.h) decides between next()'s distribution and a
  // drafter's, so it needs that distribution whole and the stream's draws one by one:
  //  - distribution: what next() would draw from for these logits, dense [V]: the adjusted,
  //    filtered softmax (0 for every token the filters drop), or, greedy, 1 at next()'s argmax.
  //    Counts nothing (the sequence's history is unchanged); valid until the next call.
  //  - take: counts `id` as generated, as next() counts the token it returns.
  //  - uniform: the stream's next draw in [0, 1) (next() takes one per sampled token).
  const std::vector<double>& distribution(const float* logits, std::int64_t V);
  void take(std::int64_t id) { remember(id, true); }
  double uniform() { return gen_.uniform(); }

 private:
  void remember(std::int64_t id, bool generated);
  std::int64_t choose(const float* logits, std::int64_t V);
  std::size_t keep(const float* logits, std::int64_t V);
  const float* adjusted(const float* logits, std::int64_t V);

  SamplingOptions opt_;
  Generator gen_;
  std::vector<std::pair<float, std::int64_t>> scratch_;  // candidates, reused every token
  std::vector<double> probs_;
  std::vector<double> dense_;                           // distribution()'s result
  std::vector<float> logits_;                           // the adjusted logits
  std::deque<std::int64_t> recent_;                     // the last repeat_last_n tokens
  std::unordered_map<std::int64_t, std::int64_t> recent_count_;  // token -> times in recent_
  std::unordered_map<std::int64_t, std::int64_t> generated_;  // token -> times generated
};

// Index of the largest logit (the first one on ties; NaN ignored).
std::int64_t argmax(const float* logits, std::int64_t V);

// The token a uniform draw u in [0, 1) picks from probabilities p [V] that need not sum to 1
// (they are normalised by their sum): the first i whose running sum exceeds u * sum, in index
// order; the last token with probability > 0 when rounding leaves u * sum unreached. -1 when
// nothing has a probability > 0.
std::int64_t sample_index(const std::vector<double>& p, double u);

// Natural-log softmax of logits [V] at token `id`, and the `top` most likely tokens with theirs,
// best first (ties: lower id first), computed in double from the float32 logits. NaN logits count
// as -inf.
double token_logprob(const float* logits, std::int64_t V, std::int64_t id,
                     std::vector<std::pair<std::int64_t, double>>* top = nullptr, std::int64_t n_top = 0);

}  // namespace qkv::infer
