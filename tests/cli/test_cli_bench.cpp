// End-to-end tests of `qkv bench`: every report runs at tiny sizes and prints
// one JSON line with the shared timing fields. Wall time is never asserted,
// only that the fields exist and are positive (benchmarks are not tests).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

using qkv::cli_test::Result;
using qkv::cli_test::run;

// Runs a bench with --json and returns its one JSON object after checking the
// fields every report shares.
nlohmann::json bench_json(const std::string& args, const std::string& name) {
  const Result r = run("--threads 1 bench " + args + " --json --warmup 1 --repeat 2");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << r.out;
  if (!j.is_object()) return j;
  EXPECT_EQ(j.value("bench", ""), name);
  for (const char* key : {"median_ms", "min_ms", "gflops", "peak_rss_mb"}) {
    const bool present = j.contains(key) && j[key].is_number();
    EXPECT_TRUE(present) << key << " missing in " << r.out;
    if (present) {
      EXPECT_GT(j[key].get<double>(), 0.0) << key << " in " << r.out;
    }
  }
  EXPECT_TRUE(j.contains("extra_rss_mb") && j["extra_rss_mb"].is_number() && j["extra_rss_mb"].get<double>() >= 0.0)
      << r.out;
  EXPECT_EQ(j.value("repeat", 0), 2);
  EXPECT_EQ(j.value("threads", 0), 1);
  EXPECT_TRUE(j.contains("isa")) << r.out;
  return j;
}

}  // namespace

TEST(CliBench, MhaForward) {
  const nlohmann::json j = bench_json("mha --batch 2 --len 8 --embed 16 --heads 2", "mha");
  EXPECT_EQ(j.value("embed", 0), 16);
  EXPECT_EQ(j.value("head_dim", 0), 8);
  EXPECT_EQ(j.value("backward", true), false);
  EXPECT_EQ(j.value("params", 0), 4 * (16 * 16 + 16));  // w_q, w_k, w_v, w_o with biases
}

TEST(CliBench, MhaForwardBackward) {
  const nlohmann::json j = bench_json("mha --batch 1 --len 5 --embed 12 --heads 3 --backward", "mha");
  EXPECT_EQ(j.value("backward", false), true);
  EXPECT_EQ(j.value("head_dim", 0), 4);
}

TEST(CliBench, EncoderStep) {
  const nlohmann::json j =
      bench_json("encoder-step --batch 2 --len 4 --d-model 8 --heads 2 --d-ff 16 --layers 2", "encoder-step");
  EXPECT_EQ(j.value("layers", 0), 2);
  EXPECT_EQ(j.value("d_ff", 0), 16);
  EXPECT_EQ(j.value("dropout", 1.0), 0.0);
  EXPECT_EQ(j.value("norm_first", true), false);
  // Per layer, as nn.TransformerEncoderLayer: attention 4 (E^2 + E), feed-forward
  // (E F + F) + (F E + E), two layer norms 2 * 2E.
  const int E = 8, F = 16, per_layer = 4 * (E * E + E) + (E * F + F) + (F * E + E) + 4 * E;
  EXPECT_EQ(j.value("params", 0), 2 * per_layer);
}

TEST(CliBench, AttentionAndGemmShareTheTimingFields) {
  bench_json("attention --batch 1 --heads 2 --len 9 --dim 4 --causal --backward", "attention");
  bench_json("gemm --m 7 --n 5 --k 3", "gemm");
}

TEST(CliBench, TextReportAndGlobalThreadsAfterCommand) {
  const Result r = run("bench mha --batch 1 --len 4 --embed 8 --heads 2 --repeat 1 --threads 1");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("threads: 1"), std::string::npos) << r.out;
  for (const char* key : {"median_ms:", "gflops:", "peak_rss_mb:", "extra_rss_mb:"})
    EXPECT_NE(r.out.find(key), std::string::npos) << key << " missing in\n" << r.out;
}

TEST(CliBench, IndivisibleHeadsFailsWithOneLine) {
  const Result r = run("bench mha --batch 1 --len 4 --embed 10 --heads 3 --json");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("not divisible by num_heads"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(CliBench, PeakOnTwoThreads) {
  const Result r = run("--threads 2 bench peak --seconds 0.02 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j.value("bench", ""), "peak");
  EXPECT_EQ(j.value("threads", 0), 2);
  const double total = j.value("gflops", 0.0), per = j.value("gflops_per_thread", 0.0);
  EXPECT_GT(total, 0.0) << r.out;
  EXPECT_DOUBLE_EQ(per * 2, total) << r.out;
  EXPECT_GT(j.value("fmas_per_thread", 0), 0) << r.out;
  const Result bad = run("bench peak --seconds 0");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--seconds"), std::string::npos) << bad.err;
}
