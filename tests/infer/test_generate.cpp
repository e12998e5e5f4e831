// Generation loop and sampling: cache vs no cache, batched vs alone, stopping,
// seeds, the filters' distributions, and every bad input named before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/sampling.h"
#include "testing/guards.h"

namespace {

using namespace qkv::infer;
using qkv::Tensor;
using i64 = std::int64_t;

using qkv::testing::kPrompts;
using qkv::testing::tokens;

TEST(Generate, GreedySameTokensWithAndWithoutCache) {
  auto m = qkv::testing::tiny_gpt2(1);
  GenerationOptions o{.max_new_tokens = 20};
  const auto cached = tokens(generate(*m, kPrompts, o));
  o.use_cache = false;
  const auto recomputed = tokens(generate(*m, kPrompts, o));
  EXPECT_EQ(cached, recomputed);
  for (const auto& t : cached) EXPECT_EQ(t.size(), 20u);
}

TEST(Generate, BatchedPaddedEqualsEachPromptAlone) {
  qkv::testing::ThreadsGuard tg;
  auto m = qkv::testing::tiny_gpt2(2);
  for (int threads : {1, 2}) {
    qkv::set_num_threads(threads);
    for (double temperature : {0.0, 0.8}) {
      GenerationOptions o{.max_new_tokens = 16, .sampling = {.temperature = temperature, .top_k = 20, .seed = 7}};
      const auto batched = tokens(generate(*m, kPrompts, o));
      for (std::size_t b = 0; b < kPrompts.size(); ++b)
        EXPECT_EQ(batched[b], tokens(generate(*m, {kPrompts[b]}, o))[0])
            << "prompt " << b << ", temperature " << temperature << ", " << threads << " threads";
    }
  }
}

TEST(Generate, GreedyTokensAreTheFullForwardsArgmax) {
  auto m = qkv::testing::tiny_gpt2(3);
  const auto r = generate(*m, {{4, 5, 6}}, {.max_new_tokens = 8});
  std::vector<i64> seq = {4, 5, 6};
  for (i64 tok : r[0].new_ids) {
    const Tensor ids = Tensor::from_vector(seq, {1, static_cast<i64>(seq.size())});
    const std::vector<float> l = m->forward(ids).select(1, static_cast<i64>(seq.size()) - 1).select(0, 0).to_vector<float>();
    EXPECT_EQ(tok, std::max_element(l.begin(), l.end()) - l.begin());
    seq.push_back(tok);
  }
}

TEST(Generate, StopsAtEosAndAtTheCallback) {
  auto m = qkv::testing::tiny_gpt2(1);
  const auto free_run = generate(*m, {kPrompts[1]}, {.max_new_tokens = 10})[0].new_ids;
  GenerationOptions o{.max_new_tokens = 10, .eos_id = free_run[2]};
  const auto r = generate(*m, {kPrompts[1]}, o)[0];
  EXPECT_EQ(r.reason, StopReason::Eos);
  EXPECT_EQ(r.new_ids.back(), free_run[2]);
  EXPECT_LE(r.new_ids.size(), 3u);
  std::vector<std::pair<i64, i64>> seen;
  const auto s = generate(*m, kPrompts, {.max_new_tokens = 10}, [&](i64 seq, i64 tok) {
    seen.emplace_back(seq, tok);
    return !(seq == 2 && seen.size() > 5);
  });
  EXPECT_EQ(s[2].reason, StopReason::Callback);
  EXPECT_LT(s[2].new_ids.size(), 10u);
  EXPECT_EQ(s[0].new_ids.size(), 10u);
  EXPECT_EQ(s[0].reason, StopReason::Length);
  std::size_t total = 0;
  for (const auto& x : s) total += x.new_ids.size();
  EXPECT_EQ(seen.size(), total) << "one callback per token";
  EXPECT_STREQ(stop_reason_name(StopReason::Callback), "stop");
}

TEST(Generate, StopIdsEndASequenceLikeEos) {
  auto m = qkv::testing::tiny_gpt2(1);
  const auto free_run = generate(*m, {kPrompts[1]}, {.max_new_tokens = 10})[0].new_ids;
  // The first token of the free run that is not its first one: the run stops right after it.
  std::size_t k = 1;
  while (k < free_run.size() && free_run[k] == free_run[0]) ++k;
  ASSERT_LT(k, free_run.size());
  GenerationOptions o{.max_new_tokens = 10, .eos_id = 59, .stop_ids = {free_run[k]}};
  const auto r = generate(*m, {kPrompts[1]}, o)[0];
  EXPECT_EQ(r.reason, StopReason::Eos);
  EXPECT_EQ(r.new_ids.size(), k + 1);
  o.stop_ids = {61};
  EXPECT_THROW(generate(*m, {kPrompts[1]}, o), qkv::IndexError);
}

TEST(Generate, LogprobsAreTheLogSoftmaxOfTheLogits) {
  auto m = qkv::testing::tiny_gpt2(2);
  GenerationOptions o{.max_new_tokens = 4, .logprobs = 3};
  o.sampling = {.temperature = 0.9, .top_k = 5, .seed = 7};  // filters do not change the reported logprobs
  const auto r = generate(*m, {kPrompts[0]}, o)[0];
  ASSERT_EQ(r.logprobs.size(), r.new_ids.size());
  std::vector<i64> seq = kPrompts[0];
  for (std::size_t i = 0; i < r.new_ids.size(); ++i) {
    const Tensor ids = Tensor::from_vector(seq, {1, static_cast<i64>(seq.size())});
    const std::vector<float> l = m->forward(ids).select(1, static_cast<i64>(seq.size()) - 1).select(0, 0).to_vector<float>();
    double mx = *std::max_element(l.begin(), l.end()), sum = 0;
    for (float x : l) sum += std::exp(x - mx);
    auto lp = [&](i64 id) { return l[static_cast<std::size_t>(id)] - mx - std::log(sum); };
    const qkv::infer::TokenLogprob& t = r.logprobs[i];
    EXPECT_EQ(t.id, r.new_ids[i]);
    EXPECT_NEAR(t.logprob, lp(t.id), 1e-4);
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[0].first, std::max_element(l.begin(), l.end()) - l.begin());
    for (std::size_t k = 0; k < 3; ++k) EXPECT_NEAR(t.top[k].second, lp(t.top[k].first), 1e-4);
    EXPECT_GE(t.top[0].second, t.top[1].second);
    EXPECT_GE(t.top[1].second, t.top[2].second);
    seq.push_back(r.new_ids[i]);
  }
  o.logprobs = 21;
  EXPECT_THROW(generate(*m, {kPrompts[0]}, o), qkv::ValueError);
}

