// Resource limits (core/memory.h): sizes that overflow or cannot fit in the memory
// available fail before anything is allocated, with a ResourceError naming what was
// asked for, the bytes it needs and the bytes available; the process goes on working.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <functional>
#include <string>

#include "qkv/qkv.h"

namespace {

using qkv::MemoryEstimate;
using qkv::ResourceError;
using qkv::Tensor;

// The peak resident set of this process, in MiB.
double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// fn throws ResourceError whose message holds every part; the process then still computes,
// and the peak memory grew by less than 256 MiB (nothing big was allocated first).
void expect_resource_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  const double rss0 = peak_rss_mb();
  try {
    fn();
    ADD_FAILURE() << "no ResourceError";
  } catch (const ResourceError& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
  EXPECT_LT(peak_rss_mb() - rss0, 256.0) << "memory was allocated before the error";
  const Tensor t = qkv::matmul(Tensor::ones({3, 4}), Tensor::ones({4, 2}));
  EXPECT_EQ(qkv::sum(t).item(), 24.0);  // the library still works
}

TEST(Memory, AvailableIsPlausibleAndFormatted) {
  const std::uint64_t avail = qkv::available_memory_bytes();
  EXPECT_GT(avail, std::uint64_t{16} << 20);
  EXPECT_LT(avail, std::uint64_t{1} << 50);
  EXPECT_EQ(qkv::format_bytes(100), "100 bytes");
  EXPECT_EQ(qkv::format_bytes(std::uint64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(qkv::format_bytes(std::uint64_t{64} << 30), "64.0 GiB");
  EXPECT_NO_THROW(qkv::check_allocation(1 << 20, "one MiB"));
}

TEST(Memory, CheckAllocationNamesTheSizeAndWhatIsAvailable) {
  expect_resource_error([] { qkv::check_allocation(std::uint64_t{1} << 60, "my buffer"); },
                        {"my buffer: needs 1.0 EiB (1152921504606846976 bytes) of memory", "is available"});
}

TEST(Memory, EstimatesSaturateOnOverflow) {
  MemoryEstimate e;
  e.add({1LL << 40, 1LL << 40});
  EXPECT_TRUE(e.overflowed());
  EXPECT_EQ(e.bytes(), ~std::uint64_t{0});
  expect_resource_error([&] { e.check("huge"); }, {"huge", "overflows 64 bits"});
  MemoryEstimate z;  // a zero dim empties the tensor whatever its other dims
  z.add({0, 1LL << 62, 1LL << 62}).add({2, 3}, 2, 8);
  EXPECT_FALSE(z.overflowed());
  EXPECT_EQ(z.bytes(), 96u);
  MemoryEstimate s;
  s.add({1 << 20}).scale(1LL << 50);
  EXPECT_TRUE(s.overflowed());
}

TEST(Memory, TensorsTooLargeFailBeforeAllocating) {
  // 4 TiB of float32: fits in int64 and size_t, not in this machine.
  expect_resource_error([] { Tensor::empty({1LL << 20, 1LL << 20}); },
                        {"float32 tensor of shape [1048576,1048576]", "needs 4.0 TiB", "available"});
  expect_resource_error([] { Tensor::zeros({1LL << 18, 1LL << 18}, qkv::DType::F64); }, {"zeros", "float64", "512.0 GiB"});
  // numel * itemsize overflows: rejected as too large (an AllocError, as before).
  EXPECT_THROW(Tensor::empty({1LL << 61}), qkv::AllocError);
  EXPECT_THROW(Tensor::empty({1LL << 40, 1LL << 40}), qkv::AllocError);
  expect_resource_error([] { qkv::aligned_alloc_bytes(std::size_t{1} << 44, "workspace"); }, {"workspace", "16.0 TiB"});
}

TEST(Memory, ModulesAndModelsCheckTheirParametersUpFront) {
  // The trace case: one block of d_model 65536 needs 64 GiB of weights.
  expect_resource_error([] { qkv::nn::TransformerEncoderBlock({.d_model = 65536, .num_heads = 1, .d_ff = 2048}); },
                        {"TransformerEncoderBlock (d_model 65536, d_ff 2048, 1 heads): needs 65.0 GiB", "available"});
  expect_resource_error(
      [] { qkv::nn::TransformerEncoder({.num_layers = 1 << 20, .layer = {.d_model = 256, .num_heads = 4, .d_ff = 1024}}); },
      {"TransformerEncoder (1048576 layers"});
  expect_resource_error(
      [] { qkv::infer::KVCache({.num_layers = 1024, .batch = 1024, .num_heads = 16, .max_len = 1 << 16, .head_dim = 64}); },
      {"KVCache (1024 layers"});
}

TEST(Memory, AbsurdConfigJsonFailsBeforeAllocating) {
  const qkv::models::GPT2Config g = qkv::models::gpt2_config_from_json(
      R"({"model_type": "gpt2", "vocab_size": 1000000000000, "n_positions": 64, "n_embd": 768, "n_layer": 2, "n_head": 12})",
      "config.json");
  EXPECT_EQ(g.vocab_size, 1000000000000LL);
  expect_resource_error([&] { qkv::models::GPT2LMHeadModel m(g); },
                        {"GPT2LMHeadModel (vocab_size 1000000000000", "needs 2.7 PiB"});
  const qkv::models::ClassifierOptions c = qkv::models::classifier_config_from_json(
      R"({"vocab_size": 1000000000000, "d_model": 64, "num_heads": 4, "d_ff": 128, "num_layers": 1,
          "num_classes": 2, "max_len": 32})");
  expect_resource_error([&] { qkv::models::TinyTextClassifier m(c); }, {"TinyTextClassifier (vocab_size 1000000000000"});
  qkv::models::Seq2SeqOptions s;
  s.vocab_size = 1000000000000LL;
  expect_resource_error([&] { qkv::models::Seq2Seq m(s); }, {"Seq2Seq (vocab_size 1000000000000"});
  // BERT's reader refuses sizes above 2^24; sizes below that can still not fit together.
  EXPECT_THROW(qkv::models::bert_config_from_json(
                   R"({"model_type": "bert", "vocab_size": 1000000000000, "hidden_size": 384, "num_hidden_layers": 1,
                       "num_attention_heads": 12, "intermediate_size": 1536, "max_position_embeddings": 512,
                       "type_vocab_size": 2, "hidden_act": "gelu"})",
                   "config.json"),
               qkv::Error);
  qkv::models::BertConfig b;
  b.vocab_size = 1 << 24;
  b.hidden_size = 1 << 16;
  b.num_attention_heads = 1;
  expect_resource_error([&] { qkv::models::BertModel m(b); }, {"BertModel (vocab_size 16777216, hidden_size 65536"});
}

}  // namespace
