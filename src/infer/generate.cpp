// The generation loop (see generate.h): prefill, then one token per step for
// every unfinished sequence; finished sequences stay in the batch with no new
// tokens (they cost a row of the batched products, nothing else). With a drafter
// (speculative.h) a step feeds each sequence's newest token and its draft, judges the
// drafted tokens row by row and rolls the cache back past the first rejected one.
#include "qkv/infer/generate.h"

#include <algorithm>
#include <chrono>
#include <string>

#include <fmt/format.h>

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

// A drafter's answer checked before the target computes it: at most k tokens, ids in [0, V), a
// distribution of V entries per token when it gives any.
void check_drafted(const Draft& d, i64 k, i64 V) {
  if (static_cast<i64>(d.ids.size()) > k)
    throw ValueError(fmt::format("generate: the drafter gave {} tokens, more than the {} asked", d.ids.size(), k));
  for (i64 id : d.ids)
    if (id < 0 || id >= V) throw IndexError(fmt::format("generate: the drafter gave token id {}, out of range [0, {})", id, V));
  if (!d.q.empty() && d.q.size() != d.ids.size())
    throw ValueError(fmt::format("generate: the drafter gave {} tokens and {} distributions", d.ids.size(), d.q.size()));
  for (const auto& q : d.q)
    if (static_cast<i64>(q.size()) != V)
      throw ValueError(fmt::format("generate: a drafter's distribution has {} entries for a vocabulary of {}", q.size(), V));
}

