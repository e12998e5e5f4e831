// Shared helpers of the WordPiece / BERT / embedding tests: the model folder (which `make models`
// fetches; a test that needs it fails with a clear message when it is absent), temporary folders.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::testing {

inline std::string minilm_dir() { return std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2"; }

// True if the model folder is complete; otherwise records a failure naming the fix.
inline bool require_minilm() {
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json", "modules.json",
                        "1_Pooling/config.json"})
    if (!std::filesystem::exists(minilm_dir() + "/" + f)) {
      ADD_FAILURE() << minilm_dir() << "/" << f
                    << " is missing: run `make models` (scripts/fetch_models.sh) before the tests; "
                       "this parity test never skips";
      return false;
    }
  return true;
}

// A fresh empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("qkv-" + tag + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// Runs fn, expects it to throw E, and returns the message ("" and a failure otherwise).
template <class E, class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

}  // namespace qkv::testing
