// Generated tokens -> the text a client may be sent, token by token: whole UTF-8 characters only
// (tokenize::StreamDecoder), and never a piece of a stop string. Text that could still be the
// start of a stop string is held back until it cannot; when a stop string appears, the text
// before it is released and the rest (the stop string included, as OpenAI does) is dropped.
//
//   serve::TextStream ts(tokenizer, {"\n\n"});
//   for each token id: send(ts.push(id)); if (ts.stopped()) break;
//   send(ts.finish());
//
// Thread safety: one TextStream per response, used by one thread.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/tokenize/bpe.h"

namespace qkv::serve {

class TextStream {
 public:
  // stops: the stop strings (non-empty UTF-8). `skip`: tokens whose text is never shown (eos).
  TextStream(const tokenize::ByteLevelBPE& tokenizer, std::vector<std::string> stops,
             std::vector<std::int64_t> skip = {});
  // The text that token `id` releases (possibly empty). Nothing once stopped().
  std::string push(std::int64_t id);
  // The text still held back (an incomplete character becomes U+FFFD). Nothing once stopped().
  std::string finish();
  // True once a stop string appeared in the text.
  bool stopped() const { return stopped_; }
  // Bytes of text released so far (the offset of the next piece, for completion logprobs).
  std::size_t released() const { return released_; }

 private:
  std::string release(std::size_t n);

  tokenize::StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::vector<std::int64_t> skip_;
  std::string held_;  // decoded, not yet released
  bool stopped_ = false;
  std::size_t released_ = 0;
};

}  // namespace qkv::serve
