// Helpers shared by the libFuzzer targets (fuzz/fuzz_*.cpp) and the seed maker.
//
// Multi-file inputs ("archives"): a model folder, a tokenizer's files and the text to encode
// are one fuzz input, written as
//   --- config.json
//   {"vocab_size": 8, ...}
//   --- vocab.txt
//   [PAD]
//   ...
// A line "--- NAME" starts file NAME; its bytes run to the next "\n--- " (that newline
// excluded) or to the end (less one final newline, which make_archive writes). Only the names a target lists are written (into a fresh temp folder),
// so a hostile name never escapes it; other entries are ignored.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace qkv::fuzz {

namespace fs = std::filesystem;

inline std::map<std::string, std::string> parse_archive(std::string_view in) {
  std::map<std::string, std::string> files;
  std::size_t pos = 0;
  if (in.rfind("--- ", 0) != 0) {  // leading bytes before the first header: ignored
    pos = in.find("\n--- ");
    if (pos == std::string_view::npos) return files;
    ++pos;
  }
  while (pos < in.size()) {  // here in[pos..] starts with "--- "
    const std::size_t name_end = in.find('\n', pos);
    if (name_end == std::string_view::npos) break;
    const std::string name(in.substr(pos + 4, name_end - pos - 4));
    std::size_t next = in.find("\n--- ", name_end);
    std::size_t body_end = next == std::string_view::npos ? in.size() : next;
    if (next == std::string_view::npos && body_end > name_end + 1 && in[body_end - 1] == '\n') --body_end;
    files[name] = std::string(in.substr(name_end + 1, body_end - name_end - 1));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return files;
}

inline std::string make_archive(const std::map<std::string, std::string>& files) {
  std::string out;
  for (const auto& [name, body] : files) out += "--- " + name + "\n" + body + "\n";
  return out;
}

// A scratch folder of this process (on /dev/shm when there is one), emptied by clear().
class Scratch {
 public:
  Scratch() {
    const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    static int count = 0;  // several harnesses share a process when the tests replay their inputs
    root_ = base / ("qkv-fuzz-" + std::to_string(::getpid()) + "-" + std::to_string(count++));
    clear();
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void clear() {
    std::error_code ec;
    fs::remove_all(root_, ec);
    fs::create_directories(root_);
  }
  const fs::path& root() const { return root_; }
  std::string path(const std::string& rel) const { return (root_ / rel).string(); }
  // Writes bytes to root/rel (creating its folder).
  std::string write(const std::string& rel, std::string_view bytes) const {
    const fs::path p = root_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }
  // Writes the archive's files whose names are in `allowed`.
  void write_files(const std::map<std::string, std::string>& files, const std::set<std::string>& allowed) const {
    for (const auto& [name, body] : files)
      if (allowed.count(name)) write(name, body);
  }

 private:
  fs::path root_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// QKV_FUZZ_VERBOSE=1: print each refusal (a qkv::Error the harness caught), to see how far a seed gets.
inline void note_refusal(const char* what, const std::exception& e) {
  static const bool verbose = std::getenv("QKV_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "[%s] %s\n", what, e.what());
}

// A property of the library that must hold: abort (a crash libFuzzer reports) if not.
#define QKV_FUZZ_CHECK(cond)                                                              \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

}  // namespace qkv::fuzz
