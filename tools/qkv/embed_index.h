// The semantic-search index of `qkv embed --out` / `qkv search`: a safetensors file with
//   embeddings  F32 [N, C]   L2-normalised sentence embeddings, row i = texts[i]
//   __metadata__ {"format": "qkv-embedding-index", "texts": JSON array of the N texts (any UTF-8),
//                 "model": the model folder, "dimension": "C",
//                 "lines": JSON array of each text's line number in the corpus (optional: 1..N)}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv::tool {

struct EmbeddingIndex {
  Tensor embeddings;               // F32 [N, C]
  std::vector<std::string> texts;  // N
  std::string model;
  std::vector<std::int64_t> lines;  // N line numbers in the corpus file (1-based); empty: 1..N

  // The corpus line of row i (1-based).
  std::int64_t line(std::int64_t i) const {
    return lines.empty() ? i + 1 : lines[static_cast<std::size_t>(i)];
  }
};

// Writes the index atomically.
void save_index(const std::string& path, const EmbeddingIndex& index);
// Reads an index; FormatError naming the file if it is not one (no metadata, counts that disagree).
EmbeddingIndex load_index(const std::string& path);

}  // namespace qkv::tool
