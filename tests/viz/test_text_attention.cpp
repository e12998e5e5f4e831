// Attention maps of real models (qkv heatmap --model, models/text_attention.h): the tiny
// GPT-2 and all-MiniLM-L6-v2 give transformers' output_attentions=True weights
// (tests/reference/make_attention_fixtures.py), with the tokenizers' ids and readable
// tokens; layer and head selections; the command writes every PNG and the explorer page.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "qkv/core/error.h"
#include "qkv/io/tensors.h"
#include "qkv/models/text_attention.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using cli_test::run;

const std::string kGpt2 = std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny";
const std::string kMiniLM = std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";

// qkv's maps for the fixture's text equal transformers' within `tol`; returns the largest difference.
double compare_with_transformers(const std::string& dir, const std::string& fixture, double tol) {
  const io::LoadedTensors ref = io::load_safetensors(std::string(QKV_FIXTURE_DIR) + "/attention/" + fixture);
  const std::string text = ref.metadata.at("text");
  const models::TextAttention a = models::text_attention(dir, text);
  EXPECT_EQ(a.model_type, ref.metadata.at("model_type"));
  EXPECT_EQ(a.ids, ref.at("ids").to_vector<std::int64_t>()) << "the tokenizer's ids differ from transformers'";
  std::size_t layers = 0;
  while (ref.contains("layer." + std::to_string(layers))) ++layers;
  EXPECT_EQ(a.layers.size(), layers);
  double worst = 0;
  for (std::size_t l = 0; l < std::min(layers, a.layers.size()); ++l) {
    const Tensor& want = ref.at("layer." + std::to_string(l));
    const Tensor& got = a.layers[l];
    EXPECT_EQ(got.shape(), want.shape()) << "layer " << l;
    if (got.shape() != want.shape()) continue;
    const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
    for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(g[i] - w[i])));
  }
  EXPECT_LE(worst, tol) << dir;
  return worst;
}

TEST(TextAttention, Gpt2EqualsTransformersOutputAttentions) {
  // float32 on both sides, sums in different orders: 5.7e-7 measured here (1.1e-6 for MiniLM).
  const double d = compare_with_transformers(kGpt2, "gpt2_tiny.safetensors", 1e-5);
  std::cout << "  gpt2_tiny: max |qkv - transformers| = " << d << "\n";
  const models::TextAttention a = models::text_attention(kGpt2, "And God said");
  EXPECT_TRUE(a.causal);
  for (const Tensor& w : a.layers) {  // no query attends to a later key
    const std::int64_t H = w.size(0), T = w.size(1);
    const std::vector<float> v = w.to_vector<float>();
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = i + 1; j < T; ++j) EXPECT_EQ(v[static_cast<std::size_t>((h * T + i) * T + j)], 0.0f);
  }
}

TEST(TextAttention, MiniLMEqualsTransformersOutputAttentions) {
  ASSERT_TRUE(fs::exists(kMiniLM + "/model.safetensors")) << kMiniLM << " is missing: run `make models` first";
  const double d = compare_with_transformers(kMiniLM, "minilm.safetensors", 1e-5);
  std::cout << "  all-MiniLM-L6-v2: max |qkv - transformers| = " << d << "\n";
  const models::TextAttention a = models::text_attention(kMiniLM, "I love NLP");
  EXPECT_EQ(a.tokens, (std::vector<std::string>{"[CLS]", "i", "love", "nl", "##p", "[SEP]"}));
  EXPECT_FALSE(a.causal);
}

TEST(TextAttention, ByteLevelTokensAreShownAsTheTextTheyStandFor) {
  EXPECT_EQ(models::readable_token(" the"), " the");                   // not GPT-2's "Ġthe"
  EXPECT_EQ(models::readable_token("caf\xc3\xa9"), "caf\xc3\xa9");     // whole UTF-8 characters as they are
  EXPECT_EQ(models::readable_token("\xe2\x80"), "<0xE2><0x80>");       // part of a character: its bytes
  EXPECT_EQ(models::readable_token("a\nb\t\r\x01"), "a\\nb\\t\\r<0x01>");
  const models::TextAttention a = models::text_attention(kGpt2, "light\u201d\n");
  std::string joined;
  for (const std::string& t : a.tokens) joined += t + "|";
  EXPECT_EQ(joined.find("\xc4\xa0"), std::string::npos) << "a byte-level 'G-dot' in " << joined;
  EXPECT_NE(joined.find("\\n"), std::string::npos) << joined;
}

