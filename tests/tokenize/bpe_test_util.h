// Helpers for the tokenizer tests: the reference tokenizer and cases
// (tests/reference/make_bpe_fixtures.py), scratch files, small hand-made
// vocabularies and error-message checks.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize::test {

namespace fs = std::filesystem;
using nlohmann::json;

inline std::string fixture(const std::string& name) { return std::string(QKV_FIXTURE_DIR) + "/" + name; }

// The tokenizer trained by make_bpe_fixtures.py (loaded once).
inline const ByteLevelBPE& reference_bpe() {
  static const ByteLevelBPE bpe = ByteLevelBPE::from_folder(fixture("gpt2_tiny"));
  return bpe;
}

// tests/fixtures/bpe_cases.json (loaded once).
inline const json& reference_cases() {
  static const json cases = [] {
    std::ifstream f(fixture("bpe_cases.json"));
    if (!f) throw std::runtime_error("cannot open " + fixture("bpe_cases.json"));
    return json::parse(f);
  }();
  return cases;
}

inline std::vector<std::int64_t> ids_of(const json& j) { return j.get<std::vector<std::int64_t>>(); }

// A string shown in a failure message: JSON-escaped, so control characters and invalid bytes are visible.
inline std::string show(const std::string& s) {
  return json(s).dump(-1, ' ', true, json::error_handler_t::replace);
}

// A fresh scratch directory per call, removed at exit.
inline fs::path scratch_dir() {
  static int n = 0;
  struct Cleanup {
    std::vector<fs::path> dirs;
    ~Cleanup() {
      std::error_code ec;
      for (const auto& d : dirs) fs::remove_all(d, ec);
    }
  };
  static Cleanup cleanup;
  fs::path d = fs::temp_directory_path() / ("qkv_bpe_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  fs::create_directories(d);
  cleanup.dirs.push_back(d);
  return d;
}

inline std::string write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  f << content;
  return p.string();
}

// GPT-2's bytes_to_unicode, in the test (independent of the library): byte -> UTF-8 of its character.
inline std::string byte_char(unsigned char b) {
  const auto printable = [](unsigned c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  char32_t cp = b;
  if (!printable(b)) {
    cp = 256;
    for (unsigned c = 0; c < b; ++c) cp += !printable(c);
  }
  std::string s;
  utf8::append_code_point(cp, s);
  return s;
}

// A vocab.json object with the 256 byte tokens (ids 0..255) followed by `extra` tokens (ids 256...).
inline json byte_vocab(const std::vector<std::string>& extra = {}) {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[byte_char(static_cast<unsigned char>(b))] = b;
  int id = 256;
  for (const auto& t : extra) v[t] = id++;
  return v;
}

// Writes vocab.json and merges.txt to a scratch directory; returns the directory.
inline std::string write_model(const std::string& vocab_json, const std::string& merges_txt) {
  const fs::path d = scratch_dir();
  write_file(d / "vocab.json", vocab_json);
  write_file(d / "merges.txt", merges_txt);
  return d.string();
}

// Runs fn, which must throw E; checks the message is one line and contains every `want`; returns it.
template <class E, class Fn>
std::string expect_error(Fn&& fn, std::initializer_list<std::string> want) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const auto& w : want) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected another exception type, got: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception thrown";
  return {};
}

}  // namespace qkv::tokenize::test
