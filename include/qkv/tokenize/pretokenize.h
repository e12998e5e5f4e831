// Pre-tokenizers: what cuts text into the pieces byte-level BPE encodes one at a
// time. GPT-2's is one regex (Hugging Face `pre_tokenizers.ByteLevel`,
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
//
// Modern vocabularies chain steps (Hugging Face pre_tokenizers.Sequence): PreTokenizer runs
// Split (a regex or a literal, five ways to keep what it matches), Digits and ByteLevel steps
// exactly as `tokenizers` 0.23 does (tokenizers/src/tokenizer/normalizer.rs `split`,
// pre_tokenizers/{split,digits,byte_level}.rs), with the patterns on PCRE2 (src/tokenize/regex.h
// lists where Oniguruma's syntax differs and how it is rewritten).
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::tokenize {

class Gpt2PreTokenizer {
 public:
  // Compiles the pattern (qkv::Error if PCRE2 refuses it, which would be a build problem).
  Gpt2PreTokenizer();
  // Appends the pieces of text to out, in order; they concatenate to text (the ByteLevel step,
  // use_regex, without a prefix space).
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

// What a Split step does with the pieces its pattern matches (HF SplitDelimiterBehavior), e.g.
// pattern \d on "a12b": Removed a|b, Isolated a|1|2|b, MergedWithPrevious a1|2b,
// MergedWithNext a|1|2b, Contiguous a|12|b.
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// One step of a pre-tokenizer (HF pre_tokenizers.Split / Digits / ByteLevel).
struct PreTokenizeStep {
  enum class Kind { Split, Digits, ByteLevel };
  Kind kind = Kind::ByteLevel;
  // Split: an Oniguruma-syntax regex (regex=true) or a literal string; invert swaps matches and gaps.
  std::string pattern;
  bool regex = true;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // Digits: every \p{N} character its own piece (true) or runs of them (false).
  bool individual_digits = false;
  // ByteLevel: ' ' prepended to every piece that does not start with one; then GPT-2's regex
  // cuts each piece (use_regex) or not.
  bool add_prefix_space = false;
  bool use_regex = true;
};

// Storage for pieces that are not slices of the input (a prepended space); a deque keeps
// the strings in place as it grows, so views of them stay valid.
using PieceArena = std::deque<std::string>;

// A sequence of steps, each applied to every piece the previous one made (empty pieces are
// dropped, as Hugging Face drops them).
class PreTokenizer {
 public:
  // Compiles the patterns; FormatError "<what>: step N: ..." for a pattern PCRE2 cannot compile.
  PreTokenizer(std::vector<PreTokenizeStep> steps, const std::string& what);
  // Appends the pieces of text (valid UTF-8; unchecked) to out, in order. A piece views text
  // or a string in arena. ValueError if a pattern's match limit is reached.
  void split(std::string_view text, std::vector<std::string_view>& out, PieceArena& arena) const;
  const std::vector<PreTokenizeStep>& steps() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace qkv::tokenize
