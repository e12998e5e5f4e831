// Every architecture of the registry through the qkv tool, from its Hugging Face folder and
// from the GGUF file llama.cpp's converter wrote (tests/fixtures/arch, made by
// tests/reference/make_arch_fixtures.py): generate (cached, --no-cache, a batch from
// --prompts-file, --logprobs) gives transformers' greedy tokens; --chat renders the chat
// template with --chat-template-kwargs and continues as transformers does; tokenize gives the
// tokenizer's ids; chat answers as generate --chat does; convert writes a GGUF that generates the
// same tokens (and a Q8_0 one inspect lists); heatmap draws every layer and head; bench generate
// runs. The numbers themselves are checked in tests/models/test_arch_parity.cpp; this checks the
// front end reaches them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using qkv::cli_test::json_lines;
using qkv::cli_test::Result;
using qkv::cli_test::run;
using nlohmann::json;

const std::string kArch = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/arch/";

const json& reference() {
  static const json j = [] {
    std::ifstream f(kArch + "reference.json");
    return json::parse(f);
  }();
  return j;
}

std::vector<std::string> archs() {
  std::vector<std::string> v;
  for (const auto& [name, value] : reference().items())
    if (name[0] != '_' && name.find("_gguf") == std::string::npos) v.push_back(name);
  return v;
}

struct Scratch {
  fs::path dir = qkv::cli_test::unique_temp("arch");
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The first n of a reference's generated tokens for prompt p.
json first(const json& ref, int p, std::size_t n) {
  const auto& g = ref["generated"][p];
  return json(std::vector<json>(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(std::min(n, g.size()))));
}

json one(const Result& r, const std::string& what) {
  EXPECT_EQ(r.code, 0) << what << ": " << r.err;
  const auto v = json_lines(r.out);
  EXPECT_FALSE(v.empty()) << what << ": no output";
  return v.empty() ? json::object() : v.at(0);
}

class CliArch : public ::testing::TestWithParam<std::string> {};

constexpr std::size_t kNew = 16;

TEST_P(CliArch, GenerateGivesTransformersTokensFromTheFolderAndTheGguf) {
  const std::string arch = GetParam();
  Scratch s;
  for (const std::string& variant : {arch, arch + "_gguf"}) {
    const json& ref = reference()[variant];
    const std::string model = kArch + (variant == arch ? arch : arch + ".gguf");
    const std::string text = ref["texts"][0];
    const std::string args = " --max-new " + std::to_string(kNew) + " --ignore-eos --json";
    const json g = one(run("generate --model " + quote(model) + " " + quote(text) + args), variant);
    EXPECT_EQ(g["prompt_ids"], ref["prompts"][0]) << variant << ": the tokenizer's ids";
    EXPECT_EQ(g["new_ids"], first(ref, 0, kNew)) << variant;
    const json u = one(run("generate --model " + quote(model) + " --no-cache " + quote(text) + args), variant);
    EXPECT_EQ(u["new_ids"], g["new_ids"]) << variant << " --no-cache";
    // A batch of two: the first prompt's tokens are those it gets alone.
    const std::string file = s.write(variant + ".txt", text + "\nAnd God\n");
    const auto b = json_lines(run("generate --model " + quote(model) + " --prompts-file " + quote(file) + args).out);
    ASSERT_EQ(b.size(), 2u) << variant;
    EXPECT_EQ(b[0]["new_ids"], g["new_ids"]) << variant << " batched";
    const json l = one(run("generate --model " + quote(model) + " --logprobs 2 " + quote(text) + args), variant);
    ASSERT_EQ(l["logprobs"].size(), kNew) << variant;
    for (const auto& t : l["logprobs"]) {
      EXPECT_EQ(t["top"][0]["id"], t["id"]) << variant << ": greedy picks the most likely token";
      EXPECT_LE(t["logprob"].get<double>(), 0.0);
    }
    // The chat prompt through the template (enable_thinking false for Qwen3 and SmolLM3, whose
    // references were rendered so; the other templates ignore the variable).
    const std::string chat = " --chat 'Who divided the light from the darkness?' --chat-template-kwargs "
                             "'{\"enable_thinking\": false}'";
    const json c = one(run("generate --model " + quote(model) + chat + args), variant + " --chat");
    EXPECT_EQ(c["prompt"], ref["texts"][2]) << variant;
    if (variant == "llama2_gguf") {
      // llama.cpp's SentencePiece tokenizer puts a space before the text after every special
      // token (llama-vocab.cpp: is_prev_special), transformers' Metaspace "first" only at the
      // start: Llama 2's "<s>[INST] ..." gets "▁" (id 285 here) after <s> from the GGUF.
      json want = ref["prompts"][2];
      want.insert(want.begin() + 1, 285);
      EXPECT_EQ(c["prompt_ids"], want) << variant;
      EXPECT_EQ(one(run("tokenize --model " + quote(model) + " --decode 94,285,94 --json"), variant)["text"], "[ [");
    } else {
      EXPECT_EQ(c["prompt_ids"], ref["prompts"][2]) << variant;
      EXPECT_EQ(c["new_ids"], first(ref, 2, kNew)) << variant;
    }
    const json t = one(run("tokenize --model " + quote(model) + " --add-special --json " + quote(text)), variant);
    EXPECT_EQ(t["ids"], ref["prompts"][0]) << variant << ": tokenize --add-special";
  }
}

TEST_P(CliArch, ChatAnswersAsGenerateChatDoes) {
  const std::string arch = GetParam();
  Scratch s;
  const std::string model = kArch + arch;
  const std::string kw = " --chat-template-kwargs '{\"enable_thinking\": false}' --max-new 12";
  const json g = one(run("generate --model " + quote(model) + " --chat 'Who divided the light from the darkness?' --json" + kw),
                     arch);
  const std::string in = s.write("in.txt", "Who divided the light from the darkness?\n");
  const Result c = run("chat --model " + quote(model) + " --temperature 0" + kw + " < " + quote(in));
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, g["text"].get<std::string>() + "\n") << arch;
}

