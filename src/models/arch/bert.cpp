// BERT in the registry: the encoder of sentence embeddings (models/bert.h, infer/embed.h), read
// from Hugging Face and sentence-transformers folders.
#include "arch.h"
#include "qkv/models/registry.h"

namespace qkv::models {

QKV_REGISTER_FAMILY(bert, ModelFamily{.name = "bert", .display = "BERT", .model_types = {"bert"}, .role = ModelRole::Encoder})

}  // namespace qkv::models