TEST(Generate, SameSeedSameTokensOtherSeedOtherTokens) {
  auto m = qkv::testing::tiny_gpt2(1);
  GenerationOptions o{.max_new_tokens = 24, .sampling = {.temperature = 1.5, .seed = 11}};
  const auto a = tokens(generate(*m, {kPrompts[0]}, o)), b = tokens(generate(*m, {kPrompts[0]}, o));
  EXPECT_EQ(a, b);
  o.sampling.seed = 12;
  EXPECT_NE(a, tokens(generate(*m, {kPrompts[0]}, o)));
  // top_k = 1 and a tiny top_p are greedy whatever the temperature.
  const auto greedy = tokens(generate(*m, {kPrompts[0]}, {.max_new_tokens = 24}));
  EXPECT_EQ(greedy, tokens(generate(*m, {kPrompts[0]}, {.max_new_tokens = 24, .sampling = {.temperature = 2, .top_k = 1}})));
  EXPECT_EQ(greedy, tokens(generate(*m, {kPrompts[0]}, {.max_new_tokens = 24, .sampling = {.temperature = 1, .top_p = 1e-6}})));
}

TEST(Sampling, FrequenciesFollowTheFilteredSoftmax) {
  const float logits[4] = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto freq = [&](SamplingOptions o) {
    Sampler s(o);
    std::vector<double> f(4, 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) f[static_cast<std::size_t>(s.next(logits, 4))] += 1.0 / n;
    return f;
  };
  auto near = [](const std::vector<double>& f, const std::vector<double>& p) {
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(f[i], p[i], 0.01) << "token " << i;
  };
  near(freq({.temperature = 1, .seed = 1}), {0.5, 0.3, 0.15, 0.05});
  near(freq({.temperature = 1, .top_k = 2, .seed = 2}), {0.625, 0.375, 0, 0});
  // top_p 0.75: 0.5 + 0.3 reaches it, so tokens 0 and 1 stay (transformers' rule).
  near(freq({.temperature = 1, .top_p = 0.75, .seed = 3}), {0.625, 0.375, 0, 0});
  near(freq({.temperature = 1, .top_p = 0.9, .seed = 4}), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
  // Temperature 2: p ~ sqrt(p).
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.15) + std::sqrt(0.05);
  near(freq({.temperature = 2, .seed = 5}), {std::sqrt(0.5) / z, std::sqrt(0.3) / z, std::sqrt(0.15) / z, std::sqrt(0.05) / z});
}

