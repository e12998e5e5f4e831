// Typed fields of a Hugging Face config.json (GPT-2, the Llama family): every error a
// FormatError naming the file and the field. Internal header of models/.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::models::hf {

using json = nlohmann::json;

[[noreturn]] inline void bad(const std::string& source, const std::string& what) {
  throw FormatError(source + ": " + what);
}

// The JSON object of `text`; FormatError for malformed JSON (numbers beyond double included)
// or another JSON value.
inline json parse_object(const std::string& text, const std::string& src) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number beyond double (1e400)
    bad(src, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad(src, "config must be a JSON object");
  return j;
}

// An integer field >= 1 (absent or null: dflt, or an error without one).
inline std::int64_t get_int(const json& j, const char* key, const std::string& src,
                            std::optional<std::int64_t> dflt = std::nullopt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (dflt) return *dflt;
    bad(src, std::string("field '") + key + "' is missing");
  }
  if (!it->is_number_integer()) bad(src, std::string("field '") + key + "' must be an integer, got " + it->dump());
  const std::int64_t v = it->get<std::int64_t>();
  if (v < 1) bad(src, std::string("field '") + key + "' must be >= 1, got " + std::to_string(v));
  return v;
}

inline double get_double(const json& j, const char* key, const std::string& src, double dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_number()) bad(src, std::string("field '") + key + "' must be a number, got " + it->dump());
  return it->get<double>();
}

inline bool get_bool(const json& j, const char* key, const std::string& src, bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) bad(src, std::string("field '") + key + "' must be true or false, got " + it->dump());
  return it->get<bool>();
}

inline std::optional<std::int64_t> get_token_id(const json& j, const char* key, const std::string& src) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
    bad(src, std::string("field '") + key + "' must be a non-negative integer, got " + it->dump());
  return it->get<std::int64_t>();
}

}  // namespace qkv::models::hf
