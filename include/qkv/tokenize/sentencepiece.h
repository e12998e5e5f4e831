// SentencePiece BPE vocabularies (Llama 2, TinyLlama, Mistral v0.1, Gemma, Phi-3): pieces that
// spell a space as U+2581 ("▁"), merged pairwise from single characters, with <0xNN> byte tokens
// for characters the vocabulary lacks (byte fallback). Three sources, each read as its own
// reference tokenizes:
//   tokenizer.model   sentencepiece's ModelProto (read directly: pieces, scores, types, the
//                     trainer's model type and byte fallback, the normalizer's dummy prefix);
//                     merges by score, as sentencepiece and llama.cpp
//   GGUF              tokenizer.ggml.model "llama": tokens, scores, token types,
//                     add_space_prefix; merges by score, as llama.cpp's llm_tokenizer_spm
//   tokenizer.json    Hugging Face's BPE model with byte_fallback and a Metaspace pre-tokenizer
//                     or a Replace / Prepend normalizer; merges by rank, as HF tokenizers
// encode: the special tokens of the text are cut out first (control and unknown tokens as
// specials, skipped by encode_ordinary; user-defined tokens always), then each piece of text
// between them gets its dummy prefix by the source's rule — sentencepiece and llama.cpp: a "▁" at
// the start of the text and after each special token; HF Metaspace "first": at the start of the
// text unless it starts with a space; "always": every piece unless it starts with one; a Prepend
// normalizer: every piece — its spaces become "▁", and its characters are merged: by score, the
// adjacent pair whose concatenation is the vocabulary piece of the highest score, the leftmost
// among equals (sentencepiece's BPE); by rank, the pair of the lowest merge rank. A symbol that
// is no piece becomes its bytes' <0xNN> tokens (the unknown token without them).
// decode: the pieces' texts ("▁" as a space, <0xNN> as its byte, special tokens as written),
// joined; one leading space dropped when the source adds a dummy prefix.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/tokenize/tokenizer.h"

namespace qkv::tokenize {

struct GgufVocab;

class SentencePiece : public Tokenizer {
 public:
  // tokenizer.model: IOError naming the path; FormatError naming the file and the field of the
  // protobuf for a damaged file or an unsupported model (unigram, a normalizer with a
  // precompiled character map).
  static SentencePiece from_model_file(const std::string& path);
  static SentencePiece from_model_bytes(std::string_view bytes, const std::string& name);
  // GGUF tokenizer.ggml.* of model "llama" (checked as gguf_vocab.h says).
  static SentencePiece from_gguf_vocab(const GgufVocab& vocab, const std::string& source);

  std::string kind() const override { return "SentencePiece"; }
  std::vector<std::int64_t> encode(std::string_view text) const override;
  std::vector<std::int64_t> encode_ordinary(std::string_view text) const override;
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::string token_text(std::int64_t id) const override;
  std::string token_string(std::int64_t id) const override;
  bool strips_leading_space() const override;
  std::int64_t vocab_size() const override;
  std::optional<std::int64_t> token_to_id(std::string_view token) const override;
  std::optional<std::int64_t> bos_id() const override;
  std::optional<std::int64_t> eos_id() const override;
  std::optional<std::int64_t> pad_id() const override;
  std::optional<std::int64_t> unk_id() const override;
  bool add_bos() const override;
  bool add_eos() const override;
  std::vector<std::string> special_tokens() const override;
  bool is_special(std::int64_t id) const override;
  // A piece's score (tokenizer.model and GGUF sources; 0 for tokenizer.json's).
  float score(std::int64_t id) const;
  // The same vocabulary with other special tokens (tokenizer_config.json's); FormatError for an
  // id outside the vocabulary or a flag without its token.
  SentencePiece with_specials(std::optional<std::int64_t> bos, std::optional<std::int64_t> eos,
                              std::optional<std::int64_t> pad, std::optional<std::int64_t> unk, bool add_bos,
                              bool add_eos) const;

  // The vocabulary as GGUF's "llama" tokenizer (tokens, scores, token types; a tokenizer.json's
  // merges as scores, the later a merge the lower its result's score), for qkv convert.
  GgufVocab to_gguf_vocab() const;

  struct Impl;  // the tables; internal (src/tokenize/sentencepiece_impl.h)
  explicit SentencePiece(std::shared_ptr<const Impl> impl);

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::tokenize
