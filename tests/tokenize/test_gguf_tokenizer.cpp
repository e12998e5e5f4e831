// Tokenizers read from GGUF files (tokenize::bpe_from_gguf): SmolLM2-135M-Instruct's own
// vocabulary (models/SmolLM2-135M-Instruct.Q4_1.gguf from `make models`; this test fails, never
// skips, without it) against Hugging Face's ids (tests/fixtures/tokenizers/smollm2.json), and
// small files written with io::write_gguf for the keys' errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "qkv/io/gguf.h"
#include "qkv/io/gguf_writer.h"
#include "tokenizer_test_util.h"

namespace qkv::tokenize::test {
namespace {

std::string smollm2_path() { return std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

TEST(GgufTokenizer, SmolLM2MatchesHuggingFace) {
  ASSERT_TRUE(fs::exists(smollm2_path())) << smollm2_path() << " is missing: run `make models` first";
  const auto tok = bpe_from_gguf(io::GGUFFile::open_header(smollm2_path()));
  const json ref = read_json(tokenizer_dir("smollm2.json"));
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<std::int64_t>());
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.bos_id(), ref["bos_token_id"].get<std::int64_t>());  // <|im_start|>
  EXPECT_EQ(tok.eos_id(), ref["eos_token_id"].get<std::int64_t>());  // <|im_end|>
  EXPECT_EQ(tok.pad_id(), 2);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_FALSE(tok.add_bos());
  EXPECT_EQ(tok.special_tokens().size(), 17u);  // the 17 control tokens, ids 0..16
  EXPECT_TRUE(tok.is_special(16));
  EXPECT_FALSE(tok.is_special(17));
  std::size_t n = 0, differ = 0;
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = ids_of(c["ids"]);
    EXPECT_EQ(tok.encode(text), ids) << show(text);
    EXPECT_EQ(tok.encode_ordinary(text), c.contains("ids_ordinary") ? ids_of(c["ids_ordinary"]) : ids) << show(text);
    EXPECT_EQ(tok.decode(ids), text) << show(text);
    differ += c.contains("ids_transformers_gguf");
    ++n;
  }
  EXPECT_GE(n, 150u);
  EXPECT_GE(differ, 1u);  // where digits split first matters ("x  1")
  // The chat markup: control tokens whole, the rest byte-level BPE.
  EXPECT_EQ(tok.encode("<|im_start|>user\nhi<|im_end|>"), (std::vector<std::int64_t>{1, 4093, 198, 6004, 2}));
}

// A GGUF file holding `meta` (no tensors), opened.
io::GGUFFile gguf_with(const io::GGUFMetadata& meta) {
  const std::string path = (scratch_dir() / "t.gguf").string();
  io::write_gguf(path, meta, {});
  return io::GGUFFile::open(path);
}

io::GGUFMetadata small_meta() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_char(static_cast<unsigned char>(b)));
  tokens.push_back("ab");
  tokens.push_back("<s>");
  std::vector<std::int64_t> types(tokens.size(), 1);
  types.back() = 3;
  using io::GGUFMeta;
  return {{"tokenizer.ggml.model", GGUFMeta::string("gpt2")},
          {"tokenizer.ggml.pre", GGUFMeta::string("smollm")},
          {"tokenizer.ggml.tokens", GGUFMeta::string_array(tokens)},
          {"tokenizer.ggml.token_type", GGUFMeta::int_array(io::GGUFType::I32, types)},
          {"tokenizer.ggml.merges", GGUFMeta::string_array({"a b"})},
          {"tokenizer.ggml.bos_token_id", GGUFMeta::u32(257)},
          {"tokenizer.ggml.add_bos_token", GGUFMeta::boolean(true)}};
}

TEST(GgufTokenizer, ReadsTheKeysOfAFile) {
  const auto tok = bpe_from_gguf(gguf_with(small_meta()));
  EXPECT_EQ(tok.vocab_size(), 258);
  EXPECT_EQ(tok.encode("<s>ab12"), (std::vector<std::int64_t>{257, 256, '1', '2'}));
  EXPECT_EQ(tok.bos_id(), 257);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_FALSE(tok.eos_id().has_value());
}

TEST(GgufTokenizer, KeyErrorsNameTheFileAndKey) {
  auto bad = [](const std::string& key, const io::GGUFMeta* value, std::initializer_list<std::string> want) {
    io::GGUFMetadata meta;
    for (auto& kv : small_meta()) {
      if (kv.first != key) meta.push_back(kv);
      else if (value) meta.emplace_back(key, *value);
    }
    const io::GGUFFile f = gguf_with(meta);
    std::vector<std::string> all{f.source()};
    all.insert(all.end(), want.begin(), want.end());
    const std::string msg = expect_error<FormatError>([&] { bpe_from_gguf(f); }, {});
    for (const auto& w : all) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  };
  using io::GGUFMeta;
  bad("tokenizer.ggml.model", nullptr, {"no tokenizer", "tokenizer.ggml.model"});
  const GGUFMeta llama = GGUFMeta::string("llama");
  bad("tokenizer.ggml.model", &llama, {"tokenizer.ggml.model", "not a byte-level BPE vocabulary"});
  const GGUFMeta number = GGUFMeta::u32(3);
  bad("tokenizer.ggml.tokens", &number, {"tokenizer.ggml.tokens"});
  bad("tokenizer.ggml.tokens", nullptr, {"tokenizer.ggml.tokens"});
  bad("tokenizer.ggml.merges", nullptr, {"tokenizer.ggml.merges", "missing"});
  bad("tokenizer.ggml.pre", &number, {"tokenizer.ggml.pre"});
  bad("tokenizer.ggml.bos_token_id", &llama, {"tokenizer.ggml.bos_token_id"});
  bad("tokenizer.ggml.bos_token_id", nullptr, {"tokenizer.ggml.add_bos_token", "bos_token_id"});
  const GGUFMeta strings = GGUFMeta::string_array({"1"});
  bad("tokenizer.ggml.token_type", &strings, {"tokenizer.ggml.token_type"});
  const GGUFMeta big = GGUFMeta::int_array(io::GGUFType::I64, std::vector<std::int64_t>(258, 1LL << 40));
  bad("tokenizer.ggml.token_type", &big, {"tokenizer.ggml.token_type[0]", "1099511627776", "not a token type"});
}

}  // namespace
}  // namespace qkv::tokenize::test
