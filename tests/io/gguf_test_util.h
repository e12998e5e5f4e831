// Helpers for the GGUF tests: GGUF files built byte by byte (to break one rule at a time),
// scratch files, and checking error messages.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/gguf.h"

namespace qkv::io::test {

using Bytes = std::vector<std::uint8_t>;

// A GGUF file written field by field (little-endian), with no checks: tests build valid files
// and files that break exactly one rule.
class GgufBytes {
 public:
  GgufBytes() = default;
  // "GGUF", version, tensor count, metadata count.
  static GgufBytes header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    GgufBytes g;
    g.raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    return g;
  }
  GgufBytes& raw(std::string_view s) {
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& le(std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
    return *this;
  }
  GgufBytes& u8(std::uint8_t v) { return le(v, 1); }
  GgufBytes& u32(std::uint32_t v) { return le(v, 4); }
  GgufBytes& u64(std::uint64_t v) { return le(v, 8); }
  GgufBytes& f32(float v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    return u32(bits);
  }
  GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s); }
  // Metadata entries: key, type, value.
  GgufBytes& kv_u32(std::string_view key, std::uint32_t v) { return str(key).u32(4).u32(v); }
  GgufBytes& kv_str(std::string_view key, std::string_view v) { return str(key).u32(8).str(v); }
  // Tensor info: name, n_dims, dims (innermost first), type, offset.
  GgufBytes& tensor(std::string_view name, std::initializer_list<std::uint64_t> dims, std::uint32_t type,
                    std::uint64_t offset) {
    str(name).u32(static_cast<std::uint32_t>(dims.size()));
    for (std::uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
  GgufBytes& pad(std::uint64_t align = 32) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  GgufBytes& zeros(std::uint64_t n) {
    b.insert(b.end(), static_cast<std::size_t>(n), 0);
    return *this;
  }
  Bytes b;
};

inline constexpr const char* kGgufSource = "bad.gguf";

// A scratch file removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& name)
      : path_((std::filesystem::temp_directory_path() / ("qkv_" + std::to_string(::getpid()) + "_" + name)).string()) {}
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  const std::string& path() const { return path_; }
  const std::string& write(const Bytes& bytes) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path_;
  }

 private:
  std::string path_;
};

// Checks a FormatError message: names `source`, one line, contains every `want`.
inline void expect_message(const std::string& msg, const std::string& source, std::initializer_list<std::string> want) {
  EXPECT_NE(msg.find(source), std::string::npos) << "message does not name the file: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
  for (const std::string& w : want) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
}

// Bytes that must be rejected, through parse() and, from a file, open() and open_header():
// the same FormatError from all three (the file's path in place of the label). Returns the
// message of parse().
inline std::string gguf_rejected(const Bytes& bytes, std::initializer_list<std::string> want) {
  std::string msg;
  try {
    GGUFFile::parse(bytes, kGgufSource);
    ADD_FAILURE() << "the file was accepted";
    return "";
  } catch (const qkv::FormatError& e) {
    msg = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qkv::FormatError, got another exception: " << e.what();
    return "";
  }
  expect_message(msg, kGgufSource, want);
  const TempFile f("rejected.gguf");
  f.write(bytes);
  const std::string expected = f.path() + msg.substr(std::strlen(kGgufSource));
  for (int header_only = 0; header_only < 2; ++header_only) {
    try {
      if (header_only)
        GGUFFile::open_header(f.path());
      else
        GGUFFile::open(f.path());
      ADD_FAILURE() << "accepted from a file (header_only " << header_only << ")";
    } catch (const qkv::FormatError& e) {
      EXPECT_EQ(std::string(e.what()), expected) << "header_only " << header_only;
    }
  }
  return msg;
}

}  // namespace qkv::io::test
