// SentencePiece vocabularies against their references (tests/reference/make_arch_fixtures.py,
// tests/fixtures/arch/tokenizer_cases.json): the Llama-2-style and Gemma tokenizers of the
// architecture fixtures, from each source — tokenizer.json (transformers' ids and decode),
// tokenizer.model and the GGUF files llama.cpp's converter wrote (sentencepiece's ids, which
// llama.cpp's tokenizer gives too) — on leading, trailing and repeated spaces, tabs, newlines,
// digits, accents, emoji and CJK (byte fallback), and special tokens inside the text; the
// byte-level BPE tokenizers of the other fixtures through the same interface; and the real
// Llama 2 and Phi-3 vocabularies llama.cpp tests its tokenizer with (models/llama.cpp/, fetched
// by `make models` from the llama-cpp-python sdist), against its expected ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/gguf.h"
#include "qkv/tokenize/sentencepiece.h"
#include "qkv/tokenize/tokenizer.h"
#include "testing/fixture.h"

namespace {

using Ids = std::vector<std::int64_t>;
namespace fs = std::filesystem;

const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(qkv::testing::fixture_path("arch/tokenizer_cases.json"));
    return nlohmann::json::parse(f);
  }();
  return j;
}

std::string shown(const std::string& s) { return nlohmann::json(s).dump(); }

