// tokenizer.json tokenizers against Hugging Face tokenizers: the tiny tokenizers and cases of
// tests/reference/make_tokenizer_fixtures.py (tests/fixtures/tokenizers/), one per
// pre-tokenizer family, and every Split / Digits / ByteLevel configuration's pieces.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace qkv::tokenize::test {
namespace {

std::vector<std::int64_t> concat(std::vector<std::int64_t> a, const std::vector<std::int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(TokenizerJson, EncodeMatchesHuggingFace) {
  const json& all = tokenizer_cases()["tokenizers"];
  ASSERT_EQ(all.size(), 6u);
  std::size_t n = 0, ordinary = 0, with_specials = 0;
  for (const auto& [name, spec] : all.items()) {
    SCOPED_TRACE(name);
    const ByteLevelBPE& tok = fixture_tokenizer(name);
    EXPECT_EQ(tok.vocab_size(), spec["vocab_size"].get<std::int64_t>());
    for (const auto& c : spec["cases"]) {
      const std::string text = c["text"].get<std::string>();
      const auto ids = ids_of(c["ids"]);
      EXPECT_EQ(tok.encode(text), ids) << show(text);
      const auto want_ordinary = c.contains("ids_ordinary") ? ids_of(c["ids_ordinary"]) : ids;
      EXPECT_EQ(tok.encode_ordinary(text), want_ordinary) << "ordinary " << show(text);
      ordinary += c.contains("ids_ordinary");
      // HF add_special_tokens=True: the post-processor's BOS / EOS around the ids.
      std::vector<std::int64_t> framed = ids;
      if (tok.add_bos()) framed.insert(framed.begin(), *tok.bos_id());
      if (tok.add_eos()) framed.push_back(*tok.eos_id());
      EXPECT_EQ(framed, c.contains("ids_with_specials") ? ids_of(c["ids_with_specials"]) : ids) << show(text);
      with_specials += c.contains("ids_with_specials");
      ++n;
    }
  }
  EXPECT_GE(n, 900u);
  EXPECT_GE(ordinary, 40u);
  EXPECT_GE(with_specials, 100u);  // llama3's BOS
  std::printf("[ compared ] %zu texts over 6 tokenizers (%zu with specials as text differ, %zu with BOS)\n", n,
              ordinary, with_specials);
}

TEST(TokenizerJson, DecodeGivesTheTextBack) {
  // No normalizer, prefix space or strip: the bytes of the ids are the text.
  for (const char* name : {"smollm", "llama3", "llamacpp_default"}) {
    const ByteLevelBPE& tok = fixture_tokenizer(name);
    for (const auto& c : tokenizer_cases()["tokenizers"][name]["cases"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ(tok.decode(ids_of(c["ids"])), text) << name << " " << show(text);
      StreamDecoder sd(std::make_shared<ByteLevelBPE>(tok));
      std::string streamed;
      for (const std::int64_t id : ids_of(c["ids"])) streamed += sd.push(id);
      EXPECT_EQ(streamed + sd.finish(), text) << name << " " << show(text);
    }
  }
  // The prefix space stays in the decoded text (HF decodes it too).
  EXPECT_EQ(fixture_tokenizer("gpt2_prefix").decode(fixture_tokenizer("gpt2_prefix").encode("God")), " God");
}

// A tokenizer.json of the 256 byte tokens and no merges, with the given pre-tokenizer and normalizer.
std::string bytes_only_tokenizer(const json& pre, const json& normalizer) {
  return json{{"version", "1.0"},
              {"normalizer", normalizer},
              {"pre_tokenizer", pre},
              {"model", {{"type", "BPE"}, {"vocab", byte_vocab()}, {"merges", json::array()}}},
              {"decoder", {{"type", "ByteLevel"}}}}
      .dump();
}

TEST(TokenizerJson, PreTokenizersCutLikeHuggingFace) {
  const json& pre = tokenizer_cases()["pre_tokenizers"];
  const json& texts = pre["texts"];
  ASSERT_GE(pre["configs"].size(), 20u);
  std::size_t n = 0;
  for (const auto& cfg : pre["configs"]) {
    const std::string name = cfg["name"].get<std::string>();
    SCOPED_TRACE(name);
    const auto tok = ByteLevelBPE::from_tokenizer_json_text(bytes_only_tokenizer(cfg["pre_tokenizer"], cfg["normalizer"]),
                                                            name);
    ASSERT_EQ(cfg["pieces"].size(), texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const std::string text = texts[i].get<std::string>();
      EXPECT_EQ(tok.pre_tokenize(text), cfg["pieces"][i].get<std::vector<std::string>>()) << show(text);
      // Bytes only: the ids are the bytes of the pieces.
      std::string bytes;
      for (const auto& p : cfg["pieces"][i]) bytes += p.get<std::string>();
      EXPECT_EQ(tok.decode_bytes(tok.encode(text)), bytes) << show(text);
      ++n;
    }
  }
  std::printf("[ compared ] %zu texts x pre-tokenizer configurations\n", n);
}

TEST(TokenizerJson, AddedTokensAndOptions) {
  const ByteLevelBPE& g = fixture_tokenizer("gpt2_added");
  const auto id = [&](const char* t) { return *g.token_to_id(t); };
  // lstrip takes the whitespace before "<mask>", rstrip the whitespace after "<sep>", [both] both.
  EXPECT_EQ(g.encode("a  <mask>  b"), concat(concat(g.encode("a"), {id("<mask>")}), g.encode("  b")));
  EXPECT_EQ(g.encode("a  <sep>  b"), concat(concat(g.encode("a  "), {id("<sep>")}), g.encode("b")));
  EXPECT_EQ(g.encode("a \t[both]\n b"), concat(concat(g.encode("a"), {id("[both]")}), g.encode("b")));
  // Special ones are text for encode_ordinary; non-special ones ("<think>") stay whole.
  EXPECT_EQ(g.encode_ordinary("<think><mask>"), concat({id("<think>")}, g.encode_ordinary("<mask>")));
  EXPECT_TRUE(g.is_special(id("<mask>")));
  EXPECT_FALSE(g.is_special(id("<think>")));
  EXPECT_FALSE(g.is_special(id("a")));
  EXPECT_EQ(g.special_tokens(), (std::vector<std::string>{"<mask>", "<sep>", "<|endoftext|>", "[both]"}));
  EXPECT_EQ(g.eos_id(), g.token_to_id("<|endoftext|>"));
  EXPECT_FALSE(g.add_bos());
  // An added token decodes to its text.
  EXPECT_EQ(g.decode({id("<think>"), id("wonderful")}), "<think>wonderful");

  // Llama 3: ignore_merges gives a vocabulary token no merge reaches; specials after the vocabulary.
  const ByteLevelBPE& l3 = fixture_tokenizer("llama3");
  const auto zyxw = l3.token_to_id("\xC4\xA0zyxw");  // "Ġzyxw"
  ASSERT_TRUE(zyxw.has_value());
  EXPECT_EQ(l3.encode(" zyxw"), std::vector<std::int64_t>{*zyxw});
  EXPECT_EQ(l3.encode("qqqq"), std::vector<std::int64_t>{*l3.token_to_id("qqqq")});
  EXPECT_EQ(l3.bos_id(), l3.token_to_id("<|begin_of_text|>"));
  EXPECT_GE(*l3.bos_id(), 700);
  EXPECT_TRUE(l3.add_bos());
  EXPECT_FALSE(l3.eos_id().has_value());  // tokenizer.json alone does not say; tokenizer_config.json does

  // Qwen2: NFC before a normalized added token, so "café" written with a combining accent matches it.
  const ByteLevelBPE& qw = fixture_tokenizer("qwen2");
  EXPECT_EQ(qw.encode("cafe\xCC\x81"), std::vector<std::int64_t>{*qw.token_to_id("caf\xC3\xA9")});
  EXPECT_EQ(qw.pre_tokenize("e\xCC\x81"), std::vector<std::string>{"\xC3\xA9"});
  EXPECT_EQ(qw.eos_id(), qw.token_to_id("<|endoftext|>"));
}

TEST(TokenizerJson, FromFolderReadsTokenizerConfig) {
  const auto l3 = ByteLevelBPE::from_folder(tokenizer_dir("llama3"));
  EXPECT_EQ(l3.eos_id(), l3.token_to_id("<|eot_id|>"));
  EXPECT_EQ(l3.bos_id(), l3.token_to_id("<|begin_of_text|>"));
  EXPECT_TRUE(l3.add_bos());
  const auto qw = ByteLevelBPE::from_folder(tokenizer_dir("qwen2"));
  EXPECT_EQ(qw.eos_id(), qw.token_to_id("<|im_end|>"));  // {"content": ...} form
  EXPECT_EQ(qw.pad_id(), qw.token_to_id("<|endoftext|>"));
  EXPECT_FALSE(qw.bos_id().has_value());
  EXPECT_FALSE(qw.add_bos());
  // A folder without tokenizer.json is read as GPT-2's vocab.json + merges.txt.
  EXPECT_EQ(ByteLevelBPE::from_folder(fixture("gpt2_tiny")).vocab_size(), 1000);
}

// GPT-2's files written as a tokenizer.json give the same ids on every GPT-2 reference case.
TEST(TokenizerJson, Gpt2FilesAsTokenizerJsonEncodeTheSame) {
  const json vocab = read_json(fixture("gpt2_tiny/vocab.json"));
  json merges = json::array();
  std::ifstream f(fixture("gpt2_tiny/merges.txt"));
  for (std::string line; std::getline(f, line);)
    if (!line.starts_with("#version")) merges.push_back(line);
  const json tj = {{"added_tokens", {{{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}}}},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                   {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}},
                   {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
                   {"decoder", {{"type", "ByteLevel"}}}};
  const auto tok = ByteLevelBPE::from_tokenizer_json_text(tj.dump(), "gpt2_tiny as tokenizer.json");
  const auto& legacy = reference_bpe();
  EXPECT_EQ(tok.vocab_size(), legacy.vocab_size());
  EXPECT_EQ(tok.eos_id(), legacy.eos_id());
  for (const auto& c : reference_cases()["encode"]) {
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << show(text);
    EXPECT_EQ(tok.encode_ordinary(text), legacy.encode_ordinary(text)) << show(text);
  }
}

}  // namespace
}  // namespace qkv::tokenize::test
