// Bad files and bad inputs for the byte-level BPE: every error is typed, one
// line, and names the file and the token / line (or the byte offset, or the id).
#include <gtest/gtest.h>

#include "bpe_test_util.h"
#include "qkv/tokenize/pretokenize.h"

namespace qkv::tokenize::test {
namespace {

const std::string kMerges = "#version: 0.2\n";

// Loads vocab/merges text written to a scratch dir; must throw FormatError naming the file + `want`.
std::string bad_vocab(const std::string& vocab, std::initializer_list<std::string> want) {
  const std::string dir = write_model(vocab, kMerges);
  std::vector<std::string> all(want);
  std::string msg = expect_error<FormatError>([&] { ByteLevelBPE::from_folder(dir); }, {dir + "/vocab.json"});
  for (const auto& w : all) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  return msg;
}

std::string bad_merges(const std::string& merges, std::initializer_list<std::string> want,
                       const std::vector<std::string>& extra_tokens = {"ab", "abc"}) {
  const std::string dir = write_model(byte_vocab(extra_tokens).dump(), merges);
  std::vector<std::string> all(want);
  std::string msg = expect_error<FormatError>([&] { ByteLevelBPE::from_folder(dir); }, {dir + "/merges.txt"});
  for (const auto& w : all) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
  return msg;
}

TEST(BpeLoadErrors, MissingFilesNameThePath) {
  const fs::path d = scratch_dir();
  expect_error<IOError>([&] { ByteLevelBPE::from_folder((d / "nope").string()); },
                        {(d / "nope" / "vocab.json").string(), "cannot open", "No such file"});
  write_file(d / "vocab.json", byte_vocab().dump());
  expect_error<IOError>([&] { ByteLevelBPE::from_folder(d.string()); },
                        {(d / "merges.txt").string(), "cannot open"});
  expect_error<IOError>([&] { ByteLevelBPE::load(d.string(), (d / "merges.txt").string()); },
                        {d.string(), "directory"});
}

TEST(BpeLoadErrors, VocabNotAnObjectOrNotJson) {
  bad_vocab("{\"a\": 0,", {"not valid JSON"});
  bad_vocab("", {"not valid JSON"});
  bad_vocab("[\"a\", \"b\"]", {"must be a JSON object", "array"});
  bad_vocab("42", {"must be a JSON object", "number"});
  bad_vocab("{}", {"no tokens"});
}

TEST(BpeLoadErrors, VocabIdsMustBeDenseIntegers) {
  auto with = [](const std::string& key, const json& value) {
    json v = byte_vocab();
    v[key] = value;
    return v.dump();
  };
  bad_vocab(with("xy", 1.5), {"token \"xy\"", "must be an integer", "1.5"});
  bad_vocab(with("xy", "256"), {"token \"xy\"", "must be an integer", "\"256\""});
  bad_vocab(with("xy", nullptr), {"token \"xy\"", "must be an integer", "null"});
  bad_vocab(with("xy", json::array({1, 2})), {"token \"xy\"", "must be an integer", "[1,2]"});
  bad_vocab(with("xy", -1), {"token \"xy\"", "has id -1", "0..256"});
  bad_vocab(with("xy", 300), {"token \"xy\"", "has id 300", "257 tokens", "0..256"});  // a gap at 256
  bad_vocab(with("xy", 40), {"id 40 belongs to both \"(\" and \"xy\""});  // '(' is byte 40
  bad_vocab(with("xy", 18446744073709551615ull), {"token \"xy\"", "18446744073709551615"});
  // The same token twice (a JSON parser would silently keep the last one).
  std::string dup = byte_vocab().dump();
  dup.insert(1, "\"zz\": 256, \"zz\": 257, ");
  bad_vocab(dup, {"token \"zz\" appears twice"});
}

TEST(BpeLoadErrors, MergesMalformedLinesNameTheLine) {
  bad_merges(kMerges + "a b\nab\n", {"line 3", "malformed", "\"ab\""});
  bad_merges(kMerges + "a b c\n", {"line 2", "malformed", "\"a b c\""});
  bad_merges(kMerges + "a  b\n", {"line 2", "malformed"});
  bad_merges(kMerges + " a\n", {"line 2", "malformed"});
  bad_merges(kMerges + "a \n", {"line 2", "malformed"});
  bad_merges(kMerges + "a b\n\nab c\n", {"line 3", "empty line"});
  bad_merges("a b\n\t\n", {"line 2", "malformed", "\"\\t\""});  // the #version line is optional
}

TEST(BpeLoadErrors, MergesMustStayInsideTheVocab) {
  bad_merges(kMerges + "a b\nab c\nxy c\n", {"line 4", "token \"xy\"", "not in vocab.json"});
  bad_merges(kMerges + "a xy\n", {"line 2", "token \"xy\"", "not in vocab.json"});
  bad_merges(kMerges + "a b\nb c\n", {"line 3", "result \"bc\"", "not in vocab.json"});
  bad_merges(kMerges + "a b\nab c\na b\n", {"line 4", "duplicate merge \"a b\"", "already on line 2"});
}

TEST(BpeLoadErrors, GoodVariantsLoad) {
  // CRLF line endings, no #version line, no final newline, empty merges: all fine (as in HF tokenizers).
  for (const std::string merges : {"#version: 0.2\r\na b\r\nab c\r\n", "a b\nab c", "#version: 0.2\n", ""}) {
    const auto bpe = ByteLevelBPE::from_folder(write_model(byte_vocab({"ab", "abc"}).dump(), merges));
    EXPECT_EQ(bpe.vocab_size(), 258);
    const auto ids = bpe.encode("abc");
    EXPECT_EQ(bpe.decode(ids), "abc");
    if (merges.find("ab c") != std::string::npos) EXPECT_EQ(ids, std::vector<std::int64_t>{257}) << show(merges);
    else EXPECT_EQ(ids, (std::vector<std::int64_t>{'a', 'b', 'c'})) << show(merges);
  }
}

TEST(BpeInputErrors, InvalidUtf8NamesTheOffset) {
  const auto& bpe = reference_bpe();
  auto bad = [&](const std::string& text, std::initializer_list<std::string> want) {
    expect_error<ValueError>([&] { bpe.encode(text); }, want);
  };
  bad("abcdefg\xff", {"tokenize: invalid UTF-8 at byte 7 (0xff)"});
  bad("\x80", {"invalid UTF-8 at byte 0 (0x80)", "continuation byte"});
  bad("ok \xC0\xAF", {"at byte 3 (0xc0)", "overlong"});
  bad("x\xE0\x80\x80", {"at byte 1 (0xe0)", "byte 2 (0x80) cannot follow"});  // overlong 3-byte
  bad("\xED\xA0\x80", {"at byte 0 (0xed)", "byte 1 (0xa0)"});                  // surrogate U+D800
  bad("\xF4\x90\x80\x80", {"at byte 0 (0xf4)", "byte 1 (0x90)"});              // above U+10FFFF
  bad("\xF5\x80\x80\x80", {"at byte 0 (0xf5)", "never appears"});
  bad("caf\xC3", {"at byte 3 (0xc3)", "ends inside"});
  bad("\xE2\x82", {"at byte 0 (0xe2)", "ends inside", "2 of its bytes"});
  bad("caf\xC3(", {"at byte 3 (0xc3)", "byte 4 (0x28) cannot follow"});
  bad("<|endoftext|>\xff<|endoftext|>", {"at byte 13 (0xff)"});
  std::vector<std::string_view> pieces;
  expect_error<ValueError>([&] { Gpt2PreTokenizer().split("a b\xFF", pieces); },
                           {"pre-tokenize: invalid UTF-8 at byte 3 (0xff)"});
  expect_error<ValueError>([&] { bpe.encode_ordinary("ab\xC3"); }, {"tokenize: invalid UTF-8 at byte 2 (0xc3)"});
  bad(std::string("a\0b\xfe", 4), {"at byte 3 (0xfe)"});
  EXPECT_EQ(bpe.encode(std::string("a\0b", 3)), bpe.encode(std::string("a\0b", 3)));  // NUL is valid text
}

TEST(BpeInputErrors, OutOfRangeIdsAreIndexErrors) {
  const auto& bpe = reference_bpe();
  expect_error<IndexError>([&] { bpe.decode({5, 1000}); }, {"decode", "token id 1000", "1000 tokens", "0..999"});
  expect_error<IndexError>([&] { bpe.decode({-1}); }, {"token id -1", "0..999"});
  expect_error<IndexError>([&] { bpe.decode_bytes({1, 2, 1 << 30}); }, {"token id 1073741824"});
  expect_error<IndexError>([&] { bpe.token_bytes(1000); }, {"token id 1000"});
  // A failed push leaves the stream decoder as it was.
  StreamDecoder sd(std::make_shared<ByteLevelBPE>(bpe));
  std::vector<std::int64_t> euro;  // U+20AC as its three one-byte tokens
  for (unsigned char b : std::string("\xE2\x82\xAC")) euro.push_back(*bpe.token_to_id(byte_char(b)));
  std::string out;
  for (std::size_t i = 0; i + 1 < euro.size(); ++i) out += sd.push(euro[i]);
  // An id past the vocabulary (a padded embedding row a model generated) stands for no text.
  EXPECT_EQ(sd.push(5000), "");
  expect_error<IndexError>([&] { sd.push(-7); }, {"token id -7"});
  out += sd.push(euro.back());
  out += sd.finish();
  EXPECT_EQ(out, "\xE2\x82\xAC");
}

}  // namespace
}  // namespace qkv::tokenize::test
