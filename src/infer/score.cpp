// Scoring tokens in sliding windows (see score.h): per window a fresh KV cache, its context
// positions fed in one pass without keeping their logits, then the positions whose logits score
// a token fed in chunks with every row's logits, turned into log-probabilities on qkv's threads.
#include "qkv/infer/score.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "qkv/core/error.h"
#include "qkv/core/memory.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/infer/logprob_file.h"
#include "qkv/infer/sampling.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

constexpr i64 kChunkBytes = i64{64} << 20;  // the default chunk's logits

// ids[begin, begin + n) as I64 [1, n].
Tensor slice_ids(const std::vector<i64>& ids, i64 begin, i64 n) {
  Tensor t = Tensor::zeros({1, n}, DType::I64);
  std::copy(ids.begin() + begin, ids.begin() + begin + n, t.data<i64>());
  return t;
}

}  // namespace

double log_sum_exp(const float* x, i64 V) {
  double mx = -std::numeric_limits<double>::infinity();
  for (i64 i = 0; i < V; ++i)
    if (!std::isnan(x[i])) mx = std::max(mx, static_cast<double>(x[i]));
  if (!std::isfinite(mx)) return mx;
  double sum = 0;
  for (i64 i = 0; i < V; ++i)
    if (!std::isnan(x[i])) sum += std::exp(static_cast<double>(x[i]) - mx);
  return mx + std::log(sum);
}

std::vector<ScoreWindow> score_windows(i64 T, i64 context, i64 stride) {
  if (T < 2) throw ValueError(fmt::format("score: {} token(s); scoring needs at least 2 (the first is never scored)", T));
  if (context < 2) throw ValueError(fmt::format("score: context must be >= 2, got {}", context));
  if (stride < 1 || stride > context)
    throw ValueError(fmt::format("score: stride must be in [1, context = {}], got {}", context, stride));
  std::vector<ScoreWindow> w;
  i64 prev_end = 0;
  for (i64 begin = 0; begin < T; begin += stride) {
    const i64 end = std::min(begin + context, T);
    const i64 first = std::max(prev_end, begin + 1);
    if (first < end) w.push_back({.begin = begin, .end = end, .first = first});
    prev_end = end;
    if (end == T) break;
  }
  return w;
}

std::vector<i64> scored_positions(const std::vector<ScoreWindow>& windows) {
  std::vector<i64> p;
  for (const ScoreWindow& w : windows)
    for (i64 t = w.first; t < w.end; ++t) p.push_back(t);
  return p;
}

ScoreOptions resolve_score_options(const CausalLM& model, ScoreOptions o) {
  if (o.context == 0) o.context = std::min(model.max_positions(), kMaxDefaultScoreContext);
  if (o.stride == 0) o.stride = std::max<i64>(1, o.context / 2);
  if (o.chunk == 0) o.chunk = std::clamp<i64>(kChunkBytes / (4 * std::max<i64>(1, model.vocab_size())), 16, 512);
  return o;
}

void check_token_ids(const CausalLM& model, const std::vector<i64>& ids, const std::string& what) {
  if (ids.empty()) throw ValueError("score: " + what + " is empty (give at least one token)");
  const i64 V = model.vocab_size();
  for (std::size_t t = 0; t < ids.size(); ++t)
    if (ids[t] < 0 || ids[t] >= V)
      throw IndexError(fmt::format("score: {} has token id {} at position {}, out of range [0, {})", what, ids[t], t, V));
}

void check_score(const CausalLM& model, const std::vector<i64>& ids, const ScoreOptions& given) {
  const ScoreOptions o = resolve_score_options(model, given);
  const i64 T = static_cast<i64>(ids.size()), P = model.max_positions(), V = model.vocab_size();
  if (T < 2)
    throw ValueError(fmt::format("score: the text gives {} token(s); scoring needs at least 2 (the first token is "
                                 "never scored)", T));
  check_token_ids(model, ids, "the text");
  if (o.context < 2 || o.context > P)
    throw ValueError(fmt::format("score: context must be in [2, {}] (the model's positions), got {}", P, o.context));
  if (o.stride < 1 || o.stride > o.context)
    throw ValueError(fmt::format("score: stride must be in [1, {}] (at most the context), got {}", o.context, o.stride));
  if (o.top < -1 || o.top > kMaxTopLogprobs)
    throw ValueError(fmt::format("score: top must be in [0, {}] (or -1 for none), got {}", kMaxTopLogprobs, o.top));
  if (o.chunk < 1) throw ValueError(fmt::format("score: chunk must be >= 1 (or 0 for the default), got {}", o.chunk));
  if (o.reference) o.reference->check_matches(ids, V, o.context, o.stride, "the reference");
  if (o.save) {
    const LogprobPlan& plan = o.save->plan();
    if (plan.tokens != ids || plan.vocab != V ||
        plan.positions != scored_positions(score_windows(T, o.context, o.stride)))
      throw ValueError("score: the log-probabilities file's plan (tokens, vocabulary, positions) is not this run's");
  }
}

