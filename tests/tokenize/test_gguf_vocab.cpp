// Tokenizers from GGUF metadata (tokenize::bpe_from_gguf_vocab): for each tokenizer.ggml.pre
// type, the GGUF form of a fixture tokenizer (tests/reference/make_tokenizer_fixtures.py) gives
// Hugging Face's ids; token types, ids and flags; every bad input named.
#include <gtest/gtest.h>

#include "tokenizer_test_util.h"

namespace qkv::tokenize::test {
namespace {

GgufVocab fixture_vocab(const std::string& name) {
  const json& spec = tokenizer_cases()["tokenizers"][name];
  return gguf_vocab_of(read_json(tokenizer_dir(name) + "/tokenizer.json"), spec["gguf_pre"].get<std::string>());
}

TEST(GgufVocab, EveryPreTypeMatchesHuggingFace) {
  std::size_t n = 0;
  for (const char* name : {"smollm", "llama3", "qwen2", "llamacpp_default"}) {
    SCOPED_TRACE(name);
    GgufVocab g = fixture_vocab(name);
    const ByteLevelBPE& from_json = fixture_tokenizer(name);
    if (std::string(name) == "llama3") g.bos_id = from_json.bos_id();  // llama3 wants a BOS by default
    const auto tok = bpe_from_gguf_vocab(g, std::string(name) + ".gguf");
    EXPECT_EQ(tok.vocab_size(), from_json.vocab_size());
    for (const auto& c : tokenizer_cases()["tokenizers"][name]["cases"]) {
      const std::string text = c["text"].get<std::string>();
      // GGUF has no "normalized" flag: qwen2's user-defined "café" is matched in the raw text only.
      if (std::string(name) == "qwen2" && text == "cafe\xCC\x81") continue;
      EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << show(text);
      EXPECT_EQ(tok.encode_ordinary(text), c.contains("ids_ordinary") ? ids_of(c["ids_ordinary"]) : ids_of(c["ids"]))
          << "ordinary " << show(text);
      ++n;
    }
  }
  EXPECT_GE(n, 600u);
}

// "gpt-2": GPT-2's own files (tests/fixtures/gpt2_tiny) as GGUF metadata, on GPT-2's reference cases.
TEST(GgufVocab, Gpt2MatchesHuggingFace) {
  const json vocab = read_json(fixture("gpt2_tiny/vocab.json"));
  json tj = {{"model", {{"vocab", vocab}, {"merges", json::array()}}}, {"added_tokens", json::array()}};
  std::ifstream f(fixture("gpt2_tiny/merges.txt"));
  for (std::string line; std::getline(f, line);)
    if (!line.starts_with("#version")) tj["model"]["merges"].push_back(line);
  tj["added_tokens"].push_back({{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}});
  for (const char* pre : {"gpt-2", "gpt2"}) {
    GgufVocab g = gguf_vocab_of(tj, pre);
    g.eos_id = 0;
    const auto tok = bpe_from_gguf_vocab(g, "gpt2_tiny.gguf");
    EXPECT_EQ(tok.eos_id(), 0);
    for (const auto& c : reference_cases()["encode"]) {
      const std::string text = c["text"].get<std::string>();
      EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << show(text);
      if (c.contains("ids_ordinary")) {
        EXPECT_EQ(tok.encode_ordinary(text), ids_of(c["ids_ordinary"])) << show(text);
      }
    }
  }
}

// A small vocabulary: the 256 byte tokens, then extra tokens; merges "a b" -> "ab".
GgufVocab small_vocab(const std::vector<std::string>& extra = {"ab", "<ctl>", "<user>", "<unk>"}) {
  GgufVocab g;
  g.model = "gpt2";
  g.pre = "gpt-2";
  for (int b = 0; b < 256; ++b) g.tokens.push_back(byte_char(static_cast<unsigned char>(b)));
  for (const auto& t : extra) g.tokens.push_back(t);
  g.merges = std::vector<std::string>{"a b"};
  return g;
}

TEST(GgufVocab, TokenTypesIdsAndFlags) {
  GgufVocab g = small_vocab();
  g.token_types.assign(g.tokens.size(), 1);
  g.token_types[257] = 3;  // control
  g.token_types[258] = 4;  // user-defined
  g.token_types[259] = 2;  // unknown: special, as llama.cpp matches it
  g.bos_id = 257, g.eos_id = 257, g.pad_id = 259, g.unk_id = 259;
  g.add_bos = true;
  const auto tok = bpe_from_gguf_vocab(g, "small.gguf");
  EXPECT_EQ(tok.vocab_size(), 260);
  EXPECT_EQ(tok.encode("ab<ctl>x<user><unk>"), (std::vector<std::int64_t>{256, 257, 'x', 258, 259}));
  const std::vector<std::int64_t> ordinary = tok.encode_ordinary("<ctl><user>");
  EXPECT_EQ(ordinary.back(), 258);  // user-defined: matched even when specials are text
  EXPECT_EQ(ordinary.size(), 6u);   // '<' 'c' 't' 'l' '>' then <user>
  EXPECT_TRUE(tok.is_special(257));
  EXPECT_TRUE(tok.is_special(259));
  EXPECT_FALSE(tok.is_special(258));
  EXPECT_EQ(tok.special_tokens(), (std::vector<std::string>{"<ctl>", "<unk>"}));
  EXPECT_EQ(tok.bos_id(), 257);
  EXPECT_EQ(tok.pad_id(), 259);
  EXPECT_EQ(tok.unk_id(), 259);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.add_eos());
  EXPECT_EQ(tok.decode({256, 257, 258}), "ab<ctl><user>");

