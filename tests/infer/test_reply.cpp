// infer/reply.h: a reasoning model's reply split into its reasoning, its answer and the markup of
// its format — <think> ... </think> (Qwen3's tiny fixture vocabulary) and gpt-oss's harmony
// channels (that vocabulary with harmony's control tokens added, as o200k_harmony has them).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/infer/reply.h"
#include "qkv/tokenize/tokenizer.h"
#include "testing/fixture.h"

namespace {

namespace fs = std::filesystem;
using qkv::infer::ReplyFormat;
using qkv::infer::ReplyPart;
using qkv::infer::ReplySplitter;
using i64 = std::int64_t;

std::shared_ptr<const qkv::tokenize::Tokenizer> qwen3() {
  return qkv::tokenize::find_tokenizer(qkv::testing::fixture_path("arch/qwen3"));
}

// The Qwen3 fixture's tokenizer with harmony's control tokens added (ids 301..).
std::shared_ptr<const qkv::tokenize::Tokenizer> harmony() {
  const fs::path dir = fs::path(::testing::TempDir()) / "qkv_reply_harmony";
  fs::create_directories(dir);
  std::ifstream in(qkv::testing::fixture_path("arch/qwen3/tokenizer.json"));
  nlohmann::json t = nlohmann::json::parse(in);
  i64 id = 301;
  for (const char* s : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|return|>", "<|call|>", "<|constrain|>"})
    t["added_tokens"].push_back({{"id", id++}, {"content", s}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  std::ofstream(dir / "tokenizer.json") << t.dump();
  fs::copy_file(qkv::testing::fixture_path("arch/qwen3/tokenizer_config.json"), dir / "tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  return qkv::tokenize::find_tokenizer(dir.string());
}

struct Split {
  std::string reasoning, content, markup;
};

// The text of each part of the reply `text` (special tokens written in it matched as tokens).
Split split(const qkv::tokenize::Tokenizer& tok, const std::string& text, const std::string& prompt = "") {
  ReplySplitter s(tok, qkv::infer::reply_format(tok), tok.encode_with_specials(prompt));
  std::vector<i64> r, c, m;
  for (i64 id : tok.encode_with_specials(text)) {
    switch (s.push(id)) {
      case ReplyPart::Reasoning: r.push_back(id); break;
      case ReplyPart::Content: c.push_back(id); break;
      case ReplyPart::Markup: m.push_back(id); break;
    }
  }
  return {tok.decode(r), tok.decode(c), tok.decode(m)};
}

TEST(Reply, TheFormatComesFromTheVocabulary) {
  EXPECT_EQ(qkv::infer::reply_format(*qwen3()), ReplyFormat::Think);
  EXPECT_EQ(qkv::infer::reply_format(*harmony()), ReplyFormat::Harmony);
  EXPECT_EQ(qkv::infer::reply_format(*qkv::tokenize::find_tokenizer(qkv::testing::fixture_path("gpt2_tiny"))),
            ReplyFormat::Plain);
}

TEST(Reply, ThinkTagsEncloseTheReasoning) {
  const auto tok = qwen3();
  Split s = split(*tok, "<think>\nLight first.\n</think>\n\nAnd there was light.");
  EXPECT_EQ(s.reasoning, "\nLight first.\n");
  EXPECT_EQ(s.content, "\n\nAnd there was light.");
  EXPECT_EQ(s.markup, "<think></think>");
  // No reasoning at all: every token is the answer.
  s = split(*tok, "And God said");
  EXPECT_EQ(s.content, "And God said");
  EXPECT_EQ(s.reasoning, "");
  // A prompt that leaves <think> open (DeepSeek-R1's templates): the reply starts in the reasoning.
  s = split(*tok, "Light first.</think>Light.", "<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(s.reasoning, "Light first.");
  EXPECT_EQ(s.content, "Light.");
  // One closed in the prompt (Qwen3 with enable_thinking false): the answer.
  s = split(*tok, "Light.", "<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(s.content, "Light.");
}

TEST(Reply, HarmonyChannelsAreReasoningAnswerAndMarkup) {
  const auto tok = harmony();
  const std::string prompt = "<|start|>user<|message|>Hi<|end|><|start|>assistant";
  Split s = split(*tok,
                  "<|channel|>analysis<|message|>The user greets.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>Hello there.<|return|>",
                  prompt);
  EXPECT_EQ(s.reasoning, "The user greets.");
  EXPECT_EQ(s.content, "Hello there.");
  // A tool call's channel ("commentary to=..."), its constrained format, and the answer after.
  s = split(*tok,
            "<|channel|>commentary to=functions.light <|constrain|>json<|message|>{\"on\": true}<|call|>", prompt);
  EXPECT_EQ(s.content, "{\"on\": true}");
  EXPECT_EQ(s.reasoning, "");
  // A reply that does not follow the format is the answer.
  s = split(*tok, "Hello there.", prompt);
  EXPECT_EQ(s.content, "Hello there.");
  // A prompt that already opened the final channel continues it.
  s = split(*tok, "Hello there.<|return|>", prompt + "<|channel|>final<|message|>");
  EXPECT_EQ(s.content, "Hello there.");
  s = split(*tok, "Thinking.<|end|>", prompt + "<|channel|>analysis<|message|>");
  EXPECT_EQ(s.reasoning, "Thinking.");
  // Text between messages (after <|end|>, before <|start|>) is markup, not the answer.
  s = split(*tok, "<|channel|>final<|message|>A.<|end|>stray<|start|>assistant<|channel|>final<|message|>B.", prompt);
  EXPECT_EQ(s.content, "A.B.");
}

}  // namespace
