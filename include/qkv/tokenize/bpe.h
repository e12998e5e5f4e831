// Byte-level BPE: text <-> token ids, exactly as Hugging Face `tokenizers` (GPT-2,
// SmolLM2, Llama 3, Qwen2 and the like: a pre-tokenizer ending in ByteLevel, a BPE model,
// a ByteLevel decoder).
//
// Sources:
//   vocab.json + merges.txt   GPT-2's files (REFERENCES.md section 4): tokens written in
//                             GPT-2's bytes_to_unicode alphabet (each byte one printable
//                             character, ' ' -> 'Ġ'), ids dense 0..V-1; one merge "a b" per
//                             line, rank = line order; every vocab entry "<|...|>" is a special
//                             token; GPT-2's pre-tokenizer.
//   tokenizer.json            Hugging Face's file (model BPE; normalizer NFC / Sequence;
//                             pre-tokenizer Split / Digits / ByteLevel / Sequence; added tokens;
//                             post-processor TemplateProcessing for BOS/EOS; decoder ByteLevel).
//   GGUF metadata             tokenizer.ggml.* (qkv/tokenize/gguf_vocab.h).
//
// encode: validate UTF-8 -> cut out the added tokens matched in the raw text (leftmost-longest,
// lstrip/rstrip taking the whitespace beside them, like HF) -> normalize the text between them
// -> cut out the added tokens matched in the normalized text -> pre-tokenize the rest -> each
// piece's bytes become one token per byte, then the lowest-rank adjacent pair is merged
// (leftmost first) until no pair has a merge. encode() adds no BOS/EOS (HF's
// add_special_tokens=False); add_bos() says whether the model wants one before a prompt.
// decode: concatenate the tokens' bytes -> invalid UTF-8 becomes U+FFFD.
//
// A loaded tokenizer is immutable and safe to use from several threads
// (the word cache inside is locked); copies share the loaded tables. Code outside tokenize/ uses
// it through the Tokenizer interface (tokenize/tokenizer.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/tokenize/tokenizer.h"

namespace qkv::tokenize {

class ByteLevelBPE : public Tokenizer {
 public:
  // Reads vocab.json and merges.txt. IOError naming the path if a file cannot be
  // read; FormatError naming the file and the token (vocab.json) or the line
  // (merges.txt) for malformed contents.
  static ByteLevelBPE load(const std::string& vocab_json, const std::string& merges_txt);
  // The same from the files' contents (e.g. received from another process); the names
  // stand for the files in messages.
  static ByteLevelBPE parse(const std::string& vocab_json_text, const std::string& merges_txt_text,
                            const std::string& vocab_name, const std::string& merges_name);
  // A model folder: tokenizer.json (with tokenizer_config.json when present) if the folder
  // has one, else load(dir + "/vocab.json", dir + "/merges.txt").
  static ByteLevelBPE from_folder(const std::string& dir);
  // Reads a Hugging Face tokenizer.json, and tokenizer_config.json if a path is given (its
  // bos_token / eos_token / pad_token / unk_token and add_bos_token / add_eos_token). IOError
  // naming the path if a file cannot be read; FormatError naming the file and the field (e.g.
  // "pre_tokenizer.pretokenizers[0].behavior") for anything malformed or not supported.
  static ByteLevelBPE from_tokenizer_json(const std::string& path, const std::string& config_path = "");
  // The same from the file's contents; `name` stands for the path in messages.
  static ByteLevelBPE from_tokenizer_json_text(std::string_view json, const std::string& name,
                                               std::string_view config_json = {});

  // text (UTF-8) -> ids [T]. ValueError naming the byte offset for invalid UTF-8.
  std::vector<std::int64_t> encode(std::string_view text) const override;
  // As encode, but special tokens (GGUF control tokens) in the text are ordinary text (HF
  // split_special_tokens=True; llama.cpp parse_special=false): for untrusted input that must
  // not inject "<|endoftext|>". Non-special added tokens (user-defined) are still matched.
  std::vector<std::int64_t> encode_ordinary(std::string_view text) const override;
  // ids [T] -> text; invalid UTF-8 byte runs become U+FFFD (one per maximal
  // invalid subpart, like Rust's String::from_utf8_lossy). IndexError for an
  // id outside 0..V-1.
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  // ids [T] -> the tokens' raw bytes concatenated, no replacement. IndexError as decode.
  std::string decode_bytes(const std::vector<std::int64_t>& ids) const override;
  // Raw bytes of one token. IndexError for an id outside 0..V-1.
  const std::string& token_bytes(std::int64_t id) const;
  std::string token_text(std::int64_t id) const override { return token_bytes(id); }
  // As the vocabulary writes it: an added token's text, else the bytes in GPT-2's alphabet ("Ġthe").
  std::string token_string(std::int64_t id) const override;
  std::string kind() const override { return "byte-level BPE"; }
  // V: the number of token ids (vocabulary and added tokens).
  std::int64_t vocab_size() const override;
  // Id of an added token's text (e.g. "<|im_start|>") or of a vocabulary token as written
  // (e.g. "Ġthe"), or nullopt.
  std::optional<std::int64_t> token_to_id(std::string_view token) const override;
  // End of text: GGUF eos_token_id, tokenizer_config.json's eos_token, else "<|endoftext|>" if
  // the vocabulary has it; nullopt otherwise.
  std::optional<std::int64_t> eos_id() const override;
  // Beginning of text (GGUF bos_token_id, tokenizer_config.json's bos_token, the BOS of
  // tokenizer.json's post-processor), padding and unknown tokens; nullopt when not given.
  std::optional<std::int64_t> bos_id() const override;
  std::optional<std::int64_t> pad_id() const override;
  std::optional<std::int64_t> unk_id() const override;
  // Whether the model wants bos_id() before a prompt / eos_id() after it (GGUF
  // add_bos_token / add_eos_token; tokenizer.json's TemplateProcessing). encode() never adds them.
  bool add_bos() const override;
  bool add_eos() const override;
  // The special tokens (GPT-2: vocab entries "<|...|>"; HF special added tokens; GGUF control
  // tokens) as written, sorted.
  std::vector<std::string> special_tokens() const override;
  // Whether id is a special token (decoders may hide it). IndexError for an id outside 0..V-1.
  bool is_special(std::int64_t id) const override;
  // The pieces the pre-tokenizer cuts text into after the normalizer, as raw bytes (added
  // tokens are not matched): what BPE encodes one by one. ValueError for invalid UTF-8.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  struct Impl;  // the tables; internal (src/tokenize/bpe_impl.h)

 private:
  explicit ByteLevelBPE(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::tokenize
