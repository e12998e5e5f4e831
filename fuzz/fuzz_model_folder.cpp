// libFuzzer target: the readers of a model folder. The input is an archive (fuzz_util.h) of
//   config.json  model.safetensors  model.safetensors.index.json  model-0000{1,2}-of-00002.safetensors
//   modules.json  1_Pooling/config.json  vocab.txt  tokenizer_config.json  special_tokens_map.json
//   sentence_bert_config.json
// written into a fresh folder, which is then read as every kind of model qkv loads:
// config.json by each config reader (GPT-2, BERT, every decoder architecture of the registry
// through decoder_spec_from_config, the classifier's and seq2seq's configs and the training
// configs, which are JSON objects of the same kind), the folder by load_gpt2, load_decoder
// (which then computes one forward pass's attention weights), BertModel::from_folder,
// read_pooling_config (modules.json and the pooling module's config) and
// SentenceEmbedder::from_folder, which then embeds two sentences. Every failure must be a
// qkv::Error; a crash, a sanitizer report, an allocation sized by the config rather than the
// files, or any other exception is a bug.
#include <string>

#include "decoder_checks.h"
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/infer/embed.h"
#include "qkv/models/bert.h"
#include "qkv/models/classifier.h"
#include "qkv/models/decoder_io.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/seq2seq.h"
#include "qkv/train/lm.h"
#include "qkv/train/seq2seq.h"

using namespace qkv;

namespace {

// Runs one reader: a qkv::Error is a refusal (fine), anything else escapes (a bug).
template <class F>
void attempt(const char* what, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    fuzz::note_refusal(what, e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::Scratch scratch;
  const auto files = fuzz::parse_archive({reinterpret_cast<const char*>(data), size});
  scratch.clear();
  scratch.write_files(files, {"config.json", "model.safetensors", "model.safetensors.index.json",
                              "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "modules.json",
                              "1_Pooling/config.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                              "sentence_bert_config.json"});
  const std::string dir = scratch.root().string();

  if (const auto it = files.find("config.json"); it != files.end()) {
    const std::string& text = it->second;
    attempt("gpt2 config", [&] { models::gpt2_config_from_json(text, "config.json"); });
    attempt("bert config", [&] { models::bert_config_from_json(text, "config.json"); });
    attempt("decoder config", [&] { models::decoder_spec_from_config(text, "config.json"); });
    attempt("classifier config", [&] { models::classifier_config_from_json(text); });
    attempt("seq2seq config", [&] { models::Seq2SeqOptions::from_json(text); });
    attempt("seq2seq train config", [&] { train::Seq2SeqTrainOptions::from_json(text); });
    attempt("lm train config", [&] { train::LMTrainOptions::from_json(text); });
  }
  attempt("load_gpt2", [&] { models::load_gpt2(dir); });
  attempt("load_decoder", [&] { fuzz::exercise_decoder(*models::load_decoder(dir)); });
  attempt("bert folder", [&] { models::BertModel::from_folder(dir); });
  attempt("pooling", [&] { infer::read_pooling_config(dir); });
  attempt("embedder", [&] {
    const infer::SentenceEmbedder e = infer::SentenceEmbedder::from_folder(dir);
    const Tensor x = e.embed({"Hello, world!", "A second, longer sentence with unusual words: zyzzyva."});
    QKV_FUZZ_CHECK(x.dim() == 2 && x.size(0) == 2 && x.size(1) == e.dimension());
  });
  return 0;
}
