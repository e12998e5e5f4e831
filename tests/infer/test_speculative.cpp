// Speculative decoding (infer/speculative.h): greedy output with any drafter is plain greedy
// output token for token (drafts that always agree, never agree, agree at random; prompt lookup;
// draft models; batched sequences with different acceptance; sliding windows crossing the
// rollback point; every tiny architecture of tests/fixtures and the real SmolLM2 when present);
// sampled output keeps the target's distribution (chi-square); bad drafts are refused first.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/speculative.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/models/registry.h"

namespace {

using namespace qkv::infer;
using i64 = std::int64_t;

using qkv::testing::kPrompts;
using qkv::testing::tokens;

// A drafter that knows each sequence's plain greedy continuation (prompt + `truth`) and guesses
// its next tokens right with probability `agree` each (a wrong guess is the right token + 1).
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(std::vector<std::vector<i64>> full, double agree, i64 V, std::uint64_t seed)
      : full_(std::move(full)), agree_(agree), V_(V), gen_(seed) {}
  void draft(i64 seq, const std::vector<i64>& tokens, i64 k, Draft& out) override {
    out.ids.clear();
    out.q.clear();
    const auto& f = full_[static_cast<std::size_t>(seq)];
    for (i64 i = 0; i < k; ++i) {
      const std::size_t at = tokens.size() + static_cast<std::size_t>(i);
      const i64 right = at < f.size() ? f[at] : 0;
      out.ids.push_back(gen_.uniform() < agree_ ? right : (right + 1) % V_);
    }
  }

 private:
  std::vector<std::vector<i64>> full_;
  double agree_;
  i64 V_;
  qkv::Generator gen_;
};

// Greedy generation of `prompts` with every drafter kind equals plain greedy generation.
void expect_greedy_unchanged(const std::shared_ptr<const CausalLM>& m, const std::vector<std::vector<i64>>& prompts,
                             i64 max_new, const std::string& what) {
  GenerationOptions plain{.max_new_tokens = max_new};
  const auto want = tokens(generate(*m, prompts, plain));
  std::vector<std::vector<i64>> full = prompts;
  for (std::size_t b = 0; b < prompts.size(); ++b) full[b].insert(full[b].end(), want[b].begin(), want[b].end());
  for (i64 max : {1, 3, 8}) {
    for (double agree : {1.0, 0.0, 0.6}) {
      GenerationOptions o = plain;
      o.draft = {.custom = [&](i64) { return std::make_unique<OracleDrafter>(full, agree, m->vocab_size(), 17); },
                 .max = max};
      GenerationStats st;
      EXPECT_EQ(tokens(generate(*m, prompts, o, {}, &st)), want) << what << ", draft max " << max << ", agree " << agree;
      if (agree == 1.0) {
        EXPECT_EQ(st.speculative.accepted, st.speculative.drafted) << what;
        // Drafts unless the model may run a sequence again from its start (LongRoPE: Phi-3).
        EXPECT_EQ(st.speculative.drafted > 0, !m->cache_options(1, 1).keep_ids) << what;
      }
      if (agree == 0.0) {
        EXPECT_EQ(st.speculative.accepted, 0) << what;
      }
    }
    GenerationOptions o = plain;
    o.draft = {.ngram = 2, .max = max};
    EXPECT_EQ(tokens(generate(*m, prompts, o)), want) << what << ", prompt lookup, draft max " << max;
    o.draft = {.model = m, .max = max};
    GenerationStats st;
    EXPECT_EQ(tokens(generate(*m, prompts, o, {}, &st)), want) << what << ", itself as its draft, draft max " << max;
  }
}

TEST(Speculative, GreedyUnchangedOnGpt2WithEveryDrafter) {
  expect_greedy_unchanged(qkv::testing::tiny_gpt2(1), kPrompts, 24, "tiny GPT-2");
}

