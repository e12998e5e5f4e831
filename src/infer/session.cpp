// Session (see session.h): one sequence's tokens and KV cache, kept across turns.
#include "qkv/infer/session.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "qkv/core/error.h"

namespace qkv::infer {

using i64 = std::int64_t;

Session::Session(std::shared_ptr<const CausalLM> model, i64 max_len)
    : model_(std::move(model)),
      max_len_(max_len),
      cache_([&] {
        if (!model_) throw ValueError("Session: no model");
        if (max_len < 1 || max_len > model_->max_positions())
          throw ValueError("Session: max_len must be in [1, " + std::to_string(model_->max_positions()) + "], got " +
                           std::to_string(max_len));
        return model_->cache_options(1, max_len);
      }()) {}

void Session::feed(const std::vector<i64>& ids) {
  const i64 n = static_cast<i64>(ids.size());
  const Tensor logits = model_->forward_cached(Tensor::from_vector(ids, {1, n}), {n}, cache_);
  const i64 V = model_->vocab_size();
  logits_.resize(static_cast<std::size_t>(V));
  std::memcpy(logits_.data(), logits.data<float>(), static_cast<std::size_t>(V) * sizeof(float));
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
}

i64 Session::sync(const std::vector<i64>& ids) {
  if (ids.empty()) throw ValueError("Session::sync: no tokens");
  if (static_cast<i64>(ids.size()) > max_len_)
    throw ValueError("Session: " + std::to_string(ids.size()) + " tokens do not fit the session's " +
                     std::to_string(max_len_) + " positions");
  const i64 V = model_->vocab_size();
  for (std::size_t t = 0; t < ids.size(); ++t)
    if (ids[t] < 0 || ids[t] >= V)
      throw IndexError("Session: token id " + std::to_string(ids[t]) + " at position " + std::to_string(t) +
                       " out of range [0, " + std::to_string(V) + ")");
  // The shared prefix stays; at least the last token is computed again for its logits.
  std::size_t keep = 0;
  while (keep < tokens_.size() && keep < ids.size() && tokens_[keep] == ids[keep]) ++keep;
  keep = std::min(keep, ids.size() - 1);
  // A model with recurrent layers (Qwen3.5) can only rewind to where its states can be rebuilt
  // (its start, or a checkpoint): the tokens after that are computed again.
  keep = static_cast<std::size_t>(cache_.rewind_point(0, static_cast<i64>(keep)));
  cache_.truncate(0, static_cast<i64>(keep));
  tokens_.resize(keep);
  feed(std::vector<i64>(ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end()));
  // The next sync usually shares all of these tokens (the next turn of a chat): recurrent states
  // are saved here, so that it never has to go back further (a no-op for a KV cache alone).
  cache_.checkpoint(0);
  return static_cast<i64>(ids.size() - keep);
}

void Session::push(i64 id) {
  if (length() >= max_len_)
    throw ValueError("Session: full (" + std::to_string(max_len_) + " positions); start over or raise the context");
  if (id < 0 || id >= model_->vocab_size())
    throw IndexError("Session: token id " + std::to_string(id) + " out of range [0, " +
                     std::to_string(model_->vocab_size()) + ")");
  feed({id});
}

void Session::reset() {
  cache_.reset();
  tokens_.clear();
  logits_.clear();
}

}  // namespace qkv::infer
