// Speculative decoding (Leviathan, Kalman and Matias 2023, "Fast Inference from Transformers via
// Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model Decoding with
// Speculative Sampling"): a drafter guesses the next k tokens of a sequence cheaply, the target
// model scores all of them in one forward pass through its KV cache (k + 1 new rows: its weights
// are read once for them all, so the pass costs about what one token's does), keeps the longest
// prefix it agrees with, adds one token of its own, and rolls its cache back past the first
// rejected position. Decoding one sequence is bound by the memory bandwidth that reads the
// weights; every accepted guess is a token that did not need its own pass.
//
//   GenerationOptions o{.max_new_tokens = 128, .draft = {.ngram = 3}};           // prompt lookup
//   GenerationOptions o{.max_new_tokens = 128, .draft = {.model = small.model}};  // a draft model
//   auto out = infer::generate(*lm.model, {ids}, o);                           // infer/generate.h
//
// The decision per drafted token x (at each row in order, stopping at the first rejection):
//  - greedy: x is kept while it is the target's own choice (the argmax of the adjusted logits,
//    what Sampler::next takes); the first other choice is the target's token there;
//  - sampled: x is kept with probability min(1, p(x) / q(x)), p the target's sampling distribution
//    (Sampler::distribution: temperature, filters and penalties applied) and q the drafter's;
//    otherwise a token is drawn from norm(max(0, p - q)). A drafter without a distribution
//    (prompt lookup) is a point mass q: x is kept with probability p(x), else one is drawn from p
//    without x. Then every emitted token has exactly the target's distribution given the ones
//    before (Leviathan et al., Theorem 1);
//  - the row after the last kept draft (all k kept: row k) gives the target's next token as
//    plain decoding does.
// Draws: the sequence's sampler (seeded with SamplingOptions::seed, as in plain generation) takes
// one uniform per drafted token it judges and one per token it draws (a rejection's replacement,
// the row after all drafts); a draft model draws its guesses from its own stream, seeded with
// seed + kDraftSeedOffset. The same seed, drafter and draft lengths give the same tokens; the
// sampled tokens are not those of plain generation with that seed (the streams are used
// differently), only their distribution is the same.
//
// Exactness of greedy output: it equals plain greedy decoding's token for token when the target
// computes each of the k + 1 rows with the bits a one-token decode step gives that position. The
// decoder family (models/decoder.h) does so for rows <= kernels::qgemm_decode_max_m() on its
// products and for new queries <= kDecodeKernelMaxQueries (infer/kv_cache.h) on attention (each
// new query attends alone, with its own key count, at any depth and with any window); with more
// rows (the prefill kernels) a logit may differ in its last bits, which changes a token only
// where two logits tie within that rounding. kExactDraftMax is the longest draft kept within
// these rules; longer drafts trade that guarantee for fewer passes.
//
// A model whose cache keeps token ids (KVCacheOptions::keep_ids: it may run a sequence again from
// its first token, as LongRoPE does when a sequence passes the original context) decodes without
// drafts: verifying rows on both sides of that switch would give the rows before it the long
// factors, which plain decoding does not. Its stats then count no drafted token.
//
// The draft length adapts per sequence (Hugging Face's "heuristic" schedule for assistant
// models): it grows by 2 after a step whose drafts were all kept and shrinks by 1 (not below 1)
// after one with a rejection, within [1, DraftOptions::max].
//
// Thread safety: a drafter is one generate() call's state (a draft model's caches): each call
// makes its own; the models may be shared.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/infer/sampling.h"

namespace qkv::tokenize {
class Tokenizer;
}

