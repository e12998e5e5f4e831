// End-to-end tests of `qkv generate`, `qkv tokenize` and `qkv bench generate` on the
// committed tiny GPT-2 folder (tests/fixtures/gpt2_tiny): the pinned JSON keys, input
// order, batch = alone, cache = no cache, seeds, stop strings, and every bad input a
// clear one-line error before anything is generated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using qkv::cli_test::Result;
using qkv::cli_test::json_lines;
using qkv::cli_test::run;

const std::string kModel = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/gpt2_tiny";

struct Scratch {
  fs::path dir = qkv::cli_test::unique_temp("gen");
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
  // A copy of the tiny model folder to break.
  std::string model_copy() const {
    fs::copy(kModel, dir / "model", fs::copy_options::recursive);
    return (dir / "model").string();
  }
};

TEST(CliGenerate, JsonKeysOrderBatchAndCache) {
  Scratch s;
  const std::string prompts = s.write("p.txt", "In the beginning\nAnd God said unto Noah\n\xe2\x80\x9cLight\xe2\x80\x9d\n");
  const Result r = run("generate --model '" + kModel + "' --prompts-file '" + prompts + "' --max-new 12 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = json_lines(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[0]["prompt"], "In the beginning");
  EXPECT_EQ(j[1]["prompt"], "And God said unto Noah");
  for (const auto& o : j) {
    for (const char* k : {"prompt", "prompt_ids", "new_ids", "text", "tokens_per_s"}) EXPECT_TRUE(o.contains(k)) << k;
    EXPECT_EQ(o["new_ids"].size(), 12u);
    EXPECT_GT(o["tokens_per_s"].get<double>(), 0.0);
  }
  // Each prompt alone gives the tokens it got in the batch; --no-cache gives the same tokens.
  for (const auto& o : j) {
    const Result one = run("generate --model '" + kModel + "' --prompt '" + o["prompt"].get<std::string>() +
                           "' --max-new 12 --json");
    ASSERT_EQ(one.code, 0) << one.err;
    EXPECT_EQ(json_lines(one.out)[0]["new_ids"], o["new_ids"]);
    EXPECT_EQ(json_lines(one.out)[0]["text"], o["text"]);
    const Result nc = run("generate --model '" + kModel + "' --prompt '" + o["prompt"].get<std::string>() +
                          "' --max-new 12 --json --no-cache");
    EXPECT_EQ(json_lines(nc.out)[0]["new_ids"], o["new_ids"]);
  }
}

TEST(CliGenerate, StreamedTextIsThePromptAndTheJsonText) {
  const std::string args = "generate --model '" + kModel + "' --prompt 'And God said' --max-new 30";
  const Result text = run(args), json = run(args + " --json");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_EQ(text.out, "And God said" + json_lines(json.out)[0]["text"].get<std::string>() + "\n");
  EXPECT_NE(text.err.find("tokens/s"), std::string::npos) << text.err;
}

TEST(CliGenerate, SeedsStopStringsAndIds) {
  const std::string base = "generate --model '" + kModel + "' --prompt 'And God' --max-new 30 --json ";
  const auto a = json_lines(run(base + "--temperature 0.9 --top-k 50 --seed 5").out);
  const auto b = json_lines(run(base + "--temperature 0.9 --top-k 50 --seed 5").out);
  const auto c = json_lines(run(base + "--temperature 0.9 --top-k 50 --seed 6").out);
  EXPECT_EQ(a[0]["new_ids"], b[0]["new_ids"]);
  EXPECT_NE(a[0]["new_ids"], c[0]["new_ids"]);
  // Greedy text of this prompt contains "the"; a stop string ends the text right after it.
  const std::string greedy = json_lines(run(base).out)[0]["text"];
  const std::size_t at = greedy.find("the");
  ASSERT_NE(at, std::string::npos) << greedy;
  const auto stopped = json_lines(run(base + "--stop the").out)[0];
  EXPECT_EQ(stopped["text"], greedy.substr(0, at + 3));
  EXPECT_EQ(stopped["stop_reason"], "stop");
  EXPECT_LT(stopped["new_ids"].size(), 30u);
  // --prompt-ids with a folder that has no tokenizer: no "text".
  Scratch s;
  const std::string m = s.model_copy();
  fs::remove(fs::path(m) / "vocab.json");
  const Result ids = run("generate --model '" + m + "' --prompt-ids 33,259,344 --max-new 4 --json");
  ASSERT_EQ(ids.code, 0) << ids.err;
  const auto o = json_lines(ids.out)[0];
  EXPECT_FALSE(o.contains("text"));
  EXPECT_EQ(o["prompt_ids"], (std::vector<int>{33, 259, 344}));
}

// --logit-bias, the penalties and --min-p reach the library's sampler: banning the first greedy
// token changes the text, llama.cpp's ID-BIAS spelling means the same as ID=-BIAS, and the
// penalties give what the library gives (its own tests check the formulas).
TEST(CliGenerate, LogitBiasAndPenaltiesChangeTheTokens) {
  const std::string M = "generate --model '" + kModel + "' --prompt-ids 33,259,344 --max-new 6 --json ";
  const Result plain = run(M);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const auto ids = json_lines(plain.out)[0]["new_ids"].get<std::vector<std::int64_t>>();
  ASSERT_FALSE(ids.empty());
  const std::string ban = std::to_string(ids[0]);
  for (const std::string& spelling : {ban + "=-100", ban + "-100"}) {
    const Result r = run(M + "--logit-bias " + spelling);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto other = json_lines(r.out)[0]["new_ids"].get<std::vector<std::int64_t>>();
    EXPECT_NE(other[0], ids[0]) << spelling;
    EXPECT_EQ(std::count(other.begin(), other.end(), ids[0]), 0) << spelling;
  }
  const Result p = run(M + "--repeat-penalty 1.5 --repeat-last-n -1 --frequency-penalty 1 --presence-penalty 0.5 --logit-bias 1=0.5 --logit-bias 2=-0.5");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(json_lines(p.out)[0]["new_ids"].size(), 6u);
  EXPECT_TRUE(p.err.empty()) << p.err;
  // --min-p with greedy decoding warns that it does nothing, as --top-p does.
  const Result g = run(M + "--min-p 0.1");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_NE(g.err.find("--min-p has no effect with greedy decoding"), std::string::npos) << g.err;
}

TEST(CliGenerate, BadInputsFailWithOneClearLine) {
  Scratch s;
  const std::string M = "generate --model '" + kModel + "' ";
  auto expect = [](const Result& r, const std::string& needle) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << "nothing generated: " << r.out;
  };
  expect(run(M + "--prompt-ids 1,2,1000"), "token id 1000 at position 2, out of range [0, 1000)");
  expect(run(M + "--prompt-ids 1,x"), "'x' is not a token id");
  expect(run(M + "--prompt ''"), "--prompt is empty");
  expect(run(M + "--prompt a --max-new 128"), "more than the model's 128");
  // Numbers out of range or not finite are usage errors naming the flag and its range.
  for (const auto& [args, needle] : std::vector<std::pair<std::string, std::string>>{
           {"--temperature -0.5", "--temperature: expects a finite number >= 0, got -0.5"},
           {"--temperature nan", "--temperature: expects a finite number >= 0, got nan"},
           {"--top-p 1.5", "--top-p: expects a finite number in [0, 1], got 1.5"},
           {"--top-p inf", "--top-p: expects a finite number in [0, 1], got inf"},
           {"--seed -1", "--seed: expects an integer in [0, 18446744073709551615], got -1"}}) {
    const Result r = run(M + "--prompt a " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  }
  expect(run(M + "--prompt a --top-k 0"), "--top-k must be >= 1, got 0");
  expect(run(M + "--prompt a --top-p 0"), "--top-p must be in (0, 1]");
  expect(run(M + "--prompt a --logit-bias 5"), "--logit-bias wants TOKEN_ID=BIAS (for example 15043=-100), got '5'");
  expect(run(M + "--prompt a --logit-bias x=1"), "--logit-bias wants TOKEN_ID=BIAS");
  expect(run(M + "--prompt a --logit-bias 5=1x"), "--logit-bias wants TOKEN_ID=BIAS");
  expect(run(M + "--prompt a --logit-bias 99999999=1"), "logit_bias names token 99999999, out of range");
  expect(run(M + "--prompt a --repeat-penalty 0"), "--repeat-penalty must be a finite number > 0");
  expect(run(M + "--prompt a --repeat-last-n -2"), "--repeat-last-n must be >= -1");
  expect(run(M + "--prompt a --frequency-penalty 3"), "--frequency-penalty must be in [-2, 2]");
  expect(run(M + "--prompt a --presence-penalty -2.5"), "--presence-penalty must be in [-2, 2]");
  expect(run(M + "--prompt a --prompt-ids 1"), "give exactly one of PROMPT (or --prompt), --prompt-ids, --prompts-file");
  expect(run(M + "--prompts-file '" + s.write("bad.txt", "fine\nbad \xff byte\n") + "'"),
         "bad.txt:2: not valid UTF-8 (byte 5 of the line)");
  expect(run(M + "--prompts-file '" + s.write("empty.txt", "one\n\nthree\n") + "'"), "empty.txt: line 2 is empty");
  // Broken folders: the file and the line or field are named.
  std::string m = s.model_copy();
  s.write("model/config.json", "{\"n_layer\": 2,");
  expect(run("generate --model '" + m + "' --prompt a"), "config.json: not valid JSON");
  s.write("model/config.json", "{\"vocab_size\": 1000, \"n_positions\": 128, \"n_embd\": 64, \"n_head\": 4}");
  expect(run("generate --model '" + m + "' --prompt a"), "config.json: field 'n_layer' is missing");
  s.write("model/config.json",
          "{\"vocab_size\": 1000, \"n_positions\": 128, \"n_embd\": 32, \"n_head\": 4, \"n_layer\": 2}");
  expect(run("generate --model '" + m + "' --prompt a"), "transformer.h.0.attn.c_attn.weight is [64,192], the config needs [32,96]");
  fs::remove_all(m);
  m = s.model_copy();
  s.write("model/merges.txt", "#version: 0.2\n\xc4\xa0 t\nnot-a-merge\n");
  expect(run("generate --model '" + m + "' --prompt a"), "merges.txt");
  fs::remove(fs::path(m) / "merges.txt");
  expect(run("generate --model '" + m + "' --prompt a"), "has no merges.txt");
  fs::remove_all(m);
  m = s.model_copy();
  s.write("model/vocab.json", "[1, 2]");
  expect(run("generate --model '" + m + "' --prompt a"), "vocab.json");
}

TEST(CliTokenize, IdsJsonAndDecode) {
  const Result r = run("tokenize --model '" + kModel + "' 'And God said' ''");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "33 259 344 330\n\n");
  const auto j = json_lines(run("tokenize --model '" + kModel + "' --json 'And God said'").out);
  EXPECT_EQ(j[0]["text"], "And God said");
  EXPECT_EQ(j[0]["ids"], (std::vector<int>{33, 259, 344, 330}));
  const Result d = run("tokenize --model '" + kModel + "' --decode 33,259,344,330 72,101");
  EXPECT_EQ(d.out, "And God said\nh\xef\xbf\xbd\n") << "half a UTF-8 character decodes to U+FFFD";
  const Result bad = run("tokenize --model '" + kModel + "' --decode 5,1000");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("1000"), std::string::npos) << bad.err;
}

