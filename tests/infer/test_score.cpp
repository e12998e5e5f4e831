// Token log-probabilities and sliding-window perplexity (infer/score.h), saved log-probabilities
// (infer/logprob_file.h) and KL statistics (infer/kl_divergence.h):
//  - the windows of transformers' rule on small cases written out by hand;
//  - parity with transformers (tests/fixtures/perplexity.json, tests/reference/
//    make_perplexity_fixtures.py) on the tiny Llama-2 folder (SentencePiece, BOS) and the tiny
//    GPT-2: each prompt token's log-probability and top-2 within 1e-4, every scored token's
//    log-probability over windows within 1e-4, perplexities to 5 significant digits;
//  - a model against its own saved file: KL 0, the same top token everywhere; the tiny Llama-2's
//    Q8_0 GGUF (llama.cpp's converter) against its float folder: a small positive KL;
//  - every bad input refused with a message naming it, before any work.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/infer/kl_divergence.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/logprob_file.h"
#include "qkv/infer/score.h"
#include "qkv/io/safetensors.h"

namespace qkv::infer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using i64 = std::int64_t;

std::string fixture(const std::string& f) { return std::string(QKV_FIXTURE_DIR) + "/" + f; }

const json& reference() {
  static const json j = [] {
    std::ifstream in(fixture("perplexity.json"));
    return json::parse(in);
  }();
  return j;
}

const LanguageModel& model(const std::string& name) {
  static const LanguageModel llama2 = load_language_model(fixture("arch/llama2"));
  static const LanguageModel gpt2 = load_language_model(fixture("gpt2_tiny"));
  return name == "llama2" ? llama2 : gpt2;
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("qkv_score_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string operator/(const std::string& f) const { return (dir / f).string(); }
};

template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(stmt, text) EXPECT_NE(error_of([&] { stmt; }).find(text), std::string::npos) << error_of([&] { stmt; })

TEST(ScoreWindows, TransformersRuleByHand) {
  // T = 10, N = 4, S = 3: [0,4) scores 1..3; [3,7) scores 4..6 with token 3 as context; [6,10) 7..9.
  auto w = score_windows(10, 4, 3);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0); EXPECT_EQ(w[0].end, 4); EXPECT_EQ(w[0].first, 1);
  EXPECT_EQ(w[1].begin, 3); EXPECT_EQ(w[1].end, 7); EXPECT_EQ(w[1].first, 4);
  EXPECT_EQ(w[2].begin, 6); EXPECT_EQ(w[2].end, 10); EXPECT_EQ(w[2].first, 7);
  // Every token but the first, once, whatever the stride below the context.
  for (i64 T : {2, 3, 17, 64})
    for (i64 N : {2, 5, 16})
      for (i64 S = 1; S < N; ++S) {
        const auto p = scored_positions(score_windows(T, N, S));
        ASSERT_EQ(static_cast<i64>(p.size()), T - 1) << T << " " << N << " " << S;
        for (i64 i = 0; i < T - 1; ++i) EXPECT_EQ(p[static_cast<std::size_t>(i)], i + 1);
      }
  // S = N: windows do not overlap and each one's first token is not scored (nothing predicts it).
  EXPECT_EQ(scored_positions(score_windows(9, 4, 4)), (std::vector<i64>{1, 2, 3, 5, 6, 7}));
  // A last window of one token scores nothing and is left out.
  EXPECT_EQ(score_windows(9, 4, 4).size(), 2u);
  EXPECT_ERROR_HAS(score_windows(1, 4, 2), "at least 2");
  EXPECT_ERROR_HAS(score_windows(10, 4, 5), "stride must be in [1, context = 4], got 5");
  EXPECT_ERROR_HAS(score_windows(10, 1, 1), "context must be >= 2, got 1");
}

class ScoreParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ScoreParity, PromptLogprobsAndTop2MatchTransformers) {
  const json& ref = reference()["models"][GetParam()];
  const LanguageModel& lm = model(GetParam());
  const std::vector<i64> ids = ref["ids"].get<std::vector<i64>>();
  // qkv's tokenizer gives transformers' ids.
  EXPECT_EQ(lm.encode_prompt(ref["text"].get<std::string>()), ids);
  const std::vector<i64> prompt(ids.begin(), ids.begin() + 40);
  const ScoreResult r = score_tokens(*lm.model, prompt, {.context = 40, .stride = 40, .top = 2});
  const json& want = ref["prompt"]["token_logprobs"];
  ASSERT_EQ(r.count(), 39);
  EXPECT_EQ(r.windows, 1);
  double worst = 0;
  for (i64 i = 0; i < 39; ++i) {
    const TokenLogprob& t = r.tokens[static_cast<std::size_t>(i)];
    EXPECT_EQ(r.positions[static_cast<std::size_t>(i)], i + 1);
    EXPECT_EQ(t.id, ids[static_cast<std::size_t>(i + 1)]);
    worst = std::max(worst, std::abs(t.logprob - want[static_cast<std::size_t>(i)].get<double>()));
    const json& top = ref["prompt"]["top2"][static_cast<std::size_t>(i)];
    ASSERT_EQ(t.top.size(), 2u);
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(t.top[k].first, top[k][0].get<i64>()) << "position " << i + 1 << " top " << k;
      worst = std::max(worst, std::abs(t.top[k].second - top[k][1].get<double>()));
    }
  }
  EXPECT_LT(worst, 1e-4);
}

