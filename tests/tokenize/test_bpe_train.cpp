// BPE training against Hugging Face tokenizers' BpeTrainer: vocab.json and
// merges.txt byte for byte for every case of tests/fixtures/bpe_train/cases.json
// (tests/reference/make_bpe_train_fixtures.py), the trained folder encodes like
// transformers' GPT2TokenizerFast, how files are cut into sequences, determinism,
// and the errors.
#include <algorithm>
#include <random>
#include <sstream>

#include "bpe_test_util.h"
#include "qkv/tokenize/bpe_train.h"

namespace qkv::tokenize::test {
namespace {

const json& train_cases() {
  static const json cases = [] {
    std::ifstream f(fixture("bpe_train/cases.json"));
    if (!f) throw std::runtime_error("cannot open " + fixture("bpe_train/cases.json"));
    return json::parse(f);
  }();
  return cases;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string source_path(const std::string& rel) { return std::string(QKV_SOURCE_DIR) + "/" + rel; }

BpeTrainOptions options_of(const json& c) {
  return {.vocab_size = c["vocab_size"].get<std::int64_t>(),
          .min_frequency = c["min_frequency"].get<std::int64_t>(),
          .special_tokens = c["special_tokens"].get<std::vector<std::string>>()};
}

BpeTrainResult train_case(const json& c) {
  if (c["route"] == "files") return train_byte_level_bpe_files({source_path(c["text"].get<std::string>())}, options_of(c));
  const auto texts = c["texts"].get<std::vector<std::string>>();
  return train_byte_level_bpe(std::vector<std::string_view>(texts.begin(), texts.end()), options_of(c));
}

// Lines of a file's text (for a failure message that names the first difference).
std::vector<std::string> split_lines(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (const char ch : s) {
    if (ch == sep) out.push_back(std::move(cur)), cur.clear();
    else cur += ch;
  }
  out.push_back(cur);
  return out;
}

// Equal bytes, or a failure naming the first line (merges.txt) / entry (vocab.json) that differs.
void expect_same_file(const std::string& got, const std::string& want, char sep, const std::string& what) {
  if (got == want) return;
  const auto g = split_lines(got, sep), w = split_lines(want, sep);
  std::size_t i = 0;
  while (i < g.size() && i < w.size() && g[i] == w[i]) ++i;
  ADD_FAILURE() << what << " differs from Hugging Face's at item " << i << ": got "
                << (i < g.size() ? show(g[i]) : "(end)") << ", want " << (i < w.size() ? show(w[i]) : "(end)")
                << " (" << g.size() << " vs " << w.size() << " items)";
}

TEST(BpeTrain, VocabAndMergesEqualHuggingFaceForEveryCase) {
  const json& cases = train_cases()["cases"];
  ASSERT_GE(cases.size(), 7u);
  for (const json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const BpeTrainResult r = train_case(c);
    const std::string dir = fixture("bpe_train/" + name);
    expect_same_file(bpe_merges_txt(r), read_bytes(dir + "/merges.txt"), '\n', name + "/merges.txt");
    expect_same_file(bpe_vocab_json(r), read_bytes(dir + "/vocab.json"), ',', name + "/vocab.json");
    EXPECT_EQ(static_cast<std::int64_t>(r.vocab.size()), c["vocab_size_out"].get<std::int64_t>());
    EXPECT_EQ(static_cast<std::int64_t>(r.merges.size()), c["merges_out"].get<std::int64_t>());
    EXPECT_EQ(r.stop == BpeTrainStop::VocabFull, c["vocab_full"].get<bool>());
    EXPECT_EQ(r.vocab.at(0), "<|endoftext|>");
    EXPECT_GT(r.words, 0);
  }
}

TEST(BpeTrain, StopReasons) {
  const std::string kjv = fixture("text/kjv_genesis.txt");
  EXPECT_EQ(train_byte_level_bpe_files({kjv}, {.vocab_size = 300}).stop, BpeTrainStop::VocabFull);
  EXPECT_EQ(train_byte_level_bpe_files({kjv}, {.vocab_size = 4096}).stop, BpeTrainStop::NoPairsLeft);
  EXPECT_EQ(train_byte_level_bpe_files({kjv}, {.vocab_size = 4096, .min_frequency = 20}).stop,
            BpeTrainStop::BelowMinFrequency);
  // Exactly 256 + specials: no merge at all.
  const BpeTrainResult none = train_byte_level_bpe_files({kjv}, {.vocab_size = 257});
  EXPECT_EQ(none.vocab.size(), 257u);
  EXPECT_TRUE(none.merges.empty());
}

TEST(BpeTrain, SpecialTokenStringsAreReusedLikeHuggingFace) {
  // "the" is a special token (id 1): merging "th" + "e" gives it, so one merge adds no token.
  const json* c = nullptr;
  for (const json& x : train_cases()["cases"])
    if (x["name"] == "kjv_specials") c = &x;
  ASSERT_NE(c, nullptr);
  const BpeTrainResult r = train_case(*c);
  EXPECT_EQ(r.vocab[1], "the");
  EXPECT_EQ(r.vocab[2], "e");
  EXPECT_EQ(std::count(r.vocab.begin(), r.vocab.end(), "e"), 1) << "the byte token 'e' is the special one";
  EXPECT_EQ(r.merges.size(), r.vocab.size() - 258 + 1);
  EXPECT_NE(std::find(r.merges.begin(), r.merges.end(), std::pair<std::string, std::string>("th", "e")), r.merges.end());
}

TEST(BpeTrain, ReproducesTheTinyGpt2Tokenizer) {
  // tests/fixtures/gpt2_tiny was trained by HF (make_bpe_fixtures.py: 1000 tokens, min frequency 2).
  const BpeTrainResult r =
      train_byte_level_bpe_files({fixture("text/kjv_genesis.txt")}, {.vocab_size = 1000, .min_frequency = 2});
  expect_same_file(bpe_merges_txt(r), read_bytes(fixture("gpt2_tiny/merges.txt")), '\n', "gpt2_tiny/merges.txt");
  expect_same_file(bpe_vocab_json(r), read_bytes(fixture("gpt2_tiny/vocab.json")), ',', "gpt2_tiny/vocab.json");
}

TEST(BpeTrain, SavedFolderEncodesLikeGpt2TokenizerFastAndRoundTrips) {
  const std::string corpus = read_bytes(fixture("text/kjv_genesis.txt"));
  int checked = 0;
  for (const json& c : train_cases()["cases"]) {
    if (!c.contains("encode")) continue;
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const std::string dir = (scratch_dir() / "nested" / name).string();  // save_bpe creates the folders
    save_bpe(train_case(c), dir);
    const ByteLevelBPE bpe = ByteLevelBPE::from_folder(dir);
    EXPECT_EQ(bpe.eos_id(), 0);
    for (const json& e : c["encode"]) {
      const std::string text = e["text"];
      EXPECT_EQ(bpe.encode(text), ids_of(e["ids"])) << show(text);
      ++checked;
    }
    const std::vector<std::int64_t> ids = bpe.encode(corpus);
    EXPECT_EQ(bpe.decode(ids), corpus);
    EXPECT_LT(ids.size(), corpus.size()) << "the merges compress the text they were learned from";
  }
  EXPECT_GE(checked, 20);
}

// HF lines_with_ending, written out here: cut after every '\n'.
std::vector<std::string> lines_with_ending(const std::string& text) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

BpeTrainResult train_texts(const std::vector<std::string>& texts, const BpeTrainOptions& o) {
  return train_byte_level_bpe(std::vector<std::string_view>(texts.begin(), texts.end()), o);
}

TEST(BpeTrain, FilesAreCutIntoLinesAfterEachNewline) {
  const fs::path d = scratch_dir();
  // A run of three newlines is "\n\n" + "\n" for the regex on the whole text, but three one-line
  // sequences from a file; "\r" alone and U+2028 do not end a line.
  const std::string text = "x\n\n\ny\r\nz\rw\xE2\x80\xA8v";
  const std::string path = write_file(d / "t.txt", text);
  const BpeTrainResult file = train_byte_level_bpe_files({path}, {.vocab_size = 300});
  const BpeTrainResult lines = train_texts(lines_with_ending(text), {.vocab_size = 300});
  EXPECT_EQ(file.merges, lines.merges);
  EXPECT_EQ(file.vocab, lines.vocab);
  const BpeTrainResult whole = train_texts({text}, {.vocab_size = 300});
  const auto nn = std::pair<std::string, std::string>("\xC4\x8A", "\xC4\x8A");  // "Ċ Ċ": newline + newline
  EXPECT_NE(std::find(whole.merges.begin(), whole.merges.end(), nn), whole.merges.end());
  EXPECT_EQ(std::find(file.merges.begin(), file.merges.end(), nn), file.merges.end());
  // Two files are the lines of one after the other; a file without a final newline ends a line there.
  const std::string a = write_file(d / "a.txt", "ab ab\nab"), b = write_file(d / "b.txt", "ab\n");
  EXPECT_EQ(train_byte_level_bpe_files({a, b}, {.vocab_size = 300}).merges,
            train_texts({"ab ab\n", "ab", "ab\n"}, {.vocab_size = 300}).merges);
  EXPECT_EQ(train_byte_level_bpe_files({a, b}, {.vocab_size = 300}).text_bytes, 11);
}

TEST(BpeTrain, DeterministicAndIndependentOfSequenceOrder) {
  std::vector<std::string> lines = lines_with_ending(read_bytes(fixture("text/kjv_genesis.txt")));
  const BpeTrainOptions o{.vocab_size = 700};
  const BpeTrainResult a = train_texts(lines, o), b = train_texts(lines, o);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(a.vocab, b.vocab);
  // HF counts words in parallel in any order; the result may not depend on it.
  std::mt19937 rng(7);
  std::shuffle(lines.begin(), lines.end(), rng);
  const BpeTrainResult c = train_texts(lines, o);
  EXPECT_EQ(a.merges, c.merges);
  EXPECT_EQ(a.vocab, c.vocab);
}

TEST(BpeTrain, TiesGoToTheSmallerPairOfIds) {
  // Words "cd", "Ġab" x2, "Ġcd": (a, b), (c, d) and (Ġ, a) all occur twice. (a, b) has the
  // smallest ids and goes first; then (c, d) and (Ġ, ab) tie at 2 and 'c' < 'Ġ' (U+0120).
  const BpeTrainResult r = train_texts({"cd ab cd ab"}, {.vocab_size = 259});
  ASSERT_EQ(r.merges.size(), 2u);
  EXPECT_EQ(r.merges[0], (std::pair<std::string, std::string>("a", "b")));
  EXPECT_EQ(r.merges[1], (std::pair<std::string, std::string>("c", "d")));
  // The count decides before the ids: (z, y) occurs 3 times, (a, b) once.
  const BpeTrainResult s = train_texts({"zy zy zy ab"}, {.vocab_size = 258});
  EXPECT_EQ(s.merges.at(0), (std::pair<std::string, std::string>("z", "y")));
  EXPECT_EQ(s.vocab.at(257), "zy");
}

TEST(BpeTrain, ReportsProgress) {
  std::vector<BpeTrainProgress> seen;
  BpeTrainOptions o{.vocab_size = 400};
  o.progress = [&](const BpeTrainProgress& p) { seen.push_back(p); };
  const std::string kjv = fixture("text/kjv_genesis.txt");
  const BpeTrainResult r = train_byte_level_bpe_files({kjv, kjv}, o);
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen[0].stage, BpeTrainProgress::Stage::CountWords);
  EXPECT_EQ(seen[1].stage, BpeTrainProgress::Stage::CountWords);
  EXPECT_EQ(seen[1].done, seen[1].total);
  EXPECT_EQ(seen[1].total, 2 * static_cast<std::int64_t>(fs::file_size(kjv)));
  EXPECT_EQ(seen.back().stage, BpeTrainProgress::Stage::Merge);
  EXPECT_EQ(seen.back().done, static_cast<std::int64_t>(r.merges.size()));
  EXPECT_EQ(seen.back().total, 400 - 257);
  for (std::size_t i = 1; i < seen.size(); ++i) {
    if (seen[i].stage == seen[i - 1].stage) {
      EXPECT_GE(seen[i].done, seen[i - 1].done);
    }
  }
}

TEST(BpeTrain, VocabJsonEscapesLikeSerdeJson) {
  BpeTrainResult r;
  r.vocab = {"<|a\tb\n|>", "\"", "\\", "\x01", "\xC4\xA0x", "\x7F"};
  r.merges = {{"\xC4\xA0", "x"}};
  EXPECT_EQ(bpe_vocab_json(r), "{\"<|a\\tb\\n|>\":0,\"\\\"\":1,\"\\\\\":2,\"\\u0001\":3,\"\xC4\xA0x\":4,\"\x7F\":5}");
  EXPECT_EQ(json::parse(bpe_vocab_json(r)).size(), 6u);
  EXPECT_EQ(bpe_merges_txt(r), "#version: 0.2\n\xC4\xA0 x\n");
}

TEST(BpeTrainErrors, VocabSizeBelowTheBaseVocabulary) {
  const std::vector<std::string_view> t = {"hello"};
  expect_error<ValueError>([&] { train_byte_level_bpe(t, {.vocab_size = 256}); },
                           {"vocab_size 256", "257", "256 byte tokens + 1 special token"});
  expect_error<ValueError>(
      [&] { train_byte_level_bpe(t, {.vocab_size = 258, .special_tokens = {"<|endoftext|>", "<|pad|>", "<|x|>"}}); },
      {"vocab_size 258", "259", "3 special tokens"});
  expect_error<ValueError>([&] { train_byte_level_bpe(t, {.vocab_size = 300, .min_frequency = -1}); },
                           {"min_frequency", "-1"});
  expect_error<ValueError>([&] { train_byte_level_bpe(t, {.vocab_size = 300, .special_tokens = {""}}); },
                           {"special token", "empty"});
  // Checked before any file is read.
  expect_error<ValueError>([&] { train_byte_level_bpe_files({"/no/such/file"}, {.vocab_size = 10}); }, {"vocab_size 10"});
}

TEST(BpeTrainErrors, EmptyText) {
  expect_error<ValueError>([] { train_byte_level_bpe({}, {.vocab_size = 300}); }, {"no text"});
  expect_error<ValueError>([] { train_byte_level_bpe({"", ""}, {.vocab_size = 300}); }, {"no text", "2 empty texts"});
  const fs::path d = scratch_dir();
  const std::string e1 = write_file(d / "e1.txt", ""), e2 = write_file(d / "e2.txt", "");
  expect_error<ValueError>([&] { train_byte_level_bpe_files({e1, e2}, {.vocab_size = 300}); }, {"every file is empty"});
  expect_error<ValueError>([&] { train_byte_level_bpe_files({}, {.vocab_size = 300}); }, {"no text files"});
}

TEST(BpeTrainErrors, MissingFileNamesIt) {
  const fs::path d = scratch_dir();
  const std::string ok = write_file(d / "ok.txt", "some text\n");
  const std::string missing = (d / "missing.txt").string();
  expect_error<IOError>([&] { train_byte_level_bpe_files({ok, missing}, {.vocab_size = 300}); }, {missing});
  expect_error<IOError>([&] { train_byte_level_bpe_files({d.string()}, {.vocab_size = 300}); }, {d.string()});
}

TEST(BpeTrainErrors, InvalidUtf8NamesFileLineAndByte) {
  const fs::path d = scratch_dir();
  const std::string bad = write_file(d / "bad.txt", "good line\nab\xFF" "cd\n");
  expect_error<ValueError>([&] { train_byte_level_bpe_files({bad}, {.vocab_size = 300}); },
                           {bad, "line 2", "byte 2 of the line", "byte 12 of the file", "0xff"});
  const std::string first = write_file(d / "first.txt", "\xC3");
  expect_error<ValueError>([&] { train_byte_level_bpe_files({first}, {.vocab_size = 300}); },
                           {first, "line 1", "byte 0 of the line"});
  const std::vector<std::string_view> texts = {"fine", "x\x80y"};
  expect_error<ValueError>([&] { train_byte_level_bpe(texts, {.vocab_size = 300}); }, {"text 1", "byte 1"});
}

TEST(BpeTrainErrors, SaveIntoAFileFails) {
  const fs::path d = scratch_dir();
  const std::string file = write_file(d / "f", "x");
  const BpeTrainResult r = train_texts({"ab ab"}, {.vocab_size = 258});
  expect_error<IOError>([&] { save_bpe(r, file); }, {file});
}

}  // namespace
}  // namespace qkv::tokenize::test
