// libFuzzer target: GPT-2's byte-level BPE. The input is an archive (fuzz_util.h) of
// vocab.json, merges.txt and text (the text to encode). ByteLevelBPE::load reads the two files
// (every failure a qkv::Error); a loaded tokenizer then encodes the text and must give ids
// within its vocabulary, a StreamDecoder fed those ids one at a time must give exactly what
// decode() gives, and when the vocabulary is a proper byte-level one (every byte has its token,
// every token is written in GPT-2's byte alphabet) decoding must give the text back.
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/utf8.h"

using namespace qkv;
using qkv::tokenize::ByteLevelBPE;

namespace {

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256 + their rank.
char32_t byte_char(unsigned char b) {
  const auto printable = [](unsigned c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  if (printable(b)) return b;
  char32_t n = 0;
  for (unsigned c = 0; c < b; ++c) n += !printable(c);
  return 256 + n;
}

std::string in_alphabet(const std::string& bytes) {
  std::string s;
  for (unsigned char b : bytes) tokenize::utf8::append_code_point(byte_char(b), s);
  return s;
}

// Every byte has a token, and every token is the alphabet spelling of its bytes.
bool proper_byte_level(const ByteLevelBPE& bpe) {
  for (int b = 0; b < 256; ++b)
    if (!bpe.token_to_id(in_alphabet(std::string(1, static_cast<char>(b))))) return false;
  for (std::int64_t id = 0; id < bpe.vocab_size(); ++id)
    if (bpe.token_to_id(in_alphabet(bpe.token_bytes(id))) != id) return false;
  return true;
}

void check_ids(const ByteLevelBPE& bpe, const std::vector<std::int64_t>& ids, const std::string& text, bool proper) {
  for (std::int64_t id : ids) QKV_FUZZ_CHECK(id >= 0 && id < bpe.vocab_size());
  if (proper) QKV_FUZZ_CHECK(bpe.decode_bytes(ids) == text);
  tokenize::StreamDecoder stream(std::make_shared<tokenize::ByteLevelBPE>(bpe));
  std::string streamed;
  for (std::int64_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  QKV_FUZZ_CHECK(streamed == bpe.decode(ids));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::Scratch scratch;
  const auto files = fuzz::parse_archive({reinterpret_cast<const char*>(data), size});
  scratch.clear();
  scratch.write_files(files, {"vocab.json", "merges.txt"});
  std::optional<ByteLevelBPE> bpe;
  try {
    bpe.emplace(ByteLevelBPE::load(scratch.path("vocab.json"), scratch.path("merges.txt")));
  } catch (const Error&) {
    return 0;
  }
  const auto t = files.find("text");
  const std::string text = t == files.end() ? std::string() : t->second;
  const bool proper = proper_byte_level(*bpe);
  try {
    check_ids(*bpe, bpe->encode(text), text, proper);
    check_ids(*bpe, bpe->encode_ordinary(text), text, proper);
  } catch (const ValueError&) {
    QKV_FUZZ_CHECK(tokenize::utf8::find_invalid(text).has_value());  // only invalid UTF-8 is refused
  }
  return 0;
}
