// Bad tokenizer.json / tokenizer_config.json files: every error is a FormatError (IOError for an
// unreadable file), one line, naming the file and the field, and what is not supported says so.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace qkv::tokenize::test {
namespace {

// A valid tokenizer.json: the byte tokens, "ab" (merge "a b"), one special token.
json good() {
  return {{"version", "1.0"},
          {"added_tokens", {{{"id", 257}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", byte_vocab({"ab"})}, {"merges", {"a b"}}}}};
}

// Loads the edited file: FormatError naming the file (the name given) and every `want`.
template <class Edit>
std::string bad(Edit edit, std::initializer_list<std::string> want) {
  json j = good();
  edit(j);
  const std::string msg = expect_error<FormatError>(
      [&] { ByteLevelBPE::from_tokenizer_json_text(j.dump(), "t/tokenizer.json"); }, {"tokenizer.json 't/tokenizer.json'"});
  for (const auto& w : want) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  return msg;
}

TEST(TokenizerJsonErrors, TheGoodFileLoads) {
  const auto tok = ByteLevelBPE::from_tokenizer_json_text(good().dump(), "good");
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.encode("ab<s>"), (std::vector<std::int64_t>{256, 257}));
}

TEST(TokenizerJsonErrors, NotJsonOrRepeatedKeys) {
  auto text_error = [](const std::string& text, std::initializer_list<std::string> want) {
    expect_error<FormatError>([&] { ByteLevelBPE::from_tokenizer_json_text(text, "x.json"); }, want);
  };
  text_error("{\"model\": ", {"tokenizer.json 'x.json'", "not valid JSON"});
  text_error("[1, 2]", {"the top level", "must be a JSON object"});
  std::string dup = good().dump();
  dup.insert(dup.find("\"ab\""), "\"zz\": 300, \"zz\": 301, ");
  text_error(dup, {"key \"zz\" appears twice"});
  const std::string dir = scratch_dir().string();
  expect_error<IOError>([&] { ByteLevelBPE::from_tokenizer_json(dir + "/none.json"); }, {dir + "/none.json", "cannot open"});
  write_file(fs::path(dir) / "tokenizer.json", good().dump());
  write_file(fs::path(dir) / "tokenizer_config.json", "");
  expect_error<FormatError>([&] { ByteLevelBPE::from_folder(dir); }, {dir + "/tokenizer_config.json", "empty"});
}

TEST(TokenizerJsonErrors, Model) {
  bad([](json& j) { j.erase("model"); }, {"model: is missing"});
  bad([](json& j) { j["model"]["type"] = "WordPiece"; }, {"model.type", "\"WordPiece\"", "not supported"});
  bad([](json& j) { j["model"].erase("type"); }, {"model: has no \"type\""});
  bad([](json& j) { j["model"]["dropout"] = 0.1; }, {"model.dropout", "0.1", "not supported"});
  bad([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"model.continuing_subword_prefix", "\"##\""});
  bad([](json& j) { j["model"]["end_of_word_suffix"] = 5; }, {"model.end_of_word_suffix", "must be a string"});
  bad([](json& j) { j["model"]["byte_fallback"] = true; }, {"model.byte_fallback", "not supported"});
  bad([](json& j) { j["model"]["ignore_merges"] = "yes"; }, {"model.ignore_merges", "true or false", "\"yes\""});
  bad([](json& j) { j["model"]["unk_token"] = "<unk>"; }, {"model.unk_token", "\"<unk>\"", "not in model.vocab"});
  bad([](json& j) { j["model"]["vocab"] = json::array(); }, {"model.vocab", "must be a JSON object"});
  bad([](json& j) { j["model"]["vocab"]["xy"] = 1.5; }, {"model.vocab", "token \"xy\"", "must be an integer"});
  bad([](json& j) { j["model"]["vocab"]["xy"] = 40; }, {"model.vocab", "id 40 belongs to both"});
  bad([](json& j) { j["model"]["vocab"]["xy"] = 5000; }, {"model.vocab", "token \"xy\" has id 5000", "0..V-1"});
  bad([](json& j) { j["added_tokens"][0]["id"] = 258; }, {"added_tokens[0].id", "258 leaves a gap"});
  bad([](json& j) { j["added_tokens"][0]["id"] = 9999; }, {"added_tokens[0].id", "9999 leaves a gap"});
  bad([](json& j) { j["model"]["merges"] = "a b"; }, {"model.merges", "must be an array"});
  bad([](json& j) { j["model"]["merges"].push_back("ab"); }, {"model.merges[1]", "two tokens separated by one space"});
  bad([](json& j) { j["model"]["merges"].push_back({1, 2}); }, {"model.merges[1]", "\"a b\" or [\"a\", \"b\"]"});
  bad([](json& j) { j["model"]["merges"].push_back({"a", "zz"}); }, {"model.merges[1]", "token \"zz\"", "model.vocab"});
  bad([](json& j) { j["model"]["merges"].push_back("a b"); }, {"model.merges[1]", "duplicate", "at model.merges[0]"});
  bad([](json& j) { j["model"]["vocab"] = json::object(), j["added_tokens"] = json::array(); }, {"model.vocab", "no tokens"});
}

TEST(TokenizerJsonErrors, NormalizerPreTokenizerDecoder) {
  bad([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, {"normalizer.type", "\"Lowercase\"", "NFC"});
  bad([](json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "NFKD"}}}}}; },
      {"normalizer.normalizers[1].type", "\"NFKD\""});
  bad([](json& j) { j["normalizer"] = "NFC"; }, {"normalizer", "must be a JSON object"});
  bad([](json& j) { j["pre_tokenizer"] = nullptr; }, {"pre_tokenizer", "needs a ByteLevel"});
  bad([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, {"pre_tokenizer.type", "\"Metaspace\"", "Split"});
  auto seq = [](json first) {
    return [first](json& j) {
      j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {first, {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    };
  };
  bad(seq({{"type", "Split"}, {"pattern", {{"Regex", "\\d"}}}, {"behavior", "Sideways"}}),
      {"pre_tokenizer.pretokenizers[0].behavior", "\"Sideways\"", "Isolated"});
  bad(seq({{"type", "Split"}, {"pattern", {{"Glob", "*"}}}, {"behavior", "Isolated"}}),
      {"pre_tokenizer.pretokenizers[0].pattern", "{\"Regex\": ...}"});
  bad(seq({{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}}, {"behavior", "Isolated"}}),
      {"pre_tokenizer: step 0", "PCRE2 cannot compile", "missing closing parenthesis"});
  bad(seq({{"type", "Split"}, {"pattern", {{"Regex", "[a[b]]"}}}, {"behavior", "Isolated"}}),
      {"pre_tokenizer: step 0", "nested character classes"});
  bad(seq({{"type", "Split"}, {"pattern", {{"Regex", "[a-z&&[^aeiou]]"}}}, {"behavior", "Isolated"}}),
      {"pre_tokenizer: step 0"});
  bad(seq({{"type", "Digits"}, {"individual_digits", 1}}), {"pre_tokenizer.pretokenizers[0].individual_digits"});
  bad(seq({{"type", "ByteLevel"}}), {"pre_tokenizer", "exactly one ByteLevel step, as the last one"});
  bad([](json& j) { j["pre_tokenizer"] = {{"type", "Digits"}}; }, {"exactly one ByteLevel step"});
  bad([](json& j) { j.erase("decoder"); }, {"decoder", "is missing"});
  bad([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, {"decoder.type", "\"WordPiece\"", "not supported"});
}

TEST(TokenizerJsonErrors, AddedTokensAndPostProcessor) {
  bad([](json& j) { j["added_tokens"] = "x"; }, {"added_tokens", "must be an array"});
  bad([](json& j) { j["added_tokens"][0]["id"] = -1; }, {"added_tokens[0].id", "-1"});
  bad([](json& j) { j["added_tokens"][0].erase("content"); }, {"added_tokens[0]", "has no \"content\""});
  bad([](json& j) { j["added_tokens"][0]["content"] = ""; }, {"added_tokens[0]", "is empty"});
  bad([](json& j) { j["added_tokens"][0]["lstrip"] = "no"; }, {"added_tokens[0].lstrip", "true or false"});
  bad([](json& j) { j["added_tokens"][0]["single_word"] = true; }, {"added_tokens[0].single_word", "not supported"});
  bad([](json& j) { j["added_tokens"].push_back({{"id", 258}, {"content", "<s>"}}); }, {"added_tokens[1]", "added twice"});
  bad([](json& j) { j["added_tokens"].push_back({{"id", 257}, {"content", "<t>"}}); },
      {"added_tokens[1]", "id 257 is given to two added tokens"});
  bad([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
      {"post_processor.type", "\"RobertaProcessing\"", "TemplateProcessing"});
  auto tmpl = [](json single, json specials) {
    return [=](json& j) {
      j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}};
    };
  };
  const json bos = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const json specials = {{"<s>", {{"id", "<s>"}, {"ids", {257}}, {"tokens", {"<s>"}}}}};
  // json::array: a braced one-element list of a json is a copy under some compilers, an array under others.
  bad(tmpl(json::array({bos}), specials), {"post_processor.single", "no sequence A"});
  bad(tmpl({bos, bos, a}, specials), {"post_processor.single[1]", "more than one special token"});
  bad(tmpl({bos, a}, json::object()), {"post_processor.special_tokens", "has no \"<s>\""});
  bad(tmpl({bos, a}, {{"<s>", {{"ids", {999}}}}}), {"post_processor.special_tokens.<s>.ids", "below 258"});
  bad(tmpl({{{"Pair", 1}}, a}, specials), {"post_processor.single[0]", "{\"Sequence\": ...}"});
  // A working template: BOS and EOS.
  json j = good();
  tmpl({bos, a, bos}, specials)(j);
  const auto tok = ByteLevelBPE::from_tokenizer_json_text(j.dump(), "template");
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.add_eos());
  EXPECT_EQ(tok.bos_id(), 257);
  EXPECT_EQ(tok.eos_id(), 257);
}

TEST(TokenizerJsonErrors, TokenizerConfig) {
  auto bad_config = [](const std::string& config, std::initializer_list<std::string> want) {
    expect_error<FormatError>(
        [&] { ByteLevelBPE::from_tokenizer_json_text(good().dump(), "t.json", config); },
        want);
  };
  bad_config("{\"eos_token\": \"</s>\"}", {"tokenizer_config.json (for 't.json')", "eos_token", "\"</s>\"", "not a token"});
  bad_config("{\"bos_token\": 5}", {"bos_token", "must be a string"});
  bad_config("{\"pad_token\": {\"text\": \"<s>\"}}", {"pad_token", "has no \"content\""});
  bad_config("{\"add_bos_token\": true}", {"add_bos_token", "no bos_token"});
  bad_config("{\"add_eos_token\": \"yes\"}", {"add_eos_token", "true or false"});
  bad_config("[]", {"must be a JSON object"});
  const auto tok = ByteLevelBPE::from_tokenizer_json_text(
      good().dump(), "t.json", R"({"bos_token": {"content": "<s>"}, "eos_token": "ab", "add_bos_token": true})");
  EXPECT_EQ(tok.bos_id(), 257);
  EXPECT_EQ(tok.eos_id(), 256);  // a vocabulary token by its written form
  EXPECT_TRUE(tok.add_bos());
}

// A pattern that backtracks without end stops with an error (PCRE2's match limit), not a hang.
TEST(TokenizerJsonErrors, RunawayPatternStops) {
  json j = good();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", "(a|aa)+$"}}}, {"behavior", "Isolated"}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}}}}};
  const auto tok = ByteLevelBPE::from_tokenizer_json_text(j.dump(), "runaway");
  expect_error<ValueError>([&] { tok.encode(std::string(60, 'a') + "b"); }, {"runaway", "PCRE2 gave up"});
  EXPECT_EQ(tok.encode("aab"), (std::vector<std::int64_t>{'a', 256}));
}

}  // namespace
}  // namespace qkv::tokenize::test
