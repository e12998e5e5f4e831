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

// The kind of model folder DIR is, from model_type in its config.json ("gpt2", "bert", ...
// as written there), or "" when it has no readable config.json with a model_type.
std::string model_folder_kind(const std::string& dir);
// How a kind is named in messages: "a GPT-2 folder", "a BERT / sentence-transformers folder",
// "a 'llama' folder".
std::string model_kind_phrase(const std::string& kind);
// ValueError when DIR is a model folder of a kind not in `kinds`, naming both, e.g.
//   "embed: tests/fixtures/gpt2_tiny is a GPT-2 folder; qkv embed needs a BERT /
//    sentence-transformers folder"
// (`needs` is the end of that sentence). A folder without a config.json passes: the
// loader then names the file that is missing.
void require_model_kind(const std::string& dir, const std::vector<std::string>& kinds, const std::string& cmd,
                        const std::string& needs);

// "1,2,3" or "1 2 3" -> ids. ValueError naming the entry that is not an integer.
std::vector<std::int64_t> parse_ids(const std::string& text, const char* flag);

}  // namespace qkv::tool
