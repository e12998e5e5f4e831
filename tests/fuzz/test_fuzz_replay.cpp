// Replays the inputs of the libFuzzer targets (fuzz/fuzz_*.cpp) through the same harness code:
// the committed seeds and every input a fuzzer crashed on (fuzz/regressions/<target>/, each a bug
// fixed since, with a test of its own in tests/io/test_hostile_inputs.cpp). A harness aborts on a
// broken property, and any exception other than qkv::Error escapes it and fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int qkv_fuzz_safetensors_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_checkpoint_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_model_folder_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_bpe_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_wordpiece_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_gguf_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_tokenizer_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_chat_template_one_input(const std::uint8_t* data, std::size_t size);
extern "C" int qkv_fuzz_openai_one_input(const std::uint8_t* data, std::size_t size);

namespace {

namespace fs = std::filesystem;
using Harness = int (*)(const std::uint8_t*, std::size_t);

// Every file of fuzz/corpus/<target>/ and fuzz/regressions/<target>/; returns how many ran.
int replay(const std::string& target, Harness h, int* regressions) {
  int n = 0;
  *regressions = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(QKV_SOURCE_DIR) / "fuzz" / kind / target;
    if (!fs::is_directory(dir)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      SCOPED_TRACE(f.string());
      std::ifstream in(f, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), {});
      EXPECT_EQ(h(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0);
      ++n;
      if (std::string(kind) == "regressions") ++*regressions;
    }
  }
  return n;
}

void replay_all(const std::string& target, Harness h) {
  int regressions = 0;
  const int n = replay(target, h, &regressions);
  EXPECT_GE(n - regressions, 2) << "fuzz/corpus/" << target << " should hold the target's seeds";
  std::printf("[ replay   ] fuzz_%s: %d inputs (%d seeds, %d regressions)\n", target.c_str(), n, n - regressions,
              regressions);
}

}  // namespace

TEST(FuzzReplay, Safetensors) { replay_all("safetensors", qkv_fuzz_safetensors_one_input); }
TEST(FuzzReplay, Checkpoint) { replay_all("checkpoint", qkv_fuzz_checkpoint_one_input); }
TEST(FuzzReplay, ModelFolder) { replay_all("model_folder", qkv_fuzz_model_folder_one_input); }
TEST(FuzzReplay, Bpe) { replay_all("bpe", qkv_fuzz_bpe_one_input); }
TEST(FuzzReplay, WordPiece) { replay_all("wordpiece", qkv_fuzz_wordpiece_one_input); }
TEST(FuzzReplay, Gguf) { replay_all("gguf", qkv_fuzz_gguf_one_input); }
TEST(FuzzReplay, Tokenizer) { replay_all("tokenizer", qkv_fuzz_tokenizer_one_input); }
TEST(FuzzReplay, ChatTemplate) { replay_all("chat_template", qkv_fuzz_chat_template_one_input); }
TEST(FuzzReplay, OpenAI) { replay_all("openai", qkv_fuzz_openai_one_input); }