// min_p after temperature, top-k and top-p (transformers' MinPLogitsWarper): tokens less likely
// than min_p x the most likely are dropped, the rest renormalised.
TEST(Sampling, MinPDropsTokensBelowItsShareOfTheMostLikely) {
  const float logits[4] = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto freq = [&](SamplingOptions o) {
    Sampler s(o);
    std::vector<double> f(4, 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) f[static_cast<std::size_t>(s.next(logits, 4))] += 1.0 / n;
    return f;
  };
  auto near = [](const std::vector<double>& f, const std::vector<double>& p) {
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(f[i], p[i], 0.01) << "token " << i;
  };
  near(freq({.temperature = 1, .seed = 1, .min_p = 0.5}), {0.625, 0.375, 0, 0});  // floor 0.25
  near(freq({.temperature = 1, .seed = 2, .min_p = 0.2}), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});  // floor 0.1
  near(freq({.temperature = 1, .seed = 3, .min_p = 1.0}), {1, 0, 0, 0});
  // After top_p 0.9 (tokens 0-2 kept, renormalised): the ratio to the most likely is unchanged.
  near(freq({.temperature = 1, .top_p = 0.9, .seed = 4, .min_p = 0.5}), {0.625, 0.375, 0, 0});
  EXPECT_THROW(Sampler({.min_p = 1.5}), qkv::ValueError);
  EXPECT_THROW(Sampler({.min_p = -0.1}), qkv::ValueError);
}

