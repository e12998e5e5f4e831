// Model folders and files as the generation commands use them: their kind (from the registry),
// their tokenizer, token id lists.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/models/registry.h"
#include "qkv/tokenize/tokenizer.h"

namespace qkv::tool {

// The tokenizer of a model folder or GGUF file (tokenize::find_tokenizer). Without one: null, or
// (`required`) IOError naming the path and the files looked for (the missing half of vocab.json
// and merges.txt when one is there); FormatError for malformed files.
std::shared_ptr<const tokenize::Tokenizer> load_tokenizer(const std::string& path, bool required, const char* why);

// What a command needs of a model of `role`, from the registry: "a causal language model: a GGUF
// file (llama, qwen2, ...) or a folder of model_type gemma2, gpt2, ..." / "a sentence-embedding
// model: a folder of model_type bert (config.json, model.safetensors, vocab.txt, modules.json)".
std::string role_needs(models::ModelRole role);
// ValueError when PATH is a model folder or GGUF file of a family of another role, naming both,
// e.g. "embed: tests/fixtures/gpt2_tiny is a GPT-2 folder; qkv embed needs a sentence-embedding
// model: ...". A folder without a config.json, or of a model_type qkv does not know, passes: the
// loader then names what is missing or unsupported.
void require_model_role(const std::string& path, models::ModelRole role, const std::string& cmd);

// "1,2,3" or "1 2 3" -> ids. ValueError naming the entry that is not an integer.
std::vector<std::int64_t> parse_ids(const std::string& text, const char* flag);

}  // namespace qkv::tool
