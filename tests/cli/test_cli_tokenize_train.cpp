// End-to-end tests of `qkv tokenize train`: the folder it writes is Hugging Face's
// (byte for byte the fixture of tests/reference/make_bpe_train_fixtures.py) and loads
// with `qkv tokenize`; the summary and --json keys; every bad input a one-line error
// before anything is written; `qkv tokenize` itself keeps its usage rules.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using qkv::cli_test::fixture;
using qkv::cli_test::json_lines;
using qkv::cli_test::read_file;
using qkv::cli_test::Result;
using qkv::cli_test::run;

const std::string kKjv = fixture("text/kjv_genesis.txt");

struct Scratch {
  fs::path dir = qkv::cli_test::unique_temp("bpetrain");
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
};

void expect_fails(const Result& r, int code, std::initializer_list<std::string> want) {
  EXPECT_EQ(r.code, code) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(qkv::cli_test::count_lines(r.err), 1) << r.err;
  for (const std::string& w : want) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

TEST(CliTokenizeTrain, WritesHuggingFacesFilesThatQkvTokenizeLoads) {
  Scratch s;
  const std::string out = s.path("bpe/nested");
  const Result r = run("tokenize train --text '" + kKjv + "' --vocab-size 1000 --min-frequency 2 --out '" + out + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("vocab size 1000 (1 special token + 256 bytes + 743 merged), 743 merges"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(std::to_string(fs::file_size(kKjv)) + " bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out + "/vocab.json"), std::string::npos) << r.out;
  for (const char* f : {"vocab.json", "merges.txt"})
    EXPECT_EQ(read_file(fs::path(out) / f), read_file(fixture(std::string("bpe_train/kjv_v1000_f2/") + f))) << f;
  // The tiny GPT-2's tokenizer was trained the same way by HF: the same ids.
  const Result t = run("tokenize --model '" + out + "' 'And God said'");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.out, "33 259 344 330\n");
}

TEST(CliTokenizeTrain, JsonAndStoppingEarly) {
  Scratch s;
  const std::string out = s.path("out");
  const Result r = run("tokenize train --text '" + kKjv + "' --vocab-size 4096 --out '" + out + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = json_lines(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  std::size_t at = 0;  // the keys in this order (json_lines' objects sort them, so look at the text)
  for (const char* k : {"vocab_size", "merges", "text_bytes", "seconds", "out"}) {
    const std::size_t p = r.out.find(std::string("\"") + k + "\":");
    EXPECT_TRUE(p != std::string::npos && p >= at) << k << " in " << r.out;
    at = p;
  }
  EXPECT_EQ(j[0].size(), 5u);
  EXPECT_EQ(j[0]["vocab_size"], 3119) << "the excerpt supports no more (HF stops there too)";
  EXPECT_EQ(j[0]["merges"], 2862);
  EXPECT_EQ(j[0]["text_bytes"], fs::file_size(kKjv));
  EXPECT_GE(j[0]["seconds"].get<double>(), 0.0);
  EXPECT_EQ(j[0]["out"], out);
  EXPECT_EQ(read_file(fs::path(out) / "merges.txt"), read_file(fixture("bpe_train/kjv_v4096/merges.txt")));
  // Plain output says why it stopped.
  const Result p = run("tokenize train --text '" + kKjv + "' --vocab-size 4096 --overwrite --out '" + out + "'");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("stopped before --vocab-size 4096: no pair of tokens is left"), std::string::npos) << p.out;
}

TEST(CliTokenizeTrain, SeveralFilesAreReadInOrder) {
  Scratch s;
  const std::string a = s.write("a.txt", "low lower lowest\n"), b = s.write("b.txt", "newer newest wider\n");
  const std::string out = s.path("out");
  const Result r = run("tokenize train --text '" + a + "' '" + b + "' --vocab-size 270 --out '" + out + "' --json");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json_lines(r.out)[0]["text_bytes"], 36);
  EXPECT_EQ(json_lines(r.out)[0]["vocab_size"], 270);
  const Result t = run("tokenize --model '" + out + "' --json 'lowest newest'");
  ASSERT_EQ(t.code, 0) << t.err;
  const auto ids = json_lines(t.out)[0]["ids"];
  EXPECT_LT(ids.size(), 13u) << "merged tokens are used: " << t.out;
  const Result d = run("tokenize --model '" + out + "' --decode " + [&] {
    std::string list;
    for (const auto& id : ids) list += (list.empty() ? "" : ",") + std::to_string(id.get<int>());
    return list;
  }());
  EXPECT_EQ(d.out, "lowest newest\n");
}

TEST(CliTokenizeTrain, BadInputsFailBeforeWritingAnything) {
  Scratch s;
  const std::string out = s.path("out");
  fs::create_directories(out);
  const std::string keep = s.write("out/vocab.json", "previous");
  const std::string good = s.write("good.txt", "some text\n");
  const std::string missing = s.path("missing.txt");
  expect_fails(run("tokenize train --text '" + good + "' '" + missing + "' --vocab-size 300 --overwrite --out '" + out + "'"), 1,
               {missing});
  const std::string bad = s.write("bad.txt", "fine\nnot \xC3\x28 fine\n");
  expect_fails(run("tokenize train --text '" + bad + "' --vocab-size 300 --overwrite --out '" + out + "'"), 1,
               {bad, "line 2", "not valid UTF-8", "byte 4 of the line"});
  expect_fails(run("tokenize train --text '" + good + "' --vocab-size 200 --overwrite --out '" + out + "'"), 1,
               {"vocab_size 200", "257", "256 byte tokens + 1 special token"});
  const std::string empty = s.write("empty.txt", "");
  expect_fails(run("tokenize train --text '" + empty + "' --vocab-size 300 --overwrite --out '" + out + "'"), 1,
               {"no text", "empty"});
  EXPECT_EQ(read_file(keep), "previous") << "nothing in --out was overwritten";
  EXPECT_FALSE(fs::exists(fs::path(out) / "merges.txt"));
  const std::string file_out = s.write("plain_file", "x");
  expect_fails(run("tokenize train --text '" + good + "' --vocab-size 300 --out '" + file_out + "'"), 1,
               {file_out, "is a file, expected a folder"});
}

TEST(CliTokenizeTrain, UsageErrors) {
  Scratch s;
  const std::string good = s.write("good.txt", "some text\n"), out = s.path("out");
  expect_fails(run("tokenize train --text '" + good + "' --vocab-size abc --out '" + out + "'"), 2,
               {"--vocab-size", "abc", "qkv tokenize train --help"});
  expect_fails(run("tokenize train --text '" + good + "' --vocab-size 300"), 2, {"--out"});
  expect_fails(run("tokenize train --vocab-size 300 --out '" + out + "'"), 2, {"--text"});
  expect_fails(run("tokenize train --text '" + good + "' --vocab-size 300 --min-frequency=-1 --out '" + out + "'"), 2,
               {"--min-frequency"});
  expect_fails(run("tokenize train --text '" + good + "' --vocab-size 300 --out '" + out + "' --model '" + s.dir.string() + "'"), 2,
               {"does not take --model"});
  expect_fails(run("tokenize --json train --text '" + good + "' --vocab-size 300 --out '" + out + "'"), 2,
               {"put --json after 'train'"});
  EXPECT_FALSE(fs::exists(out));
  // `qkv tokenize` without train still needs --model and a text.
  const std::string model = fixture("gpt2_tiny");
  expect_fails(run("tokenize 'hello'"), 2, {"--model is required", "qkv tokenize --help"});
  expect_fails(run("tokenize --model '" + model + "'"), 2, {"texts is required"});
  // A text that is the word "train" goes after --.
  const Result t = run("tokenize --model '" + model + "' -- train");
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(qkv::cli_test::count_lines(t.out), 1) << t.out;
  const Result h = run("tokenize train --help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--vocab-size"), std::string::npos) << h.out;
}

}  // namespace