// The penalties against their formulas, token by token: greedy choices on hand-made logits.
TEST(Sampling, PenaltiesAndBiasFollowTheirFormulas) {
  auto run = [](SamplingOptions o, const std::vector<float>& l, const std::vector<i64>& prompt, int n) {
    Sampler s(o);
    s.add_prompt(prompt.data(), static_cast<i64>(prompt.size()));
    std::vector<i64> out;
    for (int i = 0; i < n; ++i) out.push_back(s.next(l.data(), static_cast<i64>(l.size())));
    return out;
  };
  const std::vector<float> l = {2.0f, 1.9f, -1.0f, 0.0f};
  EXPECT_EQ(run({}, l, {}, 5), (std::vector<i64>{0, 0, 0, 0, 0}));
  // frequency 0.3: 0 -> 1.7 < 1.9 -> 1 -> (1.7, 1.6) -> 0 -> (1.4, 1.6) -> 1 -> (1.4, 1.3) -> 0.
  EXPECT_EQ(run({.frequency_penalty = 0.3}, l, {}, 5), (std::vector<i64>{0, 1, 0, 1, 0}));
  // presence 0.5: once generated, 0 and 1 stand at 1.5 and 1.4 for good.
  EXPECT_EQ(run({.presence_penalty = 0.5}, l, {}, 5), (std::vector<i64>{0, 1, 0, 0, 0}));
  // Negative penalties favour what was generated; the prompt does not count for them.
  EXPECT_EQ(run({.frequency_penalty = -1}, {1.9f, 2.0f}, {1, 1, 1}, 3), (std::vector<i64>{1, 1, 1}));
  // repeat_penalty 2 over the prompt and the generated tokens: a positive logit halves.
  const std::vector<float> r = {1.0f, 0.9f, -0.5f, -0.6f};
  EXPECT_EQ(run({.repeat_penalty = 2}, r, {0}, 2), (std::vector<i64>{1, 0}));  // (0.5, 0.9) then (0.5, 0.45)
  // repeat_last_n 1: only the newest token is penalised.
  EXPECT_EQ(run({.repeat_penalty = 2, .repeat_last_n = 1}, r, {0}, 3), (std::vector<i64>{1, 0, 1}));
  // repeat_last_n 0: off.
  EXPECT_EQ(run({.repeat_penalty = 2, .repeat_last_n = 0}, r, {0}, 2), (std::vector<i64>{0, 0}));
  // A negative logit doubles: with 0 and 1 banned by logit_bias, 2 (-1.0) loses to 3 (-0.6).
  const SamplingOptions ban{.logit_bias = {{0, -100.0}, {1, -100.0}}};
  EXPECT_EQ(run(ban, r, {}, 1), (std::vector<i64>{2}));
  SamplingOptions ban_rep = ban;
  ban_rep.repeat_penalty = 2;
  EXPECT_EQ(run(ban_rep, r, {2}, 1), (std::vector<i64>{3}));
  // A bias past the vocabulary is left for generate's check; a positive bias wins.
  EXPECT_EQ(run({.logit_bias = {{3, 5.0}}}, l, {}, 1), (std::vector<i64>{3}));
  // Sampling sees the adjusted logits: token 0 banned is never drawn.
  Sampler s({.temperature = 1, .seed = 9, .logit_bias = {{0, -100.0}}});
  for (int i = 0; i < 2000; ++i) EXPECT_NE(s.next(l.data(), 4), 0);
  // Bad values name the option.
  for (const SamplingOptions& bad : {SamplingOptions{.repeat_penalty = 0}, SamplingOptions{.repeat_last_n = -2},
                                     SamplingOptions{.frequency_penalty = 2.5}, SamplingOptions{.presence_penalty = -3},
                                     SamplingOptions{.logit_bias = {{-1, 1.0}}},
                                     SamplingOptions{.logit_bias = {{1, std::numeric_limits<double>::infinity()}}}})
    EXPECT_THROW(check_sampling(bad), qkv::ValueError);
}

