// qkv's byte-level BPE against Hugging Face tokenizers: the cases recorded by
// tests/reference/make_bpe_fixtures.py in tests/fixtures/bpe_cases.json, with
// the tokenizer it trained (tests/fixtures/gpt2_tiny/{vocab.json,merges.txt}).
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <thread>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bpe_test_util.h"
#include "qkv/tokenize/pretokenize.h"

namespace qkv::tokenize::test {
namespace {

// Every chunk is valid UTF-8 (so none ends inside a character) and they add up to decode(ids).
void expect_stream_matches_decode(const ByteLevelBPE& bpe, const std::vector<std::int64_t>& ids,
                                  const std::string& what) {
  StreamDecoder sd(std::make_shared<ByteLevelBPE>(bpe));
  std::string all;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::string chunk = sd.push(ids[i]);
    EXPECT_FALSE(utf8::find_invalid(chunk).has_value()) << what << ": chunk after id #" << i << " is "
                                                        << show(chunk);
    all += chunk;
  }
  const std::string tail = sd.finish();
  EXPECT_FALSE(utf8::find_invalid(tail).has_value()) << what << ": finish() gave " << show(tail);
  all += tail;
  EXPECT_EQ(all, bpe.decode(ids)) << what;
  EXPECT_EQ(sd.finish(), "") << what << ": a second finish() must be empty";
}

TEST(BpeReference, FixtureFacts) {
  const auto& bpe = reference_bpe();
  const auto& cases = reference_cases();
  EXPECT_EQ(bpe.vocab_size(), cases["vocab_size"].get<std::int64_t>());
  EXPECT_EQ(bpe.vocab_size(), 1000);
  ASSERT_TRUE(bpe.eos_id().has_value());
  EXPECT_EQ(*bpe.eos_id(), cases["eos_id"].get<std::int64_t>());
  EXPECT_EQ(bpe.token_to_id("<|endoftext|>"), bpe.eos_id());
  EXPECT_EQ(bpe.special_tokens(), std::vector<std::string>{"<|endoftext|>"});
  EXPECT_EQ(bpe.token_bytes(*bpe.eos_id()), "<|endoftext|>");
  // vocab.json writes bytes in GPT-2's alphabet: ' ' is "Ġ" (U+0120), '\n' is "Ċ" (U+010A).
  const auto space = bpe.token_to_id("\xC4\xA0"), newline = bpe.token_to_id("\xC4\x8A");
  ASSERT_TRUE(space && newline);
  EXPECT_EQ(bpe.token_bytes(*space), " ");
  EXPECT_EQ(bpe.token_bytes(*newline), "\n");
  const auto the = bpe.token_to_id("\xC4\xA0the");  // "Ġthe": surely learnt from Genesis
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(bpe.token_bytes(*the), " the");
  EXPECT_EQ(bpe.encode(" the"), std::vector<std::int64_t>{*the});
  EXPECT_FALSE(bpe.token_to_id(" the").has_value());  // raw bytes are not how vocab.json writes tokens
  EXPECT_FALSE(bpe.token_to_id("no such token").has_value());
  // Every byte has a one-byte token.
  for (int b = 0; b < 256; ++b) {
    const auto id = bpe.token_to_id(byte_char(static_cast<unsigned char>(b)));
    ASSERT_TRUE(id.has_value()) << "byte " << b;
    EXPECT_EQ(bpe.token_bytes(*id), std::string(1, static_cast<char>(b)));
  }
}

TEST(BpeReference, EncodeMatchesHuggingFace) {
  const auto& bpe = reference_bpe();
  const auto& cases = reference_cases()["encode"];
  ASSERT_GE(cases.size(), 150u);
  std::set<std::string> groups;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    groups.insert(c["group"].get<std::string>());
    EXPECT_EQ(bpe.encode(text), ids_of(c["ids"])) << c["group"].get<std::string>() << " " << show(text);
  }
  std::size_t ordinary = 0;
  for (const auto& c : cases) {  // HF split_special_tokens=True: "<|endoftext|>" is plain text
    if (!c.contains("ids_ordinary")) continue;
    const std::string text = c["text"].get<std::string>();
    EXPECT_EQ(bpe.encode_ordinary(text), ids_of(c["ids_ordinary"])) << show(text);
    ++ordinary;
  }
  EXPECT_GE(ordinary, 10u);
  EXPECT_EQ(bpe.encode_ordinary("plain text"), bpe.encode("plain text"));
  for (const char* g : {"empty", "whitespace", "unicode-space", "contraction", "digits", "punctuation", "accents",
                        "emoji", "cjk", "rtl", "indic", "tabs", "special", "long", "mixed", "control", "corpus"})
    EXPECT_TRUE(groups.count(g)) << "fixture lacks the group " << g;
}