TEST_P(CliArch, ConvertWritesAGgufThatGeneratesTheSameTokens) {
  const std::string arch = GetParam();
  Scratch s;
  const std::string folder = kArch + arch;
  const std::string out = (s.dir / (arch + ".gguf")).string(), q8 = (s.dir / (arch + "_q8.gguf")).string();
  Result r = run("convert --model " + quote(folder) + " --out " + quote(out));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string args = " 'And God said, Let there be light' --max-new 12 --ignore-eos --json";
  const json a = one(run("generate --model " + quote(folder) + args), arch);
  const json b = one(run("generate --model " + quote(out) + args), arch + " converted");
  EXPECT_EQ(b["prompt_ids"], a["prompt_ids"]) << arch << ": the GGUF vocabulary qkv wrote";
  EXPECT_EQ(b["new_ids"], a["new_ids"]) << arch << ": the weights as stored";
  r = run("convert --model " + quote(folder) + " --out " + quote(q8) + " --type q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  const Result i = run("inspect " + quote(q8));
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("Q8_0"), std::string::npos) << i.out;
  const json q = one(run("generate --model " + quote(q8) + args), arch + " q8_0");
  EXPECT_EQ(q["new_ids"].size(), 12u);
}

TEST_P(CliArch, HeatmapDrawsEveryLayerAndHeadFromTheFolderAndTheGguf) {
  const std::string arch = GetParam();
  Scratch s;
  for (const std::string& model : {kArch + arch, kArch + arch + ".gguf"}) {
    const fs::path out = s.dir / fs::path(model).filename();
    const Result r = run("heatmap --model " + quote(model) + " --text 'And God said, Let there be light' --out " +
                         quote(out.string()) + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(fs::exists(out / "index.html")) << model;
    EXPECT_TRUE(fs::exists(out / "self_layer0_head0.png")) << model << "\n" << r.out;
    EXPECT_TRUE(fs::exists(out / "self_layer1_head1.png")) << model << "\n" << r.out;
  }
}

TEST_P(CliArch, BenchGenerateNamesTheArchitecture) {
  const std::string arch = GetParam();
  const json j = one(run("bench generate --model " + quote(kArch + arch + ".gguf") +
                         " --prompt-len 8 --new 4 --repeat 1 --bandwidth-mb 16 --json"),
                     arch);
  EXPECT_EQ(j["architecture"], arch == "llama2" ? "llama" : arch);
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Arch, CliArch, ::testing::ValuesIn(archs()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The mixtures of experts (tests/fixtures/moe, made by tests/reference/make_moe_fixtures.py) from
// the GGUF files llama.cpp's converter wrote (their folders carry no tokenizer): generate
// (cached, --no-cache, batched, --chat) gives transformers' greedy tokens, inspect shows the
// experts and what a token reads, bench generate and heatmap run, convert writes them again.
const std::string kMoe = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/moe/";

const json& moe_reference() {
  static const json j = [] {
    std::ifstream f(kMoe + "reference.json");
    return json::parse(f);
  }();
  return j;
}

class CliMoe : public ::testing::TestWithParam<std::string> {};

TEST_P(CliMoe, GenerateInspectBenchAndHeatmapFromTheGguf) {
  const std::string arch = GetParam();
  Scratch s;
  const json& ref = moe_reference()[arch + "_gguf"];
  const std::string model = kMoe + arch + ".gguf";
  const std::string text = ref["texts"][0];
  const std::string args = " --max-new " + std::to_string(kNew) + " --ignore-eos --json";
  const json g = one(run("generate --model " + quote(model) + " " + quote(text) + args), arch);
  EXPECT_EQ(g["prompt_ids"], ref["prompts"][0]) << arch << ": the tokenizer's ids";
  EXPECT_EQ(g["new_ids"], first(ref, 0, kNew)) << arch;
  const json u = one(run("generate --model " + quote(model) + " --no-cache " + quote(text) + args), arch);
  EXPECT_EQ(u["new_ids"], g["new_ids"]) << arch << " --no-cache";
  const std::string file = s.write(arch + ".txt", text + "\nAnd God\n");
  const auto b = json_lines(run("generate --model " + quote(model) + " --prompts-file " + quote(file) + args).out);
  ASSERT_EQ(b.size(), 2u) << arch;
  EXPECT_EQ(b[0]["new_ids"], g["new_ids"]) << arch << " batched";
  const json c = one(run("generate --model " + quote(model) +
                         " --chat 'Who divided the light from the darkness?' --chat-template-kwargs "
                         "'{\"enable_thinking\": false}'" + args),
                     arch + " --chat");
  EXPECT_EQ(c["prompt_ids"], ref["prompts"][2]) << arch;
  EXPECT_EQ(c["new_ids"], first(ref, 2, kNew)) << arch;
  // inspect: the experts, and a token's parameters below the whole.
  const Result i = run("inspect " + quote(model));
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("experts:  4 per layer, 2 per token, 16 wide"), std::string::npos) << i.out;
  const json ij = one(run("inspect --json " + quote(model)), arch + " inspect --json");
  EXPECT_EQ(ij["model"]["experts"]["count"], 4);
  EXPECT_EQ(ij["model"]["experts"]["per_token"], 2);
  EXPECT_EQ(ij["model"]["experts"]["renormalized"], arch != "olmoe");
  EXPECT_LT(ij["model"]["active_parameters"].get<std::int64_t>(), ij["model"]["parameters"].get<std::int64_t>());
  const json bench = one(run("bench generate --model " + quote(model) +
                             " --prompt-len 8 --new 4 --repeat 1 --bandwidth-mb 16 --json"),
                         arch + " bench");
  EXPECT_EQ(bench["architecture"], arch == "mixtral" ? "llama" : arch);  // (a Mixtral GGUF says llama)
  EXPECT_GT(bench["decode_tokens_per_s"].get<double>(), 0);
  const fs::path out = s.dir / "heatmap";
  const Result h = run("heatmap --model " + quote(model) + " --text 'And God said' --out " + quote(out.string()));
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_TRUE(fs::exists(out / "self_layer1_head1.png")) << h.out;
  // convert: the GGUF written again (as stored, and as Q8_0) generates the same tokens.
  const std::string again = (s.dir / "again.gguf").string(), q8 = (s.dir / "q8.gguf").string();
  Result cv = run("convert --model " + quote(model) + " --out " + quote(again));
  ASSERT_EQ(cv.code, 0) << cv.err;
  EXPECT_EQ(one(run("generate --model " + quote(again) + " " + quote(text) + args), arch + " converted")["new_ids"],
            g["new_ids"]);
  cv = run("convert --model " + quote(model) + " --out " + quote(q8) + " --type q8_0");
  ASSERT_EQ(cv.code, 0) << cv.err;
  EXPECT_EQ(one(run("generate --model " + quote(q8) + " " + quote(text) + args), arch + " q8_0")["new_ids"].size(), kNew);
}

INSTANTIATE_TEST_SUITE_P(Moe, CliMoe, ::testing::Values("mixtral", "qwen3_moe", "olmoe"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Qwen3.5 (tests/fixtures/hybrid, make_hybrid_fixtures.py), Gated DeltaNet layers around a gated
// attention one, from llama.cpp's GGUF: generate (cached, --no-cache, batched, prompt lookup,
// whose rejected drafts send the recurrent states back to their checkpoint) gives transformers'
// greedy tokens; inspect names the linear layers; heatmap draws the attention layer and says the
// others have no map (and refuses one asked for); chat's second turn continues the kept
// conversation; convert writes the file again.
TEST(CliHybrid, Qwen35GenerateSpeculativeChatInspectHeatmapConvert) {
  const std::string dir = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/hybrid/";
  std::ifstream rf(dir + "reference.json");
  const json ref = json::parse(rf)["qwen3_5_gguf"];
  const std::string model = dir + "qwen3_5.gguf";
  Scratch s;
  const std::string text = ref["texts"][1];
  const std::string args = " --max-new " + std::to_string(kNew) + " --ignore-eos --json";
  const json g = one(run("generate --model " + quote(model) + " " + quote(text) + args), "qwen3_5");
  EXPECT_EQ(g["prompt_ids"], ref["prompts"][1]);
  EXPECT_EQ(g["new_ids"], first(ref, 1, kNew));
  EXPECT_EQ(one(run("generate --model " + quote(model) + " --no-cache " + quote(text) + args), "--no-cache")["new_ids"],
            g["new_ids"]);
  const json d = one(run("generate --model " + quote(model) + " --draft ngram " + quote(text) + args), "--draft ngram");
  EXPECT_EQ(d["new_ids"], g["new_ids"]);
  EXPECT_GT(d["speculative"]["drafted"].get<int>(), d["speculative"]["accepted"].get<int>()) << d.dump();
  const std::string short_text = ref["texts"][0];  // (texts[1] holds a newline)
  const std::string file = s.write("prompts.txt", "And God\n" + short_text + "\n");
  const auto b = json_lines(run("generate --model " + quote(model) + " --prompts-file " + quote(file) + args).out);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1]["new_ids"], first(ref, 0, kNew)) << "batched with a shorter prompt";
  const Result i = run("inspect " + quote(model));
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("linear:   2 of 3 layers Gated DeltaNet (2 key heads of 8, 4 value heads of 8, convolution of 4)"),
            std::string::npos)
      << i.out;
  const fs::path out = s.dir / "heatmap";
  const Result h = run("heatmap --model " + quote(model) + " --text 'And God said' --out " + quote(out.string()));
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_TRUE(fs::exists(out / "self_layer1_head1.png")) << h.out;
  EXPECT_FALSE(fs::exists(out / "self_layer0_head0.png")) << h.out;
  EXPECT_NE(h.out.find("no map:     layers 0, 2 (linear attention"), std::string::npos) << h.out;
  const Result h0 = run("heatmap --model " + quote(model) + " --text 'And God said' --layers 0 --out " +
                        quote((s.dir / "h0").string()));
  EXPECT_NE(h0.code, 0);
  EXPECT_NE(h0.err.find("layer 0 is a linear-attention layer"), std::string::npos) << h0.err;
  // Two turns: the second is computed from the first's kept states (its reply differs from a
  // fresh conversation's only if the kept states were wrong).
  const std::string in = s.write("turns.txt", "Who divided the light?\nAnd the waters?\n");
  const Result c = run("chat --model " + quote(model) + " --max-new 8 --temperature 0 --no-history < " + quote(in));
  ASSERT_EQ(c.code, 0) << c.err;
  std::vector<std::string> replies;
  for (std::size_t at = 0, nl; (nl = c.out.find('\n', at)) != std::string::npos; at = nl + 1)
    replies.push_back(c.out.substr(at, nl - at));
  ASSERT_EQ(replies.size(), 2u) << c.out;
  const json messages = json::array({{{"role", "user"}, {"content", "Who divided the light?"}},
                                     {{"role", "assistant"}, {"content", replies[0]}},
                                     {{"role", "user"}, {"content", "And the waters?"}}});
  const json m2 = one(run("generate --model " + quote(model) + " --messages " +
                          quote(s.write("m.json", messages.dump())) + " --max-new 8 --temperature 0 --json"),
                      "--messages");
  EXPECT_EQ(m2["text"], replies[1]) << "the second turn, computed from the kept states";
  const std::string again = (s.dir / "again.gguf").string();
  const Result cv = run("convert --model " + quote(model) + " --out " + quote(again));
  ASSERT_EQ(cv.code, 0) << cv.err;
  EXPECT_EQ(one(run("generate --model " + quote(again) + " " + quote(text) + args), "converted")["new_ids"], g["new_ids"]);
}

}  // namespace
