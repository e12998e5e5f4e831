// libFuzzer target: the tokenizers qkv builds from a model's tokenizer files and from GGUF
// tokenizer metadata, checked through the generic interface (tokenizer_checks.h). The input is
// an archive (fuzz_util.h) of
//   tokenizer.json         -> ByteLevelBPE::from_tokenizer_json_text (with tokenizer_config.json
//                             when the archive has one), and find_tokenizer of a folder holding it
//                             (+ tokenizer_config.json, vocab.txt): byte-level BPE, SentencePiece-
//                             style BPE (byte_fallback, Metaspace / Prepend / Replace) or WordPiece
//   tokenizer.model        -> SentencePiece::from_model_bytes (sentencepiece's protobuf), and
//                             find_tokenizer of a folder holding it (+ tokenizer_config.json) when
//                             there is no tokenizer.json
//   gguf.json              -> tokenize::tokenizer_from_gguf_vocab ("gpt2": byte-level BPE,
//                             "llama": SentencePiece), the GGUF keys written as JSON
//                             {"model": .., "pre": .., "tokens": [..], "merges": [..],
//                              "token_types": [..], "scores": [..], "bos": n, "eos": n, "pad": n,
//                              "unk": n, "add_bos": b, "add_eos": b, "add_space_prefix": b}
//                             (entries of another JSON type are left out)
//   text                   the text to encode
// Every construction failure must be a qkv::Error. A built tokenizer then encodes the text
// (encode, encode_ordinary, encode_with_specials) and must give ids within its vocabulary, a
// StreamDecoder must give what decode() gives, special ids must be in range, and ByteLevelBPE's
// pre_tokenize must not fail on valid UTF-8 unless a pattern hits PCRE2's match limit (a
// ValueError).
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/tokenize/sentencepiece.h"
#include "qkv/tokenize/tokenizer.h"
#include "tokenizer_checks.h"

using namespace qkv;
using qkv::tokenize::ByteLevelBPE;
using qkv::tokenize::Tokenizer;
using nlohmann::json;

namespace {

// Builds a tokenizer: a qkv::Error is a refusal (fine, null), anything else escapes (a bug).
template <class F>
std::shared_ptr<const Tokenizer> attempt(const char* what, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    fuzz::note_refusal(what, e);
  }
  return nullptr;
}

// The GGUF keys from JSON, leaving out what has another type (the GGUF reader checks types).
tokenize::GgufVocab gguf_vocab(const json& j) {
  tokenize::GgufVocab g;
  if (!j.is_object()) return g;
  auto str = [&](const char* k) -> std::optional<std::string> {
    if (j.contains(k) && j[k].is_string()) return j[k].get<std::string>();
    return std::nullopt;
  };
  auto strings = [&](const char* k) -> std::optional<std::vector<std::string>> {
    if (!j.contains(k) || !j[k].is_array()) return std::nullopt;
    std::vector<std::string> out;
    for (const auto& e : j[k])
      if (e.is_string()) out.push_back(e.get<std::string>());
    return out;
  };
  auto integer = [&](const char* k) -> std::optional<std::int64_t> {
    if (j.contains(k) && j[k].is_number_integer()) return j[k].get<std::int64_t>();
    return std::nullopt;
  };
  auto boolean = [&](const char* k) -> std::optional<bool> {
    if (j.contains(k) && j[k].is_boolean()) return j[k].get<bool>();
    return std::nullopt;
  };
  g.model = str("model").value_or("");
  g.pre = str("pre");
  g.tokens = strings("tokens").value_or(std::vector<std::string>{});
  g.merges = strings("merges");
  if (j.contains("token_types") && j["token_types"].is_array())
    for (const auto& e : j["token_types"])
      if (e.is_number_integer()) g.token_types.push_back(e.get<std::int64_t>());
  if (j.contains("scores") && j["scores"].is_array())
    for (const auto& e : j["scores"])
      if (e.is_number()) {  // a GGUF float32: beyond its range is +-inf (the cast would be UB)
        const double d = e.get<double>();
        constexpr double kMax = std::numeric_limits<float>::max();
        g.scores.push_back(d > kMax    ? std::numeric_limits<float>::infinity()
                           : d < -kMax ? -std::numeric_limits<float>::infinity()
                                       : static_cast<float>(d));
      }
  g.bos_id = integer("bos"), g.eos_id = integer("eos"), g.pad_id = integer("pad"), g.unk_id = integer("unk");
  g.add_bos = boolean("add_bos"), g.add_eos = boolean("add_eos");
  g.add_space_prefix = boolean("add_space_prefix");
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::Scratch scratch;
  const auto files = fuzz::parse_archive({reinterpret_cast<const char*>(data), size});
  const auto get = [&](const char* name) -> std::optional<std::string> {
    const auto it = files.find(name);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  const std::string text = get("text").value_or("");
  auto run = [&](const std::shared_ptr<const Tokenizer>& tok) {
    if (tok) fuzz::exercise_tokenizer(tok, text);
  };
  const auto tj = get("tokenizer.json");
  const auto tm = get("tokenizer.model");
  if (tj)
    run(attempt("tokenizer.json", [&] {
      return std::make_shared<const ByteLevelBPE>(
          ByteLevelBPE::from_tokenizer_json_text(*tj, "fuzz", get("tokenizer_config.json").value_or("")));
    }));
  if (tm)
    run(attempt("tokenizer.model", [&] {
      return std::make_shared<const tokenize::SentencePiece>(tokenize::SentencePiece::from_model_bytes(*tm, "fuzz"));
    }));
  if (tj || tm) {  // the folder as a model's: tokenizer.json first, then tokenizer.model
    scratch.clear();
    scratch.write_files(files, {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.txt",
                                "special_tokens_map.json"});
    run(attempt("find_tokenizer", [&] { return tokenize::find_tokenizer(scratch.root().string()); }));
  }
  if (const auto gj = get("gguf.json")) {
    const json j = json::parse(*gj, nullptr, /*allow_exceptions=*/false);
    run(attempt("gguf.json", [&] { return tokenize::tokenizer_from_gguf_vocab(gguf_vocab(j), "fuzz.gguf"); }));
  }
  return 0;
}
