// BERT's WordPiece tokenizer, the same ids as Hugging Face's BertTokenizerFast
// (tokenizers' BertNormalizer + BertPreTokenizer + WordPiece + BertProcessing):
//
//   special tokens ([CLS], [SEP], [PAD], [UNK], [MASK]) written in the raw text are matched first
//   clean-up: drop U+0000, U+FFFD and every control, format, surrogate or private-use (Cc Cf Cs Co) code point except
//             \t \n \r; map whitespace (Zs Zl Zp, \t..\r, U+0085) to ' '
//   CJK ideographs (the ranges of BERT's _is_chinese_char) get a space on each side
//   strip_accents (default: do_lower_case): NFD, then drop nonspacing marks (Mn)
//   do_lower_case: per code point lower case (Unicode simple mapping; U+0130 -> "i" U+0307)
//   pre-tokenize: split on whitespace, every punctuation code point (ASCII punctuation or a P*
//             category) is its own word
//   WordPiece: greedy longest match from the left, continuations prefixed "##"; a word with no
//             full match or longer than max_input_chars_per_word (100) code points is [UNK]
//   [CLS] ids [SEP], truncated to max_length (the model's maximum) by dropping the tail of ids.
// Unicode data (categories, NFD, case) comes from utf8proc.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/tokenize/tokenizer.h"

#include "qkv/core/tensor.h"

namespace qkv::tokenize {

struct WordPieceOptions {
  bool do_lower_case = true;
  std::optional<bool> strip_accents;  // unset: follows do_lower_case (as Hugging Face does)
  bool tokenize_chinese_chars = true;
  std::int64_t max_length = 512;      // [CLS] + ids + [SEP] never exceed this (>= 2)
  std::int64_t max_input_chars_per_word = 100;
  std::string unk_token = "[UNK]", cls_token = "[CLS]", sep_token = "[SEP]", pad_token = "[PAD]",
              mask_token = "[MASK]";
};

// A padded batch: input_ids I64 [B, T] (pad id after each sequence), attention_mask I64 [B, T]
// (1 real token, 0 padding), lengths[b] = number of real tokens of row b. T = the longest row.
struct EncodedBatch {
  Tensor input_ids;
  Tensor attention_mask;
  std::vector<std::int64_t> lengths;
};

// Byte offset of the first invalid UTF-8 sequence of s, or -1 if s is valid UTF-8.
std::int64_t utf8_invalid_offset(std::string_view s);

class WordPieceTokenizer : public Tokenizer {
 public:
  // vocab: token of id i at index i (non-empty, no duplicates, must hold the special tokens).
  // ValueError naming `source` and the token otherwise.
  WordPieceTokenizer(std::vector<std::string> vocab, const WordPieceOptions& o, const std::string& source = "vocab");

  // dir/vocab.txt + dir/tokenizer_config.json (do_lower_case, strip_accents, tokenize_chinese_chars,
  // model_max_length, the special tokens' names, which special_tokens_map.json overrides when
  // present); max_length = sentence_bert_config.json's
  // max_seq_length when that file exists, else model_max_length (capped by config.json's
  // max_position_embeddings when present). IOError / FormatError / ValueError naming file and field.
  static WordPieceTokenizer from_folder(const std::string& dir);
  // One token per line (ids = line numbers from 0). FormatError naming the file and line for an
  // empty line, a duplicate token (and the line of its first occurrence), or invalid UTF-8.
  static std::vector<std::string> read_vocab(const std::string& path);

  // text (UTF-8) -> words after clean-up, normalisation and pre-tokenisation (special tokens kept
  // as they are). ValueError naming the byte offset if text is not valid UTF-8.
  std::vector<std::string> basic_tokenize(std::string_view text) const { return basic_tokenize(text, true); }
  // text -> the bare ids (untruncated; [CLS], [SEP], ... written in the text are matched).
  std::vector<std::int64_t> encode(std::string_view text) const override;
  // The same with the special tokens' texts taken as words.
  std::vector<std::int64_t> encode_ordinary(std::string_view text) const override;
  // text -> [CLS] ids [SEP], truncated to max_length (what BERT is fed).
  std::vector<std::int64_t> encode_with_specials(std::string_view text) const override;
  std::string kind() const override { return "WordPiece"; }
  // A word's token as " word", a "##" continuation without its marks (HF's WordPiece decoder
  // joins words with spaces and continuations without).
  std::string token_text(std::int64_t id) const override;
  std::string token_string(std::int64_t id) const override { return id_to_token(id); }
  bool strips_leading_space() const override { return true; }
  std::optional<std::int64_t> max_length() const override { return opt_.max_length; }
  std::string decode(const std::vector<std::int64_t>& ids) const override;
  std::optional<std::int64_t> token_to_id(std::string_view token) const override;
  std::optional<std::int64_t> bos_id() const override { return cls_id_; }
  std::optional<std::int64_t> eos_id() const override { return sep_id_; }
  std::optional<std::int64_t> pad_id() const override { return pad_id_; }
  std::optional<std::int64_t> unk_id() const override { return unk_id_; }
  bool add_bos() const override { return true; }
  bool add_eos() const override { return true; }
  std::vector<std::string> special_tokens() const override;
  bool is_special(std::int64_t id) const override;
  // texts -> one padded batch (see EncodedBatch). B = texts.size() (B = 0 gives [0, 0] tensors).
  EncodedBatch encode_batch(const std::vector<std::string>& texts) const;
  // Pads already encoded rows into a batch.
  EncodedBatch pad(const std::vector<std::vector<std::int64_t>>& rows) const;

  // id -> token; IndexError if out of range.
  const std::string& id_to_token(std::int64_t id) const;
  std::int64_t vocab_size() const override { return static_cast<std::int64_t>(vocab_.size()); }
  std::int64_t cls_id() const { return cls_id_; }
  std::int64_t sep_id() const { return sep_id_; }
  const WordPieceOptions& options() const { return opt_; }

 private:
  std::vector<std::string> basic_tokenize(std::string_view text, bool match_specials) const;
  std::vector<std::int64_t> encode_ids(std::string_view text, bool match_specials) const;
  void wordpiece(const std::string& word, std::vector<std::int64_t>* out) const;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, std::int64_t> ids_;
  std::vector<std::pair<std::string, std::int64_t>> specials_;  // matched in raw text, longest first
  WordPieceOptions opt_;
  std::int64_t pad_id_ = 0, cls_id_ = 0, sep_id_ = 0, unk_id_ = 0;
};

}  // namespace qkv::tokenize
