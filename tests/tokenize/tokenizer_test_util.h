// Helpers for the tokenizer.json / GGUF-vocabulary tests: the fixtures of
// tests/reference/make_tokenizer_fixtures.py (tests/fixtures/tokenizers/) and a GgufVocab made
// from a tokenizer.json, as a GGUF converter writes one.
#pragma once
#include <fstream>
#include <map>

#include "bpe_test_util.h"
#include "qkv/tokenize/gguf_vocab.h"

namespace qkv::tokenize::test {

inline std::string tokenizer_dir(const std::string& name) { return fixture("tokenizers/" + name); }

inline json read_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  return json::parse(f);
}

// tests/fixtures/tokenizers/cases.json (loaded once).
inline const json& tokenizer_cases() {
  static const json cases = read_json(tokenizer_dir("cases.json"));
  return cases;
}

// The fixture tokenizer `name` from its tokenizer.json alone (loaded once per name).
inline const ByteLevelBPE& fixture_tokenizer(const std::string& name) {
  static std::map<std::string, ByteLevelBPE> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end())
    it = loaded.emplace(name, ByteLevelBPE::from_tokenizer_json(tokenizer_dir(name) + "/tokenizer.json")).first;
  return it->second;
}

// The GGUF metadata a converter writes for a tokenizer.json: tokens by id (added tokens at their
// ids), merges as "a b", special added tokens as control (3), the others user-defined (4).
inline GgufVocab gguf_vocab_of(const json& tj, const std::string& pre) {
  GgufVocab g;
  g.model = "gpt2";
  g.pre = pre;
  std::size_t v = tj["model"]["vocab"].size();
  for (const auto& a : tj["added_tokens"]) v = std::max<std::size_t>(v, a["id"].get<std::size_t>() + 1);
  g.tokens.assign(v, "");
  g.token_types.assign(v, 1);
  for (const auto& [token, id] : tj["model"]["vocab"].items()) g.tokens[id.get<std::size_t>()] = token;
  for (const auto& a : tj["added_tokens"]) {
    const auto id = a["id"].get<std::size_t>();
    g.tokens[id] = a["content"].get<std::string>();
    g.token_types[id] = a["special"].get<bool>() ? 3 : 4;
  }
  g.merges.emplace();
  for (const auto& m : tj["model"]["merges"])
    g.merges->push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  return g;
}

}  // namespace qkv::tokenize::test
