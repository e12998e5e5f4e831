// The small interface generation needs from a model (docs/design.md: infer/ takes any
// model that offers it): logits of new tokens given a KV cache.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/infer/kv_cache.h"

namespace qkv::infer {

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual std::int64_t vocab_size() const = 0;
  // Longest sequence (prompt + generated) the model accepts (its position table).
  virtual std::int64_t max_positions() const = 0;
  // A cache with `batch` slots of `max_len` positions, shaped for this model.
  virtual KVCacheOptions cache_options(std::int64_t batch, std::int64_t max_len) const = 0;
  // ids I64 [B, Tn]: row b holds n_new[b] new tokens (the rest is padding, ignored), which
  // continue sequence b of the cache at positions cache.length(b) ... Appends their keys and
  // values to the cache and advances it. Returns float32 logits of the last new token of each
  // sequence [B, V] (rows with n_new[b] == 0 are unspecified), or of every new token
  // [B, Tn, V] when all_logits. Never records autograd history.
  virtual Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, KVCache& cache,
                                bool all_logits = false) const = 0;

  // The model's sizes for reports (bench generate, inspect): name and value pairs such as
  // {"layers", 30}, {"d_model", 576}, {"heads", 9}, {"kv_heads", 3}, {"vocab", 49152}.
  virtual std::vector<std::pair<std::string, std::int64_t>> sizes() const { return {}; }

  // The element type of the caches cache_options describes: float32 (the default) or float16
  // (KVType; set once, before the model is shared between threads).
  void set_kv_type(KVType t) { kv_type_ = t; }
  KVType kv_type() const { return kv_type_; }

 private:
  KVType kv_type_ = KVType::F32;
};

}  // namespace qkv::infer
