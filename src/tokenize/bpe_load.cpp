// Reading GPT-2's vocab.json and merges.txt into ByteLevelBPE's tables, with
// errors that name the file and the token or line at fault.
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "bpe_impl.h"
#include "qkv/core/error.h"

namespace qkv::tokenize {

namespace {

using nlohmann::json;

bool is_special(const std::string& token) {
  return token.size() >= 4 && token.compare(0, 2, "<|") == 0 && token.compare(token.size() - 2, 2, "|>") == 0;
}

void read_vocab(ByteLevelBPE::Impl& m, const std::string& text, const std::string& path) {
  const std::string where = "vocab.json '" + path + "': ";
  const json j = parse_json_strict(text, where, "token");
  if (!j.is_object())
    throw FormatError(where + "the top level must be a JSON object {token: id}, got " + std::string(j.type_name()));
  const std::size_t v = j.size();
  if (v == 0) throw FormatError(where + "the object has no tokens");
  if (v > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw FormatError(where + std::to_string(v) + " tokens is more than qkv supports (2^31 - 1)");
  const std::string dense = "the ids of " + std::to_string(v) + " tokens must be exactly 0.." +
                            std::to_string(v - 1) + ", each once";
  std::vector<std::string> tokens;
  std::vector<bool> present;
  read_vocab_object(j, where, v, dense, tokens, present);  // v distinct ids below v: all present
  m.set_vocab(tokens, present);
  // GPT-2's special tokens: every "<|...|>" entry, matched whole in the raw text.
  for (std::size_t id = 0; id < v; ++id)
    if (is_special(tokens[id]))
      m.add_token({.content = tokens[id], .id = static_cast<std::int32_t>(id), .special = true}, where);
  if (const auto it = m.ids.find(std::string_view("<|endoftext|>")); it != m.ids.end()) m.eos = it->second;
}

void read_merges(ByteLevelBPE::Impl& m, const std::string& text, const std::string& path) {
  std::vector<std::size_t> line_of_rank;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF, as Rust's lines() allows
    if (line.starts_with("#version")) continue;
    const std::string where = "merges.txt '" + path + "' line " + std::to_string(line_no) + ": ";
    const std::size_t sp = line.find(' ');
    if (line.empty()) throw FormatError(where + "malformed: empty line (expected a merge \"a b\")");
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      throw FormatError(where + "malformed: expected two tokens separated by one space, got " + quote(line));
    m.add_merge(line.substr(0, sp), line.substr(sp + 1), where, "vocab.json",
                [&](std::int32_t rank) { return "on line " + std::to_string(line_of_rank[rank]); });
    line_of_rank.push_back(line_no);
  }
}

}  // namespace

ByteLevelBPE ByteLevelBPE::load(const std::string& vocab_json, const std::string& merges_txt) {
  const std::string vocab = read_text_file(vocab_json, "vocab.json");
  const std::string merges = read_text_file(merges_txt, "merges.txt");
  return parse(vocab, merges, vocab_json, merges_txt);
}

ByteLevelBPE ByteLevelBPE::parse(const std::string& vocab_json_text, const std::string& merges_txt_text,
                                 const std::string& vocab_name, const std::string& merges_name) {
  auto m = std::make_shared<Impl>();
  read_vocab(*m, vocab_json_text, vocab_name);
  read_merges(*m, merges_txt_text, merges_name);
  m->finish();
  return ByteLevelBPE(std::move(m));
}

ByteLevelBPE ByteLevelBPE::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "tokenizer.json", ec)) {
    const fs::path config = fs::path(dir) / "tokenizer_config.json";
    return from_tokenizer_json((fs::path(dir) / "tokenizer.json").string(),
                               fs::exists(config, ec) ? config.string() : std::string());
  }
  return load(dir + "/vocab.json", dir + "/merges.txt");
}

}  // namespace qkv::tokenize
