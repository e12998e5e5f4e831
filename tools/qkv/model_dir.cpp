// Model folders, id lists and prompt files for the generation commands (model_dir.h).
#include "model_dir.h"

#include <filesystem>
#include <string>

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
