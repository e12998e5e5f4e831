// libFuzzer target: the checkpoint loader (qkv-checkpoint-v1/v2 files of the trainers) and
// everything that reads a loaded checkpoint: the classifier and seq2seq attention maps, resuming
// `train classify`, `train seq2seq` and `train lm` runs; and the token cache file of `train lm`.
//
// Each input is tried twice: as it is (almost every mutation breaks the checksum, so this
// fuzzes the safetensors layer and the checksum check), and "re-signed": if the bytes parse as
// safetensors, their tensors and metadata are written back with the checksum they now need, so
// the mutated contents reach the readers behind the checksum. Every failure must be a
// qkv::Error; a crash, a sanitizer report or any other exception is a bug.
#include <string>

#include "fuzz_util.h"
#include "lm_world.h"
#include "qkv/core/error.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/tensors.h"
#include "qkv/models/attention_maps.h"
#include "qkv/models/classifier.h"
#include "qkv/models/seq2seq.h"
#include "qkv/train/classify.h"
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

void use_checkpoint(const fuzz::Scratch& scratch, const fuzz::LMWorld& world, const std::string& path) {
  io::Checkpoint c;
  try {
    c = io::load_checkpoint(path);
  } catch (const Error&) {
    return;
  }
  attempt("classifier maps", [&] { models::classifier_attention_maps(c, "1 3 7 2"); });
  attempt("classify resume", [&] { train::ClassifyTrainer t(c, path, 1000000, 10); });
  attempt("seq2seq maps", [&] { models::seq2seq_attention_maps(c, "1 2 3"); });
  attempt("seq2seq resume", [&] { train::Seq2SeqTrainer t(c, path); });
  // train lm resumes from a folder: its state file (this checkpoint) beside config.json and
  // model.safetensors (rewritten from the state's weights when they do not match its digest).
  scratch.write("lm/" + std::string(train::LMTrainer::kStateFile), fuzz::read_bytes(path));
  attempt("lm resume", [&] { train::LMTrainer::resume(scratch.path("lm"), world.tokens, world.bpe); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz::Scratch scratch;
  static const fuzz::LMWorld world = fuzz::make_lm_world(scratch);
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  const std::string raw = scratch.write("raw.safetensors", bytes);
  use_checkpoint(scratch, world, raw);

  // Re-signed: the same tensors and metadata with the checksum they need.
  io::LoadedTensors f;
  try {
    f = io::load_safetensors(raw);
  } catch (const Error&) {
  }
  if (f.metadata.count("format")) {
    f.metadata["checksum"] = io::checkpoint_checksum(f.metadata, f.tensors);
    const std::string signed_path = scratch.path("signed.safetensors");
    bool written = true;
    try {
      io::save_safetensors(signed_path, f.tensors, f.metadata);
    } catch (const Error&) {
      written = false;
    }
    if (written) use_checkpoint(scratch, world, signed_path);
  }

  // The same bytes as a `train lm` token cache: every id it gives must be below its vocabulary.
  attempt("token file", [&] {
    const train::TokenFile t = train::TokenFile::open(raw);
    for (std::int64_t i = 0; i < t.size(); ++i) QKV_FUZZ_CHECK(static_cast<std::uint64_t>(t[i]) < t.vocab_size());
  });
  return 0;
}
