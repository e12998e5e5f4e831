// fuzz_make_seeds OUT: writes the seed inputs that only the library can make -- checkpoints of
// the three trainers, a token cache, safetensors files of every dtype, model folders with
// weights, tiny decoder models (Llama, Qwen3, Gemma 2, Phi-3 folders; GGUF files with their
// vocabularies), GGUF files of every metadata value type -- into OUT/<target>/ (scripts/fuzz_smoke.sh runs it; nothing here is committed).
// Each seed is small (a few KB): tiny models, a handful of examples. The hand-written seeds
// (configs, vocabularies, merges) are committed in fuzz/corpus/<target>/.
#include <cstring>
#include <cstdio>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lm_world.h"
#include "qkv/core/rng.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensors.h"
#include "qkv/models/bert.h"
#include "qkv/models/decoder_io.h"
#include "qkv/models/gpt2.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/train/classify.h"
#include "qkv/train/lm.h"
#include "qkv/train/seq2seq.h"

using namespace qkv;
namespace fs = std::filesystem;

namespace {

void put(const fs::path& out, const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(out / target);
  std::ofstream(out / target / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  std::printf("  %-16s %-28s %6zu bytes\n", target.c_str(), name.c_str(), bytes.size());
}

void safetensors_seeds(const fuzz::Scratch& s, const fs::path& out) {
  const std::vector<float> f32 = {1, -2, 3.5f, 0, 1e-3f, 7};
  const std::vector<std::int64_t> i64 = {1, -2, 1ll << 40};
  const std::vector<std::uint8_t> b = {0, 1}, u8 = {200};
  const std::vector<std::uint16_t> f16 = {0x3C00, 0xC000}, bf16 = {0x3F80, 0x7F80};
  const std::vector<double> none;
  io::write_safetensors(s.path("mixed.safetensors"),
                        {{"enc.w", io::StDType::F32, {2, 3}, f32.data(), 24},
                         {"ids", io::StDType::I64, {3}, i64.data(), 24},
                         {"half", io::StDType::F16, {2}, f16.data(), 4},
                         {"brain", io::StDType::BF16, {1, 2}, bf16.data(), 4},
                         {"mask", io::StDType::BOOL, {2}, b.data(), 2},
                         {"scalar", io::StDType::U8, {}, u8.data(), 1},
                         {"empty", io::StDType::F64, {0, 4}, none.data(), 0}},
                        {{"format", "pt"}, {"note", "seed"}});
  put(out, "safetensors", "mixed.safetensors", fuzz::read_bytes(s.path("mixed.safetensors")));
  io::write_safetensors(s.path("empty.safetensors"), {});
  put(out, "safetensors", "empty.safetensors", fuzz::read_bytes(s.path("empty.safetensors")));
}

void checkpoint_seeds(const fuzz::Scratch& s, const fs::path& out) {
  {
    train::ClassifyRunOptions o;
    o.model = {.vocab_size = 20, .d_model = 4, .num_heads = 2, .d_ff = 4, .num_layers = 1, .max_len = 8};
    o.epochs = 2;
    o.train_size = 6;
    o.val_size = 4;
    train::ClassifyTrainer t(o);
    t.train();
    t.save(s.path("classifier.safetensors"));
    put(out, "checkpoint", "classifier.safetensors", fuzz::read_bytes(s.path("classifier.safetensors")));
  }
  {
    models::Seq2SeqOptions mo{.d_model = 4, .num_heads = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                              .d_ff = 4, .max_positions = 6};
    train::Seq2SeqTrainOptions o;
    o.data = {.min_len = 1, .max_len = 3, .train_size = 4, .test_size = 2};
    o.epochs = 1;
    o.batch = 2;
    train::Seq2SeqTrainer t(mo, o);
    t.train();
    t.save(s.path("seq2seq.safetensors"));
    put(out, "checkpoint", "seq2seq.safetensors", fuzz::read_bytes(s.path("seq2seq.safetensors")));
  }
  {
    const fuzz::LMWorld world = fuzz::make_lm_world(s);
    models::GPT2Config cfg;
    cfg.vocab_size = world.bpe.vocab_size();
    cfg.n_positions = 8;
    cfg.n_embd = 2;
    cfg.n_layer = 1;
    cfg.n_head = 1;
    train::LMTrainOptions o;
    o.steps = 1;
    o.batch = 1;
    o.context = 4;
    o.warmup = 0;
    o.eval_every = 0;
    o.val_windows = 1;
    train::LMTrainer t(cfg, o, world.tokens, world.bpe);
    t.train();
    t.save(s.path("lm"));
    put(out, "checkpoint", "lm_state.safetensors", fuzz::read_bytes(s.path("lm/") + train::LMTrainer::kStateFile));
    put(out, "checkpoint", "tokens.bin", fuzz::read_bytes(s.path("lm-world/tokens.bin")));
  }
}

void model_folder_seeds(const fuzz::Scratch& s, const fs::path& out) {
  {
    models::GPT2Config cfg;
    cfg.vocab_size = 8;
    cfg.n_positions = 4;
    cfg.n_embd = 2;
    cfg.n_layer = 1;
    cfg.n_head = 1;
    models::GPT2LMHeadModel m(cfg);
    models::init_gpt2_weights(m, 1);
    models::save_gpt2(m, s.path("gpt2"));
    put(out, "model_folder", "gpt2.txt",
        fuzz::make_archive({{"config.json", fuzz::read_bytes(s.path("gpt2/config.json"))},
                            {"model.safetensors", fuzz::read_bytes(s.path("gpt2/model.safetensors"))}}));
  }
  {
    // A sentence-transformers folder around a BERT of width 2 over a 9-token vocabulary.
    const std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n##s\n,\n";
    models::BertConfig c{.vocab_size = 9, .hidden_size = 2, .num_hidden_layers = 1, .num_attention_heads = 1,
                         .intermediate_size = 2, .max_position_embeddings = 8, .type_vocab_size = 2};
    manual_seed(3);
    models::BertModel m(c);
    std::vector<std::pair<std::string, Tensor>> t;
    for (const auto& [name, x] : m.state_dict()) t.emplace_back(name, x);
    io::save_safetensors(s.path("bert.safetensors"), t);
    const std::string config =
        R"({"model_type": "bert", "vocab_size": 9, "hidden_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1,)"
        R"( "intermediate_size": 2, "max_position_embeddings": 8, "type_vocab_size": 2, "hidden_act": "gelu",)"
        R"( "layer_norm_eps": 1e-12, "pad_token_id": 0, "position_embedding_type": "absolute"})";
    put(out, "model_folder", "sentence_bert.txt",
        fuzz::make_archive({{"config.json", config},
                            {"model.safetensors", fuzz::read_bytes(s.path("bert.safetensors"))},
                            {"vocab.txt", vocab},
                            {"tokenizer_config.json", R"({"do_lower_case": true, "model_max_length": 8})"},
                            {"modules.json",
                             R"([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},)"
                             R"( {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},)"
                             R"( {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}])"},
                            {"1_Pooling/config.json",
                             R"({"word_embedding_dimension": 2, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true})"}}));
  }
}

// A llama-like GGUF file (every value type, string and nested arrays, block types) with the
// default alignment and with general.alignment 64, and one with metadata only.
void gguf_seeds(const fuzz::Scratch& s, const fs::path& out) {
  using M = io::GGUFMeta;
  using T = io::GGUFType;
  using Q = kernels::QType;
  io::GGUFMetadata meta = {
      {"general.architecture", M::string("llama")},
      {"llama.block_count", M::u32(1)},
      {"llama.rope.freq_base", M::f32(10000.0f)},
      {"llama.attention.layer_norm_rms_epsilon", M::f64(1e-5)},
      {"s.u8", M::u8(7)}, {"s.i8", M::i8(-7)}, {"s.u16", M::u16(700)}, {"s.i16", M::i16(-700)},
      {"s.i32", M::i32(-70000)}, {"s.u64", M::u64(1ull << 40)}, {"s.i64", M::i64(-(1ll << 40))},
      {"tokenizer.ggml.add_bos_token", M::boolean(true)},
      {"tokenizer.ggml.tokens", M::string_array({"<s>", "a", "b", "\u0120ab"})},
      {"tokenizer.ggml.token_type", M::int_array(T::I32, {3, 1, 1, 1})},
      {"tokenizer.ggml.merges", M::string_array({"a b"})},
      {"tokenizer.chat_template", M::string("{% for m in messages %}{{ m['content'] }}{% endfor %}")},
      {"nested", M::array_of_arrays({M::int_array(T::U16, {1, 2}), M::int_array(T::U16, {})})},
  };
  std::vector<std::uint8_t> q8(2 * 34, 1), q41(20, 2), f32(16, 0);
  const std::vector<io::GGUFTensorData> tensors = {{"token_embd.weight", Q::Q8_0, {32, 2}, q8.data(), q8.size()},
                                                   {"blk.0.attn_q.weight", Q::Q4_1, {32, 1}, q41.data(), q41.size()},
                                                   {"output_norm.weight", Q::F32, {4}, f32.data(), f32.size()}};
  io::write_gguf(s.path("llama.gguf"), meta, tensors);
  put(out, "gguf", "llama.gguf", fuzz::read_bytes(s.path("llama.gguf")));
  meta.emplace_back("general.alignment", M::u32(64));
  io::write_gguf(s.path("align64.gguf"), meta, tensors);
  put(out, "gguf", "align64.gguf", fuzz::read_bytes(s.path("align64.gguf")));
  io::write_gguf(s.path("metadata_only.gguf"), {{"general.name", M::string("vocab only")}}, {});
  put(out, "gguf", "metadata_only.gguf", fuzz::read_bytes(s.path("metadata_only.gguf")));
}

// The tensors of a seed GGUF: float tensors of small values, Q8_0 blocks with scale 1/64 (fp16
// 0x2400) and small integers, MXFP4 blocks with exponent 124 (scale 2^-4) and every code.
struct SeedTensors {
  std::vector<std::vector<std::uint8_t>> keep;
  std::vector<io::GGUFTensorData> t;
  SeedTensors() { keep.reserve(64); }  // (the pointers stay valid)
  static std::size_t count(const std::vector<std::int64_t>& dims) {
    std::size_t n = 1;
    for (std::int64_t d : dims) n *= static_cast<std::size_t>(d);
    return n;
  }
  void f32(const char* name, std::vector<std::int64_t> dims) {
    const std::size_t n = count(dims);
    keep.emplace_back(n * sizeof(float));
    for (std::size_t i = 0; i < n; ++i) {
      const float v = 0.05f * static_cast<float>(static_cast<int>(i * 7 % 11) - 5);
      std::memcpy(keep.back().data() + i * sizeof(float), &v, sizeof(float));
    }
    t.push_back({name, kernels::QType::F32, dims, keep.back().data(), n * sizeof(float)});
  }
  void q8_0(const char* name, std::vector<std::int64_t> dims) {
    const std::size_t blocks = count(dims) / 32;
    keep.emplace_back(blocks * 34);
    for (std::size_t b = 0; b < blocks; ++b) {
      std::uint8_t* p = keep.back().data() + b * 34;
      p[0] = 0x00, p[1] = 0x24;
      for (int j = 0; j < 32; ++j) p[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>((b * 5 + j * 3) % 9 - 4));
    }
    t.push_back({name, kernels::QType::Q8_0, dims, keep.back().data(), blocks * 34});
  }
  void mxfp4(const char* name, std::vector<std::int64_t> dims) {
    const std::size_t blocks = count(dims) / 32;
    keep.emplace_back(blocks * 17);
    for (std::size_t b = 0; b < blocks; ++b) {
      std::uint8_t* p = keep.back().data() + b * 17;
      p[0] = 124;
      for (int j = 0; j < 16; ++j) p[1 + j] = static_cast<std::uint8_t>((b + j) % 16 | (b * 3 + j) % 16 << 4);
    }
    t.push_back({name, kernels::QType::MXFP4, dims, keep.back().data(), blocks * 17});
  }
};

// The keys every seed decoder of width 32 (2 heads of 16 on 1) has, under `arch`.
io::GGUFMetadata seed_decoder_keys(const std::string& arch) {
  using M = io::GGUFMeta;
  const std::string a = arch + ".";
  return {
      {"general.architecture", M::string(arch)},
      {a + "block_count", M::u32(1)},
      {a + "context_length", M::u32(64)},
      {a + "embedding_length", M::u32(32)},
      {a + "feed_forward_length", M::u32(64)},
      {a + "attention.head_count", M::u32(2)},
      {a + "attention.head_count_kv", M::u32(1)},
      {a + "attention.key_length", M::u32(16)},
      {a + "attention.value_length", M::u32(16)},
      {a + "attention.layer_norm_rms_epsilon", M::f32(1e-6f)},
      {a + "rope.freq_base", M::f32(1e6f)},
      {a + "expert_count", M::u32(2)},
      {a + "expert_used_count", M::u32(1)},
      {a + "expert_feed_forward_length", M::u32(32)},
      {"tokenizer.ggml.model", M::string("gpt2")},
      {"tokenizer.ggml.pre", M::string("qwen2")},
      {"tokenizer.ggml.tokens", M::string_array({"a", "b", "\u0120", "ab"})},
      {"tokenizer.ggml.token_type", M::int_array(io::GGUFType::I32, {1, 1, 1, 1})},
      {"tokenizer.ggml.merges", M::string_array({"a b"})},
  };
}

// Writes the seed, checks that it loads, and puts it in the gguf corpus as `name`.
void put_decoder_seed(const fuzz::Scratch& s, const fs::path& out, const std::string& name,
                      const io::GGUFMetadata& meta, const SeedTensors& t) {
  const std::string path = s.path(name);
  io::write_gguf(path, meta, t.t);
  models::load_decoder(path);  // the seed loads
  put(out, "gguf", "decoder_" + name, fuzz::read_bytes(path));
}

// Mixtures of experts: Qwen3-MoE (router, 3-D Q8_0 experts) and gpt-oss (attention sinks, biases
// on every projection, a router with a bias, MXFP4 experts with biases, a sliding window).
void moe_gguf_seeds(const fuzz::Scratch& s, const fs::path& out) {
  {
    SeedTensors t;
    t.f32("token_embd.weight", {32, 4});
    t.f32("blk.0.attn_norm.weight", {32});
    t.q8_0("blk.0.attn_q.weight", {32, 32});
    t.q8_0("blk.0.attn_k.weight", {32, 16});
    t.q8_0("blk.0.attn_v.weight", {32, 16});
    t.q8_0("blk.0.attn_output.weight", {32, 32});
    t.f32("blk.0.attn_q_norm.weight", {16});
    t.f32("blk.0.attn_k_norm.weight", {16});
    t.f32("blk.0.ffn_norm.weight", {32});
    t.f32("blk.0.ffn_gate_inp.weight", {32, 2});
    t.q8_0("blk.0.ffn_gate_exps.weight", {32, 32, 2});
    t.q8_0("blk.0.ffn_up_exps.weight", {32, 32, 2});
    t.q8_0("blk.0.ffn_down_exps.weight", {32, 32, 2});
    t.f32("output_norm.weight", {32});
    put_decoder_seed(s, out, "qwen3moe.gguf", seed_decoder_keys("qwen3moe"), t);
  }
  SeedTensors t;
  t.q8_0("token_embd.weight", {32, 4});
  t.f32("blk.0.attn_norm.weight", {32});
  t.q8_0("blk.0.attn_q.weight", {32, 32});
  t.q8_0("blk.0.attn_k.weight", {32, 16});
  t.q8_0("blk.0.attn_v.weight", {32, 16});
  t.q8_0("blk.0.attn_output.weight", {32, 32});
  t.f32("blk.0.attn_q.bias", {32});
  t.f32("blk.0.attn_k.bias", {16});
  t.f32("blk.0.attn_v.bias", {16});
  t.f32("blk.0.attn_output.bias", {32});
  t.f32("blk.0.attn_sinks.weight", {2});
  t.f32("blk.0.post_attention_norm.weight", {32});
  t.f32("blk.0.ffn_gate_inp.weight", {32, 2});
  t.f32("blk.0.ffn_gate_inp.bias", {2});
  t.mxfp4("blk.0.ffn_gate_exps.weight", {32, 32, 2});
  t.mxfp4("blk.0.ffn_up_exps.weight", {32, 32, 2});
  t.mxfp4("blk.0.ffn_down_exps.weight", {32, 32, 2});
  t.f32("blk.0.ffn_gate_exps.bias", {32, 2});
  t.f32("blk.0.ffn_up_exps.bias", {32, 2});
  t.f32("blk.0.ffn_down_exps.bias", {32, 2});
  t.f32("output_norm.weight", {32});
  t.q8_0("output.weight", {32, 4});
  io::GGUFMetadata meta = seed_decoder_keys("gpt-oss");
  meta.emplace_back("gpt-oss.attention.sliding_window", io::GGUFMeta::u32(4));
  put_decoder_seed(s, out, "gpt_oss.gguf", meta, t);
}

// Qwen3.5: a Gated DeltaNet layer (2 key and 4 value heads of 8, a convolution of 4; ssm_* keys and
// tensors) and a gated full-attention layer (q rows twice H x D), tied embeddings.
void hybrid_gguf_seeds(const fuzz::Scratch& s, const fs::path& out) {
  SeedTensors t;
  t.q8_0("token_embd.weight", {32, 4});
  for (const char* l : {"blk.0.", "blk.1."}) {
    const std::string p(l);
    t.f32((p + "attn_norm.weight").c_str(), {32});
    t.f32((p + "post_attention_norm.weight").c_str(), {32});
    t.q8_0((p + "ffn_gate.weight").c_str(), {32, 64});
    t.q8_0((p + "ffn_up.weight").c_str(), {32, 64});
    t.q8_0((p + "ffn_down.weight").c_str(), {64, 32});
  }
  t.q8_0("blk.0.attn_qkv.weight", {32, 64});
  t.q8_0("blk.0.attn_gate.weight", {32, 32});
  t.q8_0("blk.0.ssm_beta.weight", {32, 4});
  t.q8_0("blk.0.ssm_alpha.weight", {32, 4});
  t.f32("blk.0.ssm_conv1d.weight", {4, 64});
  t.f32("blk.0.ssm_a", {4});
  t.f32("blk.0.ssm_dt.bias", {4});
  t.f32("blk.0.ssm_norm.weight", {8});
  t.q8_0("blk.0.ssm_out.weight", {32, 32});
  t.q8_0("blk.1.attn_q.weight", {32, 64});
  t.q8_0("blk.1.attn_k.weight", {32, 16});
  t.q8_0("blk.1.attn_v.weight", {32, 16});
  t.q8_0("blk.1.attn_output.weight", {32, 32});
  t.f32("blk.1.attn_q_norm.weight", {16});
  t.f32("blk.1.attn_k_norm.weight", {16});
  t.f32("output_norm.weight", {32});
  using M = io::GGUFMeta;
  io::GGUFMetadata meta;
  for (auto& kv : seed_decoder_keys("qwen35"))
    if (kv.first.find("expert") == std::string::npos) meta.push_back(kv);
  for (auto& kv : meta)
    if (kv.first == "qwen35.block_count") kv.second = M::u32(2);
  meta.emplace_back("qwen35.rope.dimension_count", M::u32(4));
  meta.emplace_back("qwen35.ssm.conv_kernel", M::u32(4));
  meta.emplace_back("qwen35.ssm.state_size", M::u32(8));
  meta.emplace_back("qwen35.ssm.group_count", M::u32(2));
  meta.emplace_back("qwen35.ssm.time_step_rank", M::u32(4));
  meta.emplace_back("qwen35.ssm.inner_size", M::u32(32));
  meta.emplace_back("qwen35.attention.recurrent_layers", M::int_array(io::GGUFType::BOOL, {1, 0}));
  put_decoder_seed(s, out, "qwen35.gguf", meta, t);
}

// A tiny decoder: V tokens, width C, FFN F, H heads of D, KV key/value heads, L layers.
struct TinyDecoder {
  std::string arch;  // llama, qwen3, gemma2, phi3
  std::int64_t V = 8, C = 4, F = 8, H = 1, KV = 1, D = 4, L = 1;
  bool tied = false;
};

std::string decoder_config(const TinyDecoder& d) {
  auto n = [](std::int64_t v) { return std::to_string(v); };
  std::string c = "{\"model_type\": \"" + d.arch + "\", \"vocab_size\": " + n(d.V) + ", \"hidden_size\": " + n(d.C) +
                  ", \"intermediate_size\": " + n(d.F) + ", \"num_hidden_layers\": " + n(d.L) +
                  ", \"num_attention_heads\": " + n(d.H) + ", \"num_key_value_heads\": " + n(d.KV) +
                  ", \"head_dim\": " + n(d.D) + ", \"max_position_embeddings\": 16, \"rms_norm_eps\": 1e-06" +
                  ", \"tie_word_embeddings\": " + (d.tied ? "true" : "false") + ", \"bos_token_id\": 1, \"eos_token_id\": 2";
  if (d.arch == "gemma2")
    c += ", \"hidden_activation\": \"gelu_pytorch_tanh\", \"query_pre_attn_scalar\": 4, \"attn_logit_softcapping\": 50.0"
         ", \"final_logit_softcapping\": 30.0, \"sliding_window\": 2, \"layer_types\": [\"sliding_attention\"]";
  if (d.arch == "qwen3") c += ", \"use_sliding_window\": false, \"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}";
  if (d.arch == "phi3")
    c += ", \"sliding_window\": 4, \"rope_parameters\": {\"rope_type\": \"longrope\", \"rope_theta\": 10000.0"
         ", \"partial_rotary_factor\": 0.5, \"original_max_position_embeddings\": 8, \"short_factor\": [1.0]"
         ", \"long_factor\": [2.0]}";
  if (d.arch == "llama") c += ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"original_max_position_embeddings\": 8}";
  return c + "}";
}

// The Hugging Face tensor names and shapes of a tiny decoder.
std::vector<std::pair<std::string, Shape>> decoder_tensors(const TinyDecoder& d) {
  std::vector<std::pair<std::string, Shape>> t = {{"model.embed_tokens.weight", {d.V, d.C}}, {"model.norm.weight", {d.C}}};
  if (!d.tied) t.push_back({"lm_head.weight", {d.V, d.C}});
  for (std::int64_t l = 0; l < d.L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back({p + "input_layernorm.weight", {d.C}});
    t.push_back({p + "post_attention_layernorm.weight", {d.C}});
    t.push_back({p + "self_attn.o_proj.weight", {d.C, d.H * d.D}});
    t.push_back({p + "mlp.down_proj.weight", {d.C, d.F}});
    if (d.arch == "phi3") {
      t.push_back({p + "self_attn.qkv_proj.weight", {(d.H + 2 * d.KV) * d.D, d.C}});
      t.push_back({p + "mlp.gate_up_proj.weight", {2 * d.F, d.C}});
      continue;
    }
    t.push_back({p + "self_attn.q_proj.weight", {d.H * d.D, d.C}});
    t.push_back({p + "self_attn.k_proj.weight", {d.KV * d.D, d.C}});
    t.push_back({p + "self_attn.v_proj.weight", {d.KV * d.D, d.C}});
    t.push_back({p + "mlp.gate_proj.weight", {d.F, d.C}});
    t.push_back({p + "mlp.up_proj.weight", {d.F, d.C}});
    if (d.arch == "qwen3") {
      t.push_back({p + "self_attn.q_norm.weight", {d.D}});
      t.push_back({p + "self_attn.k_norm.weight", {d.D}});
    }
    if (d.arch == "gemma2") {
      t.push_back({p + "pre_feedforward_layernorm.weight", {d.C}});
      t.push_back({p + "post_feedforward_layernorm.weight", {d.C}});
    }
  }
  return t;
}

// Writes the decoder's folder (config.json + model.safetensors of small F32 values) under
// s/<name>/, checks that load_decoder takes it, and returns the model.
std::shared_ptr<models::DecoderLM> write_decoder_folder(const fuzz::Scratch& s, const std::string& name,
                                                        const TinyDecoder& d) {
  const std::vector<std::pair<std::string, Shape>> tensors = decoder_tensors(d);
  std::vector<std::vector<float>> values;
  std::vector<io::StTensorView> views;
  std::uint32_t seed = 1;
  for (const auto& [tname, shape] : tensors) {
    std::int64_t n = 1;
    for (std::int64_t x : shape) n *= x;
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& x : v) {
      seed = seed * 1664525u + 1013904223u;
      x = static_cast<float>(static_cast<int>(seed >> 24) - 128) / 256.f;  // in [-0.5, 0.5), exact in F32
    }
    values.push_back(std::move(v));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    views.push_back({tensors[i].first, io::StDType::F32, tensors[i].second, values[i].data(), values[i].size() * 4});
  s.write(name + "/config.json", decoder_config(d));
  io::write_safetensors(s.path(name + "/model.safetensors"), views);
  return models::load_decoder(s.path(name));
}

// Tiny decoder folders (model_folder) and GGUF files with a vocabulary (gguf).
void decoder_seeds(const fuzz::Scratch& s, const fs::path& out) {
  // A SentencePiece ("llama") vocabulary and a byte-level BPE ("gpt2") one of 8 tokens.
  tokenize::GgufVocab spm;
  spm.model = "llama";
  spm.tokens = {"<unk>", "<s>", "</s>", "\u2581", "a", "b", "\u2581a", "<0x41>"};
  spm.token_types = {2, 3, 3, 1, 1, 1, 1, 6};
  spm.scores = {0.f, 0.f, 0.f, -1.f, -2.f, -3.f, -1.5f, 0.f};
  spm.bos_id = 1, spm.eos_id = 2, spm.unk_id = 0;
  spm.add_bos = true;
  spm.add_space_prefix = true;
  tokenize::GgufVocab bpe;
  bpe.model = "gpt2";
  bpe.pre = "gpt-2";
  bpe.tokens = {"a", "b", "\u0120", "ab", "\u0120a", "<|endoftext|>", "c", "\u0120ab"};
  bpe.merges = std::vector<std::string>{"a b", "\u0120 a", "\u0120a b"};
  bpe.token_types = {1, 1, 1, 1, 1, 3, 1, 1};
  bpe.bos_id = 5, bpe.eos_id = 5;
  struct Seed {
    std::string name;
    TinyDecoder d;
    const tokenize::GgufVocab* vocab;
    std::optional<kernels::QType> type;
  };
  const std::vector<Seed> seeds = {
      {"llama", {.arch = "llama"}, &spm, std::nullopt},
      {"qwen3", {.arch = "qwen3", .H = 2, .D = 2, .tied = true}, &bpe, std::nullopt},
      {"gemma2", {.arch = "gemma2", .H = 2, .KV = 2, .D = 2, .tied = true}, &spm, std::nullopt},
      {"phi3", {.arch = "phi3", .H = 2, .D = 4, .tied = true}, &bpe, std::nullopt},
      // Rows of 32 values: the weight matrices as Q4_0 blocks.
      {"llama_q4_0", {.arch = "llama", .C = 32, .F = 32, .H = 2, .D = 16, .tied = true}, &spm, kernels::QType::Q4_0},
  };
  for (const Seed& sd : seeds) {
    const auto m = write_decoder_folder(s, sd.name, sd.d);
    if (!sd.type)
      put(out, "model_folder", "decoder_" + sd.name + ".txt",
          fuzz::make_archive({{"config.json", fuzz::read_bytes(s.path(sd.name + "/config.json"))},
                              {"model.safetensors", fuzz::read_bytes(s.path(sd.name + "/model.safetensors"))}}));
    const std::string gguf = s.path(sd.name + ".gguf");
    models::GgufQuant quant;
    if (sd.type) quant = {.ftype = models::llama_ftype_of_type(*sd.type), .pure = true};
    models::save_decoder_gguf(*m, gguf, quant, tokenize::gguf_tokenizer_metadata(*sd.vocab, ""), "seed " + sd.name);
    models::load_decoder(gguf);  // the seed loads
    put(out, "gguf", "decoder_" + sd.name + ".gguf", fuzz::read_bytes(gguf));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUT_DIR\n");
    return 2;
  }
  const fs::path out = argv[1];
  const fuzz::Scratch scratch;
  try {
    safetensors_seeds(scratch, out);
    checkpoint_seeds(scratch, out);
    model_folder_seeds(scratch, out);
    gguf_seeds(scratch, out);
    moe_gguf_seeds(scratch, out);
    hybrid_gguf_seeds(scratch, out);
    decoder_seeds(scratch, out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