TEST(BpeReference, EncodeIsStableAcrossCallsAndThreads) {
  // The word cache must not change results: encode every case twice, then in four threads at once.
  const auto& bpe = reference_bpe();
  const auto& cases = reference_cases()["encode"];
  std::vector<std::string> texts;
  for (const auto& c : cases) texts.push_back(c["text"].get<std::string>());
  std::vector<std::vector<std::int64_t>> first;
  for (const auto& t : texts) first.push_back(bpe.encode(t));
  for (std::size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(bpe.encode(texts[i]), first[i]) << show(texts[i]);
  const ByteLevelBPE fresh = ByteLevelBPE::from_folder(fixture("gpt2_tiny"));  // empty cache, shared by the threads
  std::vector<int> bad(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (std::size_t k = 0; k < texts.size(); ++k) {
        const std::size_t i = (k * 7 + static_cast<std::size_t>(t) * 13) % texts.size();
        if (fresh.encode(texts[i]) != first[i]) ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

TEST(BpeReference, DecodeOfEncodeIsIdentityOnEveryCase) {
  const auto& bpe = reference_bpe();
  for (const auto& c : reference_cases()["encode"]) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = bpe.encode(text);
    EXPECT_EQ(bpe.decode(ids), text) << show(text);
    EXPECT_EQ(bpe.decode_bytes(ids), text) << show(text);
    expect_stream_matches_decode(bpe, ids, show(text));
  }
}

TEST(BpeReference, DecodeMatchesHuggingFace) {
  const auto& bpe = reference_bpe();
  const auto& cases = reference_cases()["decode"];
  ASSERT_GE(cases.size(), 50u);
  int invalid = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"].get<std::string>();
    const auto ids = ids_of(c["ids"]);
    const std::string want = c["text"].get<std::string>();
    EXPECT_EQ(bpe.decode(ids), want) << name << ": ids " << c["ids"].dump();
    const std::string raw = bpe.decode_bytes(ids);
    std::string hex;
    for (unsigned char b : raw) {
      static const char* d = "0123456789abcdef";
      hex += d[b >> 4];
      hex += d[b & 15];
    }
    EXPECT_EQ(hex, c["bytes_hex"].get<std::string>()) << name;
    const bool valid = !utf8::find_invalid(raw).has_value();
    EXPECT_EQ(valid, c["valid_utf8"].get<bool>()) << name;
    EXPECT_EQ(want.find("\xEF\xBF\xBD") == std::string::npos, valid) << name << ": U+FFFD iff invalid";
    invalid += !valid;
    expect_stream_matches_decode(bpe, ids, name);
  }
  EXPECT_GE(invalid, 20);
}

// How the pre-tokenizer treats one code point c, from the number of pieces of
// "a"+c, "1"+c and "!"+c: L joins letters, N digits, P other symbols; S is \s.
char classify(const Gpt2PreTokenizer& pre, char32_t cp, std::vector<std::string_view>& pieces) {
  std::string c;
  utf8::append_code_point(cp, c);
  for (const auto& [probe, cls] : {std::pair{"a", 'L'}, std::pair{"1", 'N'}, std::pair{"!", 'P'}}) {
    const std::string s = probe + c;
    pieces.clear();
    pre.split(s, pieces);
    if (pieces.size() == 1) return cls;
  }
  return 'S';
}

// Whether PCRE2's Unicode tables (the ones the pre-tokenizer uses) leave cp unassigned (\p{Cn}).
bool pcre2_unassigned(char32_t cp) {
  static pcre2_code* cn = [] {
    int err = 0;
    PCRE2_SIZE off = 0;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>("^\\p{Cn}$"), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &off,
                         nullptr);
  }();
  static thread_local pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  std::string c;
  utf8::append_code_point(cp, c);
  return pcre2_match(cn, reinterpret_cast<PCRE2_SPTR>(c.data()), c.size(), 0, 0, md, nullptr) >= 0;
}

TEST(BpePreTokenizer, EveryCodePointClassMatchesHuggingFace) {
  // Hugging Face runs the GPT-2 regex with Oniguruma; qkv with PCRE2. Their \s,
  // \p{L} and \p{N} must agree on all 1,112,064 scalar values -- except where
  // the Unicode versions differ: a code point assigned (as a letter or digit)
  // after PCRE2's Unicode version is unassigned for PCRE2, so a symbol ('P').
  const auto& runs = reference_cases()["code_point_classes"];
  ASSERT_GT(runs.size(), 100u);
  const Gpt2PreTokenizer pre;
  std::vector<std::string_view> pieces;
  std::size_t checked = 0, mismatches = 0, newer_unicode = 0;
  std::string first;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto begin = runs[r][0].get<char32_t>();
    const auto end = r + 1 < runs.size() ? runs[r + 1][0].get<char32_t>() : char32_t{0x110000};
    const char want = runs[r][1].get<std::string>()[0];
    if (want == 'X') continue;  // surrogates: not text
    for (char32_t cp = begin; cp < end; ++cp, ++checked) {
      const char got = classify(pre, cp, pieces);
      if (got == want) continue;
      if (got == 'P' && (want == 'L' || want == 'N') && pcre2_unassigned(cp)) {
        ++newer_unicode;
        continue;
      }
      if (mismatches++ < 20) {
        char buf[64];
        std::snprintf(buf, sizeof buf, " U+%04X: HF %c, qkv %c;", static_cast<unsigned>(cp), want, got);
        first += buf;
      }
    }
  }
  EXPECT_EQ(checked, 0x110000u - 0x800u);
  EXPECT_EQ(mismatches, 0u) << "first ones:" << first;
  // Debian 12: PCRE2 Unicode 14.0.0 vs tokenizers 0.23's Oniguruma: 9392 code points (9272 L, 120 N).
  EXPECT_LT(newer_unicode, 20000u);
  std::printf("PCRE2 Unicode %s: %zu code points are letters/digits only in HF's newer Unicode\n",
              Gpt2PreTokenizer::unicode_version().c_str(), newer_unicode);
}

