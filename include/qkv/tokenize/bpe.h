// GPT-2 byte-level BPE: text <-> token ids, exactly as Hugging Face
// `tokenizers` (GPT2TokenizerFast: ByteLevel pre-tokenizer with
// add_prefix_space=false, BPE model, ByteLevel decoder).
//
// Files (REFERENCES.md section 4):
//   vocab.json   {"token": id, ...}: tokens written in GPT-2's bytes_to_unicode
//                alphabet (each byte is one printable character, e.g. ' ' -> 'Ġ'),
//                ids dense 0..V-1
//   merges.txt   "#version: ..." first line, then one merge "a b" per line;
//                rank = line order (earlier merges apply first)
//
// encode: validate UTF-8 -> split out special tokens (every vocab entry
// "<|...|>", leftmost-longest, like HF added tokens) -> pre-tokenize the text
// between them (GPT-2 regex, qkv/tokenize/pretokenize.h) -> each piece's bytes
// become one token per byte, then the lowest-rank adjacent pair is merged
// (leftmost first) until no pair has a merge.
// decode: concatenate the tokens' bytes -> invalid UTF-8 becomes U+FFFD.
//
// A loaded tokenizer is immutable and safe to use from several threads
// (the word cache inside is locked); copies share the loaded tables.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::tokenize {

class ByteLevelBPE {
 public:
  // Reads vocab.json and merges.txt. IOError naming the path if a file cannot be
  // read; FormatError naming the file and the token (vocab.json) or the line
  // (merges.txt) for malformed contents.
  static ByteLevelBPE load(const std::string& vocab_json, const std::string& merges_txt);
  // The same from the files' contents (e.g. received from another process); the names
  // stand for the files in messages.
  static ByteLevelBPE parse(const std::string& vocab_json_text, const std::string& merges_txt_text,
                            const std::string& vocab_name, const std::string& merges_name);
  // load(dir + "/vocab.json", dir + "/merges.txt").
  static ByteLevelBPE from_folder(const std::string& dir);

  // text (UTF-8) -> ids [T]. ValueError naming the byte offset for invalid UTF-8.
  std::vector<std::int64_t> encode(std::string_view text) const;
  // As encode, but special tokens in the text are ordinary text (HF split_special_tokens=True):
  // for untrusted input that must not inject "<|endoftext|>".
  std::vector<std::int64_t> encode_ordinary(std::string_view text) const;
  // ids [T] -> text; invalid UTF-8 byte runs become U+FFFD (one per maximal
  // invalid subpart, like Rust's String::from_utf8_lossy). IndexError for an
  // id outside 0..V-1.
  std::string decode(const std::vector<std::int64_t>& ids) const;
  // ids [T] -> the tokens' raw bytes concatenated, no replacement. IndexError as decode.
  std::string decode_bytes(const std::vector<std::int64_t>& ids) const;
  // Raw bytes of one token. IndexError for an id outside 0..V-1.
  const std::string& token_bytes(std::int64_t id) const;
  // V: the number of entries of vocab.json.
  std::int64_t vocab_size() const;
  // Id of a token as written in vocab.json (e.g. "Ġthe"), or nullopt.
  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  // Id of "<|endoftext|>", or nullopt when the vocabulary has none.
  std::optional<std::int64_t> eos_id() const;
  // The special tokens (vocab entries "<|...|>") as written, sorted.
  std::vector<std::string> special_tokens() const;

  struct Impl;  // the tables; internal (src/tokenize/bpe_impl.h)

 private:
  explicit ByteLevelBPE(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// Streaming decode for generation: push ids one at a time; each call returns
// only whole UTF-8 characters (never half of one). Bytes that can no longer
// become a character come out as U+FFFD, so the concatenation of every push()
// and finish() equals decode() of all the ids. Keeps a copy of the tokenizer
// handle (shared tables), so it may outlive the ByteLevelBPE it was made from.
class StreamDecoder {
 public:
  explicit StreamDecoder(const ByteLevelBPE& bpe);
  // The text completed by token `id` (possibly empty). IndexError for an id outside 0..V-1.
  std::string push(std::int64_t id);
  // The rest: an incomplete tail becomes U+FFFD (as decode() would); the decoder is then empty.
  std::string finish();

 private:
  ByteLevelBPE bpe_;
  std::string pending_;  // at most 3 bytes of a character not yet complete
};

}  // namespace qkv::tokenize