TEST_P(ScoreParity, SlidingWindowPerplexityMatchesTransformers) {
  const json& ref = reference()["models"][GetParam()];
  const LanguageModel& lm = model(GetParam());
  const std::vector<i64> ids = ref["ids"].get<std::vector<i64>>();
  for (const json& w : ref["windows"]) {
    const i64 N = w["context"], S = w["stride"];
    SCOPED_TRACE("context " + std::to_string(N) + ", stride " + std::to_string(S));
    const ScoreResult r = score_tokens(*lm.model, ids, {.context = N, .stride = S});
    EXPECT_EQ(r.count(), w["tokens"].get<i64>());
    const double want = w["perplexity"];
    EXPECT_LT(std::abs(r.perplexity() - want) / want, 1e-5) << r.perplexity() << " vs " << want;
    EXPECT_NEAR(r.nll_sum, w["nll_sum"].get<double>(), 1e-4 * static_cast<double>(r.count()));
    if (w.contains("positions")) {
      EXPECT_EQ(r.positions, w["positions"].get<std::vector<i64>>());
      double worst = 0;
      for (std::size_t i = 0; i < r.tokens.size(); ++i)
        worst = std::max(worst, std::abs(r.tokens[i].logprob - w["token_logprobs"][i].get<double>()));
      EXPECT_LT(worst, 1e-4);
      // Chunks of 5 rows per pass instead of one pass per window: the same log-probabilities.
      const ScoreResult c = score_tokens(*lm.model, ids, {.context = N, .stride = S, .chunk = 5});
      ASSERT_EQ(c.count(), r.count());
      for (std::size_t i = 0; i < r.tokens.size(); ++i) EXPECT_NEAR(c.tokens[i].logprob, r.tokens[i].logprob, 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ScoreParity, ::testing::Values("llama2", "gpt2"));

// Every architecture of the fixtures (sliding windows, soft-caps, LongRoPE, MoE routing, Gated
// DeltaNet states reset between windows): the windows' positions fed 3 rows per pass give the
// numbers of one pass per window, and a longer window gives the tokens of the rule's first window
// the same numbers.
TEST(ScoreArchitectures, ChunkedPassesGiveOnePassesNumbers) {
  for (const std::string f : {"arch/gemma2.gguf", "arch/gemma3.gguf", "arch/phi3.gguf", "arch/qwen3.gguf",
                              "arch/smollm3.gguf", "hybrid/qwen3_5.gguf", "moe/mixtral.gguf", "moe/olmoe.gguf",
                              "moe/qwen3_moe.gguf", "moe/gpt_oss.gguf"}) {
    SCOPED_TRACE(f);
    const LanguageModel lm = load_language_model(fixture(f));
    const i64 V = lm.model->vocab_size();
    std::vector<i64> ids;
    for (i64 i = 0; i < 40; ++i) ids.push_back((i * 37 + 11) % V);
    const ScoreResult one = score_tokens(*lm.model, ids, {.context = 16, .stride = 5});
    const ScoreResult chunked = score_tokens(*lm.model, ids, {.context = 16, .stride = 5, .chunk = 3});
    ASSERT_EQ(one.count(), 39);
    ASSERT_EQ(chunked.count(), 39);
    for (std::size_t i = 0; i < one.tokens.size(); ++i) EXPECT_NEAR(chunked.tokens[i].logprob, one.tokens[i].logprob, 1e-4) << i;
    EXPECT_TRUE(std::isfinite(one.perplexity()));
    // (30 tokens: Phi-3's LongRoPE takes its long factors for a sequence past 32 positions, as
    // transformers does, which changes every position's numbers.)
    const ScoreResult whole =
        score_tokens(*lm.model, std::vector<i64>(ids.begin(), ids.begin() + 30), {.context = 30, .stride = 30});
    for (std::size_t i = 0; i < 15; ++i) EXPECT_NEAR(whole.tokens[i].logprob, one.tokens[i].logprob, 1e-4) << i;
  }
}

TEST(ScoreDefaults, ContextIsThePositionsCappedAndStrideHalf) {
  const LanguageModel& lm = model("gpt2");  // 128 positions
  const ScoreOptions o = resolve_score_options(*lm.model, {});
  EXPECT_EQ(o.context, 128);
  EXPECT_EQ(o.stride, 64);
  EXPECT_EQ(o.chunk, 512);  // a vocabulary of 1000: the cap
  EXPECT_EQ(resolve_score_options(*lm.model, {.context = 9}).stride, 4);
}

// The model against its own saved log-probabilities: KL 0, the same top token everywhere, the
// same perplexity; the file round-trips its plan.
TEST(ScoreKL, AModelAgainstItsOwnFileIsZero) {
  Scratch s;
  const LanguageModel& lm = model("llama2");
  const std::vector<i64> ids = reference()["models"]["llama2"]["ids"].get<std::vector<i64>>();
  const ScoreOptions o{.context = 64, .stride = 24};
  const auto windows = score_windows(static_cast<i64>(ids.size()), 64, 24);
  {
    LogprobWriter w(s / "ref.safetensors",
                    {.tokens = ids, .positions = scored_positions(windows), .vocab = lm.model->vocab_size(),
                     .context = 64, .stride = 24, .model = lm.name});
    ScoreOptions so = o;
    so.save = &w;
    score_tokens(*lm.model, ids, so);
    EXPECT_EQ(w.rows_written(), static_cast<i64>(ids.size()) - 1);
    w.commit();
    EXPECT_EQ(fs::file_size(s / "ref.safetensors"), w.file_bytes());
    EXPECT_EQ(w.file_bytes() % 8, 0u);
  }
  const ReferenceLogprobs ref = ReferenceLogprobs::open(s / "ref.safetensors");
  EXPECT_EQ(ref.plan().tokens, ids);
  EXPECT_EQ(ref.plan().vocab, 336);
  EXPECT_EQ(ref.plan().context, 64);
  EXPECT_EQ(ref.plan().stride, 24);
  EXPECT_EQ(ref.plan().model, "llama2");
  ScoreOptions ko = o;
  ko.reference = &ref;
  const ScoreResult r = score_tokens(*lm.model, ids, ko);
  ASSERT_TRUE(r.kl.has_value());
  const KLStats& k = *r.kl;
  EXPECT_EQ(k.count, r.count());
  EXPECT_LT(std::abs(k.kl_mean), 1e-9);
  EXPECT_LT(k.kl_percentiles.front().second, 1e-8);  // the maximum
  EXPECT_EQ(k.same_top, 1.0);
  EXPECT_LT(k.dp_rms, 1e-6);
  EXPECT_NEAR(k.ppl, r.perplexity(), 1e-9 * r.perplexity());
  EXPECT_NEAR(k.ppl_ref, r.perplexity(), 1e-5 * r.perplexity());
  EXPECT_NEAR(k.nll_correlation, 1.0, 1e-9);
}

// The tiny Llama-2 as llama.cpp's converter wrote it in Q8_0 against its float folder: KL small
// and positive, most top tokens the same.
TEST(ScoreKL, Q8CopyAgainstTheFloatModelIsSmallAndPositive) {
  Scratch s;
  const LanguageModel& f = model("llama2");
  const LanguageModel q8 = load_language_model(fixture("arch/llama2.gguf"));
  const std::vector<i64> ids = reference()["models"]["llama2"]["ids"].get<std::vector<i64>>();
  const auto positions = scored_positions(score_windows(static_cast<i64>(ids.size()), 64, 32));
  {
    LogprobWriter w(s / "f.safetensors", {.tokens = ids, .positions = positions, .vocab = 336, .context = 64, .stride = 32});
    ScoreOptions o{.context = 64, .save = &w};
    score_tokens(*f.model, ids, o);
    w.commit();
  }
  const ReferenceLogprobs ref = ReferenceLogprobs::open(s / "f.safetensors");
  const ScoreResult r = score_tokens(*q8.model, ids, {.context = 64, .reference = &ref});
  const KLStats& k = *r.kl;
  EXPECT_GT(k.kl_mean, 1e-7);
  EXPECT_LT(k.kl_mean, 0.01);
  EXPECT_GT(k.kl_mean_err, 0.0);
  EXPECT_GE(k.kl_percentiles.back().second, -1e-12);  // the minimum: KL is never negative
  EXPECT_GT(k.same_top, 0.9);
  EXPECT_GT(k.nll_correlation, 0.99);
  EXPECT_GT(k.dp_rms, 0.0);
  // The percentiles are ordered, largest first.
  for (std::size_t i = 1; i < k.kl_percentiles.size(); ++i)
    EXPECT_LE(k.kl_percentiles[i].second, k.kl_percentiles[i - 1].second);
  EXPECT_NEAR(k.ppl, r.perplexity(), 1e-9 * r.perplexity());
  std::cout << "llama2 Q8_0 vs float: KL " << k.kl_mean << " +- " << k.kl_mean_err << ", same top " << k.same_top
            << ", RMS dp " << k.dp_rms << "\n";
}

TEST(ScoreKL, StatisticsOfKnownPositions) {
  // Two positions with known values: the means, RMS and percentiles as llama.cpp computes them.
  KLAccumulator a;
  a.add({.kl = 0.1, .nll = 1.0, .nll_ref = 1.5, .p = 0.5, .p_ref = 0.25, .same_top = true});
  a.add({.kl = 0.3, .nll = 2.0, .nll_ref = 2.5, .p = 0.25, .p_ref = 0.5, .same_top = false});
  const KLStats k = a.stats();
  EXPECT_DOUBLE_EQ(k.kl_mean, 0.2);
  EXPECT_NEAR(k.kl_mean_err, 0.1, 1e-12);  // sqrt(0.01 / 1)
  EXPECT_DOUBLE_EQ(k.dp_mean, 0.0);
  EXPECT_DOUBLE_EQ(k.dp_rms, 0.25);
  EXPECT_DOUBLE_EQ(k.same_top, 0.5);
  EXPECT_NEAR(k.kl_percentiles[6].second, 0.2, 1e-12);  // the median interpolates
  EXPECT_DOUBLE_EQ(k.kl_percentiles.front().second, 0.3);
  EXPECT_DOUBLE_EQ(k.kl_percentiles.back().second, 0.1);
  EXPECT_NEAR(k.ln_ppl_ratio, -0.5, 1e-12);
  EXPECT_NEAR(k.nll_correlation, 1.0, 1e-12);
  EXPECT_ERROR_HAS(KLAccumulator().stats(), "no positions");
  // One position by hand: p_ref = (0.5, 0.5), the model's (0.8, 0.2).
  const float ref[2] = {std::log(0.5f), std::log(0.5f)};
  const float logits[2] = {std::log(0.8f) + 3, std::log(0.2f) + 3};  // a shift changes nothing
  const KLPosition p = kl_position(logits, ref, 2, 1);
  EXPECT_NEAR(p.kl, 0.5 * std::log(0.5 / 0.8) + 0.5 * std::log(0.5 / 0.2), 1e-6);
  EXPECT_NEAR(p.p, 0.2, 1e-6);
  EXPECT_NEAR(p.p_ref, 0.5, 1e-6);
  EXPECT_TRUE(p.same_top);  // the reference's tie goes to its first token, the model's top is token 0 too
  const float swapped[2] = {std::log(0.2f), std::log(0.8f)};
  EXPECT_FALSE(kl_position(swapped, ref, 2, 1).same_top);
}

TEST(ScoreErrors, BadInputsAreRefusedNamingTheValue) {
  const LanguageModel& lm = model("gpt2");
  const CausalLM& m = *lm.model;
  EXPECT_ERROR_HAS(score_tokens(m, {5}, {}), "the text gives 1 token(s); scoring needs at least 2");
  EXPECT_ERROR_HAS(score_tokens(m, {}, {}), "at least 2");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 1000}, {}), "token id 1000 at position 1, out of range [0, 1000)");
  EXPECT_ERROR_HAS(score_tokens(m, {5, -1}, {}), "token id -1");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 6, 7}, {.context = 8, .stride = 9}), "stride must be in [1, 8] (at most the context), got 9");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 6, 7}, {.context = 129}), "context must be in [2, 128] (the model's positions), got 129");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 6, 7}, {.context = 1}), "context must be in [2, 128]");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 6, 7}, {.stride = -1}), "stride must be in [1, 128] (at most the context), got -1");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 6, 7}, {.top = 21}), "top must be in [0, 20]");
  EXPECT_ERROR_HAS(score_tokens(m, {5, 6, 7}, {.chunk = -2}), "chunk must be >= 1");
}

