// Bugs found by fuzzing the parsers (fuzz/) or by reading them for it, one test each: every
// hostile input now gives a qkv::Error naming the file and the field, never a crash, undefined
// behaviour, a foreign exception (nlohmann::json::type_error, std::filesystem_error) or an
// allocation sized by the input. The inputs that crashed a fuzzer are also replayed as they were
// found by FuzzReplay.* (fuzz/regressions/).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "infer/gpt2_test_util.h"
#include "qkv/core/error.h"
#include "qkv/infer/embed.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/io/tensors.h"
#include "qkv/models/classifier.h"
#include "qkv/models/decoder_io.h"
#include "qkv/models/gpt2.h"
#include "qkv/optim/optimizer.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/tokenize/tokenizer.h"
#include "qkv/train/seq2seq.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& stem)
      : path(fs::temp_directory_path() / ("qkv_fuzzreg_" + stem + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& rel = "") const { return rel.empty() ? path.string() : (path / rel).string(); }
};

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the E that f throws (fails the test if it throws anything else or nothing).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// Found by reading for the fuzzers: classifier_config_from_json took "dtype" with
// get<std::string>() unchecked, so {"dtype": 3} escaped as nlohmann::json::type_error.
TEST(FuzzRegression, ClassifierConfigWithANonStringDtypeIsAValueError) {
  for (const char* dtype : {"3", "null", "[\"float32\"]", "{}"}) {
    const std::string msg =
        error_of<ValueError>([&] { models::classifier_config_from_json(std::string("{\"dtype\": ") + dtype + "}"); });
    EXPECT_NE(msg.find("classifier config: dtype must be \"float32\" or \"float64\", got " + std::string(dtype)),
              std::string::npos)
        << msg;
  }
}

// The size message of check_classifier_config_fits cast a double count to long long: a config of
// vocab_size 2^62 made it undefined behaviour (UBSan: float-cast-overflow; "-9223372036854775808"
// on x86).
TEST(FuzzRegression, AnAstronomicalClassifierConfigIsNamedWithoutAnOverflowingCast) {
  models::ClassifierOptions o;
  o.vocab_size = std::int64_t{1} << 62;
  o.d_model = std::int64_t{1} << 20;
  o.num_heads = 1;
  nn::StateDict small = {{"embedding.weight", Tensor::zeros({4, 4})}};
  const std::string msg = error_of<ValueError>([&] { models::check_classifier_config_fits(o, small); });
  EXPECT_NE(msg.find("describes a model of at least 4.84e+24 parameters, but the checkpoint's tensors hold only 16 values"),
            std::string::npos)
      << msg;
  o.vocab_size = 4;
  o.d_model = 4;
  o.num_layers = 0;
  o.max_len = std::int64_t{1} << 61;
  const nn::StateDict fits = {{"embedding.weight", Tensor::zeros({8, 4})}};  // 32 values >= the 24 needed
  const std::string pe = error_of<ValueError>([&] { models::check_classifier_config_fits(o, fits); });
  EXPECT_NE(pe.find("asks for a positional table of 2305843009213693952 x 4, far larger than its model (32 values)"),
            std::string::npos)
      << pe;
  EXPECT_EQ(pe.find("-9223372036854775808"), std::string::npos) << pe;
}

// GPT-2 config.json with n_embd 2^62: GPT2Config::d_ff() (4 * n_embd) and the c_attn shape
// (3 * n_embd) overflowed int64 -- undefined behaviour before any memory check. Widths are now
// bounded by kGpt2MaxWidth (2^24) in the reader and in the model's constructor.
TEST(FuzzRegression, Gpt2WidthsThatWouldOverflowAreRefused) {
  const std::string base = R"({"model_type": "gpt2", "vocab_size": 8, "n_positions": 4, "n_layer": 1, "n_head": 1, )";
  std::string msg = error_of<FormatError>(
      [&] { models::gpt2_config_from_json(base + R"("n_embd": 4611686018427387904})", "dir/config.json"); });
  EXPECT_NE(msg.find("dir/config.json: field 'n_embd' is 4611686018427387904, more than qkv supports (16777216)"),
            std::string::npos)
      << msg;
  msg = error_of<FormatError>(
      [&] { models::gpt2_config_from_json(base + R"("n_embd": 4, "n_inner": 1099511627776})", "dir/config.json"); });
  EXPECT_NE(msg.find("field 'n_inner' is 1099511627776"), std::string::npos) << msg;
  models::GPT2Config c = models::gpt2_config_from_json(base + R"("n_embd": 4})", "x");
  c.n_embd = std::int64_t{1} << 62;
  msg = error_of<ValueError>([&] { models::GPT2LMHeadModel m(c); });
  EXPECT_NE(msg.find("n_embd 4611686018427387904 or n_inner 0 is more than qkv supports"), std::string::npos) << msg;
}

