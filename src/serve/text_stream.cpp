// Token-by-token text with stop strings (see text_stream.h).
#include "qkv/serve/text_stream.h"

#include <algorithm>

namespace qkv::serve {

TextStream::TextStream(const tokenize::ByteLevelBPE& tokenizer, std::vector<std::string> stops,
                       std::vector<std::int64_t> skip)
    : decoder_(tokenizer), stops_(std::move(stops)), skip_(std::move(skip)) {}

std::string TextStream::release(std::size_t n) {
  std::string out = held_.substr(0, n);
  held_.erase(0, n);
  released_ += n;
  return out;
}

std::string TextStream::push(std::int64_t id) {
  if (stopped_) return {};
  if (std::find(skip_.begin(), skip_.end(), id) != skip_.end()) return {};
  held_ += decoder_.push(id);
  // The earliest stop string in the held text ends the output before it.
  std::size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = release(cut);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of a stop string; release the rest. A stop
  // string is UTF-8, so such a tail starts on a character boundary.
  std::size_t keep = 0;
  for (const auto& s : stops_)
    for (std::size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  return release(held_.size() - keep);
}

std::string TextStream::finish() {
  if (stopped_) return {};
  held_ += decoder_.finish();
  // The decoder's tail (U+FFFD) could complete a stop string only if the stop string holds one.
  std::size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = release(cut);
    held_.clear();
    return out;
  }
  return release(held_.size());
}

}  // namespace qkv::serve