  // No pre-tokenizer key: llama.cpp's "default" (punctuation runs split off first).
  g.pre.reset();
  g.add_bos.reset();
  const auto dflt = bpe_from_gguf_vocab(g, "small.gguf");
  EXPECT_EQ(dflt.pre_tokenize("hi, there... 12345"),
            (std::vector<std::string>{"hi", ",", " there", "...", " ", "123", "45"}));
  EXPECT_FALSE(dflt.add_bos());
  // llama3 adds a BOS unless the file says otherwise.
  g.pre = "llama-bpe";
  EXPECT_TRUE(bpe_from_gguf_vocab(g, "small.gguf").add_bos());
  g.add_bos = false;
  EXPECT_FALSE(bpe_from_gguf_vocab(g, "small.gguf").add_bos());
  // Control tokens that are empty or repeat an earlier one's text are not matched; the last id
  // of a repeated token is the one text maps to.
  GgufVocab r = small_vocab({"<c>", "<c>", "", "ab"});
  r.token_types.assign(r.tokens.size(), 1);
  r.token_types[256] = r.token_types[257] = r.token_types[258] = 3;
  const auto rep = bpe_from_gguf_vocab(r, "repeat.gguf");
  EXPECT_EQ(rep.encode("<c>ab"), (std::vector<std::int64_t>{256, 259}));
  EXPECT_EQ(rep.token_to_id("ab"), 259);
}

template <class Fn>
void gguf_error(Fn&& fn, std::initializer_list<std::string> want) {
  std::vector<std::string> all{"GGUF 'bad.gguf'"};
  all.insert(all.end(), want.begin(), want.end());
  const std::string msg = expect_error<FormatError>(fn, {});
  for (const auto& w : all) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
}

TEST(GgufVocabErrors, EachDefectNamed) {
  auto bad = [](auto edit, std::initializer_list<std::string> want) {
    GgufVocab g = small_vocab();
    edit(g);
    gguf_error([&] { bpe_from_gguf_vocab(g, "bad.gguf"); }, want);
  };
  // bpe_from_gguf_vocab reads "gpt2"; tokenizer_from_gguf_vocab every model qkv knows.
  bad([](GgufVocab& g) { g.model = "llama"; }, {"tokenizer.ggml.model", "\"llama\"", "not a byte-level BPE", "\"gpt2\""});
  for (const std::string model : {"bert", ""}) {
    GgufVocab g = small_vocab();
    g.model = model;
    gguf_error([&] { tokenizer_from_gguf_vocab(g, "bad.gguf"); },
               {"tokenizer.ggml.model", "\"" + model + "\"", "not supported", "\"gpt2\"", "\"llama\", SentencePiece"});
  }
  bad([](GgufVocab& g) { g.pre = "deepseek-llm"; },
      {"tokenizer.ggml.pre", "\"deepseek-llm\"", "not a pre-tokenizer", "smollm", "llama3", "qwen2", "default"});
  bad([](GgufVocab& g) { g.tokens.clear(); }, {"tokenizer.ggml.tokens", "empty"});
  bad([](GgufVocab& g) { g.token_types = {1, 1}; }, {"tokenizer.ggml.token_type", "2 entries for 260 tokens"});
  bad([](GgufVocab& g) { g.token_types.assign(260, 1), g.token_types[259] = 7; },
      {"tokenizer.ggml.token_type[259]", "7", "\"<unk>\"", "not a token type"});
  bad([](GgufVocab& g) { g.token_types.assign(260, 1), g.token_types[3] = -1; }, {"token_type[3]", "-1"});
  bad([](GgufVocab& g) { g.merges.reset(); }, {"tokenizer.ggml.merges", "missing"});
  bad([](GgufVocab& g) { g.merges = std::vector<std::string>{"a b", "ab"}; },
      {"tokenizer.ggml.merges[1]", "two tokens separated by one space", "\"ab\""});
  bad([](GgufVocab& g) { g.merges = std::vector<std::string>{"a  b"}; }, {"tokenizer.ggml.merges[0]"});
  bad([](GgufVocab& g) { g.merges = std::vector<std::string>{"ab zz"}; },
      {"tokenizer.ggml.merges[0]", "token \"zz\"", "not in tokenizer.ggml.tokens"});
  bad([](GgufVocab& g) { g.merges = std::vector<std::string>{"b a"}; },
      {"tokenizer.ggml.merges[0]", "the result \"ba\"", "not in tokenizer.ggml.tokens"});
  bad([](GgufVocab& g) { g.merges = std::vector<std::string>{"a b", "a b"}; },
      {"tokenizer.ggml.merges[1]", "duplicate merge \"a b\"", "at tokenizer.ggml.merges[0]"});
  bad([](GgufVocab& g) { g.bos_id = 260; }, {"tokenizer.ggml.bos_token_id", "260", "outside", "0..259"});
  bad([](GgufVocab& g) { g.eos_id = -1; }, {"tokenizer.ggml.eos_token_id", "-1"});
  bad([](GgufVocab& g) { g.pad_id = 1000; }, {"tokenizer.ggml.padding_token_id", "1000"});
  bad([](GgufVocab& g) { g.unk_id = 99999; }, {"tokenizer.ggml.unknown_token_id"});
  bad([](GgufVocab& g) { g.add_bos = true; }, {"tokenizer.ggml.add_bos_token", "no tokenizer.ggml.bos_token_id"});
  bad([](GgufVocab& g) { g.add_eos = true; }, {"tokenizer.ggml.add_eos_token", "no tokenizer.ggml.eos_token_id"});
  bad([](GgufVocab& g) { g.pre = "llama3"; }, {"tokenizer.ggml.add_bos_token", "bos_token_id"});
}

}  // namespace
}  // namespace qkv::tokenize::test
