// libFuzzer target: the strict GGUF reader (REFERENCES.md section 6) on arbitrary bytes. A file
// it accepts must be consistent (every tensor aligned, inside the file, its byte count its
// type's for its dims, every key and name found); the header-only open of the same bytes from
// a file must agree (the same metadata and tensors, or the same message); and writing what was
// read must give a file that reads back as the same metadata and tensors. Anything else that
// escapes -- a crash, a sanitizer report, an exception that is not a qkv::Error -- is a bug.
// An accepted file is also read as a model: decoder_spec_from_gguf (every architecture of the
// registry), tokenize::tokenizer_from_gguf (its vocabulary, "gpt2" or "llama"; then encoded as
// tokenizer_checks.h checks) and load_decoder_gguf (then one forward pass, decoder_checks.h);
// each may refuse, with a qkv::Error only.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "decoder_checks.h"
#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/io/gguf.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/models/decoder_io.h"
#include "qkv/tokenize/tokenizer.h"
#include "tokenizer_checks.h"

using namespace qkv;
using namespace qkv::io;

namespace {

template <class F>
bool refuses(F&& f) {
  try {
    f();
  } catch (const FormatError&) {
    return true;
  }
  return false;
}

void check_consistent(const GGUFFile& f, const std::vector<std::uint8_t>& bytes) {
  QKV_FUZZ_CHECK(f.file_size() == bytes.size());
  QKV_FUZZ_CHECK(f.alignment() >= 1 && (f.alignment() & (f.alignment() - 1)) == 0);
  for (const GGUFTensorInfo& t : f.tensors()) {
    const std::optional<kernels::GgmlBlock> tr = kernels::ggml_type_block(static_cast<std::uint32_t>(t.type));
    QKV_FUZZ_CHECK(tr.has_value());  // any GGML type; only those qkv computes with give their data()
    QKV_FUZZ_CHECK(t.offset % f.alignment() == 0);
    QKV_FUZZ_CHECK(t.dims.size() <= 4);
    QKV_FUZZ_CHECK(t.row_length() % tr->block == 0);
    QKV_FUZZ_CHECK(t.nbytes == static_cast<std::uint64_t>(t.numel() / tr->block * tr->block_bytes));
    QKV_FUZZ_CHECK(f.data_offset() + t.offset + t.nbytes <= bytes.size());
    QKV_FUZZ_CHECK(f.find(t.name) == &t);
    if (t.computable())
      QKV_FUZZ_CHECK(std::memcmp(f.data(t), bytes.data() + f.data_offset() + t.offset, t.nbytes) == 0);
    else
      QKV_FUZZ_CHECK(refuses([&] { f.data(t); }));
  }
  for (const GGUFKeyValue& kv : f.metadata()) QKV_FUZZ_CHECK(f.find_value(kv.key) == &kv.value);
}

// Runs one reader: a qkv::Error is a refusal (fine), anything else escapes (a bug).
template <class F>
void attempt(const char* what, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    fuzz::note_refusal(what, e);
  }
}

bool same_tensors(const GGUFFile& a, const GGUFFile& b) {
  if (a.tensors().size() != b.tensors().size()) return false;
  for (std::size_t i = 0; i < a.tensors().size(); ++i) {
    const GGUFTensorInfo &x = a.tensors()[i], &y = b.tensors()[i];
    if (x.name != y.name || x.type != y.type || x.dims != y.dims || x.nbytes != y.nbytes) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const fuzz::Scratch scratch;
  std::vector<std::uint8_t> bytes(data, data + size);
  std::optional<GGUFFile> f;
  std::string refusal;
  try {
    f.emplace(GGUFFile::parse(bytes, "fuzz.gguf"));
  } catch (const Error& e) {
    refusal = e.what();  // refused: fine, as long as it is a qkv::Error
    fuzz::note_refusal("gguf", e);
  }
  // The header-only open of the same bytes from a file: the same verdict.
  const std::string path = scratch.write("in.gguf", std::string(reinterpret_cast<const char*>(data), size));
  try {
    const GGUFFile h = GGUFFile::open_header(path);
    QKV_FUZZ_CHECK(f.has_value());
    QKV_FUZZ_CHECK(metadata_of(h) == metadata_of(*f) && same_tensors(h, *f));
    QKV_FUZZ_CHECK(h.data_offset() == f->data_offset());
  } catch (const FormatError& e) {
    QKV_FUZZ_CHECK(!f.has_value());
    QKV_FUZZ_CHECK(refusal.substr(std::strlen("fuzz.gguf")) == std::string(e.what()).substr(path.size()));
  }
  if (!f) return 0;
  check_consistent(*f, bytes);

  // The file as a model: its spec, its vocabulary, its weights.
  attempt("decoder spec", [&] { models::decoder_spec_from_gguf(*f); });
  attempt("tokenizer", [&] {
    fuzz::exercise_tokenizer(tokenize::tokenizer_from_gguf(*f), "Hello, world! <s> caf\xc3\xa9 12345\n\t  x");
  });
  attempt("load_decoder_gguf", [&] { fuzz::exercise_decoder(*models::load_decoder_gguf(std::make_shared<GGUFFile>(*f))); });

  // Round trip: what was read writes back and reads again as the same contents.
  std::vector<GGUFTensorData> views;
  // (The bytes in the mapping: the writer takes tensors of any GGML type, as the reader does.)
  for (const GGUFTensorInfo& t : f->tensors())
    views.push_back({t.name, t.type, t.dims, f->mapping()->data() + f->data_offset() + t.offset, t.nbytes});
  const std::string out = scratch.path("round.gguf");
  try {
    write_gguf(out, metadata_of(*f), views);
  } catch (const IOError& e) {
    // The only files the reader takes and the writer refuses: names of 64+ bytes (llama.cpp's limit).
    bool long_name = false;
    for (const GGUFTensorInfo& t : f->tensors()) long_name |= t.name.size() > 63;
    QKV_FUZZ_CHECK(long_name);
    return 0;
  }
  const GGUFFile g = GGUFFile::open(out);
  QKV_FUZZ_CHECK(metadata_of(g) == metadata_of(*f));
  QKV_FUZZ_CHECK(same_tensors(g, *f));
  for (std::size_t i = 0; i < g.tensors().size(); ++i) {
    const GGUFTensorInfo& t = g.tensors()[i];
    QKV_FUZZ_CHECK(std::memcmp(g.mapping()->data() + g.data_offset() + t.offset, views[i].data, views[i].nbytes) == 0);
  }
  return 0;
}
