// Model folders, id lists and prompt files for the generation commands (model_dir.h).
#include "model_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::tool {

std::optional<tokenize::ByteLevelBPE> load_tokenizer(const std::string& dir, bool required, const char* why) {
  namespace fs = std::filesystem;
  for (const char* f : {"vocab.json", "merges.txt"})
    if (!fs::exists(fs::path(dir) / f)) {
      if (!required) return std::nullopt;
      throw IOError("'" + dir + "' has no " + f + " (the tokenizer is needed " + why + ")");
    }
  return tokenize::ByteLevelBPE::from_folder(dir);
}

std::string model_folder_kind(const std::string& dir) {
  std::ifstream f(std::filesystem::path(dir) / "config.json", std::ios::binary);
  if (!f) return "";
  try {
    const nlohmann::json j = nlohmann::json::parse(f);
    if (j.is_object() && j.contains("model_type") && j["model_type"].is_string()) return j["model_type"].get<std::string>();
  } catch (const std::exception&) {
  }
  return "";
}

std::string model_kind_phrase(const std::string& kind) {
  if (kind == "gpt2") return "a GPT-2 folder";
  if (kind == "bert") return "a BERT / sentence-transformers folder";
  return "a '" + kind + "' folder";
}

void require_model_kind(const std::string& dir, const std::vector<std::string>& kinds, const std::string& cmd,
                        const std::string& needs) {
  const std::string kind = model_folder_kind(dir);
  if (kind.empty() || std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) return;
  throw ValueError(cmd + ": " + dir + " is " + model_kind_phrase(kind) + "; qkv " + cmd + " needs " + needs);
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
