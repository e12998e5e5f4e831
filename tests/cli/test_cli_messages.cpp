// What a newcomer types and what the tool answers (issue 25 items 3-5): every number is
// checked (NaN, infinities, seeds outside [0, 2^64), readable bounds, the environment
// variables), every message says what is wrong (directories for files, model folders of
// the wrong kind, missing folders, file-system errors, progress bars that never say done for
// failed work), and what the tool tells users to type works.
#include <gtest/gtest.h>

#include <regex>

#include "cli_test_util.h"

namespace qkv::cli_test {
namespace {

const std::string kGpt2 = fixture("gpt2_tiny");
const std::string kText = fixture("text/kjv_genesis.txt");
const std::string kMiniLM = std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";  // `make models`

// One line on stderr starting "qkv: error: ", holding `needle`, with exit code `code`.
void expect_error(const std::string& args, int code, const std::string& needle, const std::string& env = "") {
  const Result r = run(args, env);
  EXPECT_EQ(r.code, code) << "qkv " << args << "\n" << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << "qkv " << args << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("qkv: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "qkv " << args << "\nwant: " << needle << "\ngot:  " << r.err;
}

// ------------------------------------------------------------------ item 3: numbers

TEST(CliMessages, NonFiniteNumbersAreRefusedWithReadableBounds) {
  const std::string out = " --out '" + unique_temp("msg_lm").string() + "'";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bench peak --seconds nan", "--seconds: expects a finite number in [0.001, 600], got nan"},
      {"bench peak --seconds inf", "--seconds: expects a finite number in [0.001, 600], got inf"},
      {"train lm --text x" + out + " --lr inf", "--lr: expects a finite number > 0, got inf"},
      {"train lm --text x" + out + " --lr nan", "--lr: expects a finite number > 0, got nan"},
      {"train lm --text x" + out + " --min-lr -inf", "--min-lr: expects a finite number >= 0, got -inf"},
      {"train lm --text x" + out + " --weight-decay nan", "--weight-decay: expects a finite number >= 0, got nan"},
      {"train lm --text x" + out + " --grad-clip inf", "--grad-clip: expects a finite number >= 0, got inf"},
      {"train lm --text x" + out + " --val-fraction nan", "--val-fraction: expects a finite number in [1e-06, 0.9], got nan"},
      {"train lm --text x" + out + " --dropout nan", "--dropout: expects a finite number in [0, 0.9], got nan"},
      {"train classify --lr nan", "--lr: expects a finite number > 0, got nan"},
      {"train classify --dropout inf", "--dropout: expects a finite number in [0, 0.99], got inf"},
      {"train seq2seq --lr -inf", "--lr: expects a finite number > 0, got -inf"},
      {"train seq2seq --target-acc nan", "--target-acc: expects a finite number in [0, 1], got nan"},
      {"generate --model '" + kGpt2 + "' --temperature inf hi", "--temperature: expects a finite number >= 0, got inf"},
      {"train classify --lr abc", "--lr: expects a finite number > 0, got 'abc'"},
  };
  for (const auto& [args, needle] : cases) expect_error(args, 2, needle);
  // The bound of --lr used to print as a 300-digit number.
  const Result r = run("train lm --text x --out y --lr inf");
  EXPECT_LT(r.err.size(), 120u) << r.err;
}

TEST(CliMessages, SeedsOutsideTheir64BitRangeAreRefusedNotWrapped) {
  const std::string want = "--seed: expects an integer in [0, 18446744073709551615], got ";
  for (const std::string& cmd : {std::string("train classify"), std::string("train seq2seq"), std::string("trace"),
                                 std::string("variance"), std::string("demo"),
                                 std::string("train lm --text x --out y"), "generate --model '" + kGpt2 + "' hi"}) {
    expect_error(cmd + " --seed -1", 2, want + "-1");
    expect_error(cmd + " --seed 18446744073709551616", 2, want + "18446744073709551616");
    expect_error(cmd + " --seed 1e3", 2, want + "'1e3'");
  }
  // The largest seed is a seed.
  const Result ok = run("train classify --epochs 1 --no-progress --seed 18446744073709551615 --json");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(CliMessages, InvalidEnvironmentVariablesAreNamed) {
  expect_error("worked-example", 1, "QKV_NUM_THREADS='abc' is not an integer in [1, 1024]", "QKV_NUM_THREADS=abc ");
  expect_error("worked-example", 1, "QKV_NUM_THREADS='0' is not an integer in [1, 1024]", "QKV_NUM_THREADS=0 ");
  expect_error("worked-example", 1, "QKV_NUM_THREADS='4x' is not an integer in [1, 1024]", "QKV_NUM_THREADS=4x ");
  expect_error("worked-example", 1, "QKV_ISA='avx9' is not one of scalar, avx2, avx512", "QKV_ISA=avx9 ");
  expect_error("worked-example", 1, "QKV_CACHE_MB='-1' is not an integer in [0, ", "QKV_CACHE_MB=-1 ");
  // Valid and empty values run.
  for (const char* env : {"QKV_NUM_THREADS=1 ", "QKV_ISA=avx2 ", "QKV_ISA=scalar ", "QKV_ISA= ", "QKV_CACHE_MB=0 "}) {
    const Result r = run("worked-example --json", env);
    EXPECT_EQ(r.code, 0) << env << r.err;
  }
}

// ------------------------------------------------------------------ item 4: messages

TEST(CliMessages, ADirectoryForAFileAndAFileForAFolderAreNamed) {
  const std::string dir = fixture("text");
  const std::string out = " --out '" + unique_temp("msg_out").string() + "'";
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"train lm --vocab-size 300 --text '" + dir + "'" + out, 1, "--text " + dir + " is a directory, expected a text file"},
      {"tokenize train --vocab-size 300 --text '" + dir + "'" + out, 1, "--text " + dir + " is a directory, expected a text file"},
      {"embed --model '" + kMiniLM + "' --file '" + dir + "'", 2, "--file: " + dir + " is a directory, expected a text file"},
      {"generate --model '" + kGpt2 + "' --prompts-file '" + dir + "'", 2, dir + " is a directory, expected a text file"},
      {"heatmap --checkpoint '" + dir + "' --input 1" + out, 1, "--checkpoint " + dir + " is a directory, expected a checkpoint file"},
      {"train classify --resume '" + dir + "'", 2, dir + " is a directory, expected a checkpoint file"},
      {"search --model '" + kGpt2 + "' --index '" + dir + "' q", 2, dir + " is a directory, expected an index file"},
      {"generate --model '" + kText + "' hi", 2, "--model: " + kText + " is a file but not a GGUF file, expected a GGUF file or a model folder"},
      {"embed --model '" + kText + "' hi", 2, "--model: " + kText + " is a file, expected a model folder"},
      {"tokenize --model '" + kText + "' hi", 2, kText + " is a file but not a GGUF file, expected a GGUF file or a model folder"},
      {"convert --model '" + kText + "'" + out, 2, kText + " is a file but not a GGUF file, expected a GGUF file or a model folder"},
      {"train lm --text '" + kText + "' --tokenizer '" + kText + "'" + out, 1,
       "--tokenizer " + kText + " is a file, expected a tokenizer folder"},
  };
  for (const auto& [args, code, needle] : cases) expect_error(args, code, needle);
}

TEST(CliMessages, AModelFolderOfTheWrongKindIsNamed) {
  const std::string bert = kMiniLM;
  ASSERT_TRUE(fs::exists(bert + "/config.json")) << bert << " is missing: run `make models` first";
  // The kinds come from the registry (models/registry.h): the message lists what each role takes.
  const std::string g = " is a GPT-2 folder; qkv ";
  const std::string enc = "needs a sentence-embedding model: a folder of model_type bert (config.json";
  expect_error("embed --model '" + kGpt2 + "' hello", 1, "embed: " + kGpt2 + g + "embed " + enc);
  expect_error("search --model '" + kGpt2 + "' --index '" + fixture("linear.safetensors") + "' q", 1,
               "search: " + kGpt2 + g + "search " + enc);
  expect_error("bench embed --model '" + kGpt2 + "'", 1, "bench embed: " + kGpt2 + g + "bench embed " + enc);
  expect_error("generate --model '" + bert + "' hello", 1,
               "generate: " + bert + " is a BERT folder; qkv generate needs a causal language model: a GGUF file (");
  expect_error("generate --model '" + bert + "' hello", 1, ") or a folder of model_type gemma2, gemma3, gemma3_text, gpt2, gpt_oss, llama, ");
  const fs::path t5 = unique_temp("msg_t5");
  fs::create_directories(t5);
  std::ofstream(t5 / "config.json") << R"({"model_type": "t5"})";
  expect_error("heatmap --model '" + t5.string() + "' --text hi --out '" + unique_temp("msg_hm").string() + "'", 1,
               "heatmap: " + t5.string() + " is a 't5' model folder; qkv heatmap draws GGUF files and folders of bert, ");
  fs::remove_all(t5);
}

TEST(CliMessages, MissingFoldersAndFilesAreNamedAsMissing) {
  const std::string gone = "/nonexistent/qkv-folder";
  expect_error("train lm --text '" + kText + "' --tokenizer " + gone + " --out '" + unique_temp("m").string() + "'", 1,
               "--tokenizer " + gone + ": no such folder (expected a tokenizer folder");
  expect_error("tokenize --model " + gone + " hi", 2, gone + ": no such file or folder (expected a GGUF file or a model folder");
  expect_error("generate --model " + gone + " hi", 2, "--model: " + gone + ": no such file or folder (expected a GGUF file or a model folder)");
  expect_error("train lm --resume --text '" + kText + "' --out " + gone, 1, "--out " + gone + ": no such folder");
  expect_error("embed --model '" + kMiniLM + "' --file /nonexistent/lines.txt", 2,
               "/nonexistent/lines.txt: no such file (expected a text file)");
  // A folder without its tokenizer says which file is missing.
  const fs::path m = unique_temp("msg_notok");
  fs::create_directories(m);
  fs::copy(kGpt2, m, fs::copy_options::recursive);
  fs::remove(m / "merges.txt");
  expect_error("generate --model '" + m.string() + "' hi", 1, "'" + m.string() + "' has no merges.txt");
  fs::remove_all(m);
}

TEST(CliMessages, FileSystemErrorsAreOneLineNamingThePathAndTheReason) {
  const std::string too_long = "/tmp/" + std::string(300, 'a');
  for (const std::string& args : {"convert --model '" + kGpt2 + "' --out " + too_long,
                                  "tokenize train --text '" + kText + "' --vocab-size 300 --out " + too_long,
                                  "train classify --epochs 1 --save " + too_long + ".st"}) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 1) << args << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(too_long), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("File name too long"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("unexpected failure"), std::string::npos) << r.err;
  }
  // A parent that is a file.
  const fs::path file = unique_temp("msg_parent_file");
  std::ofstream(file) << "x";
  expect_error("tokenize train --text '" + kText + "' --vocab-size 300 --out '" + (file / "sub").string() + "'", 1,
               "'" + file.string() + "' is a file, not a folder");
  fs::remove(file);
}

