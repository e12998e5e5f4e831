// Bad input for the architectures of the registry: an unsupported architecture, tokenizer model
// or rope type names itself and lists what is supported (from the registry); a config.json or
// GGUF file whose options contradict each other or the tensors (head_dim x heads against the
// projections, layer_types / no_rope_layers / a sliding-window pattern of the wrong length, rope
// factors of the wrong length, absurd sizes) is one FormatError naming the file and the field,
// raised before anything of the model's size is allocated.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/infer/language_model.h"
#include "qkv/io/gguf.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/models/decoder_io.h"
#include "qkv/models/registry.h"
#include "qkv/tokenize/tokenizer.h"
#include "testing/fixture.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using qkv::io::GGUFFile;
using qkv::io::GGUFMeta;
using qkv::io::GGUFMetadata;
using qkv::io::GGUFTensorData;

struct TempDir {
  fs::path p;
  TempDir() {
    static int n = 0;
    p = fs::temp_directory_path() / ("qkv_arch_err_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(p);
  }
  ~TempDir() { fs::remove_all(p); }
  std::string str(const std::string& f) const { return (p / f).string(); }
};

// A file of tests/fixtures/arch/, or of another fixture folder when `f` names it ("moe/olmoe").
std::string arch_path(const std::string& f) {
  return qkv::testing::fixture_path(f.rfind("moe/", 0) == 0 || f.rfind("hybrid/", 0) == 0 ? f : "arch/" + f);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const qkv::FormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a FormatError: ") + e.what();
  }
  return "no error";
}

// A copy of the arch folder `arch` with `edit` applied to its config.json.
std::string edited_folder(const TempDir& d, const std::string& arch, const std::function<void(json&)>& edit) {
  const fs::path out = d.p / (arch + "_edited");
  fs::create_directories(out);
  for (const auto& e : fs::directory_iterator(arch_path(arch)))
    fs::copy_file(e.path(), out / e.path().filename(), fs::copy_options::overwrite_existing);
  std::ifstream in(out / "config.json");
  json j = json::parse(in);
  in.close();
  edit(j);
  std::ofstream(out / "config.json") << j.dump();
  return out.string();
}

struct ConfigCase {
  std::string arch;
  std::function<void(json&)> edit;
  std::vector<std::string> want;  // substrings of the one message
};