TEST(Speculative, AlwaysAgreeingDraftsMakeSeveralTokensPerPass) {
  auto m = qkv::testing::tiny_gpt2(1);
  const auto want = tokens(generate(*m, kPrompts, {.max_new_tokens = 24}));
  std::vector<std::vector<i64>> full = kPrompts;
  for (std::size_t b = 0; b < kPrompts.size(); ++b) full[b].insert(full[b].end(), want[b].begin(), want[b].end());
  GenerationOptions o{.max_new_tokens = 24};
  o.draft = {.custom = [&](i64) { return std::make_unique<OracleDrafter>(full, 1.0, 61, 1); }, .max = 4, .adaptive = false};
  GenerationStats st;
  EXPECT_EQ(tokens(generate(*m, kPrompts, o, {}, &st)), want);
  // 23 tokens after the prefill's first, 5 per pass: 5 passes per sequence.
  EXPECT_EQ(st.speculative.target_passes, 5);
  EXPECT_DOUBLE_EQ(st.speculative.acceptance(), 1.0);
  EXPECT_GT(st.speculative.tokens_per_pass(), 4.5);
  EXPECT_EQ(st.new_tokens, 4 * 24);
}

TEST(Speculative, DraftModelOfAnotherGpt2KeepsGreedyTokens) {
  auto m = qkv::testing::tiny_gpt2(1);
  const auto want = tokens(generate(*m, kPrompts, {.max_new_tokens = 20}));
  GenerationOptions o{.max_new_tokens = 20};
  o.draft = {.model = qkv::testing::tiny_gpt2(4), .max = 3};
  EXPECT_EQ(tokens(generate(*m, kPrompts, o)), want);
}

TEST(Speculative, StopsAtEosInsideAnAcceptedDraft) {
  auto m = qkv::testing::tiny_gpt2(1);
  const auto free_run = generate(*m, {kPrompts[1]}, {.max_new_tokens = 12})[0].new_ids;
  GenerationOptions o{.max_new_tokens = 12, .eos_id = free_run[5]};
  const auto want = generate(*m, {kPrompts[1]}, o)[0];
  o.draft = {.model = m, .max = 8, .adaptive = false};
  GenerationStats st;
  const auto got = generate(*m, {kPrompts[1]}, o, {}, &st)[0];
  EXPECT_EQ(got.new_ids, want.new_ids);
  EXPECT_EQ(got.reason, StopReason::Eos);
  // The model drafting for itself: the prefill gives token 0, the one draft of 8 guesses tokens
  // 1 to 8, of which 1 to 5 are kept (the end-of-sequence token counted), the rest never judged.
  EXPECT_EQ(st.speculative.drafted, 8);
  EXPECT_EQ(st.speculative.accepted, 5);
  EXPECT_EQ(st.speculative.target_passes, 1);
}

TEST(Speculative, PromptLookupDraftsWhatFollowedTheLongestLatestMatch) {
  NgramDrafter d(3);
  Draft out;
  // The last 3 tokens (7 8 9) occur at 1..3 and 6..8; the latest match (6..8) wins: 4 5 follow.
  d.draft(0, {1, 7, 8, 9, 2, 3, 7, 8, 9, 4, 5, 7, 8, 9}, 4, out);
  EXPECT_EQ(out.ids, (std::vector<i64>{4, 5, 7, 8}));
  EXPECT_TRUE(out.q.empty());
  // No 2- or 3-gram repeats; the 1-gram 5 does: what followed it.
  d.draft(0, {5, 6, 1, 2, 5}, 8, out);
  EXPECT_EQ(out.ids, (std::vector<i64>{6, 1, 2, 5}));
  d.draft(0, {1, 2, 3}, 4, out);
  EXPECT_TRUE(out.ids.empty());
  d.draft(0, {4}, 4, out);
  EXPECT_TRUE(out.ids.empty());
  EXPECT_THROW(NgramDrafter(0), qkv::ValueError);
  EXPECT_THROW(NgramDrafter(kMaxDraftNgram + 1), qkv::ValueError);
}

std::string fixture(const std::string& f) { return std::string(QKV_FIXTURE_DIR) + "/" + f; }

// Every tiny architecture of the fixtures, windows (Mistral's 8, Gemma's, Phi-3's) crossing the
// rollback points: prompts of 12 tokens, 40 new. Qwen3.5's recurrent states cannot drop rejected
// tokens: its sequences go back to the checkpoint made before each verification and feed the
// kept tokens again (generate.cpp).
TEST(Speculative, GreedyUnchangedOnEveryFixtureArchitecture) {
  for (const std::string f : {"llama_family/llama", "llama_family/mistral", "llama_family/qwen2", "arch/llama2",
                              "arch/gemma2", "arch/gemma3", "arch/phi3", "arch/qwen3", "arch/smollm3",
                              "hybrid/qwen3_5.gguf"}) {
    const LanguageModel lm = load_language_model(fixture(f));
    const i64 V = lm.model->vocab_size();
    std::vector<std::vector<i64>> prompts(2);
    for (i64 t = 0; t < 12; ++t) {
      prompts[0].push_back((t * 7 + 3) % V);
      prompts[1].push_back((t % 4) * 5 + 1);  // repeats: prompt lookup finds matches
    }
    expect_greedy_unchanged(lm.model, prompts, 40, f);
  }
}