TEST(ScoreErrors, ReferenceFromOtherTokensVocabularyOrWindowsIsRefused) {
  Scratch s;
  const LanguageModel& lm = model("llama2");
  const std::vector<i64> ids = {1, 40, 41, 42, 43, 44, 45, 46};
  {
    LogprobWriter w(s / "r.safetensors",
                    {.tokens = ids, .positions = scored_positions(score_windows(8, 4, 2)), .vocab = 336, .context = 4, .stride = 2});
    ScoreOptions o{.context = 4, .stride = 2, .save = &w};
    score_tokens(*lm.model, ids, o);
    w.commit();
  }
  const ReferenceLogprobs ref = ReferenceLogprobs::open(s / "r.safetensors");
  std::vector<i64> other = ids;
  other[5] = 7;
  EXPECT_ERROR_HAS(score_tokens(*lm.model, other, {.context = 4, .stride = 2, .reference = &ref}),
                   "was made from other tokens: position 5 holds id 44 there and 7 here");
  EXPECT_ERROR_HAS(score_tokens(*lm.model, std::vector<i64>(ids.begin(), ids.end() - 1), {.context = 4, .stride = 2, .reference = &ref}),
                   "holds 8 tokens; this text gives 7");
  EXPECT_ERROR_HAS(score_tokens(*lm.model, ids, {.context = 4, .stride = 4, .reference = &ref}),
                   "was made with context 4 and stride 2; this run uses context 4 and stride 4");
  EXPECT_ERROR_HAS(score_tokens(*model("gpt2").model, ids, {.context = 4, .stride = 2, .reference = &ref}),
                   "was made with a vocabulary of 336 tokens; this model's has 1000");
  // Files that are not ours, or damaged.
  EXPECT_ERROR_HAS(ReferenceLogprobs::open(fixture("linear.safetensors")), "not a log-probabilities file");
  EXPECT_ERROR_HAS(ReferenceLogprobs::open(s / "missing.safetensors"), "missing.safetensors");
  {
    std::ifstream in(s / "r.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(s / "cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  }
  EXPECT_ERROR_HAS(ReferenceLogprobs::open(s / "cut.safetensors"), "cut.safetensors");
  const std::vector<i64> t = {1, 2, 3}, bad = {2, 1};
  const std::vector<float> rows(2 * 4, 0.0f);
  io::write_safetensors(s / "order.safetensors",
                        {{"tokens", io::StDType::I64, {3}, t.data(), 24},
                         {"positions", io::StDType::I64, {2}, bad.data(), 16},
                         {"logprobs", io::StDType::F32, {2, 4}, rows.data(), 32}},
                        {{"format", "qkv.logprobs"}, {"version", "1"}, {"vocab", "4"}, {"context", "3"}, {"stride", "1"}});
  EXPECT_ERROR_HAS(ReferenceLogprobs::open(s / "order.safetensors"), "scored positions must ascend");
  io::write_safetensors(s / "vocab.safetensors",
                        {{"tokens", io::StDType::I64, {3}, t.data(), 24},
                         {"positions", io::StDType::I64, {2}, t.data() + 1, 16},
                         {"logprobs", io::StDType::F32, {2, 4}, rows.data(), 32}},
                        {{"format", "qkv.logprobs"}, {"version", "1"}, {"vocab", "5x"}, {"context", "3"}, {"stride", "1"}});
  EXPECT_ERROR_HAS(ReferenceLogprobs::open(s / "vocab.safetensors"), "metadata 'vocab' is '5x'");
}

TEST(ScoreErrors, AnUnfinishedSaveLeavesNothing) {
  Scratch s;
  std::ofstream(s / "mine.safetensors") << "the user's file";
  {
    LogprobWriter w(s / "mine.safetensors", {.tokens = {1, 2, 3}, .positions = {1, 2}, .vocab = 4, .context = 3, .stride = 1});
    const float row[4] = {0, 0, 0, 0};
    w.add_logits(row);
    EXPECT_ERROR_HAS(w.commit(), "1 of its 2 rows were written; not saved");
  }
  std::ifstream in(s / "mine.safetensors");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "the user's file");
  EXPECT_EQ(std::distance(fs::directory_iterator(s.dir), fs::directory_iterator()), 1);
  EXPECT_ERROR_HAS(LogprobWriter(s / "x.safetensors", {.tokens = {1, 2, 3}, .positions = {2, 1}, .vocab = 4}),
                   "scored positions must ascend");
  EXPECT_ERROR_HAS(LogprobWriter(s / "x.safetensors", {.tokens = {1, 2, 3}, .positions = {0}, .vocab = 4}),
                   "scored positions must ascend within [1, 3), got 0");
}

}  // namespace
}  // namespace qkv::infer
