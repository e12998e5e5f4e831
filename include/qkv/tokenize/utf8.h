// UTF-8 as the tokenizers need it: strict validation with an error that names
// the byte, and lossy decoding that replaces each maximal invalid subpart by
// U+FFFD exactly like Rust's String::from_utf8_lossy (which Hugging Face's
// ByteLevel decoder uses; the "substitution of maximal subparts" practice of
// Unicode 15, section 3.9, table 3-8).
//
// Well-formed sequences (Unicode table 3-7):
//   00..7F
//   C2..DF 80..BF
//   E0 A0..BF 80..BF | E1..EC 80..BF 80..BF | ED 80..9F 80..BF | EE..EF 80..BF 80..BF
//   F0 90..BF 80..BF 80..BF | F1..F3 80..BF x3 | F4 80..8F 80..BF 80..BF
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace qkv::tokenize::utf8 {

// What the sequence starting at one byte is.
enum class SeqKind {
  Valid,      // a whole well-formed character of `len` bytes
  Invalid,    // a maximal invalid subpart of `len` bytes (>= 1): one U+FFFD
  Truncated,  // the input ends after `len` bytes that may still begin a valid character
};
struct Seq {
  SeqKind kind;
  std::size_t len;
};

// The sequence at s[0..n) (n >= 1).
Seq scan(const unsigned char* s, std::size_t n);

// Where and why a text is not UTF-8.
struct Invalid {
  std::size_t offset;  // first byte of the bad sequence
  std::string reason;  // e.g. "0xff never appears in UTF-8"
};
// The first problem in s, or nullopt when s is valid UTF-8.
std::optional<Invalid> find_invalid(std::string_view s);
// Throws qkv::ValueError "<what>: invalid UTF-8 at byte N (0xXX): <reason>" unless s is valid UTF-8.
void check(std::string_view s, std::string_view what);

// Appends s to out with every maximal invalid subpart replaced by U+FFFD.
// final=true: a truncated tail becomes one U+FFFD too; returns s.size().
// final=false: a truncated tail that may still become a character is left
// unconsumed; returns the number of bytes consumed (out stays valid UTF-8).
std::size_t append_lossy(std::string_view s, bool final, std::string& out);

// Appends the UTF-8 encoding of code point cp (<= 0x10FFFF, not a surrogate) to out.
void append_code_point(char32_t cp, std::string& out);

}  // namespace qkv::tokenize::utf8