std::vector<std::string> split(const std::string& s) {
  static const Gpt2PreTokenizer pre;
  std::vector<std::string_view> v;
  pre.split(s, v);
  return {v.begin(), v.end()};
}

TEST(BpePreTokenizer, WhitespaceAndContractions) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split(""), V{});
  EXPECT_EQ(split("a  b"), (V{"a", " ", " b"}));  // \s+(?!\S) leaves the last space to " ?\p{L}+"
  EXPECT_EQ(split("hi   "), (V{"hi", "   "}));
  EXPECT_EQ(split("\t\n"), (V{"\t\n"}));
  EXPECT_EQ(split("a \n\n b"), (V{"a", " \n\n", " b"}));
  EXPECT_EQ(split("I'm they'll DON'T"), (V{"I", "'m", " they", "'ll", " DON", "'", "T"}));
  EXPECT_EQ(split("it's'"), (V{"it", "'s", "'"}));
  EXPECT_EQ(split("3.14 1,000"), (V{"3", ".", "14", " 1", ",", "000"}));
  EXPECT_EQ(split("a\u00A0b"), (V{"a", "\u00A0", "b"}));          // NBSP is \s, and only ' ' prefixes a word
  EXPECT_EQ(split("a\u00A0 b"), (V{"a", "\u00A0", " b"}));
  EXPECT_EQ(split("a\u200Bb"), (V{"a", "\u200B", "b"}));          // ZWSP is not \s: a symbol
  EXPECT_EQ(split("!\u200B\uFEFF?"), (V{"!\u200B\uFEFF?"}));      // ... that joins punctuation runs
  EXPECT_EQ(split("!\u00A0"), (V{"!", "\u00A0"}));
  EXPECT_EQ(split("x\u2028\u2029 y"), (V{"x", "\u2028\u2029", " y"}));
  EXPECT_EQ(split("\u0085\u180E"), (V{"\u0085", "\u180E"}));      // NEL is \s, U+180E is not (Unicode >= 6.3)
  EXPECT_EQ(split("cafe\u0301"), (V{"cafe", "\u0301"}));          // a combining mark is not \p{L}
}

TEST(BpePreTokenizer, HugeRunsNeedNoRecursion) {
  // A million spaces before a word, a million letters, a million digits: one pass, no JIT stack overflow.
  const std::string spaces(1'000'000, ' ');
  auto v = split(spaces + "x");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].size(), 999'999u);
  EXPECT_EQ(v[1], " x");
  EXPECT_EQ(split(std::string(1'000'000, 'a')).size(), 1u);
  EXPECT_EQ(split(std::string(1'000'000, '7')).size(), 1u);
  EXPECT_EQ(split(spaces).size(), 1u);
  const auto& bpe = reference_bpe();
  EXPECT_EQ(bpe.decode(bpe.encode(spaces + "x" + std::string(100'000, 'e'))),
            spaces + "x" + std::string(100'000, 'e'));
}

}  // namespace
}  // namespace qkv::tokenize::test
