// The semantic-search index of `qkv embed --out` / `qkv search`: a safetensors file with
//   embeddings  F32 [N, C]   L2-normalised sentence embeddings, row i = texts[i]
//   __metadata__ {"format": "qkv-embedding-index", "texts": JSON array of the N texts (any UTF-8),
//                 "model": the model folder, "dimension": "C"}
#pragma once
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::tool {

struct EmbeddingIndex {
  Tensor embeddings;               // F32 [N, C]
  std::vector<std::string> texts;  // N
  std::string model;
};

// Writes the index atomically.
void save_index(const std::string& path, const EmbeddingIndex& index);
// Reads an index; FormatError naming the file if it is not one (no metadata, counts that disagree).
EmbeddingIndex load_index(const std::string& path);

}  // namespace qkv::tool