double ScoreResult::mean_nll() const {
  return positions.empty() ? std::numeric_limits<double>::quiet_NaN() : nll_sum / static_cast<double>(count());
}

double ScoreResult::perplexity() const { return std::exp(mean_nll()); }

ScoreResult score_tokens(const CausalLM& model, const std::vector<i64>& ids, const ScoreOptions& given,
                         const ScoreProgress& progress) {
  const auto t0 = Clock::now();
  check_score(model, ids, given);
  const ScoreOptions o = resolve_score_options(model, given);
  const i64 T = static_cast<i64>(ids.size()), V = model.vocab_size(), N = o.context;
  ScoreResult res;
  res.context = o.context;
  res.stride = o.stride;
  const std::vector<ScoreWindow> windows = score_windows(T, o.context, o.stride);
  res.windows = static_cast<i64>(windows.size());
  res.positions = scored_positions(windows);
  const i64 M = res.count();
  // Per chunk: the model's logits (its output and its own buffer) and, when saving, their
  // log-probabilities.
  const i64 chunk = std::min(o.chunk, N);
  MemoryEstimate().add({chunk, V}, o.save ? 3 : 2).check(fmt::format("score: the logits of {} positions", chunk));
  KVCache cache(model.cache_options(1, N));
  res.tokens.reserve(static_cast<std::size_t>(M));
  std::vector<TokenLogprob> rows(static_cast<std::size_t>(chunk));
  std::vector<KLPosition> kl_rows(o.reference ? static_cast<std::size_t>(chunk) : 0);
  std::vector<float> lp_rows(o.save ? static_cast<std::size_t>(chunk * V) : 0);
  KLAccumulator kl;
  i64 m = 0;  // the index of the next scored position
  for (const ScoreWindow& w : windows) {
    cache.reset();
    i64 p = w.begin;
    // The context: positions before the one that predicts the window's first scored token.
    if (w.first - 1 > p) {
      const i64 n = w.first - 1 - p;
      model.forward_cached(slice_ids(ids, p, n), {n}, cache);
      p += n;
    }
    // Position q's logits score token q + 1: positions [first - 1, end - 1).
    while (p < w.end - 1) {
      const i64 n = std::min(w.end - 1 - p, chunk);
      const Tensor logits = model.forward_cached(slice_ids(ids, p, n), {n}, cache, true).contiguous();
      const float* L = logits.data<float>();
      parallel_for(0, n, 1, [&](i64 r0, i64 r1) {
        for (i64 r = r0; r < r1; ++r) {
          const float* row = L + r * V;
          const i64 tok = ids[static_cast<std::size_t>(p + r + 1)];
          TokenLogprob& t = rows[static_cast<std::size_t>(r)];
          t.id = tok;
          t.top.clear();
          t.logprob = token_logprob(row, V, tok, o.top >= 0 ? &t.top : nullptr, std::max<i64>(o.top, 0));
          if (o.save) {
            const double lse = log_sum_exp(row, V);
            float* out = lp_rows.data() + r * V;
            for (i64 v = 0; v < V; ++v)
              out[v] = std::isnan(row[v]) ? -std::numeric_limits<float>::infinity()
                                          : static_cast<float>(static_cast<double>(row[v]) - lse);
          }
          if (o.reference) kl_rows[static_cast<std::size_t>(r)] = kl_position(row, o.reference->row(m + r), V, tok);
        }
      });
      for (i64 r = 0; r < n; ++r) {
        res.nll_sum -= rows[static_cast<std::size_t>(r)].logprob;
        res.tokens.push_back(rows[static_cast<std::size_t>(r)]);
        if (o.save) o.save->add_logprobs(lp_rows.data() + r * V);
        if (o.reference) kl.add(kl_rows[static_cast<std::size_t>(r)]);
      }
      m += n;
      p += n;
      if (progress) progress(m, M);
    }
  }
  if (o.reference) res.kl = kl.stats();
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return res;
}

}  // namespace qkv::infer
