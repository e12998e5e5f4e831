// End-to-end tests of `qkv perplexity` on the committed tiny Llama-2 folder (SentencePiece, BOS)
// and tiny GPT-2: the JSON keys and transformers' perplexity (tests/fixtures/perplexity.json),
// --save-logits then --kl-reference (the model against itself: KL 0; a `qkv convert --type q8_0`
// copy: small positive KL; context and stride taken from the reference), and every bad input a
// one-line error before any work, the user's files left as they were (also when a run is killed).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qkv::cli_test::Result;
using qkv::cli_test::read_file;
using qkv::cli_test::run;

const std::string kLlama = std::string(QKV_FIXTURE_DIR) + "/arch/llama2";
const std::string kGpt2 = std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny";
const std::string kGenesis = std::string(QKV_FIXTURE_DIR) + "/text/kjv_genesis.txt";

struct Scratch {
  fs::path dir = qkv::cli_test::unique_temp("ppl");
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
  std::string operator/(const std::string& f) const { return (dir / f).string(); }
  // The fixture's text: the first 300 bytes of Genesis.
  std::string text() const { return write("text.txt", read_file(kGenesis).substr(0, 300)); }
  int files() const { return static_cast<int>(std::distance(fs::directory_iterator(dir), fs::directory_iterator())); }
};

std::string q(const std::string& s) { return "'" + s + "'"; }

json one(const Result& r) {
  EXPECT_EQ(r.code, 0) << r.err;
  return r.code == 0 ? json::parse(r.out) : json::object();
}