// What exact greedy output rests on (speculative.h): verification rows of at most
// kExactDraftMax + 1 tokens have the bits of one-token decode steps — sliding windows that cut
// the rows' keys differently included (Gemma 2's window of 4, Mistral's), and at a depth where
// the decode kernel splits a head's keys over chunks (SmolLM2 past 1000 keys).
void expect_rows_are_decode_steps(const CausalLM& m, const std::vector<i64>& ids, const std::string& what) {
  const i64 V = m.vocab_size(), n = kExactDraftMax + 1, P = static_cast<i64>(ids.size()) - n;
  KVCache one(m.cache_options(1, P + n)), many(m.cache_options(1, P + n));
  const std::vector<i64> prompt(ids.begin(), ids.begin() + P);
  m.forward_cached(qkv::Tensor::from_vector(prompt, {1, P}), {P}, one);
  m.forward_cached(qkv::Tensor::from_vector(prompt, {1, P}), {P}, many);
  const std::vector<i64> rest(ids.begin() + P, ids.end());
  const std::vector<float> all = m.forward_cached(qkv::Tensor::from_vector(rest, {1, n}), {n}, many, true).to_vector<float>();
  for (i64 i = 0; i < n; ++i) {
    const std::vector<float> row =
        m.forward_cached(qkv::Tensor::from_vector(std::vector<i64>{rest[i]}, {1, 1}), {1}, one).to_vector<float>();
    for (i64 v = 0; v < V; ++v) ASSERT_EQ(row[v], all[i * V + v]) << what << ": row " << i << ", logit " << v;
  }
}

TEST(Speculative, VerificationRowsAreDecodeStepBits) {
  for (const std::string f : {"arch/gemma2", "llama_family/mistral", "hybrid/qwen3_5.gguf"}) {
    const LanguageModel lm = load_language_model(fixture(f));
    std::vector<i64> ids;
    for (i64 t = 0; t < 40; ++t) ids.push_back((t * 7 + 3) % (lm.model->vocab_size() - 1) + 1);
    expect_rows_are_decode_steps(*lm.model, ids, f);
  }
  const std::string smol = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (std::filesystem::exists(smol)) {
    const LanguageModel lm = load_language_model(smol);
    std::vector<i64> ids;
    for (i64 t = 0; t < 1100; ++t) ids.push_back((t * 7919 + 17) % 40000 + 100);
    ASSERT_GT(qkv::kernels::decode_attention_splits(1, 1, 1100), 1) << "the depth must split the keys";
    expect_rows_are_decode_steps(*lm.model, ids, "SmolLM2 at 1100 keys");
  }
  for (const std::string f : {"llama_family/llama", "arch/qwen3"}) {
    const LanguageModel lm = load_language_model(fixture(f));
    const CausalLM& m = *lm.model;
    const i64 V = m.vocab_size(), n = kExactDraftMax + 1;
    const std::vector<i64> ids = {5, 9, 2, 7, 1, 8, 3, 6, 4, 10};
    const i64 P = static_cast<i64>(ids.size()) - n;
    KVCache one(m.cache_options(1, 32)), many(m.cache_options(1, 32));
    const std::vector<i64> prompt(ids.begin(), ids.begin() + P);
    m.forward_cached(qkv::Tensor::from_vector(prompt, {1, P}), {P}, one);
    m.forward_cached(qkv::Tensor::from_vector(prompt, {1, P}), {P}, many);
    const std::vector<i64> rest(ids.begin() + P, ids.end());
    const std::vector<float> all =
        m.forward_cached(qkv::Tensor::from_vector(rest, {1, n}), {n}, many, true).to_vector<float>();
    for (i64 i = 0; i < n; ++i) {
      const std::vector<float> row = m.forward_cached(qkv::Tensor::from_vector(std::vector<i64>{rest[i]}, {1, 1}), {1}, one)
                                         .to_vector<float>();
      for (i64 v = 0; v < V; ++v)
        ASSERT_EQ(row[v], all[i * V + v]) << f << ": row " << i << ", logit " << v;
    }
  }
}