namespace qkv::infer {

// The most tokens a draft may hold (DraftOptions::max) and the longest n-gram prompt lookup
// matches (DraftOptions::ngram).
inline constexpr std::int64_t kMaxDraftTokens = 32;
inline constexpr std::int64_t kMaxDraftNgram = 16;
// The longest draft whose k + 1 verification rows stay on the decode kernels (see above).
inline constexpr std::int64_t kExactDraftMax = 3;
// A draft model's stream is seeded with SamplingOptions::seed + this (independent of the target's).
inline constexpr std::uint64_t kDraftSeedOffset = 0x9E3779B97F4A7C15ull;

// A drafter's guess for one sequence: ids[i] guessed at the i-th position after the sequence's
// last token; q empty (each guess certain: a point mass) or q[i] [V] the distribution ids[i] was
// drawn from (it sums to 1 and q[i][ids[i]] > 0).
struct Draft {
  std::vector<std::int64_t> ids;
  std::vector<std::vector<double>> q;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Guesses at most k >= 1 tokens to follow `tokens` (sequence `seq`'s prompt and every token
  // generated so far) into `out` (cleared first); fewer or none when it has no good guess.
  virtual void draft(std::int64_t seq, const std::vector<std::int64_t>& tokens, std::int64_t k, Draft& out) = 0;
};

// Prompt lookup (Saxena 2023; llama.cpp's lookup decoding, transformers' prompt_lookup_num_tokens):
// the sequence's last n tokens are searched for earlier in the sequence, for n = ngram down to 1;
// at the first n with a match, the most recent match wins and the tokens that followed it are the
// draft (as many as follow, at most k). Free: no model runs; strong where the output copies the
// input (rewriting, editing code, answering from a document).
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(std::int64_t ngram);  // ngram in [1, kMaxDraftNgram], ValueError otherwise
  void draft(std::int64_t seq, const std::vector<std::int64_t>& tokens, std::int64_t k, Draft& out) override;

 private:
  std::int64_t ngram_;
};

// A draft model: any causal LM of the target's vocabulary, one KV cache per sequence kept in step
// with the sequence (each draft() keeps the cached prefix the sequence still has, so a rejection
// rolls it back, and computes what is new). Greedy when `sampling` is (its argmax); else its
// guesses are drawn with sampling's temperature and filters (no penalties) from its own stream,
// and their distributions are the draft's q.
class ModelDrafter final : public Drafter {
 public:
  // batch sequences of at most max_len tokens each (max_len <= model->max_positions()).
  ModelDrafter(std::shared_ptr<const CausalLM> model, std::int64_t batch, std::int64_t max_len,
               const SamplingOptions& sampling);
  ~ModelDrafter() override;
  void draft(std::int64_t seq, const std::vector<std::int64_t>& tokens, std::int64_t k, Draft& out) override;

 private:
  struct Slot;
  std::shared_ptr<const CausalLM> model_;
  std::int64_t max_len_;
  SamplingOptions sampling_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

// How generate() drafts (GenerationOptions::draft): at most one of model, ngram and custom.
struct DraftOptions {
  std::shared_ptr<const CausalLM> model;  // a draft model (ModelDrafter) of the target's vocabulary
  std::int64_t ngram = 0;                 // >= 1: prompt lookup over n-grams of up to this many tokens
  // Any drafter, made once per generate() call for `batch` sequences (tests, experiments).
  std::function<std::unique_ptr<Drafter>(std::int64_t batch)> custom;
  std::int64_t max = kExactDraftMax;  // the most tokens per draft, in [1, kMaxDraftTokens]
  bool adaptive = true;              // the draft length follows the acceptance (see above); false: always max

  bool on() const { return model != nullptr || ngram != 0 || static_cast<bool>(custom); }
};

// Speculation's counts over a generate() call (GenerationStats::speculative).
struct SpeculativeStats {
  std::int64_t drafted = 0;        // tokens the drafter guessed
  std::int64_t accepted = 0;       // of those, kept by the target
  std::int64_t target_passes = 0;  // forward passes of the target after the prefill
  std::int64_t steps = 0;          // sequence-steps: a sequence's rows in one pass (its tokens come from them)
  std::int64_t tokens = 0;         // tokens those steps produced
  double acceptance() const { return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0; }
  // Tokens a sequence gets per target pass (1 without speculation).
  double tokens_per_pass() const { return steps ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0; }
};

// Checks a draft configuration against the target before any work (ValueError naming the
// value): one drafter at most, max in [1, kMaxDraftTokens], ngram in [0, kMaxDraftNgram], a
// draft model of the target's vocabulary size whose context holds `positions` (the longest
// prompt plus max_new_tokens).
void check_draft(const CausalLM& target, const DraftOptions& d, std::int64_t positions);

// The drafter DraftOptions describes for one generate() call over `batch` sequences of at most
// max_len tokens sampled with `sampling`.
std::unique_ptr<Drafter> make_drafter(const DraftOptions& d, std::int64_t batch, std::int64_t max_len,
                                      const SamplingOptions& sampling);

// FormatError naming both models and the first token id whose text differs (or the sizes) unless
// the draft's tokenizer has the target's vocabulary: the same size and the same token at every id.
void check_same_vocabulary(const tokenize::Tokenizer& target, const std::string& target_name,
                           const tokenize::Tokenizer& draft, const std::string& draft_name);

}  // namespace qkv::infer
