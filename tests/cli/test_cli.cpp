// End-to-end tests of the qkv tool: run the built binary (QKV_BIN) with
// popen and check stdout, stderr and the exit code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"

namespace fs = std::filesystem;
using namespace qkv::cli_test;

TEST(Cli, HelpListsEveryCommand) {
  const Result r = run("--help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* cmd : {"demo", "trace", "worked-example", "variance", "inspect", "--threads"})
    EXPECT_NE(r.out.find(cmd), std::string::npos) << "missing " << cmd << " in:\n" << r.out;
}

TEST(Cli, SubcommandHelpDescribesOptions) {
  const Result r = run("trace --help");
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* opt : {"--sentence", "--d-model", "--heads", "--d-ff", "--layers", "--values", "--seed"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << "missing " << opt << " in:\n" << r.out;
}

TEST(Cli, WorkedExampleNumbers) {
  const Result r = run("worked-example");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* row : {R"(0\.305\s+0\.333\s+0\.362)", R"(0\.237\s+0\.323\s+0\.441)", R"(0\.177\s+0\.303\s+0\.519)",
                          R"(0\.110\s+0\.230\s+0\.350)", R"(0\.474\s+1\.011\s+1\.549)"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex(row))) << "no row matching " << row << " in:\n" << r.out;
  // The tutorial's rounded table is shown beside, with its discrepancy explained.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(0\.237\s+0\.323\s+0\.440\*)"))) << r.out;
  EXPECT_NE(r.out.find("rounds intermediates"), std::string::npos) << r.out;
}

TEST(Cli, WorkedExampleJson) {
  const Result r = run("worked-example --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const double expected[3][3] = {{0.305, 0.333, 0.362}, {0.237, 0.323, 0.441}, {0.177, 0.303, 0.519}};
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(j["weights"][i][k].get<double>(), expected[i][k], 0.0005) << i << "," << k;
  EXPECT_NEAR(j["scaled_scores"][2][2].get<double>(), 2.19 / std::sqrt(2.0), 1e-12);
  EXPECT_LT(j["max_abs_diff_sdpa_vs_softmax"].get<double>(), 1e-12);
}

TEST(Cli, TraceShapesAndCheck) {
  const Result r = run("--threads 1 trace --d-model 512 --heads 8 --d-ff 2048");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(1, 5, 512) -> view -> (1, 5, 8, 64) -> transpose(1,2) -> (1, 8, 5, 64)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("(1, 8, 5, 64) @ (1, 8, 64, 5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-> (1, 8, 5, 5)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[CLS] I love NLP [SEP]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(1, 5, 512) -> linear1 -> (1, 5, 2048)"), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(block\.forward\(x\)[^\n]*max \|difference\| = ([-0-9.eE+]+))")))
      << r.out;
  EXPECT_LT(std::stod(m[1].str()), 1e-4) << r.out;
}

TEST(Cli, TraceValuesAndLayers) {
  const Result r = run("trace --sentence \"attention is all you need\" --d-model 32 --heads 4 --d-ff 64 --layers 2 "
                       "--values 3 --seed 7");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(1, 7, 32) -> view -> (1, 7, 4, 8)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("encoder block 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first values: "), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(block\.forward\(x\)[^\n]*max \|difference\| = ([-0-9.eE+]+))")));
  EXPECT_LT(std::stod(m[1].str()), 1e-4) << r.out;
}

TEST(Cli, TraceIndivisibleHeadsFailsWithLibraryMessage) {
  const Result r = run("trace --d-model 512 --heads 7");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("MultiHeadAttention: embed_dim (d_model) 512 is not divisible by num_heads 7"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");  // nothing half-printed before the error
}

TEST(Cli, VarianceAtDk64) {
  const Result r = run("--threads 1 variance --trials 10 --dims 2,64 --json --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  bool found = false;
  std::istringstream in(r.out);
  int objects = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    ++objects;
    if (j["d_k"] != 64) continue;
    found = true;
    EXPECT_GE(j["pairs_per_trial"].get<int>(), 2048);
    EXPECT_NEAR(j["var_unscaled"].get<double>(), 64.0, 0.2 * 64.0) << line;
    EXPECT_NEAR(j["var_scaled"].get<double>(), 1.0, 0.2) << line;
  }
  EXPECT_EQ(objects, 2);
  EXPECT_TRUE(found) << r.out;
}

TEST(Cli, VarianceSoftmaxSaturatesWithoutScaling) {
  const Result r = run("variance --trials 2 --dims 512 --json --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["max_weight_unscaled"].get<double>(), 0.7) << r.out;
  EXPECT_LT(j["max_weight_scaled"].get<double>(), 0.4) << r.out;
  EXPECT_LT(j["entropy_unscaled"].get<double>(), j["entropy_scaled"].get<double>()) << r.out;
}

TEST(Cli, VarianceTable) {
  const Result r = run("variance --trials 2 --dims 8,64 --no-progress");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Var(q·k) = d_k"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Var(q·k/√d_k)"), std::string::npos) << r.out;
}

TEST(Cli, InspectFixture) {
  const Result r = run("inspect '" + fixture("linear.safetensors") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(param\.weight\s+F(32|64)\s+\[4, 5\])"))) << r.out;
  EXPECT_NE(r.out.find("JSON header"), std::string::npos) << r.out;

  const Result rj = run("inspect --json '" + fixture("linear.safetensors") + "'");
  ASSERT_EQ(rj.code, 0) << rj.err;
  const auto j = nlohmann::json::parse(rj.out);
  bool found = false;
  for (const auto& t : j["tensors"])
    if (t["name"] == "param.weight") {
      found = true;
      EXPECT_EQ(t["shape"], nlohmann::json::array({4, 5}));
      EXPECT_EQ(t["numel"], 20);
      EXPECT_EQ(t["bytes"].get<int>(), 20 * (t["dtype"] == "F64" ? 8 : 4)) << t.dump();
    }
  EXPECT_TRUE(found) << rj.out;
  EXPECT_GT(j["header_size"].get<int>(), 0);
}

TEST(Cli, InspectTruncatedFileFailsWithOneLine) {
  const std::string bytes = read_file(fixture("linear.safetensors"));
  ASSERT_GT(bytes.size(), 40u);
  const fs::path dir = unique_temp("dir");
  fs::create_directories(dir);
  const fs::path bad = dir / "truncated.safetensors";
  {
    std::ofstream f(bad, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 7));
  }
  const Result r = run("inspect '" + bad.string() + "'");
  fs::remove_all(dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("truncated.safetensors"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST(Cli, InspectMissingFile) {
  const Result r = run("inspect /nonexistent/dir/model.safetensors");
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/dir/model.safetensors"), std::string::npos) << r.err;
}

TEST(Cli, UsageErrorsGiveOneLine) {
  for (const char* args : {"--bogus", "trace --bogus", "variance --trials abc", "variance --dims 2,x",
                           "trace --heads 0", "--threads 0 worked-example", "inspect", "no-such-command"}) {
    const Result r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_EQ(count_lines(r.err), 1) << args << ":\n" << r.err;
  }
}

// A usage error points at the --help of the command it happened in, however
// deeply nested ("qkv train classify --help", not "qkv train --help").
TEST(Cli, UsageErrorsHintTheHelpOfTheirOwnCommand) {
  struct Case {
    const char* args;
    const char* hint;
    const char* says;
  };
  const Case cases[] = {
      {"train classify --bogus", "(see 'qkv train classify --help')", "--bogus"},
      {"train classify --epochs abc", "(see 'qkv train classify --help')", "--epochs"},
      {"train classify stray", "(see 'qkv train classify --help')", "stray"},
      {"train seq2seq --bogus", "(see 'qkv train seq2seq --help')", "--bogus"},
      {"train seq2seq --task rotate", "(see 'qkv train seq2seq --help')", "rotate"},
      {"train nosuch", "see 'qkv train --help')", "unknown subcommand 'nosuch' of 'qkv train' (subcommands: classify, seq2seq"},
      {"train", "see 'qkv train --help')", "'qkv train' needs a subcommand (classify, seq2seq"},
      {"trace --bogus", "(see 'qkv trace --help')", "--bogus"},
      {"nosuch", "see 'qkv --help')", "unknown command 'nosuch' (commands: "},
      {"--bogus", "(see 'qkv --help')", "--bogus"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = run(c.args);
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("qkv: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(c.hint), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  // The help the hints name exists.
  for (const char* help : {"train classify --help", "train seq2seq --help", "train --help"}) {
    const Result r = run(help);
    EXPECT_EQ(r.code, 0) << help << ": " << r.err;
    EXPECT_NE(r.out.find("Usage: qkv " + std::string(help).substr(0, std::string(help).size() - 7)), std::string::npos)
        << r.out;
  }
}

TEST(Cli, NoCommandPrintsHelpAndFails) {
  const Result r = run("");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("worked-example"), std::string::npos) << r.out;
}

// cmake --install (what make install runs) puts the tool in PREFIX/bin with the library, its
// headers and its CMake package; the installed qkv runs.
TEST(Cli, InstallPutsTheToolInBin) {
  const fs::path build = fs::path(QKV_BIN).parent_path().parent_path().parent_path();  // build/tools/qkv/qkv
  ASSERT_TRUE(fs::exists(build / "CMakeCache.txt")) << build;
  const fs::path prefix = unique_temp("install");
  const std::string log = (prefix.string() + ".log");
  const int rc = std::system(("cmake --install '" + build.string() + "' --prefix '" + prefix.string() + "' >'" + log + "' 2>&1").c_str());
  std::ifstream f(log);
  const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::exists(prefix / "bin" / "qkv")) << out;
  EXPECT_TRUE(fs::exists(prefix / "include" / "qkv" / "qkv.h")) << out;
  bool config = false;
  for (const char* lib : {"lib", "lib64", "lib/x86_64-linux-gnu"})
    config = config || fs::exists(prefix / lib / "cmake" / "qkv" / "qkvConfig.cmake");
  EXPECT_TRUE(config) << out;
  const int help = std::system(("'" + (prefix / "bin" / "qkv").string() + "' --help >/dev/null 2>&1").c_str());
  EXPECT_EQ(help, 0);
  fs::remove_all(prefix);
  fs::remove(log);
}

TEST(Cli, DemoRunsEverySection) {
  const fs::path out_dir = unique_temp("demo");
  const std::string model = std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";
  ASSERT_TRUE(fs::exists(model + "/model.safetensors")) << model << " is missing: run `make models` first";
  const std::string corpus = std::string(QKV_SOURCE_DIR) + "/data/kjv.txt";
  ASSERT_TRUE(fs::exists(corpus)) << corpus << " is missing: run `make data` first";
  const std::string chat = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(fs::exists(chat)) << chat << " is missing: run `make models` first";
  const Result r = run("demo --out '" + out_dir.string() + "' --model '" + model + "' --gpt2 '" +
                       std::string(QKV_SOURCE_DIR) + "/tests/fixtures/gpt2_tiny' --corpus '" + corpus +
                       "' --chat-model '" + chat + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  // The chat part: a real instruct model answers through its template (greedy).
  EXPECT_NE(r.out.find("> What is the capital of France?\nThe capital of France is Paris."), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(1/\d+  Shape walkthrough)"))) << r.out;
  EXPECT_NE(r.out.find("(1, 5, 64) -> view -> (1, 5, 4, 16) -> transpose(1,2) -> (1, 4, 5, 16)"), std::string::npos)
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(0\.177\s+0\.303\s+0\.519)"))) << r.out;
  EXPECT_NE(r.out.find("Var(q·k)"), std::string::npos) << r.out;
  // The training step saves the classifier's checkpoint in --out and lists it.
  EXPECT_NE(r.out.find("Files written ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find((out_dir / "classifier.safetensors").string()), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out_dir / "classifier.safetensors"));
  // Generation: the reverse model trains to its 0.99 held-out target and decodes greedily; its
  // checkpoint and cross-attention maps are written and listed.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(held-out exact-sequence accuracy: ([0-9.]+))"))) << r.out;
  EXPECT_GE(std::stod(m[1].str()), 0.99) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\d\s+->\s+[\d ]+\(target [\d ]+\) ok)"))) << r.out;  // a decoding
  EXPECT_TRUE(fs::exists(out_dir / "seq2seq_reverse.safetensors"));
  EXPECT_TRUE(fs::exists(out_dir / "seq2seq_heatmaps" / "cross_layer0_head0.png"));
  EXPECT_NE(r.out.find((out_dir / "seq2seq_heatmaps" / "index.html").string()), std::string::npos) << r.out;
  // The pretrained BERT part: a similarity matrix and one search over the corpus it writes.
  EXPECT_NE(r.out.find("cosine similarity:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("query: What food do people enjoy?\n  1. "), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out_dir / "index.safetensors"));
  // MiniLM's heads on the tutorials' sentence: every layer and head, and where the attention goes.
  EXPECT_TRUE(fs::exists(out_dir / "minilm_heatmaps" / "self_layer5_head11.png"));
  EXPECT_NE(r.out.find("tokens:     [CLS] | i | love | nl | ##p | [SEP]  (6)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Mean attention weight (over heads and query tokens):"), std::string::npos) << r.out;
  // Every file the demo wrote is listed, all of them inside --out.
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(out_dir))
    if (e.is_regular_file()) {
      ++files;
      EXPECT_NE(r.out.find("\n  " + e.path().string() + "\n"), std::string::npos) << "not listed: " << e.path();
    }
  EXPECT_NE(r.out.find("Files written (" + std::to_string(files) + ", all in " + out_dir.string() + "):"),
            std::string::npos) << r.out;
  // GPT-2 generation with and without the cache: the same tokens.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(with the KV cache: +\d+ tokens/s)"))) << r.out;
  EXPECT_NE(r.out.find("(same tokens)"), std::string::npos) << r.out;
  // The language model trained on the corpus: three evaluations, its folder, its samples.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(step 300/300 \| train [0-9.]+ \| val [0-9.]+ nats/token)"))) << r.out;
  EXPECT_TRUE(fs::exists(out_dir / "gpt_kjv" / "model.safetensors"));
  std::size_t same = 0;
  for (std::size_t p = r.out.find("(same tokens)"); p != std::string::npos; p = r.out.find("(same tokens)", p + 1)) ++same;
  EXPECT_EQ(same, 2u) << r.out;  // the tiny GPT-2 and the trained one
  fs::remove_all(out_dir);
}
