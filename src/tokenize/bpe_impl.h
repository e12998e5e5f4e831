// The tables behind qkv::tokenize::ByteLevelBPE, shared by bpe.cpp (encode, decode),
// bpe_build.cpp (the checks and tables every source shares) and the readers: bpe_load.cpp
// (vocab.json + merges.txt), tokenizer_json.cpp (tokenizer.json), gguf_vocab.cpp (GGUF metadata).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

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
  std::int32_t rank;    // position in the merge list (0 = first merge)
  std::int32_t result;  // id of left + right
};

// GPT-2's bytes_to_unicode: byte b -> code point. The printable bytes '!'..'~',
// U+00A1..U+00AC and U+00AE..U+00FF map to themselves; the other 68 bytes
// (controls, space, U+00A0, U+00AD) map to U+0100, U+0101, ... in byte order.
char32_t byte_to_code_point(unsigned char b);

// A token written in that alphabet -> its raw bytes; a token with any other character is
// taken as its own UTF-8 bytes (what HF's ByteLevel decoder does). *spelled (if given) says
// which case it was.
std::string token_to_bytes(std::string_view token, bool* spelled = nullptr);

// A string for an error message: JSON-quoted, cut to 80 bytes, invalid UTF-8 replaced.
std::string quote(std::string_view s);

// A token matched whole in the text before BPE (HF added token; GGUF control / user-defined).
struct AddedToken {
  std::string content;      // the text it matches (and decodes to)
  std::int32_t id = 0;
  bool special = false;     // skipped by encode_ordinary (HF special, GGUF control)
  bool lstrip = false;      // also takes the whitespace before it
  bool rstrip = false;      // also takes the whitespace after it
  bool normalized = false;  // matched in the normalized text (else in the raw text)
};

// Leftmost-longest search over a set of added tokens (what HF's aho-corasick trie finds).
class AddedMatcher {
 public:
  void add(std::string_view content, std::int32_t index);
  bool empty() const { return by_content_.empty(); }
  struct Hit {
    std::size_t begin, end;
    std::int32_t index;
  };
  // The leftmost match starting at or after `from`, the longest there.
  std::optional<Hit> find(std::string_view text, std::size_t from) const;

 private:
  TokenMap by_content_;
  std::vector<std::size_t> lengths_;  // distinct content lengths, longest first
  std::array<bool, 256> first_{};     // bytes some content starts with
};

// HF AddedVocabulary::find_matches: the added tokens of `matcher` in text and the text between
// them, in order (a special token is left as text when !specials; lstrip / rstrip widen a match
// over the whitespace beside it).
void split_added_tokens(std::string_view text, const AddedMatcher& matcher, const std::vector<AddedToken>& added,
                        bool specials, const std::function<void(std::string_view)>& on_text,
                        const std::function<void(std::int32_t)>& on_token);

enum class Normalization { None, NFC };

struct ByteLevelBPE::Impl {
  std::vector<std::string> bytes;         // id -> raw bytes of the token
  TokenMap ids;                           // model vocabulary: token as written -> id
  std::array<std::int32_t, 256> byte_id;  // byte -> id of its one-byte token, -1 if the vocab lacks it
  std::unordered_map<std::uint64_t, Merge> merges;  // pair_key(left, right) -> merge
  bool ignore_merges = false;             // a piece that is a vocabulary token is that token (HF BPE ignore_merges)
  TokenMap whole;                         // ignore_merges: raw bytes of the alphabet-spelled tokens -> id
  std::int32_t bpe_unk = -1;              // id for a byte without a token (HF BPE unk_token), -1: dropped
  bool fuse_unk = false;                  // consecutive unknown bytes give one unk

  std::vector<AddedToken> added;          // in id order
  TokenMap added_ids;                     // content -> id
  AddedMatcher raw_added, normalized_added;  // indices into `added`
  Normalization normalization = Normalization::None;
  PreTokenizer pre{{PreTokenizeStep{}}, "ByteLevel"};

  std::optional<std::int64_t> bos, eos, pad, unk;
  bool add_bos = false, add_eos = false;

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
  // Appends the ids of text (valid UTF-8) to out; specials=false leaves special tokens as text.
  void encode_text(std::string_view text, bool specials, std::vector<std::int64_t>& out) const;
  // Text without added tokens: normalized, then normalized added tokens, then pieces.
  void encode_segment(std::string_view text, bool specials, std::vector<std::int64_t>& out) const;
  // Appends the pre-tokenizer's pieces of already normalized text to out.
  void split_pieces(std::string_view text, std::vector<std::string_view>& out, PieceArena& arena) const;
  // Throws IndexError "<what>: token id N is out of range ..." unless 0 <= id < V.
  void check_id(std::int64_t id, const char* what) const;

  // The tokenizer over finished tables (the readers' last step).
  static ByteLevelBPE wrap(std::shared_ptr<const Impl> impl) { return ByteLevelBPE(std::move(impl)); }

  // ---- building (bpe_build.cpp); `where` prefixes every message ("tokenizer.json 'p': ")
  // The model vocabulary: tokens[id] as written, present[id] false for an id only an added token holds.
  void set_vocab(const std::vector<std::string>& tokens, const std::vector<bool>& present);
  // The next merge: left + right (tokens as written). FormatError "<where>..." if a token or
  // the result is not in the vocabulary (called `vocab_name` there), or the merge repeats the
  // one of rank r (described by rank_where(r), e.g. "on line 2").
  void add_merge(std::string_view left, std::string_view right, const std::string& where, const char* vocab_name,
                 const std::function<std::string(std::int32_t)>& rank_where);
  // Adds an added token (its id must be < V); finish() must follow.
  void add_token(AddedToken t, const std::string& where);
  // Builds the matchers (normalized contents normalized) and the ignore_merges table.
  void finish();
  std::vector<std::int32_t> added_slot;  // while building: id -> index in `added`, -1
};

// The bytes of a file. IOError "bpe: cannot open <what> '<path>': <reason>" (or "... it is a directory").
std::string read_text_file(const std::string& path, const char* what);
// Parses JSON; FormatError "<where>not valid JSON: ..." or, for an object that repeats a key
// (a parser would keep the last), "<where><key_word> "k" appears twice" (any depth).
nlohmann::json parse_json_strict(std::string_view text, const std::string& where, const char* key_word);
// A JSON value for an error message, cut to one short line.
std::string shown(const nlohmann::json& v);
// A vocabulary object {token: id}: tokens[id] and present[id] for ids below `limit`.
// FormatError naming the token for an id that is not an integer, not below `limit` or taken
// twice; `rule` (e.g. "the ids of 5 tokens must be exactly 0..4, each once") ends those messages.
void read_vocab_object(const nlohmann::json& vocab, const std::string& where, std::size_t limit,
                       const std::string& rule, std::vector<std::string>& tokens, std::vector<bool>& present);

// NFC of s into out; false (out untouched) when s is already NFC for certain (no code point
// at or above U+0300). ValueError on a utf8proc failure.
bool nfc(std::string_view s, std::string& out);

}  // namespace qkv::tokenize
