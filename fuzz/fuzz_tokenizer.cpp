// libFuzzer target: tokenizers built from tokenizer.json and from GGUF tokenizer metadata. The
// input is an archive (fuzz_util.h) of
//   tokenizer.json         -> ByteLevelBPE::from_tokenizer_json_text (with tokenizer_config.json
//                             when the archive has one)
//   gguf.json              -> tokenize::bpe_from_gguf_vocab, the GGUF keys written as JSON
//                             {"model": .., "pre": .., "tokens": [..], "merges": [..],
//                              "token_types": [..], "bos": n, "eos": n, "pad": n, "unk": n,
//                              "add_bos": b, "add_eos": b} (entries of another JSON type are left out)
//   text                   the text to encode
// Every construction failure must be a qkv::Error. A built tokenizer then encodes the text
// (with and without special tokens) and must give ids within its vocabulary, a StreamDecoder
// must give what decode() gives, and pre_tokenize must not fail on valid UTF-8 unless a
// pattern hits PCRE2's match limit (a ValueError).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/tokenize/utf8.h"

using namespace qkv;
using qkv::tokenize::ByteLevelBPE;
using nlohmann::json;

namespace {

void check_ids(const ByteLevelBPE& bpe, const std::vector<std::int64_t>& ids) {
  for (std::int64_t id : ids) QKV_FUZZ_CHECK(id >= 0 && id < bpe.vocab_size());
  tokenize::StreamDecoder stream(std::make_shared<tokenize::ByteLevelBPE>(bpe));
  std::string streamed;
  for (std::int64_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  QKV_FUZZ_CHECK(streamed == bpe.decode(ids));
}

void exercise(const ByteLevelBPE& bpe, const std::string& text) {
  const bool valid = !tokenize::utf8::find_invalid(text).has_value();
  try {
    check_ids(bpe, bpe.encode(text));
    check_ids(bpe, bpe.encode_ordinary(text));
    bpe.pre_tokenize(text);
  } catch (const ValueError& e) {  // invalid UTF-8, or a pattern that backtracks without end
    QKV_FUZZ_CHECK(!valid || std::string(e.what()).find("PCRE2 gave up") != std::string::npos);
  }
  for (const auto& id : {bpe.bos_id(), bpe.eos_id(), bpe.pad_id(), bpe.unk_id()})
    if (id) QKV_FUZZ_CHECK(*id >= 0 && *id < bpe.vocab_size());
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
  g.bos_id = integer("bos"), g.eos_id = integer("eos"), g.pad_id = integer("pad"), g.unk_id = integer("unk");
  g.add_bos = boolean("add_bos"), g.add_eos = boolean("add_eos");
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto files = fuzz::parse_archive({reinterpret_cast<const char*>(data), size});
  const auto get = [&](const char* name) -> std::optional<std::string> {
    const auto it = files.find(name);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
  const std::string text = get("text").value_or("");
  if (const auto tj = get("tokenizer.json")) {
    std::optional<ByteLevelBPE> bpe;
    try {
      bpe.emplace(ByteLevelBPE::from_tokenizer_json_text(*tj, "fuzz", get("tokenizer_config.json").value_or("")));
    } catch (const Error& e) {
      fuzz::note_refusal("tokenizer.json", e);
    }
    if (bpe) exercise(*bpe, text);
  }
  if (const auto gj = get("gguf.json")) {
    const json j = json::parse(*gj, nullptr, /*allow_exceptions=*/false);
    std::optional<ByteLevelBPE> bpe;
    try {
      bpe.emplace(tokenize::bpe_from_gguf_vocab(gguf_vocab(j), "fuzz.gguf"));
    } catch (const Error& e) {
      fuzz::note_refusal("gguf.json", e);
    }
    if (bpe) exercise(*bpe, text);
  }
  return 0;
}
