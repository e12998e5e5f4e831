// The tables behind qkv::tokenize::ByteLevelBPE (shared by bpe.cpp, which
// encodes and decodes, and bpe_load.cpp, which reads the files).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/pretokenize.h"

namespace qkv::tokenize {

// std::string keys looked up by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

struct Merge {
  std::int32_t rank;    // line order in merges.txt (0 = first merge)
  std::int32_t result;  // id of left + right
};

// GPT-2's bytes_to_unicode: byte b -> code point. The printable bytes '!'..'~',
// U+00A1..U+00AC and U+00AE..U+00FF map to themselves; the other 68 bytes
// (controls, space, U+00A0, U+00AD) map to U+0100, U+0101, ... in byte order.
char32_t byte_to_code_point(unsigned char b);

struct ByteLevelBPE::Impl {
  std::vector<std::string> bytes;     // id -> raw bytes of the token
  TokenMap ids;                       // token as written in vocab.json -> id
  std::array<std::int32_t, 256> byte_id;  // byte -> id of its one-byte token, -1 if the vocab lacks it
  std::unordered_map<std::uint64_t, Merge> merges;  // pair_key(left, right) -> merge
  TokenMap specials;                  // "<|...|>" entries -> id
  std::size_t max_special_len = 0;
  std::optional<std::int64_t> eos;    // id of <|endoftext|>
  Gpt2PreTokenizer pre;

  // Words already encoded (pieces shorter than kCacheMaxPiece bytes; at most
  // kCacheCapacity of them, then no more are added, like HF's BPE cache).
  static constexpr std::size_t kCacheMaxPiece = 256;
  static constexpr std::size_t kCacheCapacity = 10000;
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> cache;

  static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
  }
  // Appends the ids of one pre-tokenized piece (raw bytes) to out.
  void encode_piece(std::string_view piece, std::vector<std::int64_t>& out) const;
  // Appends the ids of text without special tokens to out.
  void encode_ordinary(std::string_view text, std::vector<std::int64_t>& out) const;
  // Throws IndexError "<what>: token id N is out of range ..." unless 0 <= id < V.
  void check_id(std::int64_t id, const char* what) const;
};

}  // namespace qkv::tokenize
