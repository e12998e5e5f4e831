// Attention maps of a trained model for one input: what `qkv heatmap` draws.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/io/checkpoint.h"

namespace qkv::models {

struct AttentionMap {
  std::string name;                         // e.g. "encoder.layers.0.self_attn", "decoder.layers.1.cross_attn"
  std::string kind;                         // "self" or "cross"
  int layer = 0;
  Tensor weights;                           // [H, Lq, Lk] float32, rows sum to 1 (0 for fully masked rows)
  std::vector<std::string> query_tokens;    // Lq labels
  std::vector<std::string> key_tokens;      // Lk labels
  std::vector<std::int64_t> head_ids;       // the model's number of each of the H heads (empty: 0..H-1)

  // The model's number of row h of weights.
  std::int64_t head_id(std::int64_t h) const { return head_ids.empty() ? h : head_ids[static_cast<std::size_t>(h)]; }
};

// Builds the model stored in `ckpt` and runs it on `input` (its own text format,
// e.g. space-separated token ids), returning every layer's attention maps.
// ValueError for an unknown model_type or a malformed input.
std::vector<AttentionMap> attention_maps_for(const io::Checkpoint& ckpt, const std::string& input);

// Per model type (each in its model's source file).
std::vector<AttentionMap> classifier_attention_maps(const io::Checkpoint& ckpt, const std::string& input);
std::vector<AttentionMap> seq2seq_attention_maps(const io::Checkpoint& ckpt, const std::string& input);

}  // namespace qkv::models