// A GPT-2 folder whose config.json asks for a model far larger than its model.safetensors (but
// within the machine's memory): load_gpt2 built the whole model -- gigabytes -- before matching
// the tensors. It is now refused first, naming both files; nothing large is allocated.
TEST(FuzzRegression, Gpt2ConfigFarLargerThanItsWeightsIsRefusedBeforeBuilding) {
  TempDir d("gpt2_big");
  auto m = testing::tiny_gpt2(1);
  models::save_gpt2(*m, d.str());
  models::GPT2Config c = m->config();
  c.n_embd = 1024;
  c.n_head = 16;
  c.n_layer = 24;  // ~300 M parameters (1.2 GB) over a file of a few thousand values
  io::write_file_atomic(d.str("config.json"), models::gpt2_config_to_json(c), "test");
  const std::string msg = error_of<FormatError>([&] { models::load_gpt2(d.str()); });
  EXPECT_NE(msg.find(d.str("config.json") + " describes a model of at least"), std::string::npos) << msg;
  EXPECT_NE(msg.find("far more than the"), std::string::npos) << msg;
  EXPECT_NE(msg.find("values of " + d.str("model.safetensors")), std::string::npos) << msg;
}

// modules.json naming a pooling folder whose path the file system refuses (a component longer
// than NAME_MAX): std::filesystem::exists threw std::filesystem_error out of read_pooling_config.
TEST(FuzzRegression, APoolingPathTheFileSystemRefusesIsAnIOError) {
  TempDir d("pooling_path");
  const std::string long_name(300, 'p');
  write(d.str("modules.json"),
        R"([{"type": "sentence_transformers.models.Pooling", "path": ")" + long_name + R"("}])");
  const std::string msg = error_of<IOError>([&] { infer::read_pooling_config(d.str()); });
  EXPECT_NE(msg.find("sentence embedder: cannot read " + d.str(long_name + "/config.json")), std::string::npos) << msg;
  EXPECT_NE(msg.find("named by " + d.str("modules.json")), std::string::npos) << msg;
}

// A seq2seq checkpoint whose train_config holds counts that overflow when a run multiplies them:
// max_len + 1 (max_len = 2^63 - 1) and steps per epoch x epochs -- signed overflow (undefined
// behaviour) in the resume path before. Now a FormatError naming the file.
TEST(FuzzRegression, Seq2SeqTrainConfigCountsThatOverflowAreRefused) {
  TempDir d("seq2seq_counts");
  const std::string path = d.str("run.safetensors");
  {
    models::Seq2SeqOptions mo{.d_model = 4, .num_heads = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                              .d_ff = 4, .max_positions = 6};
    train::Seq2SeqTrainOptions o;
    o.data = {.min_len = 1, .max_len = 3, .train_size = 4, .test_size = 2};
    o.epochs = 1;
    o.batch = 2;
    train::Seq2SeqTrainer t(mo, o);
    t.train();
    t.save(path);
  }
  auto with_train_config = [&](const std::string& key, std::int64_t value) {
    io::LoadedTensors f = io::load_safetensors(path);
    nlohmann::json j = nlohmann::json::parse(f.metadata.at("train_config"));
    j[key] = value;
    f.metadata["train_config"] = j.dump();
    f.metadata["checksum"] = io::checkpoint_checksum(f.metadata, f.tensors);  // valid, only hostile
    const std::string out = d.str(key + ".safetensors");
    io::save_safetensors(out, f.tensors, f.metadata);
    return out;
  };
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
  const std::string epochs = with_train_config("epochs", huge);
  std::string msg = error_of<FormatError>([&] { train::Seq2SeqTrainer t(io::load_checkpoint(epochs), epochs); });
  EXPECT_NE(msg.find("epochs 9223372036854775807 x 2 steps per epoch overflows a 64-bit step count"), std::string::npos)
      << msg;
  const std::string max_len = with_train_config("max_len", huge);
  msg = error_of<FormatError>([&] { train::Seq2SeqTrainer t(io::load_checkpoint(max_len), max_len); });
  EXPECT_NE(msg.find("max_len 9223372036854775807 needs max_len + 1 positions, more than the model's max_positions 6"),
            std::string::npos)
      << msg;
  // The untouched checkpoint still resumes.
  EXPECT_NO_THROW(train::Seq2SeqTrainer t(io::load_checkpoint(path), path));
}