TEST(CliConvert, WritesTheHuggingFaceLayoutThatLoadsBack) {
  Scratch s;
  const std::string out = (s.dir / "converted").string();
  const Result r = run("convert --model '" + kModel + "' --out '" + out + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote"), std::string::npos);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  const std::string args = " --prompt 'And God said' --max-new 20 --json";
  EXPECT_EQ(json_lines(run("generate --model '" + out + "'" + args).out)[0]["new_ids"],
            json_lines(run("generate --model '" + kModel + "'" + args).out)[0]["new_ids"]);
  const Result same = run("convert --model '" + kModel + "' --out '" + kModel + "'");
  EXPECT_EQ(same.code, 1);
  EXPECT_NE(same.err.find("--out is the --model folder"), std::string::npos) << same.err;
}

TEST(CliBenchGenerate, ReportsThroughputAndTheBandwidthBound) {
  for (const std::string extra : {"", " --no-cache"}) {
    const Result r = run("--threads 1 bench generate --model '" + kModel +
                         "' --batch 2 --prompt-len 5 --new 6 --repeat 1 --bandwidth-mb 16 --json" + extra);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = json_lines(r.out);
    ASSERT_EQ(j.size(), 1u);
    for (const char* k : {"tokens_per_s", "ms_per_token", "prefill_ms", "read_gbs", "weight_bytes",
                          "bandwidth_bound_tokens_per_s", "fraction_of_bound", "read_gbs_weight_size",
                          "bound_weight_size_tokens_per_s", "fraction_of_bound_weight_size", "peak_rss_mb"})
      EXPECT_GT(j[0][k].get<double>(), 0.0) << k << " in " << r.out;
    EXPECT_EQ(j[0]["first_ids"].size(), 2u);
    EXPECT_EQ(j[0]["first_ids"][0].size(), 6u);
    EXPECT_EQ(j[0]["cache"], extra.empty());
  }
  const Result rnd = run("--threads 1 bench generate --layers 1 --d-model 16 --heads 2 --vocab 50 --new 3 "
                         "--repeat 1 --bandwidth-mb 16 --json");
  ASSERT_EQ(rnd.code, 0) << rnd.err;
  EXPECT_EQ(json_lines(rnd.out)[0]["model"], "random");
}

}  // namespace
