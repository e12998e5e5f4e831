// infer::TextStream: generated tokens -> text with stop strings, for every front end. Byte-by-byte
// tokens exercise every split point: pieces are whole UTF-8 characters, a stop string split
// across tokens (or inside a character's bytes) is found, Keep ends the text where the stop
// string ends and releases every piece at once, Drop ends it before the stop string and holds
// back only what could still begin one.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/infer/text_stream.h"
#include "qkv/tokenize/bpe.h"

namespace {

using i64 = std::int64_t;
using qkv::infer::StopMode;
using qkv::infer::TextStream;

std::shared_ptr<const qkv::tokenize::ByteLevelBPE> tiny_tokenizer() {
  return std::make_shared<qkv::tokenize::ByteLevelBPE>(
      qkv::tokenize::ByteLevelBPE::from_folder(std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny"));
}

// The ids of text, one byte per token (so every split point is exercised).
std::vector<i64> byte_ids(const qkv::tokenize::ByteLevelBPE& tok, const std::string& text) {
  std::vector<i64> ids;
  for (const char c : text) {
    for (i64 id = 0; id < tok.vocab_size(); ++id)
      if (tok.token_bytes(id) == std::string(1, c)) {
        ids.push_back(id);
        break;
      }
  }
  return ids;
}

bool starts_inside_a_character(const std::string& piece) {
  return !piece.empty() && (static_cast<unsigned char>(piece[0]) & 0xC0) == 0x80;
}

const std::string kText = "caf\xc3\xa9 and na\xc3\xafve END more text";

TEST(TextStream, WithoutStopsThePiecesAreWholeCharactersAndMakeTheText) {
  const auto tok = tiny_tokenizer();
  const auto ids = byte_ids(*tok, kText);
  ASSERT_EQ(tok->decode(ids), kText);
  for (StopMode mode : {StopMode::Keep, StopMode::Drop}) {
    TextStream ts(tok, {.mode = mode});
    std::string all;
    for (i64 id : ids) {
      const std::string piece = ts.push(id);
      EXPECT_FALSE(starts_inside_a_character(piece)) << "split character";
      all += piece;
    }
    all += ts.finish();
    EXPECT_EQ(all, kText);
    EXPECT_EQ(ts.text(), kText);
    EXPECT_EQ(ts.released(), kText.size());
    EXPECT_FALSE(ts.stopped());
  }
}

TEST(TextStream, StopStringsAcrossTokensKeepOrDrop) {
  const auto tok = tiny_tokenizer();
  const auto ids = byte_ids(*tok, kText);
  // A stop string that arrives a byte at a time; one inside a character's bytes; one that is
  // the whole rest; "ENX" is a held-back prefix that turns out not to be one.
  for (const std::string stop : {"END", " m", "\xc3\xaf", "na\xc3\xafve END more text", "t"}) {
    for (StopMode mode : {StopMode::Keep, StopMode::Drop}) {
      TextStream ts(tok, {.stops = {"ENX", stop}, .mode = mode});
      std::string all;
      std::size_t pushed = 0;
      for (i64 id : ids) {
        const std::string piece = ts.push(id);
        ++pushed;
        all += piece;
        // Keep holds nothing back: after each token, everything decoded so far is out (but for
        // an incomplete character).
        if (mode == StopMode::Keep && !ts.stopped()) {
          const std::string so_far = kText.substr(0, pushed);
          EXPECT_LE(so_far.size() - all.size(), 1u) << stop;
        }
        if (ts.stopped()) break;
      }
      all += ts.finish();
      EXPECT_TRUE(ts.stopped()) << stop;
      const std::size_t at = kText.find(stop);
      EXPECT_EQ(all, kText.substr(0, mode == StopMode::Keep ? at + stop.size() : at)) << stop;
      EXPECT_EQ(ts.text(), all);
      EXPECT_EQ(ts.push(ids[0]), "");  // nothing once stopped
      EXPECT_EQ(ts.finish(), "");
    }
  }
  // The first stop string to be complete wins, though another began earlier: "\xc3\xa9" is
  // complete at byte 5, "caf\xc3\xa9 and" (from byte 0) only at byte 9.
  for (StopMode mode : {StopMode::Keep, StopMode::Drop}) {
    TextStream ts(tok, {.stops = {"caf\xc3\xa9 and", "\xc3\xa9"}, .mode = mode});
    std::string all;
    for (i64 id : ids) all += ts.push(id);
    EXPECT_EQ(all, mode == StopMode::Keep ? "caf\xc3\xa9" : "caf");
  }
}

TEST(TextStream, SkippedIdsShowNoTextAndEmptyStopsAreRefused) {
  const auto tok = tiny_tokenizer();
  const auto ids = byte_ids(*tok, kText);
  TextStream ts(tok, {.skip = {ids[0]}});
  EXPECT_EQ(ts.push(ids[0]), "");
  EXPECT_EQ(ts.push(ids[1]), "a");
  try {
    TextStream bad(tok, {.stops = {"x", ""}});
    ADD_FAILURE() << "an empty stop string was accepted";
  } catch (const qkv::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("an empty stop string would stop at once"), std::string::npos) << e.what();
  }
}

}  // namespace