// The real model (when models/ holds it): a rewrite-style prompt, where prompt lookup drafts much.
TEST(Speculative, GreedyUnchangedOnSmolLM2) {
  const std::string path = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not there (scripts fetch it)";
  const LanguageModel lm = load_language_model(path);
  const auto prompt = lm.chat_prompt(
      {{.role = "user",
        .content = "Rewrite this sentence in the past tense, changing nothing else: The quick brown fox jumps over "
                   "the lazy dog while the farmer watches from the porch and the children play in the garden."}});
  GenerationOptions plain{.max_new_tokens = 48, .eos_id = lm.eos_id()};
  const auto want = generate(*lm.model, {prompt}, plain)[0].new_ids;
  for (i64 max : {kExactDraftMax, i64{8}}) {
    GenerationOptions o = plain;
    o.draft = {.ngram = 3, .max = max};
    GenerationStats st;
    EXPECT_EQ(generate(*lm.model, {prompt}, o, {}, &st)[0].new_ids, want) << "prompt lookup, draft max " << max;
    EXPECT_GT(st.speculative.accepted, 0);
  }
}

// The probability of each token at positions 1 and 2 after `prompt` under the target's sampling
// (temperature 1): exact, from the model's softmaxes.
std::vector<std::vector<double>> exact_marginals(const CausalLM& m, const std::vector<i64>& prompt) {
  const i64 V = m.vocab_size();
  auto softmax_after = [&](const std::vector<i64>& ids) {
    KVCache c(m.cache_options(1, static_cast<i64>(ids.size())));
    const std::vector<float> l =
        m.forward_cached(qkv::Tensor::from_vector(ids, {1, static_cast<i64>(ids.size())}), {static_cast<i64>(ids.size())}, c)
            .to_vector<float>();
    Sampler s({.temperature = 1.0});
    return s.distribution(l.data(), V);
  };
  const std::vector<double> p1 = softmax_after(prompt);
  std::vector<double> p2(static_cast<std::size_t>(V), 0.0);
  for (i64 a = 0; a < V; ++a) {
    std::vector<i64> ids = prompt;
    ids.push_back(a);
    const std::vector<double> q = softmax_after(ids);
    for (i64 v = 0; v < V; ++v) p2[v] += p1[a] * q[v];
  }
  return {p1, p2};
}

// Pearson's chi-square of counts against probabilities, cells of expected count < 5 pooled;
// returns the statistic and sets the degrees of freedom.
double chi_square(const std::vector<i64>& counts, const std::vector<double>& p, i64 n, i64& dof) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  dof = -1;
  for (std::size_t v = 0; v < p.size(); ++v) {
    const double e = p[v] * static_cast<double>(n);
    if (e < 5) {
      pooled_e += e;
      pooled_o += static_cast<double>(counts[v]);
      continue;
    }
    stat += (static_cast<double>(counts[v]) - e) * (static_cast<double>(counts[v]) - e) / e;
    ++dof;
  }
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9);
    ++dof;
  }
  return stat;
}

