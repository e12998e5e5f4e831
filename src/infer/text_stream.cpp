// Token-by-token text with stop strings (see text_stream.h).
#include "qkv/infer/text_stream.h"

#include <algorithm>

#include "qkv/core/error.h"

namespace qkv::infer {

TextStream::TextStream(std::shared_ptr<const tokenize::Tokenizer> tokenizer, TextStreamOptions o)
    : decoder_(std::move(tokenizer)), o_(std::move(o)) {
  for (const auto& s : o_.stops) {
    if (s.empty()) throw ValueError("an empty stop string would stop at once");
    longest_ = std::max(longest_, s.size());
  }
}

std::string TextStream::release(std::size_t n) {
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  released_ += n;
  text_ += out;
  return out;
}

// Releases what held_ allows: up to the first stop string (its end with Keep, its start with
// Drop), else all of it (Keep) or all but a tail that could begin a stop string (Drop).
std::string TextStream::scan() {
  if (o_.stops.empty()) return release(held_.size());
  // A stop string may begin in text already released (Keep releases at once): search from the
  // last longest_ - 1 released bytes on. No stop string lies wholly in them (it would have
  // stopped the stream), so every match found ends in held_.
  const std::size_t back = o_.mode == StopMode::Keep ? std::min(text_.size(), longest_ - 1) : 0;
  const std::string window = text_.substr(text_.size() - back) + held_;
  std::size_t end = std::string::npos, start = std::string::npos;
  for (const auto& s : o_.stops) {
    const std::size_t at = window.find(s);
    if (at == std::string::npos) continue;
    if (at + s.size() < end || end == std::string::npos) end = at + s.size();
    start = std::min(start, at);
  }
  if (o_.mode == StopMode::Keep) {
    if (end == std::string::npos) return release(held_.size());
    stopped_ = true;
    std::string out = release(end - back);
    held_.clear();
    return out;
  }
  if (start != std::string::npos) {
    stopped_ = true;
    std::string out = release(start);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of a stop string; release the rest. A stop
  // string is UTF-8, so such a tail starts on a character boundary.
  std::size_t keep = 0;
  for (const auto& s : o_.stops)
    for (std::size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  return release(held_.size() - keep);
}

std::string TextStream::push(std::int64_t id) {
  if (stopped_) return {};
  if (std::find(o_.skip.begin(), o_.skip.end(), id) != o_.skip.end()) return {};
  held_ += decoder_.push(id);
  return scan();
}

std::string TextStream::finish() {
  if (stopped_) return {};
  // The decoder's tail (U+FFFD) could complete a stop string only if the stop string holds one.
  held_ += decoder_.finish();
  std::string out = scan();
  if (!stopped_) out += release(held_.size());
  return out;
}

}  // namespace qkv::infer
