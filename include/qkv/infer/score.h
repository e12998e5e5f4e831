// Scoring a token sequence with a causal language model: each token's log-probability given the
// tokens before it (and, when asked, the most likely tokens at its position), the text's
// perplexity, and optionally each scored position's whole distribution saved to a file
// (infer/logprob_file.h) or compared with a reference's (infer/kl_divergence.h). What
// `qkv perplexity` and Python's LLM.score run on; the server scores an echoed prompt in its
// scheduler's prefill (SequenceRequest::prompt_logprobs), with the same numbers for a prompt that
// fits one window.
//
// The model sees at most `context` tokens at once, so a long text is run in windows, by the
// sliding-window rule of transformers' "Perplexity of fixed-length models": windows of N =
// context tokens start every S = stride tokens (0, S, 2S, ...), the last one ends at the text's
// end; each window scores only the tokens the previous one did not score, with the window's
// earlier tokens as their context. Token t is scored from the logits at position t - 1, so the
// text's first token is never scored, nor (when S = N, windows that do not overlap) the first
// token of any window. With S < N every token but the first is scored exactly once, with at least
// N - S tokens of context once past the first window; a smaller S gives more context and costs
// more passes. (transformers' documented loop multiplies each window's mean loss by its labels
// minus one, which undercounts every window after the first by a token; qkv averages exactly.
// llama-perplexity's default scores the second half of non-overlapping windows of N tokens, and
// its --ppl-stride S the last S tokens of full windows only: the same tokens as this rule scores
// after the first window, with the same context.)
//
// Log-probabilities are natural logs, computed in float64 from the model's float32 logits
// (log-softmax over the whole vocabulary; NaN logits count as -inf).
//
//   auto r = infer::score_tokens(*lm.model, lm.encode_prompt(text), {.context = 512, .stride = 256});
//   std::cout << r.perplexity() << " over " << r.count() << " tokens\n";
//
// Letters (docs/shapes.md): T tokens, N context, S stride, V vocabulary, M scored positions.
//
// Thread safety: one loaded model may serve score_tokens calls from several threads at once (each
// has its own KV cache), as generate() does.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/kl_divergence.h"

namespace qkv::infer {

class LogprobWriter;
class ReferenceLogprobs;

// The longest default context: score_tokens takes min(the model's positions, this) when none is
// given (a CPU's cost per window grows with its length; 2048 covers the usual evaluations).
inline constexpr std::int64_t kMaxDefaultScoreContext = 2048;

// One window: tokens [begin, end) are the model's input (a fresh cache), tokens [first, end) are
// scored (begin < first <= end).
struct ScoreWindow {
  std::int64_t begin = 0, end = 0, first = 0;
};

// The windows over T >= 2 tokens with context N >= 2 and stride 1 <= S <= N (ValueError
// otherwise): begin = 0, S, 2S, ...; end = min(begin + N, T); first = max(the previous end,
// begin + 1); the last ends at T.
std::vector<ScoreWindow> score_windows(std::int64_t T, std::int64_t context, std::int64_t stride);
// Every scored position of those windows, ascending.
std::vector<std::int64_t> scored_positions(const std::vector<ScoreWindow>& windows);

struct ScoreOptions {
  // N: the most tokens the model sees at once, in [2, model.max_positions()]; 0: min(the model's
  // positions, kMaxDefaultScoreContext).
  std::int64_t context = 0;
  // S in [1, N]; 0: N / 2.
  std::int64_t stride = 0;
  // >= 0: also record the `top` most likely tokens at each scored position (<= kMaxTopLogprobs);
  // -1: none.
  std::int64_t top = -1;
  // Positions run per forward pass whose logits are kept (each pass holds chunk x V float32 logits
  // and as many log-probabilities); 0: as many as fit in 64 MiB of them, 16 to 512.
  std::int64_t chunk = 0;
  // Every scored position's log-probabilities written there, in order (its plan must be these
  // tokens and positions; the caller commits it).
  LogprobWriter* save = nullptr;
  // KL-divergence statistics against this reference (made from the same tokens, vocabulary size
  // and windows: ReferenceLogprobs::check_matches).
  const ReferenceLogprobs* reference = nullptr;
};

// ScoreOptions with context and stride resolved for a model (0 -> the defaults above).
ScoreOptions resolve_score_options(const CausalLM& model, ScoreOptions o);

// Checks before any work (ValueError / IndexError naming the value): at least 2 tokens, ids in
// [0, V), context in [2, model.max_positions()], stride in [1, context], top in [-1, 20], chunk
// >= 0, the writer's plan and the reference matching these tokens and windows.
void check_score(const CausalLM& model, const std::vector<std::int64_t>& ids, const ScoreOptions& o);

// ValueError / IndexError naming `what` ("the prompt") when ids is empty or holds an id outside
// [0, model.vocab_size()).
void check_token_ids(const CausalLM& model, const std::vector<std::int64_t>& ids, const std::string& what);

struct ScoreResult {
  std::int64_t context = 0, stride = 0;  // as resolved
  std::int64_t windows = 0;
  std::vector<std::int64_t> positions;   // the scored positions, ascending
  std::vector<TokenLogprob> tokens;      // per scored position: ids[p], its log-probability, top
  double nll_sum = 0;                    // minus the sum of the log-probabilities
  double seconds = 0;
  std::optional<KLStats> kl;             // with ScoreOptions::reference

  std::int64_t count() const { return static_cast<std::int64_t>(positions.size()); }
  double mean_nll() const;               // nll_sum / count()
  double perplexity() const;             // exp(mean_nll())
};

// Called after each forward pass: scored positions done so far of `total`.
using ScoreProgress = std::function<void(std::int64_t done, std::int64_t total)>;

// Scores ids (check_score first; the memory of the cache and of a chunk of logits is checked
// before it is allocated). The log-softmax of the rows runs on qkv's threads; the results do not
// depend on their number beyond the model's own logits.
ScoreResult score_tokens(const CausalLM& model, const std::vector<std::int64_t>& ids, const ScoreOptions& o,
                         const ScoreProgress& progress = {});

// The natural log of the sum of exp(x[v]) over v < V, in float64 (NaN counts as -inf; -inf when
// every entry is).
double log_sum_exp(const float* x, std::int64_t V);

}  // namespace qkv::infer
