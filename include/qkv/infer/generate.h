// Autoregressive generation through a KV cache: the prompts are prefilled in one
// forward pass, then every step feeds each unfinished sequence's last token. A
// batch of prompts of different lengths shares one cache (each sequence in its own
// slot, at its own positions), so each prompt's tokens are those it gets alone.
//
//   auto results = infer::generate(model, {{464, 3290}, {40}}, {.max_new_tokens = 32, .eos_id = 50256});
//
// Thread safety: one loaded model (in eval mode) may serve generate() calls from several
// threads at once; each call makes its own KV cache and samplers (seeded by the options), so a
// request's tokens are the same as when it runs alone.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/infer/sampling.h"
#include "qkv/infer/speculative.h"

namespace qkv::infer {

// Called once per new token (in generation order) with the sequence index and the
// token; return false to stop that sequence after this token (a stop string, say).
using TokenCallback = std::function<bool(std::int64_t seq, std::int64_t token)>;

// The most alternatives GenerationOptions::logprobs may ask for (OpenAI's top_logprobs bound).
inline constexpr std::int64_t kMaxTopLogprobs = 20;

struct GenerationOptions {
  std::int64_t max_new_tokens = 32;   // >= 1
  SamplingOptions sampling;           // greedy by default
  std::optional<std::int64_t> eos_id; // stop after generating it (it is kept in the output)
  std::vector<std::int64_t> stop_ids; // more tokens that end a sequence as eos_id does (Llama 3's <|eot_id|>)
  bool use_cache = true;              // false: recompute the whole sequence every step (same tokens)
  // >= 0: record, for every generated token, its log-probability and the `logprobs` most likely
  // tokens' (natural log of the softmax of the float32 logits, before any sampling filter);
  // -1: none. At most 20 alternatives.
  std::int64_t logprobs = -1;
  // Speculative decoding (infer/speculative.h): a drafter guesses tokens that the model checks
  // several at a time; greedy tokens are plain decoding's, sampled ones keep its distribution.
  // Needs use_cache.
  DraftOptions draft;
};

struct TokenLogprob {
  std::int64_t id = 0;
  double logprob = 0;
  std::vector<std::pair<std::int64_t, double>> top;  // the most likely tokens, best first
};

enum class StopReason { Length, Eos, Callback };
const char* stop_reason_name(StopReason r);  // "length" | "eos" | "stop"

struct GenerationResult {
  std::vector<std::int64_t> new_ids;  // generated tokens only
  StopReason reason = StopReason::Length;
  std::vector<TokenLogprob> logprobs;  // one per new token when GenerationOptions::logprobs >= 0
};

struct GenerationStats {
  double prefill_seconds = 0;  // the prompts' forward pass (first token's logits)
  double decode_seconds = 0;   // every later step (with a drafter, its drafting included)
  std::int64_t new_tokens = 0; // over all sequences
  SpeculativeStats speculative; // with GenerationOptions::draft: drafted, accepted, passes
};

// Checks everything before any forward pass (ValueError / IndexError naming the prompt and
// value): at least one prompt, each non-empty, ids in [0, vocab), max_new_tokens >= 1,
// prompt length + max_new_tokens <= model.max_positions(), the sampling options, the draft
// options (check_draft; a draft needs the cache).
void check_generation(const CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts,
                      const GenerationOptions& o);

std::vector<GenerationResult> generate(const CausalLM& model, const std::vector<std::vector<std::int64_t>>& prompts,
                                       const GenerationOptions& o, const TokenCallback& on_token = {},
                                       GenerationStats* stats = nullptr);

}  // namespace qkv::infer
