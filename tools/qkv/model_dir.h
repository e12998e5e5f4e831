// A GPT-2 folder as `qkv generate`, `qkv tokenize` and `qkv bench generate` use it:
// config.json + model.safetensors, and (optional for ids-only use) vocab.json + merges.txt.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/models/gpt2.h"
#include "qkv/tokenize/bpe.h"

namespace qkv::tool {

// The tokenizer of DIR. IOError naming DIR and the missing file when vocab.json or
// merges.txt is absent and `required` (else nullopt); FormatError for malformed files.
std::optional<tokenize::ByteLevelBPE> load_tokenizer(const std::string& dir, bool required, const char* why);

// "1,2,3" or "1 2 3" -> ids. ValueError naming the entry that is not an integer.
std::vector<std::int64_t> parse_ids(const std::string& text, const char* flag);

}  // namespace qkv::tool
