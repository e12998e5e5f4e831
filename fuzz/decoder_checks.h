// What a loaded decoder model (models/decoder.h) must do, checked by fuzz_model_folder and
// fuzz_gguf: its spec passes the model's own checks, and one forward pass over two tokens (the
// first and the last id) gives attention weights of the spec's shape, [H, T, T] per layer.
#pragma once
#include <algorithm>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/models/decoder.h"

namespace qkv::fuzz {

inline void exercise_decoder(const models::DecoderLM& m) {
  const models::DecoderSpec& s = m.spec();
  bool spec_ok = true;  // a loaded model's spec is one the model accepts
  try {
    models::check_decoder_spec(s);
  } catch (const Error& e) {
    std::fprintf(stderr, "loaded a spec check_decoder_spec refuses: %s\n", e.what());
    spec_ok = false;
  }
  QKV_FUZZ_CHECK(spec_ok);
  QKV_FUZZ_CHECK(m.weights().layers.size() == s.layers.size());
  const std::int64_t t = std::min<std::int64_t>(2, s.max_positions);
  std::vector<std::int64_t> ids = {0, s.vocab_size - 1};
  ids.resize(static_cast<std::size_t>(t));
  const models::AttentionWeights a = m.attention_weights(ids);
  QKV_FUZZ_CHECK(static_cast<std::int64_t>(a.layers.size()) == s.num_layers());
  for (const Tensor& w : a.layers) QKV_FUZZ_CHECK(w.sizes() == Shape({s.num_heads, t, t}));
}

}  // namespace qkv::fuzz