// Found by fuzz_bpe (fuzz/regressions/bpe/vocab_number_beyond_double): a number beyond the double
// range in vocab.json ("21e308") makes nlohmann's parser throw out_of_range, not parse_error;
// read_vocab caught parse_error only, so it escaped as nlohmann::json::out_of_range. The GPT-2
// config reader had the same catch.
TEST(FuzzRegression, AJsonNumberBeyondDoubleIsAFormatError) {
  TempDir d("json_number");
  write(d.str("vocab.json"), R"({"a": 0, "b": 21e308})");
  write(d.str("merges.txt"), "#version: 0.2\n");
  std::string msg = error_of<FormatError>([&] { tokenize::ByteLevelBPE::load(d.str("vocab.json"), d.str("merges.txt")); });
  EXPECT_NE(msg.find("vocab.json '" + d.str("vocab.json") + "': not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find("number overflow parsing '21e308'"), std::string::npos) << msg;
  msg = error_of<FormatError>([&] { models::gpt2_config_from_json(R"({"vocab_size": 1e400})", "dir/config.json"); });
  EXPECT_NE(msg.find("dir/config.json: not valid JSON"), std::string::npos) << msg;
}

// Found by fuzz_checkpoint (fuzz/regressions/checkpoint/optimizer_step_beyond_int64): an LM
// training state whose optimizer 'step' tensor holds 5.4e138 was cast to int64 -- undefined
// behaviour (UBSan: float-cast-overflow) in Optimizer::load_state. The step must now be a whole
// number in [0, 2^53] and lr a finite number >= 0, else a ValueError; nothing is changed.
TEST(FuzzRegression, OptimizerStateWithAnImpossibleStepIsAValueError) {
  Tensor w = Tensor::zeros({2});
  optim::Adam opt(optim::NamedParams{{"w", w}}, {.lr = 0.5});
  for (double step : {5.44859e138, -1.0, 1.5, std::numeric_limits<double>::quiet_NaN(),
                      std::numeric_limits<double>::infinity()}) {
    const std::string msg = error_of<ValueError>(
        [&] { opt.load_state({{"step", Tensor::scalar(step, DType::F64)}, {"lr", Tensor::scalar(0.1, DType::F64)}}); });
    EXPECT_NE(msg.find("Adam.load_state: 'step' must be a whole number of steps >= 0, got"), std::string::npos) << msg;
  }
  const std::string msg = error_of<ValueError>([&] {
    opt.load_state({{"step", Tensor::scalar(3.0, DType::F64)}, {"lr", Tensor::scalar(-2.0, DType::F64)}});
  });
  EXPECT_NE(msg.find("Adam.load_state: 'lr' must be a finite number >= 0, got -2"), std::string::npos) << msg;
  EXPECT_EQ(opt.steps(), 0);  // nothing changed
  EXPECT_EQ(opt.lr(), 0.5);
  opt.load_state({{"step", Tensor::scalar(7.0, DType::F64)}, {"lr", Tensor::scalar(0.25, DType::F64)}});
  EXPECT_EQ(opt.steps(), 7);
  EXPECT_EQ(opt.lr(), 0.25);
}

// Found by fuzz_gguf in CI (fuzz/regressions/gguf/empty_tensor_past_the_end): one tensor of no
// elements at data offset 0 in a file that ends right after its tensor infos, before the padding
// to the data section. The reader accepted it, and the tensor's data pointer lay past the end of
// the file. A file with tensors must now reach its data section.
TEST(FuzzRegression, AnEmptyTensorInAFileCutBeforeItsDataSectionIsAFormatError) {
  const fs::path p = fs::path(QKV_SOURCE_DIR) / "fuzz/regressions/gguf/empty_tensor_past_the_end";
  std::ifstream in(p, std::ios::binary);
  ASSERT_TRUE(in) << p;
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string msg = error_of<FormatError>([&] { io::GGUFFile::parse(bytes, "cut.gguf"); });
  EXPECT_NE(msg.find("cut.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("the data section begins at byte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("but the file ends at byte " + std::to_string(bytes.size())), std::string::npos) << msg;
}

// Found by fuzz_gguf (fuzz/regressions/gguf/tensor_bytes_wrap_past_u64): 2^62 + 1 F32 elements fit
// in int64, but their bytes (x 4) wrapped past 2^64 to 4: the tensor was accepted with 4 bytes of
// data. Now a FormatError naming the tensor. And (empty_tensor_numel_overflow) an empty tensor
// with huge other dims: numel() multiplied them (signed overflow) before reaching the 0.
TEST(FuzzRegression, TensorBytesBeyondInt64AreAFormatErrorAndEmptyTensorsHaveNoElements) {
  auto bytes_of = [](const char* name) {
    const fs::path p = fs::path(QKV_SOURCE_DIR) / "fuzz/regressions/gguf" / name;
    std::ifstream in(p, std::ios::binary);
    EXPECT_TRUE(in) << p;
    return std::vector<std::uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string msg = error_of<FormatError>([&] { io::GGUFFile::parse(bytes_of("tensor_bytes_wrap_past_u64"), "w.gguf"); });
  EXPECT_NE(msg.find("w.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("take more bytes than fit in int64"), std::string::npos) << msg;
  try {
    const io::GGUFFile f = io::GGUFFile::parse(bytes_of("empty_tensor_numel_overflow"), "e.gguf");
    for (const io::GGUFTensorInfo& t : f.tensors()) {
      EXPECT_EQ(t.numel(), 0) << t.name;
      EXPECT_EQ(t.nbytes, 0u) << t.name;
    }
  } catch (const Error& e) {  // refused for another defect is fine; no undefined behaviour either way
    SUCCEED() << e.what();
  }
}

// Found by fuzz_gguf (fuzz/regressions/gguf/stream_decoder_strips_every_leading_space; the same in
// fuzz/regressions/tokenizer/): a SentencePiece vocabulary's StreamDecoder dropped the space of
// every leading token of just "\u2581" (the first space was dropped, nothing came out, so the next
// one counted as the first again), where decode() drops one: "  a" streamed as "a".
TEST(FuzzRegression, AStreamDecoderDropsOneLeadingSpaceAsDecodeDoes) {
  tokenize::GgufVocab v;
  v.model = "llama";
  v.tokens = {"\u2581", "a"};
  const auto tok = tokenize::tokenizer_from_gguf_vocab(v, "spaces.gguf");
  ASSERT_TRUE(tok->strips_leading_space());
  for (const std::vector<std::int64_t>& ids :
       std::vector<std::vector<std::int64_t>>{{0, 0, 0, 1}, {0, 1}, {0}, {0, 0}, {1, 0, 0}, {}}) {
    tokenize::StreamDecoder s(tok);
    std::string streamed;
    for (std::int64_t id : ids) streamed += s.push(id);
    streamed += s.finish();
    EXPECT_EQ(streamed, tok->decode(ids)) << ids.size() << " ids";
  }
  EXPECT_EQ(tok->decode({0, 0, 0, 1}), "  a");
}

// Found while extending fuzz_tokenizer to find_tokenizer (fuzz/regressions/tokenizer/
// tokenizer_json_* and sentencepiece_json_*): a tokenizer.json field of another JSON type than
// expected, read with json::value, escaped as nlohmann::json::type_error -- model.byte_fallback,
// model.type, a normalizer's type in a Sequence (choosing the tokenizer), a Strip decoder's start
// / stop, a Metaspace decoder's prepend_scheme -- and a Strip start beyond int was an undefined
// float-to-int conversion. Now the chosen reader names the field, or the field is refused.
TEST(FuzzRegression, MistypedTokenizerJsonFieldsAreFormatErrors) {
  TempDir dir("tokenizer_json");
  const std::string spm = R"("model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]},)"
                          R"("pre_tokenizer":{"type":"Metaspace","replacement":"\u2581","split":false})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"normalizer":{"type":"Sequence","normalizers":[{"type":5}]}})",
       "normalizer.normalizers[0].type: must be a string, got 5"},
      {R"({"model":{"type":"BPE","byte_fallback":"yes","vocab":{"a":0},"merges":[]}})", "tokenizer.json"},
      {R"({"model":{"type":7,"vocab":{"a":0},"merges":[]}})", "tokenizer.json"},
      {"{" + spm + R"(,"decoder":{"type":"Strip","content":" ","start":"1","stop":0}})",
       "decoder.start: must be an integer >= 0, got \"1\""},
      {"{" + spm + R"(,"decoder":{"type":"Strip","content":" ","start":1e30,"stop":0}})",
       "decoder.start: must be an integer >= 0, got 1e+30"},
      {"{" + spm + R"(,"decoder":{"type":"Strip","content":" ","start":1,"stop":-1}})",
       "decoder.stop: must be an integer >= 0, got -1"},
      {"{" + spm + R"(,"decoder":{"type":"Metaspace","prepend_scheme":3}})",
       "decoder.prepend_scheme: must be a string or null, got 3"},
  };
  for (const auto& [text, want] : cases) {
    write(dir.str("tokenizer.json"), text);
    const std::string msg = error_of<FormatError>([&] { tokenize::find_tokenizer(dir.str()); });
    EXPECT_NE(msg.find(want), std::string::npos) << text << "\n" << msg;
  }
  // The well-typed decoders still read.
  for (const char* decoder : {R"({"type":"Strip","content":" ","start":1,"stop":0})",
                              R"({"type":"Metaspace","replacement":"\u2581"})"}) {
    write(dir.str("tokenizer.json"), "{" + spm + R"(,"decoder":)" + decoder + "}");
    EXPECT_TRUE(tokenize::find_tokenizer(dir.str())->strips_leading_space()) << decoder;
  }
}

// Found while extending fuzz_gguf to the model layer (fuzz/regressions/gguf/): a GGUF file's sizes
// reach the decoder loader unchecked. heads_times_key_length_overflows: head_count and
// key_length of 2^40 each -- the tensor shapes computed from them (heads x head_dim) overflowed
// int64 before any tensor was compared; now a FormatError bounds the sizes first.
// phi3_rope_dims_beyond_the_head: a Phi-3 file with LongRoPE factors and a rope.dimension_count
// of 2^32 - 2 allocated 8 GB of placeholder factors before the spec was checked; now refused
// naming the key.
TEST(FuzzRegression, GgufDecoderSizesAreBoundedBeforeTheyAreUsed) {
  const fs::path dir = fs::path(QKV_SOURCE_DIR) / "fuzz/regressions/gguf";
  const std::string heads = (dir / "heads_times_key_length_overflows").string();
  std::string msg = error_of<FormatError>([&] { models::load_decoder(heads); });
  EXPECT_NE(msg.find(heads + ": DecoderSpec: num_attention_heads must be in [1, 2^24], got 1099511627776"),
            std::string::npos) << msg;
  const std::string phi3 = (dir / "phi3_rope_dims_beyond_the_head").string();
  for (auto f : {std::function<void()>([&] { models::load_decoder(phi3); }),
                 std::function<void()>([&] { models::decoder_spec_from_gguf(io::GGUFFile::open(phi3)); })}) {
    msg = error_of<FormatError>(f);
    EXPECT_NE(msg.find(phi3 + ": GGUF key 'phi3.rope.dimension_count' is 4294967294 for a head size of 4"),
              std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace qkv
