// One growing token sequence and its KV cache: a chat conversation across turns. Tokens are
// fed (prefilled in one forward pass) or pushed one at a time as they are generated; a new turn
// re-synchronises the session with the conversation's tokens, keeping the common prefix in the
// cache and computing only what follows it (a turn costs its new tokens, not the whole chat).
//
//   infer::Session s(lm.model, 4096);
//   s.sync(lm.chat_prompt(messages));           // prefill (only the part not already cached)
//   while (...) { id = sampler.next(s.logits().data(), V); s.push(id); }
//
// Thread safety: one session per thread at a time; the model may be shared by many sessions.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/infer/kv_cache.h"

namespace qkv::infer {

class Session {
 public:
  // A session of at most max_len tokens (1 <= max_len <= model.max_positions(), ValueError
  // otherwise). The cache's memory is reserved, not touched, until tokens fill it.
  Session(std::shared_ptr<const CausalLM> model, std::int64_t max_len);

  const CausalLM& model() const { return *model_; }
  std::int64_t max_len() const { return max_len_; }
  const std::vector<std::int64_t>& tokens() const { return tokens_; }
  std::int64_t length() const { return static_cast<std::int64_t>(tokens_.size()); }

  // Makes the session hold exactly `ids` (non-empty): the longest prefix it shares with what the
  // session holds stays cached, the rest is computed in one forward pass (at least the last
  // token, whose logits are then logits()). Returns the number of tokens computed. ValueError
  // when ids is empty or longer than max_len, IndexError for an id outside the vocabulary —
  // before anything changes.
  std::int64_t sync(const std::vector<std::int64_t>& ids);
  // Appends one token and computes its logits. ValueError when the session is full.
  void push(std::int64_t id);
  // Logits [V] of the last token computed (empty before any).
  const std::vector<float>& logits() const { return logits_; }
  // Forgets every token (the cache's memory stays reserved).
  void reset();

 private:
  void feed(const std::vector<std::int64_t>& ids);
  std::shared_ptr<const CausalLM> model_;
  std::int64_t max_len_;
  KVCache cache_;
  std::vector<std::int64_t> tokens_;
  std::vector<float> logits_;
};

}  // namespace qkv::infer