TEST(ArchErrors, ContradictoryConfigsAreOneMessageNamingTheField) {
  const std::vector<ConfigCase> cases = {
      {"qwen3", [](json& j) { j["head_dim"] = 8; },
       {"model.safetensors: does not match the qwen3 config", "q_proj.weight is [64,32], the config needs [32,32]"}},
      {"qwen3", [](json& j) { j["num_attention_heads"] = 8; }, {"q_proj.weight is [64,32], the config needs [128,32]"}},
      {"qwen3", [](json& j) { j["num_key_value_heads"] = 3; },
       {"config.json", "num_attention_heads 4 is not a multiple of num_key_value_heads 3"}},
      {"qwen3", [](json& j) { j["vocab_size"] = 1000; }, {"embed_tokens.weight is [301,32], the config needs [1000,32]"}},
      {"qwen3", [](json& j) { j["num_hidden_layers"] = 3; }, {"layer_types must list the 3 layers' types"}},
      {"gemma3", [](json& j) { j["layer_types"] = json::array({"sliding_attention"}); },
       {"layer_types must list the 2 layers' types, got [\"sliding_attention\"]"}},
      {"gemma3", [](json& j) { j["layer_types"] = json::array({"sliding_attention", "chunked"}); },
       {"layer_types holds \"chunked\" (sliding_attention or full_attention)"}},
      {"gemma2", [](json& j) { j["query_pre_attn_scalar"] = 0; }, {"query_pre_attn_scalar must be > 0, got 0"}},
      {"gemma2", [](json& j) { j["sliding_window"] = -1; }, {"'sliding_window' must be >= 1, got -1"}},
      {"phi3", [](json& j) { j["rope_parameters"]["long_factor"] = json::array({1.0, 2.0, 3.0}); },
       {"long_factor has 3 values; the rotated dims 12 need 6"}},
      {"phi3", [](json& j) { j["rope_parameters"]["short_factor"] = json::array({1.0}); }, {"short_factor has 1 values"}},
      {"smollm3", [](json& j) { j["no_rope_layers"] = json::array({1, 1}); },
       {"no_rope_layers must give the 4 layers a 0 or 1, got [1,1]"}},
      {"qwen3", [](json& j) { j["rope_parameters"]["rope_type"] = "dynamic"; },
       {"rope type \"dynamic\" is not supported (default, linear, llama3, yarn, longrope)"}},
      // Absurd sizes: refused from the config, before the tensors are read or anything allocated.
      {"qwen3", [](json& j) { j["num_hidden_layers"] = 100000000; j.erase("layer_types"); },
       {"num_hidden_layers must be in [1, 65536], got 100000000"}},
      {"qwen3", [](json& j) { j["num_hidden_layers"] = 1 << 24; j.erase("layer_types"); },
       {"num_hidden_layers must be in [1, 65536], got 16777216"}},
      {"qwen3", [](json& j) { j["vocab_size"] = 1LL << 40; }, {"vocab_size"}},
      {"qwen3", [](json& j) { j["head_dim"] = -16; }, {"'head_dim' must be >= 1, got -16"}},
      // Mixtures of experts: counts that disagree with each other or with the tensors.
      {"moe/qwen3_moe", [](json& j) { j["num_experts_per_tok"] = 5; },
       {"config.json", "num_experts_per_tok must be in [1, 4] (num_local_experts), got 5"}},
      {"moe/qwen3_moe", [](json& j) { j["num_local_experts"] = 3; },
       {"does not match the qwen3_moe config", "unexpected 6 tensors", "mlp.experts.3."}},
      {"moe/qwen3_moe", [](json& j) { j["moe_intermediate_size"] = 8; },
       {"mlp.experts.0.gate_proj.weight is [16,16], the config needs [8,16]"}},
      {"moe/qwen3_moe", [](json& j) { j["mlp_only_layers"] = json::array({7}); },
       {"mlp_only_layers holds 7, not a layer index below 2"}},
      {"moe/mixtral", [](json& j) { j["num_local_experts"] = 100000; },
       {"num_local_experts must be in [1, 4096], got 100000"}},
      {"moe/mixtral", [](json& j) { j.erase("num_experts_per_tok"); }, {"num_experts_per_tok"}},
      {"moe/olmoe", [](json& j) { j["clip_qkv"] = 8.0; }, {"clip_qkv 8.0 is not supported"}},
      // gpt-oss: its experts' shapes (rewritten at load from gate_up_proj) and its own fields.
      {"moe/gpt_oss", [](json& j) { j["intermediate_size"] = 16; },
       {"model.layers.0.mlp.experts.gate_up_proj is [4,32,64], the config needs [4,32,32]"}},
      {"moe/gpt_oss", [](json& j) { j["num_local_experts"] = 5; }, {"gate_up_proj is [4,32,64], the config needs [5,32,64]"}},
      {"moe/gpt_oss", [](json& j) { j["swiglu_limit"] = -1.0; }, {"swiglu_limit must be > 0, got -1"}},
      {"moe/gpt_oss", [](json& j) { j["attention_bias"] = false; }, {"attention_bias false is not supported for gpt-oss"}},
      {"moe/gpt_oss", [](json& j) { j["sliding_window"] = 0; }, {"'sliding_window' must be >= 1, got 0"}},
      // Qwen3.5: linear-attention dimensions that disagree, a layer_types list of the wrong length.
      {"hybrid/qwen3_5", [](json& j) { j["layer_types"] = json::array({"linear_attention", "full_attention"}); },
       {"config.json", "layer_types must list one type per layer (3), got 2 entries"}},
      {"hybrid/qwen3_5", [](json& j) { j["layer_types"][1] = "sliding_attention"; },
       {"layer_types[1] is \"sliding_attention\", expected \"linear_attention\" or \"full_attention\""}},
      {"hybrid/qwen3_5", [](json& j) { j["linear_num_value_heads"] = 3; },
       {"linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2"}},
      {"hybrid/qwen3_5", [](json& j) { j["linear_key_head_dim"] = 4; },
       {"does not match the qwen3_5_text config", "linear_attn.in_proj_qkv.weight is [64,16], the config needs [48,16]"}},
      {"hybrid/qwen3_5", [](json& j) { j["linear_num_value_heads"] = 1 << 20; },
       {"linear_num_value_heads must be in [1, 65536], got 1048576"}},
      {"hybrid/qwen3_5", [](json& j) { j["linear_conv_kernel_dim"] = 0; },
       {"field 'linear_conv_kernel_dim' must be >= 1, got 0"}},
  };
  TempDir d;
  for (const ConfigCase& c : cases) {
    const std::string dir = edited_folder(d, c.arch, c.edit);
    const std::string m = message_of([&] { qkv::models::load_decoder(dir); });
    for (const std::string& w : c.want) EXPECT_NE(m.find(w), std::string::npos) << c.arch << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    fs::remove_all(dir);
  }
}

