// UTF-8 and Unicode helpers of the WordPiece tokenizer (utf8proc underneath; private to src/tokenize).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::tokenize::detail {

// UTF-8 -> code points. Returns the byte offset of the first invalid sequence, or -1 if valid.
std::int64_t utf8_decode(std::string_view s, std::vector<char32_t>* out);
// Appends the UTF-8 encoding of c.
void utf8_append(std::string* s, char32_t c);
std::string utf8_encode(const std::vector<char32_t>& cps, std::size_t begin, std::size_t end);

// Hugging Face BertNormalizer's character classes.
bool is_bert_whitespace(char32_t c);   // \t \n \r, U+000B..U+000C, U+0085, categories Zs Zl Zp
bool is_bert_control(char32_t c);      // categories Cc Cf Cs Co (not Cn), except \t \n \r
bool is_bert_punctuation(char32_t c);  // ASCII punctuation or categories Pc Pd Ps Pe Pi Pf Po
bool is_cjk_ideograph(char32_t c);     // BERT's _is_chinese_char ranges
bool is_nonspacing_mark(char32_t c);   // category Mn

// Canonical decomposition (NFD) of cps, in place.
void nfd(std::vector<char32_t>* cps);
// Per code point lower case (simple mapping; U+0130 -> U+0069 U+0307 as Rust's char::to_lowercase).
void lower(std::vector<char32_t>* cps);

}  // namespace qkv::tokenize::detail
