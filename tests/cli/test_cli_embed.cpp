// End-to-end tests of `qkv embed`, `qkv search` and `qkv bench embed` on all-MiniLM-L6-v2
// (models/, fetched by `make models`; these tests fail, never skip, without it).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "cli/cli_test_util.h"
#include "qkv/io/tensors.h"

using namespace qkv::cli_test;

namespace {

std::string model_dir() { return std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2"; }

bool require_model() {
  if (fs::exists(model_dir() + "/model.safetensors") && fs::exists(model_dir() + "/vocab.txt")) return true;
  ADD_FAILURE() << model_dir() << " is missing: run `make models` (scripts/fetch_models.sh) before the tests";
  return false;
}

std::string model_arg() { return "--model '" + model_dir() + "'"; }

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f << bytes;
}

}  // namespace

TEST(CliEmbed, JsonLinesInInputOrderMatchSentenceTransformers) {
  if (!require_model()) return;
  const Result r = run("embed " + model_arg() + " --json 'A man is eating food.' '' 'The cat sat on the mat.'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["text"], "A man is eating food.");
  EXPECT_EQ(lines[1]["text"], "");
  EXPECT_EQ(lines[2]["text"], "The cat sat on the mat.");
  EXPECT_EQ(r.out.substr(0, 9), "{\"text\":\"");  // key order pinned: text, then embedding
  // Line 2 of tests/fixtures/bert/sentences.txt is "A man is eating food.".
  const auto ref = qkv::io::load_safetensors(fixture("bert/embeddings.safetensors")).at("embeddings");
  const auto want = ref.select(0, 1).to_vector<float>();
  const auto got = lines[0]["embedding"].get<std::vector<float>>();
  ASSERT_EQ(got.size(), 384u);
  double norm = 0, diff = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    norm += static_cast<double>(got[i]) * got[i];
    diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_LE(diff, 1e-4);
}

TEST(CliEmbed, SimilarityMatrix) {
  if (!require_model()) return;
  const Result r = run("embed " + model_arg() + " --similarity --json 'A man is eating food.' "
                       "'A man is eating a piece of bread.' 'A monkey is playing drums.'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto s = j["similarity"].get<std::vector<std::vector<double>>>();
  ASSERT_EQ(s.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(s[i][i], 1.0, 1e-6);
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(s[i][k], s[k][i], 1e-12);
  }
  EXPECT_GT(s[0][1], s[0][2]);  // eating food ~ eating bread, not drums
  const Result plain = run("embed " + model_arg() + " --similarity 'a' 'b'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_NE(plain.out.find("cosine similarity:"), std::string::npos) << plain.out;
}

TEST(CliEmbed, IndexAndSearchRoundTripArbitraryUtf8) {
  if (!require_model()) return;
  const fs::path corpus = unique_temp("corpus.txt"), index = unique_temp("index.safetensors");
  const std::string odd = "quotes \"x\" back\\slash tab\there ctl\x01 emoji \xf0\x9f\x98\x80 \xe4\xb8\xad\xe6\x96\x87";
  write(corpus, "A man is eating food.\nA woman is playing violin.\n" + odd + "\nPizza with cheese\r\n");
  Result r = run("embed " + model_arg() + " --file '" + corpus.string() + "' --out '" + index.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 4 embeddings [4, 384]"), std::string::npos) << r.out;
  r = run("search --index '" + index.string() + "' " + model_arg() + " --top-k 2 --json 'Someone plays the violin.' '" +
          std::string("A man is eating food.") + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto q = json_lines(r.out);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0]["query"], "Someone plays the violin.");
  ASSERT_EQ(q[0]["results"].size(), 2u);
  EXPECT_EQ(q[0]["results"][0]["text"], "A woman is playing violin.");
  EXPECT_EQ(q[0]["results"][0]["line"], 2);
  EXPECT_EQ(q[1]["results"][0]["text"], "A man is eating food.");
  EXPECT_NEAR(q[1]["results"][0]["score"].get<double>(), 1.0, 1e-5);
  EXPECT_GE(q[0]["results"][0]["score"].get<double>(), q[0]["results"][1]["score"].get<double>());
  // The odd line comes back byte for byte (and the \r of the CRLF line is gone).
  r = run("search --index '" + index.string() + "' " + model_arg() + " --top-k 4 --json 'x'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> texts;
  const auto all = json_lines(r.out);
  for (const auto& res : all.at(0)["results"]) texts.push_back(res["text"]);
  EXPECT_NE(std::find(texts.begin(), texts.end(), odd), texts.end());
  EXPECT_NE(std::find(texts.begin(), texts.end(), "Pizza with cheese"), texts.end());
  r = run("search --index '" + index.string() + "' " + model_arg() + " 'violin music'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("query: violin music\n  1. "), std::string::npos) << r.out;
  fs::remove(corpus);
  fs::remove(index);
}

TEST(CliEmbed, BlankLinesOfASearchCorpusAreSkippedAndLineNumbersKept) {
  if (!require_model()) return;
  const fs::path corpus = unique_temp("corpus_blank.txt"), index = unique_temp("index_blank.safetensors");
  write(corpus, "\nA man is eating food.\n   \n\nA woman is playing violin.\n\t\n");
  Result r = run("embed " + model_arg() + " --file '" + corpus.string() + "' --out '" + index.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote 2 embeddings [2, 384] to " + index.string() + " (4 blank lines skipped)"), std::string::npos)
      << r.out;
  r = run("search --index '" + index.string() + "' " + model_arg() + " --top-k 5 --json 'violin'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto res = json_lines(r.out).at(0)["results"];
  ASSERT_EQ(res.size(), 2u) << "no blank line was indexed";
  EXPECT_EQ(res[0]["text"], "A woman is playing violin.");
  EXPECT_EQ(res[0]["line"], 5);  // its line in the corpus file
  EXPECT_EQ(res[1]["line"], 2);
  // Writing over an index needs --overwrite; a blank corpus makes no index.
  r = run("embed " + model_arg() + " --file '" + corpus.string() + "' --out '" + index.string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--out " + index.string() + " already exists; give --overwrite"), std::string::npos) << r.err;
  r = run("embed " + model_arg() + " --overwrite --file '" + corpus.string() + "' --out '" + index.string() + "'");
  EXPECT_EQ(r.code, 0) << r.err;
  write(corpus, "\n \n");
  r = run("embed " + model_arg() + " --overwrite --file '" + corpus.string() + "' --out '" + index.string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is blank; a search index needs at least one line of text"), std::string::npos) << r.err;
  fs::remove(corpus);
  fs::remove(index);
}

TEST(CliEmbed, BadInputsGiveOneClearLine) {
  if (!require_model()) return;
  const fs::path bad = unique_temp("bad.txt"), empty = unique_temp("empty.txt"), folder = unique_temp("model");
  write(bad, "fine\nalso fine\nbroken \xff line\n");
  Result r = run("embed " + model_arg() + " --file '" + bad.string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(bad.string() + ":3: not valid UTF-8 (byte 8 of the line)"), std::string::npos) << r.err;
  write(empty, "");
  r = run("embed " + model_arg() + " --file '" + empty.string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the file is empty"), std::string::npos) << r.err;
  r = run("embed " + model_arg() + " \"$(printf 'bad \\377')\"");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("text 0: wordpiece: text is not valid UTF-8 (byte 4)"), std::string::npos) << r.err;
  r = run("embed " + model_arg());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("give either --file FILE or TEXT arguments"), std::string::npos) << r.err;
  // A model folder with a missing file.
  fs::create_directories(folder);
  for (const char* f : {"config.json", "model.safetensors", "tokenizer_config.json", "modules.json"})
    fs::create_symlink(model_dir() + "/" + f, folder / f);
  r = run("embed --model '" + folder.string() + "' 'hello'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find((folder / "vocab.txt").string() + " is missing"), std::string::npos) << r.err;
  // Not an index.
  r = run("search --index '" + fixture("linear.safetensors") + "' " + model_arg() + " 'q'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("not a qkv embedding index"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  fs::remove(bad);
  fs::remove(empty);
  fs::remove_all(folder);
}

TEST(CliEmbed, BenchEmbedJson) {
  if (!require_model()) return;
  const fs::path dump = unique_temp("sentences.txt");
  const Result r = run("bench embed " + model_arg() + " --sentences 12 --batch 4 --repeat 1 --warmup 0 --json "
                       "--dump-sentences '" + dump.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"sentences_per_s", "batch", "threads", "gflops", "median_s", "tokens"})
    EXPECT_TRUE(j.contains(k)) << k << " missing in " << r.out;
  EXPECT_EQ(j["batch"], 4);
  EXPECT_GT(j["sentences_per_s"].get<double>(), 0.0);
  EXPECT_EQ(count_lines(read_file(dump)), 12);
  // The generated sentences are the same on every run.
  const Result again = run("bench embed " + model_arg() + " --sentences 12 --repeat 1 --warmup 0 --json "
                           "--dump-sentences '" + dump.string() + "2'");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(read_file(dump), read_file(dump.string() + "2"));
  fs::remove(dump);
  fs::remove(dump.string() + "2");
}
