// Model folders, id lists and prompt files for the generation commands (model_dir.h).
#include "model_dir.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "qkv/core/error.h"

namespace qkv::tool {

std::shared_ptr<const tokenize::Tokenizer> load_tokenizer(const std::string& path, bool required, const char* why) {
  namespace fs = std::filesystem;
  if (auto t = tokenize::find_tokenizer(path)) return t;
  if (!required) return nullptr;
  std::error_code ec;
  for (const auto& [have, missing] : {std::pair{"vocab.json", "merges.txt"}, std::pair{"merges.txt", "vocab.json"}})
    if (fs::exists(fs::path(path) / have, ec) && !fs::exists(fs::path(path) / missing, ec))
      throw IOError("'" + path + "' has no " + missing + " (the tokenizer is needed " + why + ")");
  throw IOError("'" + path + "' has no tokenizer (" +
                (fs::is_regular_file(path, ec) ? std::string("no tokenizer.ggml.* keys")
                                               : std::string("tokenizer.json, tokenizer.model, vocab.json + merges.txt, "
                                                             "or vocab.txt")) +
                "; it is needed " + why + ")");
}

std::string role_needs(models::ModelRole role) {
  if (role == models::ModelRole::CausalLM)
    return "a causal language model: a GGUF file (" + models::gguf_architectures_list() + ") or a folder of model_type " +
           models::model_types_list(role);
  return "a sentence-embedding model: a folder of model_type " + models::model_types_list(role) +
         " (config.json, model.safetensors, vocab.txt, modules.json)";
}

void require_model_role(const std::string& path, models::ModelRole role, const std::string& cmd) {
  const models::ModelKind k = models::model_kind(path);
  if (!k.family || k.family->role == role) return;
  throw ValueError(cmd + ": " + path + " is a " + k.family->display + (k.gguf ? " GGUF file" : " folder") + "; qkv " + cmd +
                   " needs " + role_needs(role));
}

std::vector<std::int64_t> parse_ids(const std::string& text, const char* flag) {
  std::vector<std::int64_t> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && text[j] != ',' && text[j] != ' ' && text[j] != '\t' && text[j] != '\n') ++j;
    const std::string word = text.substr(i, j - i);
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || word.empty())
      throw ValueError(std::string(flag) + ": '" + word + "' is not a token id (give integers separated by commas)");
    ids.push_back(v);
    i = j;
  }
  return ids;
}

}  // namespace qkv::tool