TEST(ArchErrors, UnsupportedKindsAreNamedWithTheRegistrysList) {
  TempDir d;
  const std::string dir = edited_folder(d, "qwen3", [](json& j) { j["model_type"] = "falcon"; });
  const std::string m = message_of([&] { qkv::infer::load_language_model(dir); });
  EXPECT_NE(m.find("falcon"), std::string::npos) << m;
  // Every causal family of the registry is listed, whatever it holds.
  for (const qkv::models::ModelFamily* f : qkv::models::model_families()) {
    if (f->role != qkv::models::ModelRole::CausalLM) continue;
    for (const std::string& t : f->model_types) EXPECT_NE(m.find(t), std::string::npos) << t << ": " << m;
  }
  // A GGUF architecture qkv does not run.
  qkv::io::write_gguf(d.str("f.gguf"), {{"general.architecture", GGUFMeta::string("rwkv7")}}, {});
  const std::string g = message_of([&] { qkv::infer::load_language_model(d.str("f.gguf")); });
  EXPECT_NE(g.find("'rwkv7' is not one qkv generates with (" + qkv::models::gguf_architectures_list() + ")"),
            std::string::npos)
      << g;
  // A GGUF tokenizer model qkv does not read.
  qkv::io::write_gguf(d.str("t.gguf"),
                      {{"general.architecture", GGUFMeta::string("qwen3")},
                       {"tokenizer.ggml.model", GGUFMeta::string("rwkv")},
                       {"tokenizer.ggml.tokens", GGUFMeta::string_array({"a", "b"})}},
                      {});
  const std::string t = message_of([&] { qkv::tokenize::load_tokenizer(d.str("t.gguf")); });
  EXPECT_NE(t.find("tokenizer.ggml.model: \"rwkv\" is not supported (qkv reads \"gpt2\""), std::string::npos) << t;
}

// The arch GGUF `arch`.gguf rewritten with `edit` applied to its metadata and tensors.
std::string edited_gguf(const TempDir& d, const std::string& arch,
                        const std::function<void(GGUFMetadata&, std::vector<GGUFTensorData>&)>& edit) {
  const GGUFFile f = GGUFFile::open(arch_path(arch + ".gguf"));
  GGUFMetadata meta = qkv::io::metadata_of(f);
  std::vector<GGUFTensorData> tensors;
  for (const auto& t : f.tensors()) tensors.push_back({t.name, t.type, t.dims, f.data(t), t.nbytes});
  edit(meta, tensors);
  const std::string out = d.str(arch + "_edited.gguf");
  fs::create_directories(fs::path(out).parent_path());
  qkv::io::write_gguf(out, meta, tensors);
  return out;
}

void set_meta(GGUFMetadata& m, const std::string& key, GGUFMeta v) {
  for (auto& [k, value] : m)
    if (k == key) {
      value = std::move(v);
      return;
    }
  m.emplace_back(key, std::move(v));
}