// Through generate, on a model: each token is the argmax of the model's logits adjusted by the
// formulas (recomputed here from the whole sequence), cached or not.
TEST(Generate, PenaltiesAreAppliedToTheModelsLogitsCachedOrNot) {
  auto m = qkv::testing::tiny_gpt2(2);
  const i64 V = m->vocab_size();
  SamplingOptions so{.logit_bias = {{5, 0.5}, {7, -100.0}}, .repeat_penalty = 1.3, .repeat_last_n = 6,
                     .frequency_penalty = 0.4, .presence_penalty = 0.2};
  for (const bool cache : {true, false}) {
    GenerationOptions o{.max_new_tokens = 12, .sampling = so, .use_cache = cache};
    const auto r = generate(*m, {kPrompts[1]}, o)[0];
    std::vector<i64> seq = kPrompts[1];
    for (std::size_t i = 0; i < r.new_ids.size(); ++i) {
      const Tensor ids = Tensor::from_vector(seq, {1, static_cast<i64>(seq.size())});
      std::vector<float> l = m->forward(ids).select(1, static_cast<i64>(seq.size()) - 1).select(0, 0).to_vector<float>();
      for (const auto& [id, b] : so.logit_bias) l[static_cast<std::size_t>(id)] = static_cast<float>(l[static_cast<std::size_t>(id)] + b);
      std::vector<bool> recent(static_cast<std::size_t>(V), false);
      for (std::size_t k = seq.size() > 6 ? seq.size() - 6 : 0; k < seq.size(); ++k) recent[static_cast<std::size_t>(seq[k])] = true;
      for (i64 t = 0; t < V; ++t) {
        float& x = l[static_cast<std::size_t>(t)];
        if (recent[static_cast<std::size_t>(t)]) x = static_cast<float>(x > 0 ? x / 1.3 : x * 1.3);
        const auto c = std::count(r.new_ids.begin(), r.new_ids.begin() + static_cast<std::ptrdiff_t>(i), t);
        if (c > 0) x = static_cast<float>(x - static_cast<double>(c) * 0.4 - 0.2);
      }
      EXPECT_EQ(r.new_ids[i], argmax(l.data(), V)) << "token " << i << (cache ? " cached" : " recomputed");
      EXPECT_NE(r.new_ids[i], 7);
      seq.push_back(r.new_ids[i]);
    }
  }
  // A bias for a token past the vocabulary is refused.
  GenerationOptions bad{.max_new_tokens = 2, .sampling = {.logit_bias = {{V, 1.0}}}};
  EXPECT_THROW(generate(*m, {kPrompts[0]}, bad), qkv::IndexError);
}

TEST(Sampling, ArgmaxTakesTheFirstMaxAndSkipsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float a[5] = {1, 3, nan, 3, 2};
  EXPECT_EQ(argmax(a, 5), 1);
  const float b[3] = {nan, nan, -1};
  EXPECT_EQ(argmax(b, 3), 2);
  Sampler s({.temperature = 1, .seed = 0});
  const float c[3] = {nan, -std::numeric_limits<float>::infinity(), 0};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.next(c, 3), 2);
}

template <class E>
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Generate, BadInputsAreNamedBeforeAnyWork) {
  auto m = qkv::testing::tiny_gpt2(1);
  int calls = 0;
  auto gen = [&](std::vector<std::vector<i64>> p, GenerationOptions o) {
    return [&, p, o] { generate(*m, p, o, [&](i64, i64) { ++calls; return true; }); };
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error<qkv::IndexError>(gen({{1, 61}}, {}), "token id 61 at position 1, out of range [0, 61)");
  expect_error<qkv::IndexError>(gen({{1}, {-3}}, {}), "prompt 1 has token id -3");
  expect_error<qkv::ValueError>(gen({{}}, {}), "the prompt is empty");
  expect_error<qkv::ValueError>(gen({}, {}), "no prompts");
  expect_error<qkv::ValueError>(gen({std::vector<i64>(60, 1)}, {.max_new_tokens = 5}),
                                "60 tokens; with max_new_tokens 5 that is 65 positions, more than the model's 64");
  expect_error<qkv::ValueError>(gen({{1}}, {.max_new_tokens = 0}), "max_new_tokens must be >= 1");
  expect_error<qkv::ValueError>(gen({{1}}, {.sampling = {.temperature = -1}}), "temperature must be");
  expect_error<qkv::ValueError>(gen({{1}}, {.sampling = {.temperature = nan}}), "temperature must be");
  expect_error<qkv::ValueError>(gen({{1}}, {.sampling = {.top_k = -2}}), "top_k must be >= 0");
  expect_error<qkv::ValueError>(gen({{1}}, {.sampling = {.top_p = 0}}), "top_p must be in (0, 1]");
  expect_error<qkv::ValueError>(gen({{1}}, {.sampling = {.top_p = 1.5}}), "top_p must be in (0, 1]");
  expect_error<qkv::ValueError>(gen({{1}}, {.sampling = {.top_p = nan}}), "top_p must be in (0, 1]");
  expect_error<qkv::IndexError>(gen({{1}}, {.eos_id = 99}), "eos id 99 out of range");
  EXPECT_EQ(calls, 0);
}

}  // namespace