TEST(CliMessages, AProgressBarNeverSaysDoneForWorkThatFailed) {
  const fs::path dir = unique_temp("msg_bar");
  fs::create_directories(dir);
  // The bar (plain lines on a pipe) of a run that fails at its 3rd epoch ends "failed", not "done".
  const Result r = run("train classify --epochs 50 --lr 1e30 --threads 1 --save '" + (dir / "c.st").string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("train: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", failed"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("done"), std::string::npos) << r.err;
  // A run that completes says done.
  const Result ok = run("train classify --epochs 3 --threads 1");
  EXPECT_NE(ok.err.find("3/3 (100%)"), std::string::npos) << ok.err;
  EXPECT_NE(ok.err.find(", done"), std::string::npos) << ok.err;
  fs::remove_all(dir);
}

// ------------------------------------------------------------------ item 5: what users type

TEST(CliMessages, ThePrintedGenerateCommandWorks) {
  // train lm ends with "try: qkv generate --model DIR 'And God said'": it runs as printed.
  const fs::path dir = unique_temp("msg_try");
  const Result t = run("train lm --text '" + kText + "' --tokenizer '" + kGpt2 + "' --layers 1 --d-model 16 --heads 2 "
                       "--context 16 --batch 2 --steps 3 --warmup 1 --eval-every 0 --val-windows 2 --no-progress --out '" +
                       dir.string() + "'");
  ASSERT_EQ(t.code, 0) << t.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(t.out, m, std::regex("try: qkv (generate [^\n]*)\n"))) << t.out;
  const Result g = run(m[1].str() + " --max-new 4");
  EXPECT_EQ(g.code, 0) << m[1].str() << ": " << g.err;
  EXPECT_EQ(g.out.rfind("And God said", 0), 0u) << g.out;
  // PROMPT and --prompt are the same prompt; both, or two PROMPTs, are refused.
  const Result a = run("generate --model '" + kGpt2 + "' 'In the beginning' --max-new 6 --json");
  const Result b = run("generate --model '" + kGpt2 + "' --prompt 'In the beginning' --max-new 6 --json");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(json_lines(a.out)[0]["new_ids"], json_lines(b.out)[0]["new_ids"]);
  EXPECT_EQ(json_lines(a.out)[0]["prompt"], "In the beginning");
  expect_error("generate --model '" + kGpt2 + "' --prompt a b", 1, "the prompt is given twice (--prompt and a PROMPT argument)");
  expect_error("generate --model '" + kGpt2 + "' And God said", 1, "give one prompt (quote it: qkv generate --model DIR");
}

TEST(CliMessages, TopLevelHelpNamesEveryCommandANewcomerLooksFor) {
  const Result r = run("--help");
  ASSERT_EQ(r.code, 0);
  // The commands grouped by what people come for, one example per group.
  for (const char* want : {"Chat with and serve a model:\n  chat ", "Embed and search:\n  embed ", "Train:\n  train ",
                           "The tutorials' experiments:\n  demo ", "Inspect, convert and measure:\n  inspect ",
                           "qkv chat --model", "qkv serve --model", "embed --model", "search --index", "train lm --text",
                           "qkv demo", "qkv inspect", "qkv convert", "lm (a GPT-2 on your text files)"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " in\n" << r.out;
  EXPECT_EQ(r.out.find("Each subcommand runs one of the tutorials' experiments"), std::string::npos) << r.out;
}

TEST(CliMessages, SharedFlagsLookAlikeAndDefaultsAreShownWithinTheirRange) {
  // --model is a DIR where only folders are read, a PATH (GGUF file or folder) for language models;
  // --no-progress reads the same; bench attention shows its defaults.
  for (const char* cmd : {"embed", "search", "bench embed"}) {
    const Result r = run(std::string(cmd) + " --help");
    EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(--model DIR)"))) << cmd << ":\n" << r.out;
  }
  for (const char* cmd : {"generate", "chat", "convert", "bench generate", "heatmap"}) {
    const Result r = run(std::string(cmd) + " --help");
    EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(--model PATH)"))) << cmd << ":\n" << r.out;
  }
  for (const char* cmd : {"train classify", "train seq2seq", "train lm", "variance", "embed", "tokenize train"}) {
    const Result r = run(std::string(cmd) + " --help");
    EXPECT_NE(r.out.find("--no-progress               Do not show the progress bar on stderr"), std::string::npos)
        << cmd << ":\n" << r.out;
  }
  const Result b = run("bench attention --help");
  for (const char* d : {"--batch INT:[1, 1048576]=4", "--len INT:[1, 16777216]=1024", "--warmup INT:[0, 1000]=1"})
    EXPECT_NE(b.out.find(d), std::string::npos) << d << " in\n" << b.out;
  // No default outside its own range (train lm's --vocab-size once showed [257, ...]=0).
  for (const char* cmd : {"train lm", "train classify", "train seq2seq", "generate", "bench attention", "bench gemm",
                          "bench mha", "bench encoder-step", "bench generate", "bench embed", "trace", "variance"}) {
    const Result r = run(std::string(cmd) + " --help");
    const std::regex range(R"(INT:\[(-?\d+), (-?\d+)\]=(-?\d+))");
    for (std::sregex_iterator it(r.out.begin(), r.out.end(), range), end; it != end; ++it) {
      const long long lo = std::stoll((*it)[1]), hi = std::stoll((*it)[2]), d = std::stoll((*it)[3]);
      EXPECT_TRUE(lo <= d && d <= hi) << cmd << ": " << it->str();
    }
  }
}

TEST(CliMessages, OptionsWithoutEffectAreWarnedOrRefused) {
  const Result k = run("generate --model '" + kGpt2 + "' hi --max-new 2 --top-k 5 --top-p 0.5 --seed 3");
  EXPECT_EQ(k.code, 0) << k.err;
  for (const char* f : {"--top-k", "--top-p", "--seed"})
    EXPECT_NE(k.err.find(std::string("qkv: warning: ") + f + " has no effect with greedy decoding (--temperature 0)"),
              std::string::npos)
        << k.err;
  const Result sampled = run("generate --model '" + kGpt2 + "' hi --max-new 2 --top-k 5 --temperature 0.7");
  EXPECT_EQ(sampled.err.find("warning"), std::string::npos) << sampled.err;
  expect_error("embed --model '" + kMiniLM + "' --similarity --out '" + unique_temp("x").string() + "' a b", 1,
               "--similarity prints the similarity matrix and --out writes a search index; give one of them");
  const Result w = run("train lm --text '" + kText + "' --tokenizer '" + kGpt2 + "' --layers 1 --d-model 16 --heads 2 "
                       "--context 16 --batch 2 --steps 5 --warmup 10 --eval-every 0 --val-windows 2 --no-progress --out '" +
                       unique_temp("msg_warm").string() + "'");
  EXPECT_EQ(w.code, 0) << w.err;
  EXPECT_NE(w.err.find("qkv: warning: --warmup 10 is not shorter than the run (--steps 5)"), std::string::npos) << w.err;
  const Result s = run("train seq2seq --epochs 1 --train-size 64 --test-size 8 --batch 16 --warmup 100 --d-model 16 "
                       "--heads 2 --d-ff 16 --layers 1 --no-progress");
  EXPECT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.err.find("qkv: warning: --warmup 100 is not shorter than the run (4 steps)"), std::string::npos) << s.err;
  expect_error("train classify --epochs 2 --save-every 1", 2, "--save-every requires --save");
}

TEST(CliMessages, AWordBeforeTheCommandIsAnUnknownCommand) {
  expect_error("foo generate --model x", 2, "unknown command 'foo' (commands: chat, generate, serve");
  expect_error("--threads 2 foo trace", 2, "unknown command 'foo'");
  const Result ok = run("--threads 1 worked-example --json");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

}  // namespace
}  // namespace qkv::cli_test
