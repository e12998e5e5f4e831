// The regular expressions of the pre-tokenizers (private to src/tokenize): patterns written for
// Oniguruma (what Hugging Face `tokenizers` runs; tokenizer.json's Split patterns and the
// ByteLevel regex) compiled with PCRE2, and the match list `tokenizers` builds from them.
//
// Oniguruma (Ruby syntax, UTF-8) and PCRE2 (UTF + UCP) agree on what these patterns use
// (\p{..}, classes, (?i:..), lookahead, {m,n}) except for a few escapes, rewritten here:
//   \s, \S   Oniguruma: the White_Space property. PCRE2 also takes U+180E, so \s is spelled
//            [\t-\r\x{85}\p{Z}] (inside a class: \t-\r\x{85}\p{Z}); \S inside a class keeps
//            PCRE2's meaning (differs at U+180E only).
//   \h, \H   Oniguruma: a hexadecimal digit; PCRE2: horizontal space. Spelled [0-9A-Fa-f].
//   ^ $      Ruby: at line starts and ends; compiled with PCRE2_MULTILINE.
//   (?m)     Ruby: dot matches newlines; rewritten to PCRE2's (?s).
// \w keeps PCRE2's meaning (letters, numbers, '_'; Oniguruma also counts marks); nested
// classes ([a[b]]) are refused.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::tokenize::detail {

// One entry of a match list: text[begin, end) and whether the pattern matched it.
struct Span {
  std::size_t begin;
  std::size_t end;
  bool match;
};

class Regex {
 public:
  // pattern: Oniguruma syntax, or a literal string when literal=true. Throws FormatError
  // "<what>: ..." (with PCRE2's reason and offset) when it cannot be compiled.
  Regex(std::string_view pattern, bool literal, const std::string& what);
  // Hugging Face's match list of text (valid UTF-8): the matches of onig's find_iter (an empty
  // match right after the previous match is skipped) and the gaps between them, in order,
  // covering text exactly; an empty text gives one empty gap. Throws Error when PCRE2 gives
  // up (match limit) on a hostile pattern.
  void find_matches(std::string_view text, std::vector<Span>& out) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// The pattern rewritten for PCRE2 (see above). FormatError "<what>: ..." for a nested class.
std::string onig_to_pcre2(std::string_view pattern, const std::string& what);

}  // namespace qkv::tokenize::detail
