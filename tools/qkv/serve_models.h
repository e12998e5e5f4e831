// The models of `qkv serve`: each --model path loaded as a text model (a scheduler over its
// network, its tokenizer and chat template) or an embedding model (a batcher over a
// sentence-transformers folder), by what the path holds.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/kernels/qgemm.h"
#include "qkv/serve/server.h"

namespace qkv::tool {

struct ServeModelOptions {
  std::int64_t slots = 4;
  std::int64_t context = 0;  // 0: the model's positions, at most kDefaultServeContext
  std::int64_t max_queue = 64;
  std::int64_t prefill_chunk = 256;
  std::string chat_template_file;  // replaces the text models' own templates
  kernels::QActivations activations = kernels::QActivations::F32;  // Llama family with quantized weights
  infer::KVType kv_cache = infer::KVType::F32;
  // --model-alias: NAME (another name of the only model served) or NAME=ID (of the model whose
  // id is ID, its file or folder name).
  std::vector<std::string> aliases;
};

// Positions per slot when --ctx is not given (a model's full context would give every slot a
// cache of, e.g., 8192 positions).
inline constexpr std::int64_t kDefaultServeContext = 4096;

struct ServedModels {
  std::vector<serve::TextModel> text;
  std::vector<serve::EmbeddingModel> embedding;
  std::string summary;  // "model a (text, 4 slots x 2048 positions), model b (embeddings)"
};

// Text models through infer::load_language_model, BERT folders as sentence embedders. IOError /
// FormatError naming the path for a missing or unsupported model; ValueError for a chat template
// that does not parse or a model without a tokenizer, or an alias that names no model (or
// NAME alone with several models served).
ServedModels load_served_models(const std::vector<std::string>& paths, const ServeModelOptions& o);

}  // namespace qkv::tool
