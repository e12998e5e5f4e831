// Helpers for the safetensors tests: building raw files byte by byte, scratch
// directories, and checking error messages.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"

namespace qkv::io::test {

using Bytes = std::vector<std::uint8_t>;

inline void put_u64(Bytes& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// 8-byte length + header (padded with spaces to (8+N) % 8 == 0 if pad) + data.
inline Bytes make_file(const std::string& header, const Bytes& data = {}, bool pad = true) {
  std::string h = header;
  if (pad)
    while ((8 + h.size()) % 8 != 0) h += ' ';
  Bytes b;
  put_u64(b, h.size());
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}
// A header-length prefix that may lie, then raw bytes.
inline Bytes make_raw(std::uint64_t n, const std::string& rest) {
  Bytes b;
  put_u64(b, n);
  b.insert(b.end(), rest.begin(), rest.end());
  return b;
}
inline Bytes zeros(std::size_t n) { return Bytes(n, 0); }

inline constexpr const char* kSource = "bad.safetensors";

// Parses bytes that must be rejected; returns the FormatError message after
// checking it names the file, is one line and contains every `want`.
inline std::string rejected(const Bytes& bytes, std::initializer_list<std::string> want) {
  try {
    SafetensorsFile::parse(bytes, kSource);
  } catch (const qkv::FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(kSource), std::string::npos) << "message does not name the file: " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const std::string& w : want) EXPECT_NE(msg.find(w), std::string::npos) << "missing '" << w << "' in: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected qkv::FormatError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected qkv::FormatError, but the bytes parsed";
  return {};
}

// A fresh directory under /tmp, removed (recursively) at scope exit.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/qkv_st_test_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    if (!d) throw std::runtime_error("mkdtemp failed");
    path_ = d;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  // Names in the directory that look like writer temp files.
  std::vector<std::string> temp_files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      const std::string n = e.path().filename().string();
      if (n.find(".tmp.") != std::string::npos) out.push_back(n);
    }
    return out;
  }

 private:
  std::string path_;
};

inline Bytes read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
inline void write_all(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

template <class T>
Bytes bytes_of(std::initializer_list<T> v) {
  Bytes b(v.size() * sizeof(T));
  if (v.size()) std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

inline Bytes tensor_bytes(const SafetensorsFile& f, const StTensorInfo& t) {
  const std::uint8_t* p = f.data(t);
  return Bytes(p, p + t.nbytes());
}

}  // namespace qkv::io::test