TEST(ArchErrors, ContradictoryGgufMetadataIsOneMessage) {
  TempDir d;
  struct Case {
    std::string arch;
    std::function<void(GGUFMetadata&, std::vector<GGUFTensorData>&)> edit;
    std::string want;
  };
  std::vector<float> short_long(3, 1.f);
  const std::vector<Case> cases = {
      {"qwen3", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen3.attention.head_count", GGUFMeta::u32(8)); },
       "blk.0.attn_q.weight"},
      {"qwen3", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen3.attention.key_length", GGUFMeta::u32(8)); },
       "blk.0.attn_q.weight"},
      {"qwen3", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen3.block_count", GGUFMeta::u32(3)); }, "blk.2"},
      {"qwen3", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen3.block_count", GGUFMeta::u32(1u << 30)); },
       "GGUF key 'qwen3.block_count' is 1073741824, but the file holds"},
      {"gemma3",
       [](GGUFMetadata& m, auto&) {
         set_meta(m, "gemma3.attention.sliding_window_pattern",
                  GGUFMeta::int_array(qkv::io::GGUFType::BOOL, {1, 0, 1}));
       },
       "GGUF key 'gemma3.attention.sliding_window_pattern' has 3 entries for 2 layers"},
      {"phi3",
       [&](GGUFMetadata&, std::vector<GGUFTensorData>& t) {
         for (auto& x : t)
           if (x.name == "rope_factors_long.weight") {
             x.dims = {3};
             x.data = short_long.data();
             x.nbytes = 12;
           }
       },
       "rope_factors_long.weight"},
      {"moe/qwen3_moe",
       [](GGUFMetadata& m, auto&) { set_meta(m, "qwen3moe.expert_used_count", GGUFMeta::u32(9)); },
       "GGUF key 'qwen3moe.expert_used_count' must be in [1, 4], got 9"},
      {"moe/olmoe", [](GGUFMetadata& m, auto&) { set_meta(m, "olmoe.expert_count", GGUFMeta::u32(8)); },
       "blk.0.ffn_gate_exps.weight is [4,16,16], the config needs [8,16,16]"},
      {"moe/mixtral", [](GGUFMetadata& m, auto&) { set_meta(m, "llama.expert_count", GGUFMeta::u32(1u << 30)); },
       "GGUF key 'llama.expert_count' must be in [1, 4096], got 1073741824"},
      {"hybrid/qwen3_5", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen35.ssm.inner_size", GGUFMeta::u32(33)); },
       "GGUF keys 'qwen35.ssm.*' are inconsistent: inner size 33 for 4 value heads on 2 key heads"},
      {"hybrid/qwen3_5", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen35.ssm.group_count", GGUFMeta::u32(3)); },
       "GGUF keys 'qwen35.ssm.*' are inconsistent"},
      {"hybrid/qwen3_5",
       [](GGUFMetadata& m, auto&) {
         set_meta(m, "qwen35.attention.recurrent_layers", GGUFMeta::int_array(qkv::io::GGUFType::BOOL, {1, 0}));
       },
       "GGUF key 'qwen35.attention.recurrent_layers' has 2 entries for 3 layers"},
      {"hybrid/qwen3_5", [](GGUFMetadata& m, auto&) { set_meta(m, "qwen35.ssm.time_step_rank", GGUFMeta::u32(1u << 30)); },
       "GGUF key 'qwen35.ssm.time_step_rank' must be in [1, 65536], got 1073741824"},
  };
  for (const Case& c : cases) {
    const std::string path = edited_gguf(d, c.arch, c.edit);
    const std::string m = message_of([&] { qkv::models::load_decoder(path); });
    EXPECT_NE(m.find(c.want), std::string::npos) << c.arch << ": " << m;
    EXPECT_NE(m.find(path), std::string::npos) << "names the file: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}


// How chat and serve sample when the user says nothing: the model's advice over llama.cpp's
// defaults (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), from a folder's
// generation_config.json or a GGUF's general.sampling.* keys; do_sample false is greedy; a value
// the sampler refuses names the file.
TEST(ArchDefaults, SamplingAdviceFromGenerationConfigAndGguf) {
  TempDir d;
  const auto none = qkv::infer::load_language_model(arch_path("qwen3"));
  EXPECT_EQ(none.default_sampling.temperature, 0.8);
  EXPECT_EQ(none.default_sampling.top_k, 40);
  EXPECT_EQ(none.default_sampling.top_p, 0.95);
  EXPECT_EQ(none.default_sampling.min_p, 0.05);
  EXPECT_EQ(none.default_sampling.repeat_penalty, 1.0);
  EXPECT_EQ(none.default_sampling_source, "llama.cpp's defaults");
  const std::string dir = edited_folder(d, "qwen3", [](json&) {});
  std::ofstream(dir + "/generation_config.json")
      << R"({"do_sample": true, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "repetition_penalty": 1.1, "bos_token_id": 1})";
  const auto qwen = qkv::infer::load_language_model(dir);
  EXPECT_EQ(qwen.default_sampling.temperature, 0.6);
  EXPECT_EQ(qwen.default_sampling.top_k, 20);
  EXPECT_EQ(qwen.default_sampling.min_p, 0.05);  // not said: llama.cpp's
  EXPECT_EQ(qwen.default_sampling.repeat_penalty, 1.1);
  EXPECT_EQ(qwen.default_sampling_source, "generation_config.json over llama.cpp's defaults");
  std::ofstream(dir + "/generation_config.json") << R"({"do_sample": false, "temperature": 0.6})";
  EXPECT_EQ(qkv::infer::load_language_model(dir).default_sampling.temperature, 0.0);
  std::ofstream(dir + "/generation_config.json") << R"({"top_p": 2})";
  const std::string bad = message_of([&] { qkv::infer::load_language_model(dir); });
  EXPECT_NE(bad.find("generation_config.json: sampling: top_p must be in (0, 1], got 2"), std::string::npos) << bad;
  std::ofstream(dir + "/generation_config.json") << R"({"temperature": "hot"})";
  EXPECT_NE(message_of([&] { qkv::infer::load_language_model(dir); }).find("temperature is not a number"), std::string::npos);
  // GGUF: general.sampling.*, as llama.cpp's converter writes them.
  const std::string g = edited_gguf(d, "qwen3", [](GGUFMetadata& m, auto&) {
    m.emplace_back("general.sampling.temp", GGUFMeta::f32(0.7f));
    m.emplace_back("general.sampling.top_k", GGUFMeta::i32(20));
    m.emplace_back("general.sampling.min_p", GGUFMeta::f32(0.0f));
  });
  const auto gg = qkv::infer::load_language_model(g);
  EXPECT_FLOAT_EQ(static_cast<float>(gg.default_sampling.temperature), 0.7f);
  EXPECT_EQ(gg.default_sampling.top_k, 20);
  EXPECT_EQ(gg.default_sampling.min_p, 0.0);
  EXPECT_EQ(gg.default_sampling.top_p, 0.95);
  EXPECT_EQ(gg.default_sampling_source, "the file's general.sampling over llama.cpp's defaults");
}

}  // namespace
