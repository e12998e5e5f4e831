// JsonFields: typed fields of a flat JSON object for the from_json() readers of
// run and model configs (seq2seq, language-model training). Internal header.
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::io {

// Reads the typed fields of a JSON object for the from_json() functions; every
// error is a ValueError starting with `what` and naming the field.
class JsonFields {
 public:
  JsonFields(const std::string& text, std::string what, const std::set<std::string>& known) : what_(std::move(what)) {
    try {
      j_ = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
      throw ValueError(what_ + ": not valid JSON: " + e.what());
    }
    if (!j_.is_object()) throw ValueError(what_ + ": expected a JSON object");
    for (const auto& [k, v] : j_.items())
      if (!known.count(k)) throw ValueError(what_ + ": unknown field '" + k + "'");
  }
  void get(const char* key, std::int64_t* out, std::int64_t lo) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_number_integer()) fail(key, "must be an integer");
    *out = j_[key].get<std::int64_t>();
    if (*out < lo) fail(key, "must be >= " + std::to_string(lo) + ", got " + std::to_string(*out));
  }
  void get(const char* key, std::uint64_t* out) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_number_unsigned()) fail(key, "must be a non-negative integer");
    *out = j_[key].get<std::uint64_t>();
  }
  void get(const char* key, double* out) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_number()) fail(key, "must be a number");
    *out = j_[key].get<double>();
  }
  void get(const char* key, bool* out) const {
    if (!j_.contains(key)) return;
    if (!j_[key].is_boolean()) fail(key, "must be true or false");
    *out = j_[key].get<bool>();
  }
  // The string field `key` (or `fallback` if absent).
  std::string get_string(const char* key, const std::string& fallback) const {
    if (!j_.contains(key)) return fallback;
    if (!j_[key].is_string()) fail(key, "must be a string");
    return j_[key].get<std::string>();
  }
  [[noreturn]] void fail(const char* key, const std::string& why) const {
    throw ValueError(what_ + ": '" + key + "' " + why);
  }

 private:
  nlohmann::json j_;
  std::string what_;
};

}  // namespace qkv::io
