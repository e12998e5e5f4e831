// Generated tokens -> the text to show, token by token: whole UTF-8 characters only
// (tokenize::StreamDecoder), with stop strings. One rule for every front end: `qkv generate` /
// `qkv chat` and Python keep the stop string (the text ends where it ends, StopMode::Keep); the
// HTTP server drops it, as OpenAI does (StopMode::Drop). The first point where the text contains
// a stop string ends it, even in the middle of a token's bytes.
//
// Keep releases each piece at once. Drop holds back text that could still be the start of a
// stop string until it cannot; when a stop string appears, the text before it is released and
// the rest (the stop string included) is dropped.
//
//   infer::TextStream ts(tokenizer, {.stops = {"\n\n"}, .skip = eos_ids});
//   for each token id: send(ts.push(id)); if (ts.stopped()) break;
//   send(ts.finish());
//
// Thread safety: one TextStream per sequence, used by one thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/tokenize/tokenizer.h"

namespace qkv::infer {

enum class StopMode { Keep, Drop };

struct TextStreamOptions {
  std::vector<std::string> stops;    // non-empty UTF-8 strings (an empty one is a ValueError)
  std::vector<std::int64_t> skip;    // tokens whose text is never shown (the end-of-sequence ids)
  StopMode mode = StopMode::Keep;
};

class TextStream {
 public:
  TextStream(std::shared_ptr<const tokenize::Tokenizer> tokenizer, TextStreamOptions o);
  // The text that token `id` releases (possibly empty). Nothing once stopped().
  std::string push(std::int64_t id);
  // The text still held back (an incomplete character becomes U+FFFD). Nothing once stopped().
  std::string finish();
  // True once a stop string appeared in the text.
  bool stopped() const { return stopped_; }
  // Bytes of text released so far (the offset of the next piece, for completion logprobs).
  std::size_t released() const { return released_; }
  // The text released so far.
  const std::string& text() const { return text_; }

 private:
  std::string release(std::size_t n);
  std::string scan();

  tokenize::StreamDecoder decoder_;
  TextStreamOptions o_;
  std::size_t longest_ = 0;  // the longest stop string's bytes
  std::string held_;         // decoded, not yet released
  std::string text_;         // released
  bool stopped_ = false;
  std::size_t released_ = 0;
};

}  // namespace qkv::infer
