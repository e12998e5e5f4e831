// WordPiece tokenizer: rules on a tiny vocabulary, bad vocabulary/config files, and exact id
// parity with Hugging Face's tokenizer on tests/fixtures/bert/sentences.txt
// (tests/reference/make_bert_fixtures.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/infer/embed.h"
#include "qkv/io/tensors.h"
#include "qkv/tokenize/wordpiece.h"
#include "testing/fixture.h"
#include "tokenize/bert_test_util.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::tokenize::WordPieceOptions;
using qkv::tokenize::WordPieceTokenizer;

namespace {

std::vector<std::string> tiny_vocab() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "##a", "a", "hello", "world", ",",
          "!", "cafe", "中", "文", "##b", "b", "the", ".", "x", "##x", "$", "3", "##5"};
}

WordPieceTokenizer tiny(WordPieceOptions o = {}) { return WordPieceTokenizer(tiny_vocab(), o, "tiny"); }

std::vector<std::string> toks(const WordPieceTokenizer& t, const std::string& s) {
  std::vector<std::string> out;
  for (auto id : t.encode(s)) out.push_back(t.id_to_token(id));
  return out;
}

using V = std::vector<std::string>;

}  // namespace

TEST(WordPiece, GreedyLongestMatchWithContinuations) {
  const auto t = tiny();
  EXPECT_EQ(toks(t, "unaffable"), (V{"un", "##aff", "##able"}));
  EXPECT_EQ(toks(t, "aa"), (V{"a", "##a"}));
  EXPECT_EQ(toks(t, "unknownword"), (V{"[UNK]"}));  // no full match: the whole word is [UNK]
  EXPECT_EQ(toks(t, "bb b"), (V{"b", "##b", "b"}));
}

TEST(WordPiece, SpecialTokensAroundAndTruncation) {
  WordPieceOptions o;
  o.max_length = 4;
  const auto t = tiny(o);
  EXPECT_EQ(t.encode_with_specials("hello"), (std::vector<std::int64_t>{2, 10, 3}));
  EXPECT_EQ(t.encode_with_specials(""), (std::vector<std::int64_t>{2, 3}));
  // [CLS] hello world [SEP]: the tail of the text is dropped, [SEP] kept.
  EXPECT_EQ(t.encode_with_specials("hello world hello world"), (std::vector<std::int64_t>{2, 10, 11, 3}));
  EXPECT_EQ(t.encode("hello world hello world").size(), 4u);  // bare ids are not truncated
}

TEST(WordPiece, BasicTokenizerRules) {
  const auto t = tiny();
  // Lower-casing, accent stripping (NFD then drop Mn), punctuation split (ASCII and Unicode P*).
  EXPECT_EQ(t.basic_tokenize("Hello, WORLD! Café"), (V{"hello", ",", "world", "!", "cafe"}));
  EXPECT_EQ(t.basic_tokenize("a\u00bfb\u2014c"), (V{"a", "\u00bf", "b", "\u2014", "c"}));  // ¿ (Po), — (Pd)
  EXPECT_EQ(t.basic_tokenize("$3.5"), (V{"$", "3", ".", "5"}));                          // $ is ASCII punctuation
  EXPECT_EQ(t.basic_tokenize("x\u2211y"), (V{"x\u2211y"}));                                // ∑ (Sm) is not punctuation
  // CJK ideographs become single words; other scripts stay whole.
  EXPECT_EQ(t.basic_tokenize("中文abc"), (V{"中", "文", "abc"}));
  EXPECT_EQ(t.basic_tokenize("ひらがな"), (V{"ひらかな"}));  // stays whole; が's dakuten (Mn after NFD) is stripped
  // Control and format characters vanish (they do not split); whitespace of any kind splits.
  EXPECT_EQ(t.basic_tokenize("a\x01" "b\u200bc\ufeff\x7f"), (V{"abc"}));
  EXPECT_EQ(t.basic_tokenize("a\tb\u00a0c\u3000d\u2028e\r\nf"), (V{"a", "b", "c", "d", "e", "f"}));
  EXPECT_EQ(t.basic_tokenize(std::string("a\0b", 3)), (V{"ab"}));
  // Unassigned code points (Cn) stay, as in tokenizers' BertNormalizer (private use and tags go).
  EXPECT_EQ(t.basic_tokenize("a\u0378b\ue000c\U000e0041d"), (V{"a\u0378bcd"}));
  EXPECT_EQ(t.basic_tokenize("   "), V{});
  // U+0130 lower-cases to i + U+0307, which accent stripping removes.
  EXPECT_EQ(t.basic_tokenize("\u0130"), (V{"i"}));
}

