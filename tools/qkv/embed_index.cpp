// The semantic-search index file (see embed_index.h).
#include "embed_index.h"

#include <map>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/tensors.h"

namespace qkv::tool {

void save_index(const std::string& path, const EmbeddingIndex& index) {
  nlohmann::json texts = index.texts;
  std::map<std::string, std::string> meta{{"format", "qkv-embedding-index"},
                                          {"texts", texts.dump()},
                                          {"model", index.model},
                                          {"dimension", std::to_string(index.embeddings.size(1))}};
  if (!index.lines.empty()) meta["lines"] = nlohmann::json(index.lines).dump();
  io::save_safetensors(path, {{"embeddings", index.embeddings}}, meta);
}

EmbeddingIndex load_index(const std::string& path) {
  const io::LoadedTensors f = io::load_safetensors(path);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end())
      throw FormatError(path + ": not a qkv embedding index (no metadata '" + key + "'; write one with qkv embed --out)");
    return it->second;
  };
  if (meta("format") != "qkv-embedding-index") throw FormatError(path + ": metadata 'format' is not qkv-embedding-index");
  EmbeddingIndex ix;
  ix.model = meta("model");
  nlohmann::json texts;
  try {
    texts = nlohmann::json::parse(meta("texts"));
  } catch (const std::exception& e) {
    throw FormatError(path + ": metadata 'texts' is not a JSON array: " + e.what());
  }
  if (!texts.is_array()) throw FormatError(path + ": metadata 'texts' is not a JSON array");
  for (const auto& t : texts) {
    if (!t.is_string()) throw FormatError(path + ": metadata 'texts' holds a non-string " + t.dump());
    ix.texts.push_back(t.get<std::string>());
  }
  if (const auto it = f.metadata.find("lines"); it != f.metadata.end()) {
    nlohmann::json lines;
    try {
      lines = nlohmann::json::parse(it->second);
    } catch (const std::exception& e) {
      throw FormatError(path + ": metadata 'lines' is not a JSON array: " + e.what());
    }
    if (!lines.is_array() || lines.size() != ix.texts.size())
      throw FormatError(path + ": metadata 'lines' must be an array of " + std::to_string(ix.texts.size()) + " line numbers");
    for (const auto& l : lines) {
      if (!l.is_number_integer() || l.get<std::int64_t>() < 1)
        throw FormatError(path + ": metadata 'lines' holds " + l.dump() + ", not a line number");
      ix.lines.push_back(l.get<std::int64_t>());
    }
  }
  ix.embeddings = f.at("embeddings");
  if (ix.embeddings.dim() != 2 || ix.embeddings.dtype() != DType::F32 ||
      ix.embeddings.size(0) != static_cast<std::int64_t>(ix.texts.size()))
    throw FormatError(path + ": 'embeddings' is " + std::string(dtype_name(ix.embeddings.dtype())) + " " +
                      ix.embeddings.shape_str() + ", expected float32 [" + std::to_string(ix.texts.size()) + ", C]");
  return ix;
}

}  // namespace qkv::tool
