// GPT-2's pre-tokenizer: the regex that cuts text into the pieces byte-level
// BPE encodes one at a time (Hugging Face `pre_tokenizers.ByteLevel`,
// add_prefix_space=false, use_regex=true):
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// Run with PCRE2 (UTF + UCP, JIT when available). Hugging Face runs it with
// Oniguruma, whose Unicode \s is the White_Space property: U+0009..U+000D,
// U+0085 and the categories Zs, Zl, Zp (so NBSP U+00A0, U+2028 and U+3000 are
// spaces; U+200B, U+FEFF and U+180E are not). PCRE2's UCP \s also takes U+180E
// (through \h), so the pattern spells \s as the class [\t-\r\x{85}\p{Z}],
// which is exactly White_Space. tests/tokenize checks every code point
// against a table recorded from Hugging Face.
//
// Unicode versions differ: Debian 12's PCRE2 10.42 has Unicode 14.0, the
// Oniguruma inside tokenizers 0.23 a newer one. The ~9,400 code points
// assigned after 14.0 as letters or digits (CJK extensions H and I, Garay,
// Kawi, ...) are \p{L}/\p{N} for Hugging Face but unassigned (a symbol) here,
// so text using them may pre-tokenize, and encode, differently. Every code
// point that Unicode 14 assigns agrees (tested).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::tokenize {

class Gpt2PreTokenizer {
 public:
  // Compiles the pattern (qkv::Error if PCRE2 refuses it, which would be a build problem).
  Gpt2PreTokenizer();
  // Appends the pieces of text to out, in order; they concatenate to text.
  // ValueError naming the byte offset if text is not valid UTF-8.
  void split(std::string_view text, std::vector<std::string_view>& out) const;
  // The PCRE2 pattern used (with \s spelled out as above).
  static const char* pattern();
  // The Unicode version of PCRE2's property tables, e.g. "14.0.0".
  static std::string unicode_version();

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::tokenize