TEST(WordPiece, CaseAndAccentOptions) {
  WordPieceOptions cased;
  cased.do_lower_case = false;
  EXPECT_EQ(tiny(cased).basic_tokenize("Café"), (V{"Café"}));  // strip_accents follows do_lower_case
  cased.strip_accents = true;
  EXPECT_EQ(tiny(cased).basic_tokenize("Café"), (V{"Cafe"}));
  WordPieceOptions keep_accents;
  keep_accents.strip_accents = false;
  EXPECT_EQ(tiny(keep_accents).basic_tokenize("CAFÉ"), (V{"café"}));
  WordPieceOptions no_cjk;
  no_cjk.tokenize_chinese_chars = false;
  EXPECT_EQ(tiny(no_cjk).basic_tokenize("中文abc"), (V{"中文abc"}));
}

TEST(WordPiece, SpecialTokensInTextAreMatchedRaw) {
  const auto t = tiny();
  EXPECT_EQ(toks(t, "hello[SEP]world [MASK]"), (V{"hello", "[SEP]", "world", "[MASK]"}));
  EXPECT_EQ(toks(t, "[sep]"), (V{"[UNK]", "[UNK]", "[UNK]"}));  // lower-case: ordinary text "[", "sep", "]"
}

TEST(WordPiece, LongWordsAreUnknown) {
  const auto t = tiny();
  EXPECT_EQ(toks(t, std::string(100, 'x')).size(), 100u);  // x ##x ... (100 code points: still split)
  EXPECT_EQ(toks(t, std::string(101, 'x')), (V{"[UNK]"}));
  // The limit counts code points, not bytes: 100 two-byte letters are fine.
  std::string e;
  for (int i = 0; i < 100; ++i) e += "\u00e9";
  EXPECT_EQ(t.basic_tokenize(e).size(), 1u);
}

TEST(WordPiece, BatchesArePaddedWithMasks) {
  const auto t = tiny();
  const auto b = t.encode_batch({"hello world", "", "a"});
  ASSERT_EQ(b.input_ids.shape(), (Shape{3, 4}));
  EXPECT_EQ(b.input_ids.to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 10, 11, 3, 2, 3, 0, 0, 2, 9, 3, 0}));
  EXPECT_EQ(b.attention_mask.to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0}));
  EXPECT_EQ(b.lengths, (std::vector<std::int64_t>{4, 2, 3}));
  const auto e = t.encode_batch({});
  EXPECT_EQ(e.input_ids.shape(), (Shape{0, 0}));
}

TEST(WordPiece, InvalidUtf8IsAnError) {
  const auto t = tiny();
  const std::string msg = error_of<ValueError>([&] { t.encode("ok \xff bad"); });
  EXPECT_NE(msg.find("not valid UTF-8 (byte 3)"), std::string::npos) << msg;
  error_of<ValueError>([&] { t.encode("\xed\xa0\x80"); });  // a surrogate
  error_of<ValueError>([&] { t.encode("\xc0\xaf"); });      // an overlong '/'
}

TEST(WordPiece, BadVocabularies) {
  qkv::testing::TempDir d("wordpiece-vocab");
  qkv::testing::write_file(d.file("dup.txt"), "[PAD]\na\nb\na\n");
  std::string m = error_of<FormatError>([&] { WordPieceTokenizer::read_vocab(d.file("dup.txt")); });
  EXPECT_NE(m.find("dup.txt:4: duplicate token 'a' (first on line 2)"), std::string::npos) << m;
  qkv::testing::write_file(d.file("empty_line.txt"), "[PAD]\n\nb\n");
  m = error_of<FormatError>([&] { WordPieceTokenizer::read_vocab(d.file("empty_line.txt")); });
  EXPECT_NE(m.find("empty_line.txt:2: empty line"), std::string::npos) << m;
  qkv::testing::write_file(d.file("empty.txt"), "");
  m = error_of<FormatError>([&] { WordPieceTokenizer::read_vocab(d.file("empty.txt")); });
  EXPECT_NE(m.find("empty.txt: empty vocabulary file"), std::string::npos) << m;
  qkv::testing::write_file(d.file("bad.txt"), "[PAD]\nok\nb\xfe\n");
  m = error_of<FormatError>([&] { WordPieceTokenizer::read_vocab(d.file("bad.txt")); });
  EXPECT_NE(m.find("bad.txt:3: not valid UTF-8 (byte 2 of the line)"), std::string::npos) << m;
  m = error_of<IOError>([&] { WordPieceTokenizer::read_vocab(d.file("absent.txt")); });
  EXPECT_NE(m.find("absent.txt"), std::string::npos) << m;
  // A vocabulary without a special token the config names.
  m = error_of<ValueError>([&] { WordPieceTokenizer({"[PAD]", "[CLS]", "[SEP]"}, {}, "v.txt"); });
  EXPECT_NE(m.find("v.txt: the unknown token '[UNK]' is not in the vocabulary"), std::string::npos) << m;
}

