// Strict reading of Hugging Face tokenizer files shared by the tokenizers' readers (internal
// header of tokenize/): typed access to JSON fields with errors naming the file and the field,
// the added tokens of a tokenizer.json, and tokenizer_config.json's special tokens.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bpe_impl.h"
#include "qkv/core/error.h"

namespace qkv::tokenize::hfjson {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throw FormatError(where_ + field + ": " + msg);
  }
  const json& object(const json& j, const std::string& field) const {
    if (!j.is_object()) fail(field, "must be a JSON object, got " + shown(j));
    return j;
  }
  // obj[key], which must exist.
  const json& member(const json& obj, const char* key, const std::string& field) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(field, std::string("has no \"") + key + "\"");
    return *it;
  }
  const json& array(const json& obj, const char* key, const std::string& field) const {
    const json& a = member(obj, key, field);
    if (!a.is_array()) fail(field + "." + key, "must be an array, got " + shown(a));
    return a;
  }
  bool boolean(const json& obj, const char* key, const std::string& field, bool fallback) const {
    const auto it = obj.find(key);
    if (it == obj.end()) return fallback;
    if (!it->is_boolean()) fail(field + "." + key, "must be true or false, got " + shown(*it));
    return it->get<bool>();
  }
  const std::string& string(const json& obj, const char* key, const std::string& field) const {
    const json& s = member(obj, key, field);
    if (!s.is_string()) fail(field + "." + key, "must be a string, got " + shown(s));
    return s.get_ref<const std::string&>();
  }
  // A null-or-string member; "" when null or absent.
  std::string optional_string(const json& obj, const char* key, const std::string& field) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (!it->is_string()) fail(field + "." + key, "must be a string or null, got " + shown(*it));
    return it->get<std::string>();
  }
  const std::string& type(const json& j, const std::string& field) const { return string(object(j, field), "type", field); }

 private:
  std::string where_;
};

inline std::string at(const std::string& field, std::size_t i) { return field + "[" + std::to_string(i) + "]"; }

inline std::vector<AddedToken> read_added(const Reader& r, const json& root) {
  std::vector<AddedToken> out;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) r.fail("added_tokens", "must be an array, got " + shown(*it));
  for (std::size_t i = 0; i < it->size(); ++i) {
    const std::string field = at("added_tokens", i);
    const json& t = r.object((*it)[i], field);
    const json& id = r.member(t, "id", field);
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > std::numeric_limits<std::int32_t>::max())
      r.fail(field + ".id", "must be an integer in 0..2^31-1, got " + shown(id));
    AddedToken a;
    a.id = id.get<std::int32_t>();
    a.content = r.string(t, "content", field);
    a.special = r.boolean(t, "special", field, false);
    a.lstrip = r.boolean(t, "lstrip", field, false);
    a.rstrip = r.boolean(t, "rstrip", field, false);
    a.normalized = r.boolean(t, "normalized", field, !a.special);
    if (r.boolean(t, "single_word", field, false))
      r.fail(field + ".single_word", "true is not supported (token " + quote(a.content) + ")");
    out.push_back(std::move(a));
  }
  return out;
}

// The special tokens a tokenizer declares (tokenizer.json's post-processor, tokenizer_config.json).
struct SpecialIds {
  std::optional<std::int64_t> bos, eos, pad, unk;
  bool add_bos = false, add_eos = false;
};

// tokenizer_config.json: the special tokens by name (a string or {"content": ...}), looked up
// by `id_of` (nullopt: not a token), and the BOS/EOS flags, into `m`.
void read_special_config(std::string_view text, const std::string& where,
                         const std::function<std::optional<std::int64_t>(const std::string&)>& id_of, SpecialIds& m);

// A TemplateProcessing post-processor's BOS / EOS (single: [SpecialToken]? Sequence A
// [SpecialToken]?), ByteLevel / Sequence of them; v: the vocabulary size.
void read_post_processor(const Reader& r, const json& j, const std::string& field, std::size_t v, SpecialIds& m);

}  // namespace qkv::tokenize::hfjson
