// GPT-2 files: Hugging Face config.json parsing and its errors, model.safetensors in
// both namings, the Conv1D layout written back, and every mismatch listed in one error.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "../infer/gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/io/files.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensors.h"
#include "qkv/models/gpt2.h"
#include "qkv/optim/optimizer.h"
#include "testing/fixture.h"

namespace {

namespace fs = std::filesystem;
using qkv::Tensor;
using qkv::models::GPT2Config;
using i64 = std::int64_t;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("qkv_gpt2_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& name = "") const { return (path / name).string(); }
};

Tensor logits_of(const qkv::models::GPT2LMHeadModel& m) {
  return m.forward(Tensor::from_vector(std::vector<i64>{3, 1, 4, 1, 5, 9, 2, 6}, {1, 8}));
}

template <class E>
void expect_error(const std::function<void()>& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << needles[0] << "'";
  } catch (const E& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Gpt2Files, SaveLoadRoundTripInHuggingFaceLayout) {
  TempDir d;
  auto m = qkv::testing::tiny_gpt2(1);
  qkv::models::save_gpt2(*m, d.str());
  const qkv::io::SafetensorsFile f = qkv::io::SafetensorsFile::open(d.str("model.safetensors"));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.at("transformer.h.0.attn.c_attn.weight").shape, (qkv::Shape{32, 96}));
  EXPECT_EQ(f.at("transformer.h.1.mlp.c_fc.weight").shape, (qkv::Shape{32, 128}));
  EXPECT_EQ(f.at("transformer.h.1.mlp.c_proj.weight").shape, (qkv::Shape{128, 32}));
  EXPECT_EQ(f.find("lm_head.weight"), nullptr) << "a tied head is not written";
  EXPECT_EQ(f.tensors().size(), 2u + 2 * 12 + 2);
  // c_attn's first column block is w_q^T.
  const Tensor c_attn = qkv::io::to_tensor(f, f.at("transformer.h.0.attn.c_attn.weight"));
  EXPECT_EQ(c_attn.at({3, 5}), m->h[0]->self_attn->w_q->weight.at({5, 3}));
  EXPECT_EQ(c_attn.at({3, 32 + 5}), m->h[0]->self_attn->w_k->weight.at({5, 3}));
  EXPECT_EQ(c_attn.at({3, 64 + 5}), m->h[0]->self_attn->w_v->weight.at({5, 3}));
  auto back = qkv::models::load_gpt2(d.str());
  // The loaded Conv1D weights are read in place, in their [in, out] layout, so the products sum
  // in another order than with the trained model's [out, in] weights: equal to float rounding.
  EXPECT_LE(qkv::max_abs_diff(logits_of(*m), logits_of(*back)), 1e-5);
  const GPT2Config c = back->config();
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.eos_token_id, 60);
}