TEST(WordPiece, BadFolders) {
  qkv::testing::TempDir d("wordpiece-folder");
  std::string m = error_of<IOError>([&] { WordPieceTokenizer::from_folder(d.file("nope")); });
  EXPECT_NE(m.find("nope does not exist"), std::string::npos) << m;
  m = error_of<IOError>([&] { WordPieceTokenizer::from_folder(d.str()); });
  EXPECT_NE(m.find("vocab.txt is missing"), std::string::npos) << m;
  std::string vocab;
  for (const auto& s : tiny_vocab()) vocab += s + "\n";
  qkv::testing::write_file(d.file("vocab.txt"), vocab);
  m = error_of<IOError>([&] { WordPieceTokenizer::from_folder(d.str()); });
  EXPECT_NE(m.find("tokenizer_config.json is missing"), std::string::npos) << m;
  qkv::testing::write_file(d.file("tokenizer_config.json"), "{\"do_lower_case\": 1}");
  m = error_of<FormatError>([&] { WordPieceTokenizer::from_folder(d.str()); });
  EXPECT_NE(m.find("tokenizer_config.json: 'do_lower_case' must be true or false, got 1"), std::string::npos) << m;
  qkv::testing::write_file(d.file("tokenizer_config.json"), "{\"do_lower_case\": true,");
  m = error_of<FormatError>([&] { WordPieceTokenizer::from_folder(d.str()); });
  EXPECT_NE(m.find("tokenizer_config.json: not valid JSON"), std::string::npos) << m;
  qkv::testing::write_file(d.file("tokenizer_config.json"), "{\"do_lower_case\": false, \"model_max_length\": 7}");
  const auto t = WordPieceTokenizer::from_folder(d.str());
  EXPECT_FALSE(t.options().do_lower_case);
  EXPECT_EQ(t.options().max_length, 7);
  qkv::testing::write_file(d.file("sentence_bert_config.json"), "{\"max_seq_length\": 5}");
  EXPECT_EQ(WordPieceTokenizer::from_folder(d.str()).options().max_length, 5);
  // special_tokens_map.json names the special tokens (a string or an AddedToken object).
  qkv::testing::write_file(d.file("special_tokens_map.json"), R"({"unk_token": {"content": "x", "lstrip": false}})");
  EXPECT_EQ(WordPieceTokenizer::from_folder(d.str()).unk_id(), 21);
  qkv::testing::write_file(d.file("special_tokens_map.json"), R"({"cls_token": "<s>"})");
  m = error_of<ValueError>([&] { WordPieceTokenizer::from_folder(d.str()); });
  EXPECT_NE(m.find("vocab.txt: the cls token '<s>' is not in the vocabulary"), std::string::npos) << m;
  qkv::testing::write_file(d.file("special_tokens_map.json"), R"({"cls_token": 5})");
  m = error_of<FormatError>([&] { WordPieceTokenizer::from_folder(d.str()); });
  EXPECT_NE(m.find("special_tokens_map.json: 'cls_token' must be a string, got 5"), std::string::npos) << m;
}

// Exact ids of Hugging Face's BertTokenizerFast on every committed sentence.
TEST(WordPieceParity, IdsEqualHuggingFace) {
  if (!qkv::testing::require_minilm()) return;
  const auto tok = WordPieceTokenizer::from_folder(qkv::testing::minilm_dir());
  EXPECT_EQ(tok.options().max_length, 256);
  EXPECT_EQ(tok.vocab_size(), 30522);
  EXPECT_EQ(tok.unk_id(), 100);
  const auto lines = infer::read_text_lines(qkv::testing::fixture_path("bert/sentences.txt"));
  const auto ref = qkv::testing::load_fixture("bert/tokens.safetensors");
  const auto ids = ref.at("ids").to_vector<std::int64_t>();
  const auto off = ref.at("offsets").to_vector<std::int64_t>();
  ASSERT_EQ(off.size(), lines.size() + 1) << "sentences.txt and tokens.safetensors disagree; re-run make_bert_fixtures.py";
  int mismatches = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::int64_t> want(ids.begin() + off[i], ids.begin() + off[i + 1]);
    const auto got = tok.encode_with_specials(lines[i]);
    if (got != want) {
      ++mismatches;
      std::string g, w;
      for (auto x : got) g += tok.id_to_token(x) + " ";
      for (auto x : want) w += tok.id_to_token(x) + " ";
      ADD_FAILURE() << "line " << i + 1 << " '" << lines[i] << "'\n  qkv: " << g << "\n  HF:  " << w;
    }
  }
  EXPECT_EQ(mismatches, 0);
}
