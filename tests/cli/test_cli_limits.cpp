// Resource limits end to end: CLI flags and config files asking for absurd sizes fail up
// front, exit 1 with one message naming the command's sizes, the memory they need and
// the memory available. Each run is capped at 4 GB (memory_cap: of address space, or ASan's limits), so a command that
// started allocating its gigabytes would die of it instead of giving this message.
#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace qkv::cli_test {
namespace {

const std::string kCap = memory_cap(4000000);

void expect_refused(const Result& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.code, 1) << r.err;
  for (const auto& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << "'" << p << "' not in: " << r.err;
  EXPECT_EQ(r.err.find("unexpected failure"), std::string::npos) << r.err;
}

TEST(CliLimits, TraceWithAnUnaffordableWidthFailsUpFront) {
  const Result r = run("trace --d-model 65536 --heads 1", kCap);
  expect_refused(r, {"trace (--d-model 65536 --heads 1 --d-ff 2048 --layers 1): needs 65.", "GiB", "is available"});
  EXPECT_TRUE(r.out.empty()) << "printed before failing: " << r.out;
  // The same command at a sane width works.
  const Result ok = run("trace --d-model 64 --heads 4", kCap);
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(CliLimits, BenchFlagsWithAbsurdSizesFailUpFront) {
  expect_refused(run("bench gemm --m 1048576 --n 1048576 --k 1048576", kCap),
                 {"bench gemm (M 1048576, N 1048576, K 1048576): needs 12.0 TiB"});
  expect_refused(run("bench attention --batch 1048576 --heads 1048576 --len 16777216 --dim 4096", kCap),
                 {"bench attention ([1048576,1048576,16777216,4096] float32)", "overflows 64 bits"});
  expect_refused(run("bench mha --batch 1048576 --len 16777216 --embed 65536 --heads 1", kCap), {"bench mha"});
  expect_refused(run("bench encoder-step --batch 4096 --len 4096 --d-model 4096 --heads 8 --layers 64", kCap),
                 {"bench encoder-step (64 layers"});
  expect_refused(run("bench generate --layers 2 --d-model 65536 --heads 1 --vocab 16777216", kCap),
                 {"GPT2LMHeadModel (vocab_size 16777216", "needs"});
}

TEST(CliLimits, AConfigJsonWithAnAbsurdVocabFailsUpFront) {
  const fs::path dir = unique_temp("huge_gpt2");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "gpt2", "vocab_size": 1000000000000, "n_positions": 64,
                                           "n_embd": 768, "n_layer": 2, "n_head": 12})";
  std::ofstream(dir / "model.safetensors") << "";
  expect_refused(run("bench generate --model '" + dir.string() + "' --new 4", kCap),
                 {"GPT2LMHeadModel (vocab_size 1000000000000", "needs 2.7 PiB"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::cli_test
