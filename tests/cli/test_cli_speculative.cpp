// End-to-end tests of speculative decoding in `qkv generate` and `qkv bench generate` (--draft
// ngram | MODEL, --draft-max, --draft-ngram): the same tokens as without, the counts in --json,
// and every bad draft a clear one-line error before any work.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using qkv::cli_test::json_lines;
using qkv::cli_test::Result;
using qkv::cli_test::run;

const std::string kSmol = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kMiniLM = std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";
const std::string kFixtures = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/";
const std::string kRewrite =
    "'Rewrite in the past tense, changing nothing else: The keeper climbs the stairs every evening. He lights the "
    "lamp and watches the ships pass the point. When storms come, he stays awake all night.'";

void need_smol() { ASSERT_TRUE(fs::exists(kSmol)) << kSmol << " is missing: run `make models` first"; }

// One JSON object's new_ids after running `args`.
nlohmann::json generated(const std::string& args) {
  const Result r = run(args);
  EXPECT_EQ(r.code, 0) << r.err;
  return json_lines(r.out).at(0);
}

TEST(CliSpeculative, PromptLookupGivesTheSameTokensAndCountsThem) {
  need_smol();
  const std::string base = "generate --model '" + kSmol + "' --chat " + kRewrite + " --max-new 40 --json";
  const auto plain = generated(base);
  EXPECT_FALSE(plain.contains("speculative"));
  const auto spec = generated(base + " --draft ngram");
  EXPECT_EQ(spec["new_ids"], plain["new_ids"]);
  EXPECT_EQ(spec["text"], plain["text"]);
  const auto& s = spec.at("speculative");
  EXPECT_GT(s["drafted"].get<int>(), 0);
  EXPECT_GT(s["accepted"].get<int>(), 0);
  EXPECT_LE(s["accepted"].get<int>(), s["drafted"].get<int>());
  EXPECT_GT(s["tokens_per_pass"].get<double>(), 1.0);
  EXPECT_EQ(generated(base + " --draft ngram --draft-ngram 1 --draft-max 2")["new_ids"], plain["new_ids"]);
  // Without --json: the text as without a draft, the counts on stderr.
  const Result text = run("generate --model '" + kSmol + "' --chat " + kRewrite + " --max-new 40 --draft ngram");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(text.out, plain["text"].get<std::string>() + "\n");
  EXPECT_NE(text.err.find("drafted tokens accepted"), std::string::npos) << text.err;
}

// The model as its own draft, both with Q8 activations (a draft always has them): its one-token
// steps are the target's, so (nearly) every guess is kept. Exactly every one where the Q8
// products give a verification row the bits of a one-row product, as the GCC build does; clang's
// build (make test-asan, which contracts a * b + c into fused multiply-adds differently in the
// one-row and few-row kernels) kept 16 of 17 guesses. The tokens are the same either way.
TEST(CliSpeculative, DraftModelOfItselfIsAlwaysAccepted) {
  need_smol();
  const std::string base =
      "generate --model '" + kSmol + "' --chat 'Name three colours.' --max-new 24 --activations q8 --json";
  const auto plain = generated(base);
  const auto spec = generated(base + " --draft '" + kSmol + "'");
  EXPECT_EQ(spec["new_ids"], plain["new_ids"]);
  const auto& s = spec.at("speculative");
  EXPECT_GT(s["drafted"].get<int>(), 0);
  EXPECT_GE(s["acceptance"].get<double>(), 0.9);
}

TEST(CliSpeculative, TinyArchitecturesGiveTheSameIds) {
  for (const std::string f : {"llama_family/mistral", "arch/gemma2"}) {
    const std::string base =
        "generate --model '" + kFixtures + f + "' --prompt-ids 1,5,9,1,5,9,1,5 --max-new 30 --ignore-eos --json";
    const auto plain = generated(base);
    EXPECT_EQ(generated(base + " --draft ngram")["new_ids"], plain["new_ids"]) << f;
    EXPECT_EQ(generated(base + " --draft '" + kFixtures + f + "' --draft-max 2")["new_ids"], plain["new_ids"]) << f;
  }
}

// bench generate --draft times speculative decoding beside plain decoding and says whether the
// tokens are the same.
TEST(CliSpeculative, BenchGenerateReportsAcceptanceAndSpeedUp) {
  const std::string base = "bench generate --model '" + kFixtures +
                           "llama_family/mistral' --prompt-len 8 --new 24 --repeat 1 --bandwidth-mb 1 --json ";
  const Result r = run(base + "--draft ngram --draft-max 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = json_lines(r.out).at(0);
  const auto& s = j.at("speculative");
  EXPECT_EQ(s["draft"], "ngram");
  EXPECT_EQ(s["draft_max"], 2);
  EXPECT_EQ(s["same_ids"], true);
  EXPECT_LE(s["accepted"].get<int>(), s["drafted"].get<int>());
  EXPECT_GE(s["tokens_per_pass"].get<double>(), 1.0);
  EXPECT_GT(s["speedup"].get<double>(), 0.0);
  const Result plain = run(base);
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_FALSE(json_lines(plain.out).at(0).contains("speculative"));
  const Result bad = run(base + "--draft-ngram 2");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("needs --draft ngram or --draft MODEL"), std::string::npos) << bad.err;
}

// Each bad draft: a non-zero exit and one line naming the problem, before the model is read.
TEST(CliSpeculative, BadDraftsAreClearErrors) {
  const std::string tiny = "generate --model '" + kFixtures + "llama_family/llama' --prompt-ids 1,2,3 --max-new 4 ";
  auto expect_error = [](const std::string& args, const std::string& needle) {
    const Result r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  };
  expect_error(tiny + "--draft ngram --draft-max 0", "--draft-max");
  expect_error(tiny + "--draft ngram --draft-max 33", "--draft-max");
  expect_error(tiny + "--draft ngram --draft-ngram 17", "--draft-ngram");
  expect_error(tiny + "--draft-max 4", "needs --draft ngram or --draft MODEL");
  expect_error(tiny + "--draft '" + kFixtures + "llama_family/llama' --draft-ngram 2", "goes with --draft ngram");
  expect_error(tiny + "--draft ngram --no-cache", "cannot go with --no-cache");
  expect_error(tiny + "--draft /nonexistent/draft.gguf", "'/nonexistent/draft.gguf' does not exist");
  // Another vocabulary: by size (no tokenizers to compare), or token by token.
  expect_error(tiny + "--draft '" + kFixtures + "arch/gemma2'", "vocabulary has 336 tokens, the target's 128");
  expect_error("generate --model '" + kFixtures + "arch/phi3' --max-new 4 Hello --draft '" + kFixtures + "arch/smollm3'",
               "does not share the vocabulary");
  if (fs::exists(kMiniLM)) expect_error(tiny + "--draft '" + kMiniLM + "'", "needs a causal language model");
}

}  // namespace