TEST(Gpt2Files, OriginalNamingWithMaskBuffersAndAnUntiedHead) {
  TempDir d;
  GPT2Config cfg = qkv::testing::tiny_gpt2_config();
  cfg.tie_word_embeddings = false;
  auto m = qkv::testing::tiny_gpt2(2, cfg);
  qkv::models::save_gpt2(*m, d.str());
  // Rewrite the file the way OpenAI's original checkpoints name it: no "transformer." prefix,
  // plus the causal-mask buffers older files carry.
  auto loaded = qkv::io::load_safetensors(d.str("model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> renamed;
  for (auto& [name, t] : loaded.tensors)
    renamed.emplace_back(name.rfind("transformer.", 0) == 0 ? name.substr(12) : name, t);
  renamed.emplace_back("h.0.attn.bias", Tensor::ones({1, 1, 64, 64}));
  renamed.emplace_back("h.1.attn.masked_bias", Tensor::scalar(-1e4));
  qkv::io::save_safetensors(d.str("model.safetensors"), renamed);
  auto back = qkv::models::load_gpt2(d.str());
  ASSERT_NE(back->lm_head, nullptr);
  // The loaded Conv1D weights are read in place, in their [in, out] layout, so the products sum
  // in another order than with the trained model's [out, in] weights: equal to float rounding.
  EXPECT_LE(qkv::max_abs_diff(logits_of(*m), logits_of(*back)), 1e-5);
}

TEST(Gpt2Files, EveryMismatchIsListedInOneError) {
  TempDir d;
  auto m = qkv::testing::tiny_gpt2(1);
  qkv::models::save_gpt2(*m, d.str());
  auto loaded = qkv::io::load_safetensors(d.str("model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> t;
  for (auto& [name, x] : loaded.tensors) {
    if (name == "transformer.h.1.ln_2.bias") continue;                                       // missing
    if (name == "transformer.h.0.mlp.c_fc.weight") x = Tensor::zeros({128, 32});             // transposed
    t.emplace_back(name, x);
  }
  t.emplace_back("transformer.h.0.attn.rotary.weight", Tensor::zeros({3}));  // unexpected
  qkv::io::save_safetensors(d.str("model.safetensors"), t);
  expect_error<qkv::FormatError>([&] { qkv::models::load_gpt2(d.str()); },
                                 {"model.safetensors", "missing 1 tensors: h.1.ln_2.bias",
                                  "unexpected 1 tensors: transformer.h.0.attn.rotary.weight",
                                  "transformer.h.0.mlp.c_fc.weight is [128,32], the config needs [32,128]"});
}

TEST(Gpt2Files, ConfigThatDisagreesWithTheCheckpointIsNamed) {
  TempDir d;
  auto m = qkv::testing::tiny_gpt2(1);
  qkv::models::save_gpt2(*m, d.str());
  GPT2Config c = m->config();
  c.n_layer = 3;
  c.vocab_size = 70;
  qkv::io::write_file_atomic(d.str("config.json"), qkv::models::gpt2_config_to_json(c), "test");
  expect_error<qkv::FormatError>([&] { qkv::models::load_gpt2(d.str()); },
                                 {"missing 12 tensors: h.2.", "transformer.wte.weight is [61,32], the config needs [70,32]"});
}

TEST(Gpt2Files, ConfigErrorsNameTheFileAndTheField) {
  using qkv::models::gpt2_config_from_json;
  const std::string good = qkv::models::gpt2_config_to_json(qkv::testing::tiny_gpt2_config());
  auto with = [&](const std::string& key, const std::string& value) {
    std::string s = good;
    const std::size_t at = s.find("\"" + key + "\"");
    EXPECT_NE(at, std::string::npos) << key;
    const std::size_t colon = s.find(':', at), end = s.find_first_of(",\n", colon);
    return s.substr(0, colon + 1) + " " + value + s.substr(end);
  };
  auto err = [&](const std::string& text, const std::string& needle) {
    expect_error<qkv::FormatError>([&] { gpt2_config_from_json(text, "dir/config.json"); }, {"dir/config.json", needle});
  };
  EXPECT_NO_THROW(gpt2_config_from_json(good, "x"));
  err("{\"n_layer\": 2,", "not valid JSON");
  err("[1, 2]", "config must be a JSON object");
  err(with("n_layer", "null"), "field 'n_layer' is missing");
  err(with("n_head", "\"four\""), "field 'n_head' must be an integer, got \"four\"");
  err(with("n_embd", "0"), "field 'n_embd' must be >= 1, got 0");
  err(with("n_head", "5"), "n_embd 32 is not divisible by n_head 5");
  err(with("activation_function", "\"relu\""), "activation_function \"relu\" is not supported");
  err(with("model_type", "\"bert\""), "model_type \"bert\" is not supported");
  err(with("scale_attn_by_inverse_layer_idx", "true"), "scale_attn_by_inverse_layer_idx true is not supported");
  err(with("tie_word_embeddings", "1"), "field 'tie_word_embeddings' must be true or false");
  err(with("layer_norm_epsilon", "-1"), "layer_norm_epsilon' must be > 0");
}

TEST(Gpt2Files, MissingFilesAreIOErrorsNamingThePath) {
  TempDir d;
  expect_error<qkv::IOError>([&] { qkv::models::load_gpt2(d.str()); }, {"config.json"});
  auto m = qkv::testing::tiny_gpt2(1);
  qkv::models::save_gpt2(*m, d.str());
  fs::remove(d.str("model.safetensors"));
  expect_error<qkv::IOError>([&] { qkv::models::load_gpt2(d.str()); }, {"model.safetensors"});
}

// The dtype every tensor of a folder's model.safetensors has (F32, F16, ...; "mixed" if several).
std::string file_dtype(const std::string& dir) {
  std::set<std::string> kinds;
  const auto file = qkv::io::SafetensorsFile::open(dir + "/model.safetensors");  // (alive while iterated)
  for (const auto& t : file.tensors()) kinds.insert(qkv::io::st_dtype_name(t.dtype));
  return kinds.size() == 1 ? *kinds.begin() : "mixed";
}

// True when p points into a mapping of `file` (Linux's /proc/self/maps names the file of each).
bool lies_in_mapping_of(const void* p, const std::string& file) {
  const std::string want = fs::canonical(file).string();
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    fields >> std::hex >> lo >> dash >> hi;
    const std::size_t path = line.find('/');  // the last field; none of the others holds a '/'
    if (path != std::string::npos && line.substr(path) == want && lo <= at && at < hi) return true;
  }
  return false;
}

}  // namespace

// Loading builds the model without initialising it: no random number is drawn (the default
// generator's stream is where it was), and the Conv1D weights [in, out] become transposed views,
// not copies into [out, in]. What they view depends on the file's dtype: float32 weights are used
// where the file lies (its mapped pages); the committed fixture is float16 (half the bytes), widened
// to float32 once at load, and the views are of that copy. Both are checked: the fixture, and a
// float32 copy of it written here.
TEST(Gpt2Files, LoadingDrawsNoRandomNumbers) {
  TempDir d;
  const std::string fixture = qkv::testing::fixture_path("gpt2_tiny");
  qkv::models::save_gpt2(*qkv::models::load_gpt2(fixture), d.str());  // save_gpt2 writes float32
  ASSERT_EQ(file_dtype(fixture), "F16");
  ASSERT_EQ(file_dtype(d.str()), "F32");
  for (const std::string& dir : {fixture, d.str()}) {
    SCOPED_TRACE(dir + " (" + file_dtype(dir) + ")");
    const std::uint64_t before = qkv::default_generator().offset();
    const auto m = qkv::models::load_gpt2(dir);
    EXPECT_EQ(qkv::default_generator().offset(), before);
    const Tensor& w = m->h[0]->self_attn->w_q->weight;
    EXPECT_EQ(w.dtype(), qkv::DType::F32);
    EXPECT_FALSE(w.is_contiguous());
    EXPECT_EQ(lies_in_mapping_of(w.raw_data(), dir + "/model.safetensors"), file_dtype(dir) == "F32");
    // Training such a model gives its parameters contiguous storage first.
    qkv::optim::AdamW opt(m->parameters(), {});
    EXPECT_TRUE(m->h[0]->self_attn->w_q->weight.is_contiguous());
  }
}