// The target's decision on drafted token i of `d` at its logits `row` [V] (speculative.h): the
// token emitted at that position, and in `agreed` whether it is the drafted one.
i64 judge(Sampler& s, const float* row, i64 V, const Draft& d, i64 i, bool greedy, std::vector<double>& residual,
          bool& agreed) {
  const i64 x = d.ids[static_cast<std::size_t>(i)];
  if (greedy) {
    const i64 tok = s.next(row, V);
    agreed = tok == x;
    return tok;
  }
  const std::vector<double>& p = s.distribution(row, V);
  const std::vector<double>* q = d.q.empty() ? nullptr : &d.q[static_cast<std::size_t>(i)];
  // Accept with probability min(1, p(x) / q(x)): u q(x) < p(x) for u uniform in [0, 1).
  const double qx = q ? (*q)[static_cast<std::size_t>(x)] : 1.0;
  if (s.uniform() * qx < p[static_cast<std::size_t>(x)]) {
    s.take(x);
    agreed = true;
    return x;
  }
  agreed = false;
  residual.assign(p.begin(), p.end());
  if (q)
    for (std::size_t v = 0; v < residual.size(); ++v) residual[v] = std::max(0.0, residual[v] - (*q)[v]);
  else
    residual[static_cast<std::size_t>(x)] = 0.0;
  // A rejection leaves mass in p - q (a rejection needs p(x) < q(x), so some other token has
  // p > q); only rounding in p and q could leave none, and then p itself is the answer.
  const double u = s.uniform();
  i64 tok = sample_index(residual, u);
  if (tok < 0) tok = sample_index(p, u);
  s.take(tok);
  return tok;
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
  if (o.draft.on()) {
    if (!o.use_cache)
      throw ValueError("generate: speculative decoding (a draft) verifies drafted tokens through the KV cache; it "
                       "cannot go with use_cache = false");
    i64 longest = 0;
    for (const auto& p : prompts) longest = std::max<i64>(longest, static_cast<i64>(p.size()));
    check_draft(model, o.draft, longest + o.max_new_tokens);
  }
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
  const i64 max_len = longest + o.max_new_tokens;
  KVCache cache(model.cache_options(B, max_len));
  std::vector<Sampler> samplers;
  for (i64 b = 0; b < B; ++b) {
    samplers.emplace_back(o.sampling);
    samplers.back().add_prompt(prompts[b].data(), static_cast<i64>(prompts[b].size()));
  }
  std::vector<GenerationResult> out(static_cast<std::size_t>(B));
  std::vector<bool> done(static_cast<std::size_t>(B), false);
  std::vector<std::vector<i64>> seq = prompts;  // prompt + generated so far
  GenerationStats st;

  // Records token `tok` of sequence b, chosen from the logits `row` [V]; marks the sequence done
  // and returns true when it ends there.
  auto emit = [&](i64 b, i64 tok, const float* row) {
    GenerationResult& r = out[b];
    r.new_ids.push_back(tok);
    if (o.logprobs >= 0) {
      TokenLogprob lp{.id = tok};
      lp.logprob = token_logprob(row, V, tok, &lp.top, o.logprobs);
      r.logprobs.push_back(std::move(lp));
    }
    seq[b].push_back(tok);
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
    return stop;
  };

  // Step 0 feeds the prompts; step s feeds each unfinished sequence's newest token (and, when
  // drafting, the drafted tokens after it).
  // A cache that keeps token ids belongs to a model that may run a sequence again from its first
  // token (LongRoPE's switch to its long factors when it passes the original context): rows
  // verified together across that switch would all take the long factors, which plain decoding
  // gives only to the tokens past it; such a model decodes without drafts (speculative.h).
  const bool drafting = o.draft.on() && !cache.options().keep_ids;
  std::unique_ptr<Drafter> drafter = drafting ? make_drafter(o.draft, B, max_len, o.sampling) : nullptr;
  std::vector<i64> draft_len(static_cast<std::size_t>(B), o.draft.max);
  std::vector<Draft> drafts(static_cast<std::size_t>(B));
  std::vector<double> residual;
  std::vector<std::vector<i64>> feed = prompts;
  // Tokens at the head of a sequence's feed computed again (already judged): a model with
  // recurrent layers (Qwen3.5) goes back to its checkpoint before a rejected draft and runs the
  // kept tokens again (its states cannot drop the rejected ones), in the rows before the newest.
  std::vector<i64> lead(static_cast<std::size_t>(B), 0);
  for (i64 step = 0;; ++step) {
    const auto t0 = Clock::now();  // a step's time includes its drafting
    std::vector<i64> n_new(static_cast<std::size_t>(B), 0);
    for (i64 b = 0; b < B; ++b) {
      if (done[b]) continue;
      Draft& d = drafts[b];
      d.ids.clear();
      d.q.clear();
      // A draft leaves room for the token the target adds after it.
      const i64 k = std::min(draft_len[b], o.max_new_tokens - static_cast<i64>(out[b].new_ids.size()) - 1);
      if (drafter && step > 0 && k > 0) {
        drafter->draft(b, seq[b], k, d);
        check_drafted(d, k, V);
        feed[b].insert(feed[b].end(), d.ids.begin(), d.ids.end());
      }
      n_new[b] = static_cast<i64>(feed[b].size());
    }
    Tensor logits;
    if (o.use_cache) {
      if (drafter && step > 0)
        for (i64 b = 0; b < B; ++b)
          if (n_new[b] > 1) cache.checkpoint(b);  // (a no-op without recurrent states)
      logits = model.forward_cached(pack(feed), n_new, cache, drafter && step > 0);
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
    if (step > 0 && drafter) ++st.speculative.target_passes;
    bool any = false;
    const float* L = logits.data<float>();
    // Rows per sequence in the logits: 1, or every fed token's when verifying drafts.
    const i64 Tn = logits.dim() == 3 ? logits.size(1) : 1;
    for (i64 b = 0; b < B; ++b) {
      if (done[b]) continue;
      const Draft& d = drafts[b];
      const i64 nd = static_cast<i64>(d.ids.size());
      // Row i judges drafted token i (i < nd); the row after the last kept one gives the target's
      // own token. The cache keeps the fed newest token and the kept drafts.
      i64 kept = 0, made = 0;
      for (i64 i = 0; i <= nd; ++i) {
        const float* row = L + (b * Tn + (Tn > 1 ? lead[b] + i : 0)) * V;
        bool agreed = false;
        const i64 tok = i < nd ? judge(samplers[b], row, V, d, i, o.sampling.temperature == 0.0, residual, agreed)
                               : samplers[b].next(row, V);
        ++made;
        const bool stop = emit(b, tok, row);
        if (agreed) ++kept;
        if (stop || !agreed) break;
      }
      if (drafter && step > 0) {
        SpeculativeStats& sp = st.speculative;
        sp.drafted += nd;
        sp.accepted += kept;
        ++sp.steps;
        sp.tokens += made;
        const i64 keep = cache.length(b) - n_new[b] + lead[b] + 1 + kept;
        const i64 back = cache.rewind_point(b, keep);
        cache.truncate(b, back);
        lead[b] = keep - back;  // the kept tokens the states lost, fed again before the newest
        // Hugging Face's heuristic schedule: longer after a draft kept whole, shorter after a rejection.
        if (o.draft.adaptive && nd > 0)
          draft_len[b] = kept == nd ? std::min(o.draft.max, draft_len[b] + 2) : std::max<i64>(1, draft_len[b] - 1);
      }
      feed[b].assign(seq[b].end() - lead[b] - 1, seq[b].end());
      any = any || !done[b];
    }
    (step == 0 ? st.prefill_seconds : st.decode_seconds) += since(t0);
    if (!any) break;
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace qkv::infer
