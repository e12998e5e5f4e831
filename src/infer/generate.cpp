// The generation loop (see generate.h): prefill, then one token per step for
// every unfinished sequence; finished sequences stay in the batch with no new
// tokens (they cost a row of the batched products, nothing else).
#include "qkv/infer/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "qkv/core/error.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ids [B, Tn] from per-sequence token lists (right-padded with 0).
Tensor pack(const std::vector<std::vector<i64>>& rows) {
  std::size_t width = 1;
  for (const auto& r : rows) width = std::max(width, r.size());
  Tensor ids = Tensor::zeros({static_cast<i64>(rows.size()), static_cast<i64>(width)}, DType::I64);
  i64* d = ids.data<i64>();
  for (std::size_t b = 0; b < rows.size(); ++b) std::copy(rows[b].begin(), rows[b].end(), d + b * width);
  return ids;
}

}  // namespace

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Length: return "length";
    case StopReason::Eos: return "eos";
    case StopReason::Callback: return "stop";
  }
  return "?";
}

void check_generation(const CausalLM& model, const std::vector<std::vector<i64>>& prompts, const GenerationOptions& o) {
  if (prompts.empty()) throw ValueError("generate: no prompts");
  if (o.max_new_tokens < 1)
    throw ValueError("generate: max_new_tokens must be >= 1, got " + std::to_string(o.max_new_tokens));
  check_sampling(o.sampling);
  const i64 V = model.vocab_size(), P = model.max_positions();
  for (const auto& [id, bias] : o.sampling.logit_bias)
    if (id >= V)
      throw IndexError("generate: logit_bias names token " + std::to_string(id) + ", out of range [0, " + std::to_string(V) + ")");
  if (o.eos_id && (*o.eos_id < 0 || *o.eos_id >= V))
    throw IndexError("generate: eos id " + std::to_string(*o.eos_id) + " out of range [0, " + std::to_string(V) + ")");
  for (i64 s : o.stop_ids)
    if (s < 0 || s >= V)
      throw IndexError("generate: stop token id " + std::to_string(s) + " out of range [0, " + std::to_string(V) + ")");
  if (o.logprobs < -1 || o.logprobs > kMaxTopLogprobs)
    throw ValueError("generate: logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) + "] (or -1 for none), got " +
                     std::to_string(o.logprobs));
  for (std::size_t b = 0; b < prompts.size(); ++b) {
    const auto& p = prompts[b];
    const std::string which = prompts.size() > 1 ? "prompt " + std::to_string(b) : std::string("the prompt");
    if (p.empty()) throw ValueError("generate: " + which + " is empty (give at least one token)");
    for (std::size_t t = 0; t < p.size(); ++t)
      if (p[t] < 0 || p[t] >= V)
        throw IndexError("generate: " + which + " has token id " + std::to_string(p[t]) + " at position " +
                         std::to_string(t) + ", out of range [0, " + std::to_string(V) + ")");
    if (static_cast<i64>(p.size()) + o.max_new_tokens > P)
      throw ValueError("generate: " + which + " has " + std::to_string(p.size()) + " tokens; with max_new_tokens " +
                       std::to_string(o.max_new_tokens) + " that is " +
                       std::to_string(static_cast<i64>(p.size()) + o.max_new_tokens) +
                       " positions, more than the model's " + std::to_string(P));
  }
}

std::vector<GenerationResult> generate(const CausalLM& model, const std::vector<std::vector<i64>>& prompts,
                                       const GenerationOptions& o, const TokenCallback& on_token,
                                       GenerationStats* stats) {
  check_generation(model, prompts, o);
  const i64 B = static_cast<i64>(prompts.size()), V = model.vocab_size();
  i64 longest = 0;
  for (const auto& p : prompts) longest = std::max<i64>(longest, static_cast<i64>(p.size()));
  KVCache cache(model.cache_options(B, longest + o.max_new_tokens));
  std::vector<Sampler> samplers;
  for (i64 b = 0; b < B; ++b) {
    samplers.emplace_back(o.sampling);
    samplers.back().add_prompt(prompts[b].data(), static_cast<i64>(prompts[b].size()));
  }
  std::vector<GenerationResult> out(static_cast<std::size_t>(B));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  std::vector<std::vector<i64>> seq = prompts;  // prompt + generated so far (for use_cache = false)
  GenerationStats st;

  // Step 0 feeds the prompts; step s feeds each unfinished sequence's newest token.
  std::vector<std::vector<i64>> feed = prompts;
  for (i64 step = 0;; ++step) {
    std::vector<i64> n_new(static_cast<std::size_t>(B), 0);
    for (i64 b = 0; b < B; ++b) n_new[b] = done[b] ? 0 : static_cast<i64>(feed[b].size());
    const auto t0 = Clock::now();
    Tensor logits;
    if (o.use_cache) {
      logits = model.forward_cached(pack(feed), n_new, cache);
    } else {
      // Recompute: a fresh cache every step, each unfinished sequence fed whole.
      cache.reset();
      std::vector<std::vector<i64>> whole(static_cast<std::size_t>(B));
      for (i64 b = 0; b < B; ++b) {
        if (!done[b]) whole[b] = seq[b];
        n_new[b] = static_cast<i64>(whole[b].size());
      }
      logits = model.forward_cached(pack(whole), n_new, cache);
    }
    bool any = false;
    const float* L = logits.data<float>();
    for (i64 b = 0; b < B; ++b) {
      if (done[b]) continue;
      const i64 tok = samplers[b].next(L + b * V, V);
      GenerationResult& r = out[b];
      r.new_ids.push_back(tok);
      if (o.logprobs >= 0) {
        TokenLogprob lp{.id = tok};
        lp.logprob = token_logprob(L + b * V, V, tok, &lp.top, o.logprobs);
        r.logprobs.push_back(std::move(lp));
      }
      seq[b].push_back(tok);
      feed[b] = {tok};
      ++st.new_tokens;
      bool stop = false;
      if (on_token && !on_token(b, tok)) {
        r.reason = StopReason::Callback;
        stop = true;
      } else if ((o.eos_id && tok == *o.eos_id) || std::find(o.stop_ids.begin(), o.stop_ids.end(), tok) != o.stop_ids.end()) {
        r.reason = StopReason::Eos;
        stop = true;
      } else if (static_cast<i64>(r.new_ids.size()) >= o.max_new_tokens) {
        r.reason = StopReason::Length;
        stop = true;
      }
      done[b] = stop;
      any = any || !stop;
    }
    (step == 0 ? st.prefill_seconds : st.decode_seconds) += since(t0);
    if (!any) break;
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace qkv::infer
