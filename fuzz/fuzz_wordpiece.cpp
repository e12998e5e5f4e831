// libFuzzer target: BERT's WordPiece tokenizer. The input is an archive (fuzz_util.h) of
// vocab.txt, tokenizer_config.json, special_tokens_map.json, sentence_bert_config.json,
// config.json and text (the text to encode). WordPieceTokenizer::from_folder reads the files
// (every failure a qkv::Error); a loaded tokenizer then encodes the text: ids within the
// vocabulary, [CLS] ... [SEP] within max_length, the same ids alone and in a batch, and only
// invalid UTF-8 refused.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/wordpiece.h"

using namespace qkv;
using qkv::tokenize::WordPieceTokenizer;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::Scratch scratch;
  const auto files = fuzz::parse_archive({reinterpret_cast<const char*>(data), size});
  scratch.clear();
  scratch.write_files(files, {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json",
                              "sentence_bert_config.json", "config.json"});
  std::optional<WordPieceTokenizer> tok;
  try {
    tok.emplace(WordPieceTokenizer::from_folder(scratch.root().string()));
  } catch (const Error&) {
    return 0;
  }
  const auto t = files.find("text");
  const std::string text = t == files.end() ? std::string() : t->second;
  try {
    const std::vector<std::int64_t> ids = tok->encode_with_specials(text);
    QKV_FUZZ_CHECK(ids.size() >= 2 && static_cast<std::int64_t>(ids.size()) <= tok->options().max_length);
    QKV_FUZZ_CHECK(ids.front() == tok->cls_id() && ids.back() == tok->sep_id());
    for (std::int64_t id : ids) QKV_FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
    const std::vector<std::int64_t> bare = tok->encode(text);
    for (std::int64_t id : bare) QKV_FUZZ_CHECK(id >= 0 && id < tok->vocab_size());
    const tokenize::EncodedBatch b = tok->encode_batch({text, "[CLS] plain text"});
    QKV_FUZZ_CHECK(b.lengths.size() == 2 && b.lengths[0] == static_cast<std::int64_t>(ids.size()));
    const std::vector<std::int64_t> row = b.input_ids.to_vector<std::int64_t>();
    QKV_FUZZ_CHECK(std::equal(ids.begin(), ids.end(), row.begin()));
    for (const std::string& w : tok->basic_tokenize(text)) QKV_FUZZ_CHECK(!w.empty());
  } catch (const ValueError&) {
    QKV_FUZZ_CHECK(tokenize::utf8_invalid_offset(text) >= 0);  // only invalid UTF-8 is refused
  }
  return 0;
}
