// Byte-level BPE properties beyond the recorded cases: random round trips,
// streaming decode, the merge loop on hand-made vocabularies, special-token
// splitting, and the UTF-8 helpers.
#include <gtest/gtest.h>

#include <random>

#include "bpe_test_util.h"

namespace qkv::tokenize::test {
namespace {

using Ids = std::vector<std::int64_t>;

// A seeded generator of valid UTF-8 text drawing code points from many ranges.
class TextGen {
 public:
  explicit TextGen(std::uint64_t seed) : rng_(seed) {}
  std::string next(int max_code_points) {
    std::string s;
    const int n = static_cast<int>(rng_() % static_cast<std::uint64_t>(max_code_points + 1));
    for (int i = 0; i < n; ++i) {
      if (rng_() % 40 == 0) {  // now and then a special token or a piece of one, or a contraction
        static const char* bits[] = {"<|endoftext|>", "<|", "|>", "'s", "'ll", "'", "<|endoftext", " <|endoftext|> "};
        s += bits[rng_() % 8];
        continue;
      }
      utf8::append_code_point(code_point(), s);
    }
    return s;
  }

 private:
  char32_t in(char32_t lo, char32_t hi) { return lo + static_cast<char32_t>(rng_() % (hi - lo + 1)); }
  char32_t code_point() {
    static const char32_t spaces[] = {0x20,   0x20,   0x20,   0x09,   0x0A,   0x0D,   0x0B,   0x0C,   0x85,
                                      0xA0,   0x1680, 0x2000, 0x2005, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F,
                                      0x3000, 0x200B, 0xFEFF, 0x180E, 0x2060, 0x1C,   0x1F,   0xAD};
    switch (rng_() % 16) {
      case 0: case 1: case 2: return in(0x20, 0x7E);            // ASCII printable
      case 3: return spaces[rng_() % std::size(spaces)];        // spaces and look-alikes
      case 4: return in(0x00, 0x1F);                            // controls
      case 5: return in(0x80, 0x24F);                           // C1, Latin-1, Latin Extended
      case 6: return in(0x300, 0x36F);                          // combining marks
      case 7: return in(0x370, 0x52F);                          // Greek, Cyrillic
      case 8: return in(0x600, 0x6FF);                          // Arabic
      case 9: return in(0x900, 0x97F);                          // Devanagari
      case 10: return in(0x4E00, 0x9FFF);                       // CJK
      case 11: return in(0xAC00, 0xD7A3);                       // Hangul
      case 12: return in(0x1F300, 0x1FAFF);                     // emoji (4 bytes)
      case 13: return in(0x20000, 0x2A6DF);                     // CJK extension B (4 bytes)
      case 14: return rng_() % 2 ? in(0xE000, 0xFFFD) : in(0xF0000, 0x10FFFF);  // BMP tail, planes 15-16
      default: return in(0x10000, 0x1FFFF);                     // plane 1, assigned or not
    }
  }
  std::mt19937_64 rng_;
};

TEST(BpeRoundTrip, RandomValidUtf8) {
  const auto& bpe = reference_bpe();
  TextGen gen(20261201);
  for (int k = 0; k < 3000; ++k) {
    const std::string s = gen.next(k < 2900 ? 40 : 400);
    ASSERT_FALSE(utf8::find_invalid(s).has_value());
    const Ids ids = bpe.encode(s);
    ASSERT_EQ(bpe.decode(ids), s) << "case " << k << ": " << show(s);
    // Streaming: chunks are whole characters and add up to the text.
    StreamDecoder sd(std::make_shared<ByteLevelBPE>(bpe));
    std::string all;
    for (const auto id : ids) {
      const std::string chunk = sd.push(id);
      ASSERT_FALSE(utf8::find_invalid(chunk).has_value()) << "case " << k << ": chunk " << show(chunk);
      all += chunk;
    }
    all += sd.finish();
    ASSERT_EQ(all, s) << "case " << k;
  }
}

TEST(BpeRoundTrip, RandomIdsStreamLikeDecode) {
  // Random ids (half of them one-byte tokens, so mostly invalid UTF-8): the stream equals decode(),
  // every chunk is valid UTF-8, and decode() itself is always valid UTF-8.
  const auto& bpe = reference_bpe();
  std::mt19937_64 rng(7);
  for (int k = 0; k < 2000; ++k) {
    Ids ids(rng() % 20);
    for (auto& id : ids) id = static_cast<std::int64_t>(rng() % 2 ? 1 + rng() % 256 : rng() % 1000);
    const std::string text = bpe.decode(ids);
    ASSERT_FALSE(utf8::find_invalid(text).has_value());
    StreamDecoder sd(std::make_shared<ByteLevelBPE>(bpe));
    std::string all;
    for (const auto id : ids) {
      const std::string chunk = sd.push(id);
      ASSERT_FALSE(utf8::find_invalid(chunk).has_value());
      all += chunk;
    }
    all += sd.finish();
    ASSERT_EQ(all, text) << "case " << k;
    if (!utf8::find_invalid(bpe.decode_bytes(ids))) {
      ASSERT_EQ(text, bpe.decode_bytes(ids));
    }
  }
}

TEST(BpeStreamDecoder, HoldsBackPartialCharacters) {
  const auto& bpe = reference_bpe();
  auto byte_id = [&](unsigned char b) { return *bpe.token_to_id(byte_char(b)); };
  StreamDecoder sd(std::make_shared<ByteLevelBPE>(bpe));
  EXPECT_EQ(sd.push(byte_id('a')), "a");
  EXPECT_EQ(sd.push(byte_id(0xF0)), "");      // U+1F600 = F0 9F 98 80
  EXPECT_EQ(sd.push(byte_id(0x9F)), "");
  EXPECT_EQ(sd.push(byte_id(0x98)), "");
  EXPECT_EQ(sd.push(byte_id(0x80)), "\U0001F600");
  EXPECT_EQ(sd.push(byte_id(0xE2)), "");
  EXPECT_EQ(sd.push(byte_id('x')), "\uFFFDx");  // E2 then 'x': the E2 can no longer become a character
  EXPECT_EQ(sd.push(byte_id(0xFF)), "\uFFFD");  // never valid: out at once
  EXPECT_EQ(sd.push(byte_id(0xE2)), "");
  EXPECT_EQ(sd.push(byte_id(0x82)), "");
  EXPECT_EQ(sd.finish(), "\uFFFD");             // a cut-off character at the end: one U+FFFD, as decode()
  EXPECT_EQ(sd.finish(), "");
  EXPECT_EQ(sd.push(*bpe.eos_id()), "<|endoftext|>");
  // The decoder keeps its own handle on the tables.
  std::optional<StreamDecoder> keep;
  {
    const ByteLevelBPE local = ByteLevelBPE::from_folder(fixture("gpt2_tiny"));
    keep.emplace(std::make_shared<ByteLevelBPE>(local));
  }
  EXPECT_EQ(keep->push(byte_id('z')), "z");
}

// A tokenizer on the 256 byte tokens plus `extra`, with `merges` (one "a b" per entry).
ByteLevelBPE tiny(const std::vector<std::string>& extra, const std::vector<std::string>& merges) {
  std::string m = "#version: 0.2\n";
  for (const auto& x : merges) m += x + "\n";
  return ByteLevelBPE::from_folder(write_model(byte_vocab(extra).dump(), m));
}

TEST(BpeMerges, LowestRankFirstThenLeftmost) {
  // Expected ids checked against HF tokenizers' BPE on the same vocab and merges.
  const auto t1 = tiny({"bc", "ab"}, {"b c", "a b"});  // bc=256 (rank 0), ab=257 (rank 1)
  EXPECT_EQ(t1.encode("abc"), (Ids{'a', 256}));
  EXPECT_EQ(t1.encode("ab"), (Ids{257}));
  const auto t2 = tiny({"aa", "aaa"}, {"a a", "aa a"});  // aa=256, aaa=257
  EXPECT_EQ(t2.encode("aaa"), (Ids{257}));
  EXPECT_EQ(t2.encode("aaaa"), (Ids{256, 256}));
  EXPECT_EQ(t2.encode("aaaaa"), (Ids{256, 257}));
  const auto t3 = tiny({"ab", "ba", "aba"}, {"a b", "b a", "ab a"});  // ab=256, ba=257, aba=258
  EXPECT_EQ(t3.encode("aba"), (Ids{258}));
  EXPECT_EQ(t3.encode("bab"), (Ids{'b', 256}));
  EXPECT_EQ(t3.encode("ababa"), (Ids{256, 258}));
  // Merges never cross pre-token boundaries: " ab" is one piece, "a b" three.
  const std::string sp = byte_char(' ');
  const auto t4 = tiny({sp + "a", sp + "ab"}, {sp + " a", sp + "a b"});
  EXPECT_EQ(t4.encode(" ab"), (Ids{257}));
  EXPECT_EQ(t4.encode("a b"), (Ids{'a', ' ', 'b'}));
}

TEST(BpeMerges, BytesWithoutATokenAreDropped) {
  // HF's BPE without an unk token skips characters it has no token for; so does qkv.
  const json v = {{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}};
  const auto bpe = ByteLevelBPE::from_folder(write_model(v.dump(), "#version: 0.2\na b\n"));
  EXPECT_EQ(bpe.encode("axb"), (Ids{3}));  // x dropped; a and b are then neighbours and merge (HF: [3] too)
  EXPECT_EQ(bpe.encode("ab c"), (Ids{3, 2}));
  EXPECT_EQ(bpe.encode("x"), Ids{});
  EXPECT_FALSE(bpe.eos_id().has_value());
}

TEST(BpeSpecialTokens, LeftmostLongestLikeAddedTokens) {
  const auto bpe = tiny({"<|a|>", "<|a|>b|>", "<|endoftext|>", "<|x"}, {});
  const std::int64_t a = 256, ab = 257, eot = 258;
  EXPECT_EQ(bpe.eos_id(), eot);
  EXPECT_EQ(bpe.special_tokens(), (std::vector<std::string>{"<|a|>", "<|a|>b|>", "<|endoftext|>"}));
  EXPECT_EQ(bpe.encode("<|a|>"), (Ids{a}));
  EXPECT_EQ(bpe.encode("<|a|>b|>"), (Ids{ab}));  // the longer special wins at the same start
  EXPECT_EQ(bpe.encode("<|a|>b"), (Ids{a, 'b'}));
  EXPECT_EQ(bpe.encode("x<|endoftext|><|a|>y"), (Ids{'x', eot, a, 'y'}));
  EXPECT_EQ(bpe.encode("<|<|a|>"), (Ids{'<', '|', a}));
  EXPECT_EQ(bpe.encode("<|x"), (Ids{'<', '|', 'x'}));  // "<|x" is a vocab entry but not "<|...|>": not special
  EXPECT_EQ(bpe.decode({a, ab, eot}), "<|a|><|a|>b|><|endoftext|>");
}

TEST(BpeUtf8, MaximalSubpartsAsUnicodeTable3_8) {
  // Unicode 15 section 3.9, table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  // -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d (what Rust's from_utf8_lossy gives).
  std::string out;
  EXPECT_EQ(utf8::append_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", true, out), 13u);
  EXPECT_EQ(out, "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("ab\xF0\x9F\x98", false, out), 2u);  // a truncated tail waits
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("\xED\xA0\x80", false, out), 3u);  // a surrogate is invalid at once: 3 x U+FFFD
  EXPECT_EQ(out, "\uFFFD\uFFFD\uFFFD");
}

TEST(BpeUtf8, ScanFollowsTable3_7) {
  auto kind = [](const std::string& s) {
    const auto q = utf8::scan(reinterpret_cast<const unsigned char*>(s.data()), s.size());
    return std::pair{q.kind, q.len};
  };
  using K = utf8::SeqKind;
  EXPECT_EQ(kind("\x7F"), std::pair(K::Valid, std::size_t{1}));
  EXPECT_EQ(kind("\xC2\x80"), std::pair(K::Valid, std::size_t{2}));
  EXPECT_EQ(kind("\xC1\xBF"), std::pair(K::Invalid, std::size_t{1}));
  EXPECT_EQ(kind("\xE0\xA0\x80"), std::pair(K::Valid, std::size_t{3}));
  EXPECT_EQ(kind("\xE0\x9F\x80"), std::pair(K::Invalid, std::size_t{1}));
  EXPECT_EQ(kind("\xED\x9F\xBF"), std::pair(K::Valid, std::size_t{3}));
  EXPECT_EQ(kind("\xED\xA0\x80"), std::pair(K::Invalid, std::size_t{1}));
  EXPECT_EQ(kind("\xEF\xBF\xBF"), std::pair(K::Valid, std::size_t{3}));
  EXPECT_EQ(kind("\xF0\x90\x80\x80"), std::pair(K::Valid, std::size_t{4}));
  EXPECT_EQ(kind("\xF0\x8F\xBF\xBF"), std::pair(K::Invalid, std::size_t{1}));
  EXPECT_EQ(kind("\xF4\x8F\xBF\xBF"), std::pair(K::Valid, std::size_t{4}));
  EXPECT_EQ(kind("\xF4\x90\x80\x80"), std::pair(K::Invalid, std::size_t{1}));
  EXPECT_EQ(kind("\xF1\x80\x80"), std::pair(K::Truncated, std::size_t{3}));
  EXPECT_EQ(kind("\xF1\x80\x41"), std::pair(K::Invalid, std::size_t{2}));
  EXPECT_EQ(kind("\xF8\x88\x80\x80\x80"), std::pair(K::Invalid, std::size_t{1}));
  // Every code point encodes to a sequence scan accepts whole.
  for (char32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    utf8::append_code_point(cp, s);
    ASSERT_EQ(kind(s), std::pair(K::Valid, s.size())) << std::hex << static_cast<unsigned>(cp);
  }
  std::string s;
  EXPECT_THROW(utf8::append_code_point(0xD800, s), ValueError);
  EXPECT_THROW(utf8::append_code_point(0x110000, s), ValueError);
}

}  // namespace
}  // namespace qkv::tokenize::test