TEST(TextAttention, SelectionsAndErrorsNameTheModelsSizes) {
  const models::TextAttention a = models::text_attention(kGpt2, "And God said");
  const auto all = models::text_attention_maps(a, {}, {});
  ASSERT_EQ(all.size(), a.layers.size());
  EXPECT_EQ(all[1].weights.shape(), a.layers[1].shape());
  const auto some = models::text_attention_maps(a, {1}, {0, 3});
  ASSERT_EQ(some.size(), 1u);
  EXPECT_EQ(some[0].layer, 1);
  EXPECT_EQ(some[0].head_ids, (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(some[0].weights.select(0, 1).to_vector<float>(), a.layers[1].select(0, 3).to_vector<float>());
  try {
    models::text_attention_maps(a, {2}, {});
    ADD_FAILURE() << "layer 2 of 2";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--layers 2 is not a layer of the model (it has 2: 0..1)"), std::string::npos)
        << e.what();
  }
  try {
    models::text_attention_maps(a, {}, {4});
    ADD_FAILURE() << "head 4 of 4";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--heads 4 is not a head of the model (it has 4 per layer: 0..3)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(models::text_attention(kGpt2, ""), ValueError);
  EXPECT_THROW(models::text_attention(kGpt2, std::string(400, 'x') + " " + std::string(400, 'y')), ValueError);
}

TEST(TextAttention, AFamilyItCannotDrawIsNamed) {
  const fs::path dir = cli_test::unique_temp("t5_folder");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "t5"})";
  try {
    models::text_attention(dir.string(), "hello");
    ADD_FAILURE() << "a t5 folder";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("is a 't5' model folder; qkv heatmap draws GGUF files and folders of bert, gemma2, "),
              std::string::npos)
        << e.what();
  }
  const cli_test::Result r = run("heatmap --model '" + dir.string() + "' --text hello --out '" +
                                 cli_test::unique_temp("t5_out").string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(dir.string() + " is a 't5' model folder; qkv heatmap draws"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(TextAttentionCommand, WritesEveryLayerAndHeadWithTheRealTokens) {
  for (const auto& [dir, text, layers, heads] :
       {std::tuple{kGpt2, std::string("And God said"), 2, 4}, std::tuple{kMiniLM, std::string("I love NLP"), 6, 12}}) {
    const fs::path out = cli_test::unique_temp("text_heatmap");
    const cli_test::Result r = run("heatmap --model '" + dir + "' --text '" + text + "' --json --out '" + out.string() + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["maps"].size(), static_cast<std::size_t>(layers));
    EXPECT_EQ(j["files"].size(), static_cast<std::size_t>(layers * heads + 1));
    for (int l = 0; l < layers; ++l)
      for (int h = 0; h < heads; ++h)
        EXPECT_TRUE(fs::exists(out / ("self_layer" + std::to_string(l) + "_head" + std::to_string(h) + ".png"))) << l << " " << h;
    const std::vector<std::string> tokens = j["maps"][0]["query_tokens"];
    const models::TextAttention a = models::text_attention(dir, text);
    EXPECT_EQ(tokens, a.tokens);
    // The page carries the tokens as its axis labels.
    std::ifstream f(out / "index.html");
    const std::string page((std::istreambuf_iterator<char>(f)), {});
    EXPECT_NE(page.find(nlohmann::json(tokens).dump()), std::string::npos);
    fs::remove_all(out);
  }
  // A selection: only those PNGs, named by the model's layer and head numbers.
  const fs::path out = cli_test::unique_temp("text_heatmap_sel");
  const cli_test::Result r = run("heatmap --model '" + kGpt2 + "' --text 'In the beginning' --layers 1 --heads 2-3 --out '" +
                                 out.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("tokens:     I | n |  the |  beg | in | ning  (6)"), std::string::npos) << r.out;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"index.html", "self_layer1_head2.png", "self_layer1_head3.png"}));
  const cli_test::Result bad = run("heatmap --model '" + kGpt2 + "' --text hi --heads 9 --out '" +
                                   cli_test::unique_temp("text_heatmap_bad").string() + "'");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--heads 9 is not a head of the model (it has 4 per layer: 0..3)"), std::string::npos) << bad.err;
  const cli_test::Result both = run("heatmap --model '" + kGpt2 + "' --text hi --checkpoint x --input 1");
  EXPECT_EQ(both.code, 2);
  const cli_test::Result notext = run("heatmap --model '" + kGpt2 + "'");
  EXPECT_EQ(notext.code, 2);
  EXPECT_NE(notext.err.find("--model: needs --text TEXT"), std::string::npos) << notext.err;
  fs::remove_all(out);
}

}  // namespace
}  // namespace qkv