// Every tokenizer of the fixtures from its folder (tokenizer.json): transformers' ids and decode.
TEST(TokenizerCases, FoldersGiveTransformersIdsAndText) {
  int checked = 0;
  for (const auto& [name, t] : cases().items()) {
    if (name[0] == '_') continue;
    for (const std::string& folder : t["folders"].get<std::vector<std::string>>()) {
      const std::string dir = qkv::testing::fixture_path("arch/" + folder);
      const auto tok = qkv::tokenize::load_tokenizer(dir);
      EXPECT_EQ(tok->vocab_size(), t["vocab_size"].get<std::int64_t>()) << folder;
      // A byte-level vocabulary's GGUF (llama.cpp's converter) gives transformers' ids too.
      const auto gguf = tok->kind() == "SentencePiece" ? nullptr : qkv::tokenize::load_tokenizer(dir + ".gguf");
      for (const auto& c : t["cases"]) {
        const std::string text = c["text"];
        const Ids want = c["ids"];
        EXPECT_EQ(tok->encode(text), want) << folder << " (" << tok->kind() << ") " << shown(text);
        EXPECT_EQ(tok->decode(want), c["decode"].get<std::string>()) << folder << " decode of " << shown(text);
        if (gguf) EXPECT_EQ(gguf->encode(text), want) << folder << ".gguf " << shown(text);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 200);
}

// tokenizer.model and the GGUF files: sentencepiece's ids (with specials in the text as text,
// which is what sentencepiece does with them: encode_ordinary; encode matches them as tokens, as
// llama.cpp does), its decode.
TEST(TokenizerCases, ModelFilesAndGgufGiveSentencepieceIds) {
  int checked = 0;
  for (const auto& [name, t] : cases().items()) {
    if (name[0] == '_' || !t["cases"][0].contains("ids_sentencepiece")) continue;
    for (const std::string& folder : t["folders"].get<std::vector<std::string>>()) {
      const std::string dir = qkv::testing::fixture_path("arch/" + folder);
      std::vector<std::pair<std::string, std::shared_ptr<const qkv::tokenize::Tokenizer>>> sources;
      sources.emplace_back("tokenizer.model", std::make_shared<qkv::tokenize::SentencePiece>(
                                                  qkv::tokenize::SentencePiece::from_model_file(dir + "/tokenizer.model")));
      sources.emplace_back(folder + ".gguf", qkv::tokenize::load_tokenizer(dir + ".gguf"));
      for (const auto& [what, tok] : sources) {
        EXPECT_EQ(tok->kind(), "SentencePiece") << what;
        for (const auto& c : t["cases"]) {
          const std::string text = c["text"];
          const Ids want = c["ids_sentencepiece"];
          EXPECT_EQ(tok->encode_ordinary(text), want) << folder << " " << what << " " << shown(text);
          bool specials = false;
          for (const std::string& s : tok->special_tokens()) specials = specials || text.find(s) != std::string::npos;
          if (!specials) EXPECT_EQ(tok->encode(text), want) << folder << " " << what << " " << shown(text);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

// The Llama-2-style tokenizer's particulars: the dummy prefix (sentencepiece and llama.cpp: also
// after a special token; transformers' Metaspace "first": only at the start, and not before a
// space), byte fallback for characters it lacks, specials whole, and the streamed decode.
TEST(SentencePiece, PrefixByteFallbackAndSpecials) {
  const std::string dir = qkv::testing::fixture_path("arch/llama2");
  const auto hf = qkv::tokenize::load_tokenizer(dir);
  const auto gguf = qkv::tokenize::load_tokenizer(dir + ".gguf");
  for (const auto& tok : {hf, gguf}) {
    EXPECT_TRUE(tok->strips_leading_space());
    EXPECT_EQ(tok->bos_id(), 1);
    EXPECT_EQ(tok->eos_id(), 2);
    EXPECT_TRUE(tok->add_bos());
    EXPECT_TRUE(tok->is_special(2));
    const Ids ids = tok->encode("a</s>b");
    ASSERT_EQ(std::count(ids.begin(), ids.end(), 2), 1) << "</s> is one token";
    // CJK this vocabulary lacks: <0xNN> tokens of its UTF-8 bytes, decoded back.
    const std::string cjk = "\xE6\x97\xA5\xE6\x9C\xAC";  // 日本
    const Ids c = tok->encode(cjk);
    EXPECT_EQ(tok->decode(c), cjk);
    // Streaming gives decode's text, the dummy prefix's space dropped once.
    qkv::tokenize::StreamDecoder sd(tok);
    std::string streamed;
    for (const std::int64_t id : tok->encode("In the beginning")) streamed += sd.push(id);
    streamed += sd.finish();
    EXPECT_EQ(streamed, "In the beginning");
  }
  // After a special token: llama.cpp prefixes "▁", transformers (Metaspace "first") does not.
  const Ids g = gguf->encode("</s>In"), h = hf->encode("</s>In");
  EXPECT_NE(g, h);
  EXPECT_EQ(gguf->token_string(g[1]).rfind("\xE2\x96\x81", 0), 0u) << gguf->token_string(g[1]);
}

TEST(SentencePiece, DamagedModelFilesAreNamed) {
  const std::string dir = qkv::testing::fixture_path("arch/llama2");
  std::ifstream f(dir + "/tokenizer.model", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  // Cut anywhere: a FormatError naming the file, never a crash.
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, bytes.size() / 3, bytes.size() - 1}) {
    try {
      qkv::tokenize::SentencePiece::from_model_bytes(bytes.substr(0, n), "cut.model");
    } catch (const qkv::FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("cut.model"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(qkv::tokenize::SentencePiece::from_model_bytes("\x0a\xff\xff\xff\xff\x0f", "huge.model"), qkv::FormatError);
  EXPECT_THROW(qkv::tokenize::SentencePiece::from_model_bytes("", "empty.model"), qkv::FormatError);
}

// llama.cpp's tokenizer test files for real vocabularies (models/llama.cpp/: ggml-vocab-*.gguf
// with .inp, the texts separated by "\n__ggml_vocab_test__\n", and .out, the expected ids of
// each, one line of space-separated ids per text).
void expect_llama_cpp_vocab(const std::string& name) {
  const std::string base = std::string(QKV_SOURCE_DIR) + "/models/llama.cpp/ggml-vocab-" + name + ".gguf";
  ASSERT_TRUE(fs::exists(base)) << base << " is missing: run `make models`";
  const auto tok = qkv::tokenize::load_tokenizer(base);
  std::ifstream in(base + ".inp"), out(base + ".out");
  std::stringstream si;
  si << in.rdbuf();
  std::string all = si.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (std::size_t at = 0;;) {
    const std::size_t e = all.find(sep, at);
    if (e == std::string::npos) break;
    texts.push_back(all.substr(at, e - at));
    at = e + sep.size();
  }
  std::vector<Ids> want;
  for (std::string line; std::getline(out, line);) {
    Ids ids;
    std::istringstream ls(line);
    for (std::int64_t id; ls >> id;) ids.push_back(id);
    want.push_back(ids);
  }
  ASSERT_EQ(texts.size(), want.size()) << name;
  for (std::size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok->encode(texts[i]), want[i]) << name << " text " << i << " " << shown(texts[i]);
}

TEST(LlamaCppVocab, Llama2SentencePiece) { expect_llama_cpp_vocab("llama-spm"); }
TEST(LlamaCppVocab, Phi3SentencePiece) { expect_llama_cpp_vocab("phi-3"); }
TEST(LlamaCppVocab, Qwen2ByteLevel) { expect_llama_cpp_vocab("qwen2"); }
TEST(LlamaCppVocab, Llama3ByteLevel) { expect_llama_cpp_vocab("llama-bpe"); }
TEST(LlamaCppVocab, Gpt2ByteLevel) { expect_llama_cpp_vocab("gpt-2"); }

}  // namespace