void expect_error(const Result& r, const std::string& part) {
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("qkv: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line
}

json fixture_json() {
  std::ifstream in(std::string(QKV_FIXTURE_DIR) + "/perplexity.json");
  return json::parse(in);
}

TEST(CliPerplexity, JsonAndTextGiveTransformersPerplexity) {
  Scratch s;
  const json ref = fixture_json();
  for (const std::string m : {"llama2", "gpt2"}) {
    const json& want = ref["models"][m]["windows"][0];  // context 64, stride 24
    const Result r = run("perplexity --model " + q(m == "llama2" ? kLlama : kGpt2) + " --text " + q(s.text()) +
                         " --context 64 --stride 24 --json --no-progress");
    const json j = one(r);
    for (const char* k : {"model", "perplexity", "nll", "nll_sum", "tokens", "text_tokens", "context", "stride", "windows",
                          "seconds", "tokens_per_s"})
      EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_FALSE(j.contains("kl"));
    EXPECT_LT(std::abs(j["perplexity"].get<double>() - want["perplexity"].get<double>()) / want["perplexity"].get<double>(),
              1e-5)
        << m << ": " << j["perplexity"] << " vs " << want["perplexity"];
    EXPECT_EQ(j["tokens"], want["tokens"]);
    EXPECT_EQ(j["text_tokens"].get<std::int64_t>(), static_cast<std::int64_t>(ref["models"][m]["ids"].size()));
    EXPECT_NEAR(std::exp(j["nll"].get<double>()), j["perplexity"].get<double>(), 1e-9 * j["perplexity"].get<double>());
  }
  const Result text = run("perplexity --model " + q(kLlama) + " --text " + q(s.text()) + " --context 64 --stride 24 --no-progress");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(text.out,
            "perplexity 7.7187 over 204 tokens (mean nll 2.0436 nats; 205 text tokens, context 64, stride 24, 7 windows)\n");
  EXPECT_NE(text.err.find("204 tokens scored in"), std::string::npos) << text.err;
  // Defaults: the model's 256 positions, stride half of them; progress on stderr only.
  const json d = one(run("perplexity --model " + q(kLlama) + " --text " + q(s.text()) + " --json"));
  EXPECT_EQ(d["context"], 256);
  EXPECT_EQ(d["stride"], 128);
  EXPECT_EQ(d["windows"], 1);
  EXPECT_EQ(d["tokens"], 204);
}

TEST(CliPerplexity, SavedLogitsGiveZeroKLToTheModelAndSmallKLToAQ8Copy) {
  Scratch s;
  const std::string text = s.text(), logits = s / "f32.safetensors", q8 = s / "q8.gguf";
  const json saved = one(run("perplexity --model " + q(kLlama) + " --text " + q(text) +
                             " --context 64 --stride 32 --json --no-progress --save-logits " + q(logits)));
  EXPECT_EQ(saved["saved_logits"], logits);
  // tokens 205 and positions 204 (8 bytes each), 204 rows of 336 float32 log-probabilities, a header.
  const auto size = fs::file_size(logits);
  EXPECT_GT(size, 204u * 336 * 4 + 409 * 8);
  EXPECT_LT(size, 204u * 336 * 4 + 409 * 8 + 1024);
  // The model against its own file; context and stride come from the file.
  const json self = one(run("perplexity --model " + q(kLlama) + " --text " + q(text) + " --json --no-progress --kl-reference " +
                            q(logits)));
  EXPECT_EQ(self["context"], 64);
  EXPECT_EQ(self["stride"], 32);
  const json& k = self["kl"];
  EXPECT_EQ(k["reference"], logits);
  EXPECT_EQ(k["tokens"], 204);
  EXPECT_LT(std::abs(k["mean"].get<double>()), 1e-9);
  EXPECT_LT(k["percentiles"]["max"].get<double>(), 1e-8);
  EXPECT_EQ(k["same_top"].get<double>(), 1.0);
  EXPECT_LT(k["delta_p"]["rms"].get<double>(), 1e-6);
  EXPECT_NEAR(k["reference_perplexity"].get<double>(), saved["perplexity"].get<double>(), 1e-5 * saved["perplexity"].get<double>());
  // A Q8_0 copy written by qkv convert: KL small and positive, most top tokens the same.
  const Result cv = run("convert --model " + q(kLlama) + " --out " + q(q8) + " --type q8_0");
  ASSERT_EQ(cv.code, 0) << cv.err;
  const json quant = one(run("perplexity --model " + q(q8) + " --text " + q(text) + " --json --no-progress --kl-reference " +
                             q(logits)));
  const json& kq = quant["kl"];
  EXPECT_GT(kq["mean"].get<double>(), 1e-7);
  EXPECT_LT(kq["mean"].get<double>(), 0.01);
  EXPECT_GE(kq["percentiles"]["min"].get<double>(), -1e-12);
  EXPECT_GT(kq["same_top"].get<double>(), 0.9);
  EXPECT_GT(kq["nll_correlation"].get<double>(), 0.99);
  for (const char* p : {"max", "99.9%", "99%", "95%", "90%", "75%", "median", "25%", "10%", "5%", "1%", "0.1%", "min"}) {
    EXPECT_TRUE(kq["percentiles"].contains(p)) << p;
    EXPECT_TRUE(kq["delta_p"]["percentiles"].contains(p)) << p;
  }
  // The text report has llama-perplexity's lines.
  const Result t = run("perplexity --model " + q(q8) + " --text " + q(text) + " --no-progress --kl-reference " + q(logits));
  ASSERT_EQ(t.code, 0) << t.err;
  for (const char* line : {"mean KL ", "median  KL ", "RMS delta-p ", "same top p ", "99.9%   KL "})
    EXPECT_NE(t.out.find(line), std::string::npos) << line << " in\n" << t.out;
}

TEST(CliPerplexity, BadInputsAreOneLineErrorsBeforeAnyWork) {
  Scratch s;
  const std::string text = s.text(), logits = s / "ref.safetensors";
  ASSERT_EQ(run("perplexity --model " + q(kLlama) + " --text " + q(text) + " --context 64 --stride 32 --no-progress "
                "--save-logits " + q(logits)).code, 0);
  const std::string base = "perplexity --no-progress --model " + q(kLlama) + " --text ";
  // Too short: an empty text is BOS alone for Llama-2; nothing at all for GPT-2.
  expect_error(run(base + q(s.write("empty.txt", ""))), "gives 1 token; a perplexity needs at least 2");
  expect_error(run("perplexity --model " + q(kGpt2) + " --text " + q(s / "empty.txt")), "gives 0 tokens");
  expect_error(run(base + q(text) + " --context 32 --stride 33"), "--stride 33 is larger than --context 32");
  expect_error(run(base + q(text) + " --context 300"), "--context 300 is more than the model's 256 positions");
  expect_error(run(base + q(text) + " --stride 300"), "--stride 300 is larger than the context 256");
  EXPECT_EQ(run(base + q(text) + " --context 1").code, 2);  // out of the flag's range
  // References of other tokens, another vocabulary, other windows; not a reference at all.
  const std::string other = s.write("other.txt", read_file(kGenesis).substr(300, 300));
  expect_error(run(base + q(other) + " --kl-reference " + q(logits)), "--kl-reference '" + logits + "'");
  expect_error(run(base + q(other) + " --kl-reference " + q(logits)), "this text gives");
  expect_error(run("perplexity --model " + q(kGpt2) + " --text " + q(text) + " --kl-reference " + q(logits)),
               "was made with a vocabulary of 336 tokens; this model's has 1000");
  expect_error(run(base + q(text) + " --context 64 --stride 16 --kl-reference " + q(logits)),
               "was made with context 64 and stride 32; this run uses context 64 and stride 16");
  expect_error(run(base + q(text) + " --kl-reference " + q(std::string(QKV_FIXTURE_DIR) + "/linear.safetensors")),
               "not a log-probabilities file");
  expect_error(run(base + q(text) + " --kl-reference " + q(text)), "text.txt");
  // Outputs: a folder, the user's file (untouched without --overwrite), the reference itself, the text.
  fs::create_directories(s.dir / "folder");
  expect_error(run(base + q(text) + " --save-logits " + q(s / "folder")), "folder");
  const std::string mine = s.write("mine.safetensors", "my file");
  expect_error(run(base + q(text) + " --save-logits " + q(mine)), "give --overwrite");
  EXPECT_EQ(read_file(mine), "my file");
  expect_error(run(base + q(text) + " --save-logits " + q(logits) + " --kl-reference " + q(logits) + " --overwrite"),
               "--save-logits names the --kl-reference file");
  expect_error(run(base + q(text) + " --save-logits " + q(text) + " --overwrite"), "--save-logits names the --text file");
  EXPECT_EQ(read_file(text), read_file(kGenesis).substr(0, 300));
  const Result ok = run(base + q(text) + " --context 64 --save-logits " + q(mine) + " --overwrite --json");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_NE(read_file(mine), "my file");
  EXPECT_EQ(s.files(), 6) << "text, empty, other, ref, mine, folder: no temp files left";
}

// A run killed while it writes leaves the user's file as it was; the next run removes the dead
// run's temp file.
TEST(CliPerplexity, AKilledSaveLeavesTheUsersFile) {
  Scratch s;
  const std::string text = s.write("long.txt", read_file(kGenesis).substr(0, 15000));
  const std::string mine = s.write("mine.safetensors", "my file");
  const auto p = qkv::cli_test::spawn("perplexity --no-progress --model " + q(kLlama) + " --text " + q(text) +
                                      " --context 64 --stride 2 --overwrite --save-logits " + q(mine));
  // Wait for the temp file beside the target, then kill.
  bool seen = false;
  for (int i = 0; i < 3000 && !seen; ++i) {
    for (const auto& e : fs::directory_iterator(s.dir))
      if (e.path().filename().string().rfind("mine.safetensors.tmp.", 0) == 0) seen = true;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(p.pid, SIGKILL);
  const Result r = qkv::cli_test::wait_for(p);
  ASSERT_TRUE(seen) << r.err;
  EXPECT_EQ(r.signal, SIGKILL) << "the run ended before it was killed: " << r.err;
  EXPECT_EQ(read_file(mine), "my file");
  // The next run (refused: the output is taken) cleans the dead writer's temp file first.
  const Result again = run("perplexity --no-progress --model " + q(kLlama) + " --text " + q(text) + " --save-logits " + q(mine));
  EXPECT_EQ(again.code, 1);
  EXPECT_EQ(s.files(), 2) << "long.txt, mine.safetensors";
}

}  // namespace
