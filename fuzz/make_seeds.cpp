// fuzz_make_seeds OUT: writes the seed inputs that only the library can make -- checkpoints of
// the three trainers, a token cache, safetensors files of every dtype, model folders with
// weights, GGUF files of every metadata value type -- into OUT/<target>/ (scripts/fuzz_smoke.sh runs it; nothing here is committed).
// Each seed is small (a few KB): tiny models, a handful of examples. The hand-written seeds
// (configs, vocabularies, merges) are committed in fuzz/corpus/<target>/.
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
#include "qkv/models/gpt2.h"
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
