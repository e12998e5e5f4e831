// The Llama family's files and configs: config.json fields (transformers 4 and 5 spellings),
// every defect a clear error naming the file and the field or tensor, GGUF files of other
// architectures or with weights that do not fit, forward_cached's bad inputs, and GGUF export
// read back.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/infer/language_model.h"
#include "qkv/io/gguf.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensors.h"
#include "qkv/models/gguf_export.h"
#include "qkv/models/decoder_io.h"
#include "testing/fixture.h"

namespace {

namespace fs = std::filesystem;
using qkv::Tensor;
using i64 = std::int64_t;

template <class E, class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "no error";
}

struct TempDir {
  fs::path p;
  TempDir() {
    p = fs::temp_directory_path() / ("qkv_llama_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(p);
  }
  ~TempDir() { fs::remove_all(p); }
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string str(const std::string& f = "") const { return (p / f).string(); }
};

std::string fixture(const std::string& f) { return qkv::testing::fixture_path("llama_family/" + f); }

nlohmann::json config_of(const std::string& kind) {
  std::ifstream f(fixture(kind + "/config.json"));
  return nlohmann::json::parse(f);
}

std::string config_error(nlohmann::json j) {
  return error_of<qkv::FormatError>([&] { qkv::models::decoder_spec_from_config(j.dump(), "cfg.json"); });
}

TEST(LlamaConfig, ReadsTransformersFiveAndFourSpellings) {
  using Type = qkv::kernels::RopeScaling::Type;
  const auto c5 = qkv::models::decoder_spec_from_config(config_of("llama").dump(), "llama");
  EXPECT_EQ(c5.arch, "llama");
  EXPECT_EQ(c5.num_kv_heads, 2);
  EXPECT_EQ(c5.ropes.at(0).scaling.type, Type::Llama3);
  EXPECT_EQ(c5.ropes.at(0).scaling.original_max_positions, 32);
  // transformers 4: rope_theta + rope_scaling {"type" or "rope_type"}.
  nlohmann::json j = config_of("llama");
  j.erase("rope_parameters");
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const auto c4 = qkv::models::decoder_spec_from_config(j.dump(), "llama");
  EXPECT_EQ(c4.ropes.at(0).theta, 500000.0);
  EXPECT_EQ(c4.ropes.at(0).scaling.type, Type::Linear);
  EXPECT_EQ(c4.ropes.at(0).scaling.factor, 2.0);
  const auto mistral = qkv::models::decoder_spec_from_config(config_of("mistral").dump(), "mistral");
  EXPECT_EQ(mistral.arch, "mistral");
  for (const auto& l : mistral.layers) EXPECT_EQ(l.window, 8);
  EXPECT_TRUE(qkv::models::decoder_spec_from_config(config_of("qwen2").dump(), "qwen2").attention_bias);
}

TEST(LlamaConfig, EveryDefectIsNamed) {
  nlohmann::json j = config_of("llama");
  auto with = [&](const char* k, nlohmann::json v) {
    nlohmann::json x = j;
    x[k] = std::move(v);
    return config_error(x);
  };
  EXPECT_NE(with("model_type", "gpt2").find("model_type \"gpt2\" is not a decoder architecture qkv runs ("), std::string::npos);
  EXPECT_NE(with("model_type", "falcon").find("is not a decoder architecture qkv runs (gemma"), std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("hidden_act \"gelu\" is not supported"), std::string::npos);
  EXPECT_NE(with("hidden_size", "32").find("field 'hidden_size' must be an integer"), std::string::npos);
  EXPECT_NE(with("num_key_value_heads", 3).find("num_attention_heads 4 is not a multiple of num_key_value_heads 3"),
            std::string::npos);
  EXPECT_NE(with("mlp_bias", true).find("mlp_bias true is not supported"), std::string::npos);
  EXPECT_NE(with("rope_parameters", {{"rope_type", "dynamic"}, {"rope_theta", 1e4}}).find("rope type \"dynamic\" is not supported"),
            std::string::npos);
  EXPECT_NE(with("rms_norm_eps", -1.0).find("rms_norm_eps"), std::string::npos);
  nlohmann::json x = j;
  x.erase("hidden_size");
  EXPECT_NE(config_error(x).find("field 'hidden_size' is missing"), std::string::npos);
  EXPECT_NE(config_error(nlohmann::json::array()).find("config must be a JSON object"), std::string::npos);
  nlohmann::json q = config_of("qwen2");
  q["use_sliding_window"] = true;
  EXPECT_NE(config_error(q).find("use_sliding_window true is not supported"), std::string::npos);
  EXPECT_EQ(config_error(j), "no error");
}

// A copy of a fixture folder whose safetensors file is rewritten by `edit`.
void edit_folder(const std::string& kind, const TempDir& d,
                 const std::function<void(std::vector<std::pair<std::string, Tensor>>&)>& edit) {
  fs::copy(fixture(kind), d.p, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  auto t = qkv::io::load_safetensors(fixture(kind + "/model.safetensors"));
  std::vector<std::pair<std::string, Tensor>> v;
  for (auto& [n, x] : t.tensors) v.emplace_back(n, x.clone());
  edit(v);
  qkv::io::save_safetensors(d.str("model.safetensors"), v);
}

TEST(LlamaFiles, MissingUnexpectedAndWrongTensorsAreListed) {
  TempDir d;
  edit_folder("llama", d, [](auto& v) {
    v.erase(v.begin());                                       // one missing
    v.emplace_back("model.extra.weight", Tensor::zeros({2}));  // one unexpected
    for (auto& [n, t] : v)
      if (n == "model.norm.weight") t = Tensor::zeros({31});   // one wrong shape
  });
  const std::string msg = error_of<qkv::FormatError>([&] { qkv::models::load_decoder(d.str()); });
  EXPECT_NE(msg.find("does not match the llama config"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing 1 tensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected 1 tensors: model.extra.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.norm.weight is [31], the config needs [32]"), std::string::npos) << msg;
}

TEST(LlamaFiles, IntegerWeightsAndBadShardIndexesAreNamed) {
  TempDir d;
  edit_folder("llama", d, [](auto& v) { v[0].second = Tensor::zeros(v[0].second.shape(), qkv::DType::I64); });
  EXPECT_NE(error_of<qkv::FormatError>([&] { qkv::models::load_decoder(d.str()); }).find("has dtype I64"), std::string::npos);
  TempDir s;
  fs::copy(fixture("qwen2"), s.p, fs::copy_options::recursive);
  std::ofstream(s.str("model.safetensors.index.json")) << R"({"weight_map": {"model.norm.weight": "../../etc/passwd"}})";
  EXPECT_NE(error_of<qkv::FormatError>([&] { qkv::models::load_decoder(s.str()); }).find("is not a file of the folder"),
            std::string::npos);
  std::ofstream(s.str("model.safetensors.index.json")) << "{not json";
  EXPECT_NE(error_of<qkv::FormatError>([&] { qkv::models::load_decoder(s.str()); }).find("not valid JSON"), std::string::npos);
}

TEST(LlamaFiles, GgufOfAnotherArchitectureOrTypeIsNamed) {
  TempDir d;
  qkv::io::GGUFMetadata meta = {{"general.architecture", qkv::io::GGUFMeta::string("falcon")}};
  qkv::io::write_gguf(d.str("f.gguf"), meta, {});
  EXPECT_NE(error_of<qkv::FormatError>([&] { qkv::models::load_decoder(d.str("f.gguf")); })
                .find("GGUF architecture 'falcon' is not one qkv runs ("),
            std::string::npos);
  EXPECT_NE(error_of<qkv::FormatError>([&] { qkv::infer::load_language_model(d.str("f.gguf")); })
                .find("'falcon' is not one qkv generates with"),
            std::string::npos);
  EXPECT_NE(error_of<qkv::IOError>([&] { qkv::models::load_decoder(d.str("nothing")); }).find("does not exist"),
            std::string::npos);
  std::ofstream(d.str("x.gguf")) << "not a gguf";
  EXPECT_NE(error_of<qkv::FormatError>([&] { qkv::models::load_decoder(d.str("x.gguf")); }).find("not a GGUF file"),
            std::string::npos);
}

TEST(LanguageModel, ChatTemplateGivenAsTextOrFile) {
  const std::vector<qkv::tokenize::ChatMessage> hi = {{.role = "user", .content = "hi"}};
  // The tiny folder has no tokenizer and no template: render_chat says so.
  EXPECT_NE(error_of<qkv::ValueError>([&] { qkv::infer::load_language_model(fixture("llama")).render_chat(hi); })
                .find("has no chat template"),
            std::string::npos);
  TempDir d;
  std::ofstream(d.str("t.jinja")) << "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}";
  const auto file = qkv::infer::load_language_model(fixture("llama"), {.chat_template_file = d.str("t.jinja")});
  EXPECT_EQ(file.render_chat(hi, false), "<user>hi");
  // The text wins over the file.
  const auto text = qkv::infer::load_language_model(
      fixture("llama"), {.chat_template_file = d.str("t.jinja"), .chat_template_text = "[{{ messages[0].content }}]"});
  EXPECT_EQ(text.render_chat(hi, false), "[hi]");
  EXPECT_NE(error_of<qkv::tokenize::ChatTemplateError>([&] {
              qkv::infer::load_language_model(fixture("llama"), {.chat_template_text = "{% for %}"});
            }).find("chat template"),
            std::string::npos);
}

TEST(LlamaModel, ForwardCachedChecksBeforeWriting) {
  const auto m = qkv::models::load_decoder(fixture("mistral"));
  qkv::infer::KVCache cache(m->cache_options(1, 8));
  EXPECT_NE(error_of<qkv::IndexError>([&] {
              m->forward_cached(Tensor::from_vector(std::vector<i64>{1, 500}, {1, 2}), {2}, cache);
            }).find("token id 500 of sequence 0 out of range [0, 128)"),
            std::string::npos);
  EXPECT_EQ(cache.length(0), 0);
  EXPECT_NE(error_of<qkv::ValueError>([&] {
              m->forward_cached(Tensor::from_vector(std::vector<i64>(9, 1), {1, 9}), {9}, cache);
            }).find("max_len"),
            std::string::npos);
  qkv::infer::KVCache other({.num_layers = 2, .batch = 1, .num_heads = 4, .max_len = 8, .head_dim = 8});
  EXPECT_NE(error_of<qkv::ShapeError>([&] {
              m->forward_cached(Tensor::from_vector(std::vector<i64>{1}, {1, 1}), {1}, other);
            }).find("shaped for another model"),
            std::string::npos);
}

// A decode step of many sequences (more than the quantized products' decode path takes rows; the
// longest at the last position) gives each sequence bitwise the logits it gets when it is the
// only one stepping: continuous batching's premise (the attention kernel's part is
// DecodeAttention.ASequenceGetsTheSameBitsWhateverTheOthersHold).
TEST(LlamaModel, DecodeStepGivesEachSequenceItsLogitsAlone) {
  for (const std::string file : {"llama_q8_0.gguf", "qwen2_mixed.gguf"}) {
    const auto m = qkv::models::load_decoder(fixture(file));
    constexpr i64 B = 12;
    const i64 T = m->max_positions(), V = m->vocab_size();
    qkv::infer::KVCache cache(m->cache_options(B, T));
    // Prompts of lengths 1 .. T - 1, each prefilled alone.
    for (i64 b = 0; b < B; ++b) {
      const i64 n = b == 0 ? T - 1 : 1 + (b * 37) % 60;
      std::vector<i64> ids(static_cast<std::size_t>(B * n), 0), n_new(B, 0);
      for (i64 j = 0; j < n; ++j) ids[static_cast<std::size_t>(b * n + j)] = (b * 7 + j * 3) % V;
      n_new[static_cast<std::size_t>(b)] = n;
      m->forward_cached(Tensor::from_vector(ids, {B, n}), n_new, cache);
    }
    std::vector<i64> next(B);
    for (i64 b = 0; b < B; ++b) next[static_cast<std::size_t>(b)] = (b * 11 + 5) % V;
    const Tensor ids = Tensor::from_vector(next, {B, 1});
    // Each alone (the others with no new token), then all together, from the same cache.
    std::vector<Tensor> alone;
    for (i64 b = 0; b < B; ++b) {
      qkv::infer::KVCache c = cache;
      std::vector<i64> n_new(B, 0);
      n_new[static_cast<std::size_t>(b)] = 1;
      alone.push_back(m->forward_cached(ids, n_new, c).contiguous());
    }
    qkv::infer::KVCache c = cache;
    const Tensor all = m->forward_cached(ids, std::vector<i64>(B, 1), c).contiguous();
    for (i64 b = 0; b < B; ++b)
      EXPECT_EQ(0, std::memcmp(all.data<float>() + b * V, alone[static_cast<std::size_t>(b)].data<float>() + b * V,
                               static_cast<std::size_t>(V) * sizeof(float)))
          << file << ": sequence " << b;
  }
}

// A float16 KV cache (--kv-cache f16): the cache holds halves and half the bytes; prefill and
// decode logits stay within rounding of the float32 cache's (each key and value rounded once to
// 11 significant bits) on a folder with a sliding window and on quantized GGUFs, and a decode
// step still gives each sequence bitwise the logits it gets alone.
TEST(LlamaModel, HalfCacheStaysWithinRoundingOfTheFloatCache) {
  for (const std::string file : {"mistral", "llama_q8_0.gguf", "qwen2_mixed.gguf"}) {
    const auto m32 = qkv::models::load_decoder(fixture(file));
    const auto m16 = qkv::models::load_decoder(fixture(file));
    m16->set_kv_type(qkv::infer::KVType::F16);
    const i64 T = std::min<i64>(m32->max_positions(), 40), V = m32->vocab_size();
    qkv::infer::KVCache c32(m32->cache_options(2, T)), c16(m16->cache_options(2, T));
    ASSERT_EQ(c16.dtype(), qkv::infer::KVType::F16);
    EXPECT_EQ(2 * c16.bytes(), c32.bytes());
    // Two prompts of different lengths prefilled together, then decode steps of both.
    const i64 n0 = T / 2, n1 = T / 4;
    std::vector<i64> ids(static_cast<std::size_t>(2 * n0), 0);
    for (i64 j = 0; j < n0; ++j) ids[static_cast<std::size_t>(j)] = (j * 7 + 3) % V;
    for (i64 j = 0; j < n1; ++j) ids[static_cast<std::size_t>(n0 + j)] = (j * 13 + 1) % V;
    auto compare = [&](const Tensor& a, const Tensor& b, const std::string& what) {
      const Tensor x = a.contiguous(), y = b.contiguous();
      ASSERT_EQ(x.numel(), y.numel());
      double scale = 0, diff = 0;
      for (i64 i = 0; i < x.numel(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(x.data<float>()[i])));
        diff = std::max(diff, static_cast<double>(std::abs(x.data<float>()[i] - y.data<float>()[i])));
      }
      EXPECT_GT(diff, 0.0) << file << " " << what << ": the half cache changed nothing (is it used?)";
      EXPECT_LE(diff, 2e-3 * std::max(scale, 1.0)) << file << " " << what;
    };
    const Tensor p = Tensor::from_vector(ids, {2, n0});
    compare(m32->forward_cached(p, {n0, n1}, c32, true), m16->forward_cached(p, {n0, n1}, c16, true), "prefill");
    for (i64 step = 0; c32.length(0) < T; ++step) {
      const Tensor next = Tensor::from_vector(std::vector<i64>{(step * 5 + 2) % V, (step * 3 + 1) % V}, {2, 1});
      compare(m32->forward_cached(next, {1, 1}, c32), m16->forward_cached(next, {1, 1}, c16),
              "decode step " + std::to_string(step));
    }
    // Batch independence with the half cache: sequence 1 stepping alone gets the same bits.
    c16.truncate(0, T - 2), c16.truncate(1, T / 2);
    const Tensor next = Tensor::from_vector(std::vector<i64>{4, 9}, {2, 1});
    qkv::infer::KVCache alone = c16;
    const Tensor one = m16->forward_cached(next, {0, 1}, alone).contiguous();
    qkv::infer::KVCache both = c16;
    const Tensor two = m16->forward_cached(next, {1, 1}, both).contiguous();
    EXPECT_EQ(0, std::memcmp(one.data<float>() + V, two.data<float>() + V, static_cast<std::size_t>(V) * sizeof(float)))
        << file;
  }
}

TEST(LlamaGguf, ExportedFilesLoadBackWithTheSameLogits) {
  TempDir d;
  for (const std::string kind : {"llama", "qwen2"}) {
    const auto m = qkv::models::load_decoder(fixture(kind));
    const std::vector<i64> ids = {5, 9, 17, 33, 2, 80, 101};
    auto logits = [&](const qkv::models::DecoderLM& x) {
      qkv::infer::KVCache c(x.cache_options(1, 7));
      return x.forward_cached(Tensor::from_vector(ids, {1, 7}), {7}, c, true);
    };
    // Kept types (no conversion) read back give the same logits; Q8_0 within its rounding.
    const std::string same = d.str(kind + ".gguf"), q8 = d.str(kind + "_q8.gguf");
    qkv::models::save_decoder_gguf(*m, same, {}, {}, kind);
    qkv::models::save_decoder_gguf(*m, q8, {.ftype = qkv::models::LlamaFtype::Q8_0}, {}, kind);
    const auto a = qkv::models::load_decoder(same), b = qkv::models::load_decoder(q8);
    EXPECT_EQ(a->spec().ropes.front().style,
              kind == "llama" ? qkv::kernels::RopeStyle::Interleaved : qkv::kernels::RopeStyle::Half);
    EXPECT_LE(qkv::max_abs_diff(logits(*a), logits(*m)), 1e-4) << kind;
    EXPECT_LE(qkv::max_abs_diff(logits(*b), logits(*m)), 0.05) << kind;
    const qkv::io::GGUFFile f = qkv::io::GGUFFile::open(q8);
    EXPECT_EQ(f.at("blk.0.attn_q.weight").type, qkv::kernels::QType::Q8_0);
    EXPECT_EQ(f.get_string("general.architecture"), kind);
  }
}

// The checksum of tests/reference/make_quant_mix_fixtures.py: the sum over the little-endian
// 32-bit words w_i of the bytes (zero-padded) of w_i * (2i + 1), mod 2^64.
std::uint64_t word_checksum(const std::uint8_t* p, std::uint64_t n) {
  std::uint64_t h = 0;
  for (std::uint64_t i = 0; i * 4 < n; ++i) {
    std::uint32_t w = 0;
    std::memcpy(&w, p + 4 * i, static_cast<std::size_t>(std::min<std::uint64_t>(4, n - 4 * i)));
    h += static_cast<std::uint64_t>(w) * (2 * i + 1);
  }
  return h;
}

// qkv convert --type q4_k_m of a real model (SmolLM2-135M-Instruct, its Q4_1 matrices dequantized
// and quantized again) writes every tensor as llama-quantize --allow-requantize does, type and
// bytes (tests/fixtures/quant/smollm2_q4_k_m.json: rows of 576 fall back from Q4_K to Q5_0 and from
// Q6_K to Q8_0, the tied embedding is Q8_0, ffn_down's rows of 1536 are Q6_K in the use_more_bits
// layers and Q4_K in the others), general.file_type 15, and the file loads back with prompt logits
// close to the source's (measured: rms difference / rms logit 0.078, max |difference| 5.3 of logits
// up to 35, the same top token at 10 of 12 positions - the noise of requantizing 4-bit weights).
TEST(LlamaGguf, SmolLM2AsQ4KMIsLlamaQuantizesAndLoadsBack) {
  const std::string src = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(std::filesystem::exists(src)) << src << " is missing: run `make models`";
  TempDir d;
  const auto m = qkv::models::load_decoder(src);
  const std::string out = d.str("smollm2_q4_k_m.gguf");
  qkv::models::save_decoder_gguf(*m, out, {.ftype = qkv::models::LlamaFtype::Q4_K_M}, {}, "smollm2");
  const qkv::io::GGUFFile f = qkv::io::GGUFFile::open(out);
  std::ifstream in(qkv::testing::fixture_path("quant/smollm2_q4_k_m.json"));
  const nlohmann::json want = nlohmann::json::parse(in);
  EXPECT_EQ(f.get_int("general.file_type"), want["file_type"].get<int>());
  ASSERT_EQ(f.tensors().size(), want["tensors"].size());
  int wrong = 0;
  for (const qkv::io::GGUFTensorInfo& t : f.tensors()) {
    const auto& w = want["tensors"].at(t.name);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(word_checksum(f.data(t), t.nbytes)));
    if ((t.type_name() != w[0].get<std::string>() || hex != w[1].get<std::string>()) && wrong++ < 5)
      ADD_FAILURE() << t.name << ": " << t.type_name() << " " << hex << ", llama-quantize " << w.dump();
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(f.at("blk.5.ffn_down.weight").type, qkv::kernels::QType::Q6_K);  // (5 - 30 / 8) % 3 == 2
  EXPECT_EQ(f.at("blk.4.ffn_down.weight").type, qkv::kernels::QType::Q4_K);
  const auto back = qkv::models::load_decoder(out);
  const std::vector<i64> ids = {1, 9690, 2683, 314, 4649, 253, 6123, 30, 1016, 1530, 314, 260};
  auto logits = [&](const qkv::models::DecoderLM& x) {
    qkv::infer::KVCache c(x.cache_options(1, static_cast<i64>(ids.size())));
    return x.forward_cached(Tensor::from_vector(ids, {1, static_cast<i64>(ids.size())}), {static_cast<i64>(ids.size())}, c,
                            true)
        .contiguous();
  };
  const Tensor a = logits(*m), b = logits(*back);
  const i64 V = a.shape().back(), T = static_cast<i64>(ids.size());
  double diff = 0, scale = 0, sq = 0, sq_ref = 0;
  int same_top = 0;
  for (i64 t = 0; t < T; ++t) {
    const float* x = a.data<float>() + t * V;
    const float* y = b.data<float>() + t * V;
    i64 ax = 0, ay = 0;
    for (i64 v = 0; v < V; ++v) {
      diff = std::max(diff, static_cast<double>(std::fabs(x[v] - y[v])));
      scale = std::max(scale, static_cast<double>(std::fabs(x[v])));
      sq += static_cast<double>(x[v] - y[v]) * (x[v] - y[v]);
      sq_ref += static_cast<double>(x[v]) * x[v];
      ax = x[v] > x[ax] ? v : ax;
      ay = y[v] > y[ay] ? v : ay;
    }
    same_top += ax == ay;
  }
  const double rel_rms = std::sqrt(sq / sq_ref);
  std::printf("[ q4_k_m   ] SmolLM2 logits: max |diff| %.3f (max |logit| %.2f), rms diff / rms logit %.4f, same top token "
              "at %d of %lld positions\n",
              diff, scale, rel_rms, same_top, static_cast<long long>(T));
  EXPECT_LE(rel_rms, 0.1);
  EXPECT_LE(diff, 0.25 * scale);
  EXPECT_GE(same_top, T - 3);
}

}  // namespace