// Over many seeds, the empirical distribution of the tokens at positions 1 and 2 matches the
// target's exact one, with a draft model (q: another GPT-2's distribution) and with guesses
// without a distribution (point masses). The threshold is chi-square's 0.999 quantile for the
// degrees of freedom (Wilson-Hilferty), so a correct sampler fails once in a thousand runs
// per check; the seeds are fixed, so the test is deterministic.
TEST(Speculative, SampledTokensKeepTheTargetsDistribution) {
  auto m = qkv::testing::tiny_gpt2(1);
  const i64 V = m->vocab_size();
  const std::vector<i64> prompt = {4, 5, 6};
  const auto exact = exact_marginals(*m, prompt);
  const i64 N = 6000;
  struct Case {
    std::string what;
    DraftOptions draft;
  };
  std::vector<Case> cases;
  cases.push_back({"a draft model", {.model = qkv::testing::tiny_gpt2(4), .max = 2, .adaptive = false}});
  cases.push_back({"the target as its own draft", {.model = m, .max = 2, .adaptive = false}});
  cases.push_back({"point masses", {.custom = [&](i64) {
                                      std::vector<std::vector<i64>> full = {prompt};
                                      // Guesses: the most likely tokens of the first position.
                                      full[0].push_back(std::max_element(exact[0].begin(), exact[0].end()) - exact[0].begin());
                                      full[0].push_back(std::max_element(exact[1].begin(), exact[1].end()) - exact[1].begin());
                                      full[0].push_back(0);
                                      return std::make_unique<OracleDrafter>(full, 1.0, V, 3);
                                    },
                                    .max = 2,
                                    .adaptive = false}});
  for (const Case& c : cases) {
    std::vector<std::vector<i64>> counts(2, std::vector<i64>(static_cast<std::size_t>(V), 0));
    for (i64 seed = 0; seed < N; ++seed) {
      GenerationOptions o{.max_new_tokens = 3, .sampling = {.temperature = 1.0, .seed = static_cast<std::uint64_t>(seed)}};
      o.draft = c.draft;
      const auto r = generate(*m, {prompt}, o)[0].new_ids;
      ++counts[0][r[0]];
      ++counts[1][r[1]];
    }
    for (int pos = 0; pos < 2; ++pos) {
      i64 dof = 0;
      const double stat = chi_square(counts[pos], exact[pos], N, dof);
      ASSERT_GT(dof, 5) << c.what;
      const double k = static_cast<double>(dof), z = 3.0902;  // the normal's 0.999 quantile
      const double limit = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
      EXPECT_LT(stat, limit) << c.what << ", position " << pos + 1 << ", " << dof << " degrees of freedom";
    }
  }
}

TEST(Speculative, BadDraftsAreRefusedBeforeAnyWork) {
  auto m = qkv::testing::tiny_gpt2(1);
  auto expect_error = [&](GenerationOptions o, const std::string& needle) {
    try {
      generate(*m, kPrompts, o);
      ADD_FAILURE() << "no error; expected one naming " << needle;
    } catch (const qkv::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GenerationOptions o{.max_new_tokens = 8};
  qkv::models::GPT2Config other = qkv::testing::tiny_gpt2_config();
  other.vocab_size = 60;
  o.draft = {.model = qkv::testing::tiny_gpt2(2, other)};
  expect_error(o, "vocabulary has 60 tokens, the target's 61");
  qkv::models::GPT2Config short_ctx = qkv::testing::tiny_gpt2_config();
  short_ctx.n_positions = 8;
  o.draft = {.model = qkv::testing::tiny_gpt2(2, short_ctx)};
  expect_error(o, "holds 8 positions, fewer than the 15");
  o.draft = {.ngram = 2, .max = 0};
  expect_error(o, "must be in [1, 32], got 0");
  o.draft = {.ngram = 2, .max = kMaxDraftTokens + 1};
  expect_error(o, "must be in [1, 32], got 33");
  o.draft = {.ngram = kMaxDraftNgram + 1};
  expect_error(o, "n-gram length must be in [1, 16], got 17");
  o.draft = {.model = m, .ngram = 2};
  expect_error(o, "give one drafter");
  o.draft = {.ngram = 2};
  o.use_cache = false;
  expect_error(o, "through the KV cache");
}

TEST(Speculative, DraftsOfAnotherVocabularyNameTheFirstDifferingToken) {
  const LanguageModel a = load_language_model(fixture("arch/phi3")), b = load_language_model(fixture("arch/smollm3"));
  ASSERT_EQ(a.tok().vocab_size(), b.tok().vocab_size());
  i64 first = 0;
  while (a.tok().token_string(first) == b.tok().token_string(first)) ++first;
  try {
    check_same_vocabulary(a.tok(), "phi3", b.tok(), "smollm3");
    ADD_FAILURE() << "no error";
  } catch (const qkv::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("token " + std::to_string(first) + " is"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_same_vocabulary(a.tok(), "phi3", a.tok(), "phi3 again"));
  const LanguageModel g = load_language_model(fixture("arch/gemma2"));
  EXPECT_THROW(check_same_vocabulary(a.tok(), "phi3", g.tok(), "gemma2"), qkv::FormatError);
}

}  // namespace
