// The tables behind qkv::tokenize::SentencePiece (internal header of tokenize/), shared by
// sentencepiece.cpp (encode, decode) and sentencepiece_load.cpp (the three sources).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bpe_impl.h"
#include "qkv/tokenize/sentencepiece.h"

namespace qkv::tokenize {

// sentencepiece's ModelProto.SentencePiece.Type (GGUF token_type uses the same numbers).
enum class PieceType : std::uint8_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

struct SentencePiece::Impl {
  enum class Merging { Score, Rank };
  // Where a piece of text (between special tokens) gets its "▁" dummy prefix.
  enum class Prefix {
    None,
    Always,            // sentencepiece / llama.cpp: the text's start and after each special token
    FirstUnlessSpace,  // HF Metaspace "first": the text's start, unless it starts with a space
    EachUnlessSpace,   // HF Metaspace "always": every piece, unless it starts with a space
    Each,              // HF Prepend normalizer: every piece
  };

  std::vector<std::string> pieces;  // id -> piece as written ("▁the", "<0x0A>", "<s>")
  std::vector<float> scores;        // id -> score (Score merging)
  std::vector<PieceType> types;     // id -> type
  TokenMap ids;                     // piece -> id (the first id of a piece listed twice)
  std::vector<std::int32_t> byte_id = std::vector<std::int32_t>(256, -1);  // byte -> its <0xNN> token
  Merging merging = Merging::Score;
  std::unordered_map<std::uint64_t, Merge> merges;  // Rank merging: pair_key(left, right) -> merge
  Prefix prefix = Prefix::Always;
  bool byte_fallback = true;
  bool remove_extra_whitespaces = false;  // sentencepiece's normalizer: spaces trimmed, runs made one
  bool strip_leading_space = true;  // decode drops one space at the start

  std::vector<AddedToken> added;  // matched whole in the text, by id
  AddedMatcher matcher;           // indices into `added`
  std::optional<std::int64_t> bos, eos, pad, unk;
  bool add_bos = false, add_eos = false;

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  void check_id(std::int64_t id, const char* what) const;
  // Appends the ids of one piece of text (no special tokens in it; spaces already "▁").
  void encode_piece(std::string_view text, std::vector<std::int64_t>& out) const;
  void encode_text(std::string_view text, bool specials, std::vector<std::int64_t>& out) const;

  // ---- building (sentencepiece_load.cpp): after pieces, scores and types are set, the maps,
  // the byte tokens and the special tokens (control, unknown, user-defined) to match.
  void finish(const std::string& where);
};

}  // namespace qkv::tokenize
