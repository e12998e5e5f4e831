// UTF-8 and Unicode helpers of the WordPiece tokenizer (see wordpiece_unicode.h).
#include "wordpiece_unicode.h"

#include <utf8proc.h>

#include "qkv/core/error.h"

namespace qkv::tokenize::detail {

std::int64_t utf8_decode(std::string_view s, std::vector<char32_t>* out) {
  out->clear();
  out->reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  std::size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t c = 0;
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // ASCII fast path
      out->push_back(static_cast<char32_t>(s[i]));
      ++i;
      continue;
    }
    // utf8proc_iterate rejects overlong forms, surrogates and code points above U+10FFFF.
    const utf8proc_ssize_t n = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0 || c < 0) return static_cast<std::int64_t>(i);
    out->push_back(static_cast<char32_t>(c));
    i += static_cast<std::size_t>(n);
  }
  return -1;
}

void utf8_append(std::string* s, char32_t c) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  s->append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

std::string utf8_encode(const std::vector<char32_t>& cps, std::size_t begin, std::size_t end) {
  std::string s;
  s.reserve(end - begin);
  for (std::size_t i = begin; i < end; ++i) utf8_append(&s, cps[i]);
  return s;
}

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_bert_whitespace(char32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  if (c < 0x80) return false;
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto k = category(c);
  // Unassigned code points (Cn) are kept, as tokenizers' BertNormalizer keeps them.
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS || k == UTF8PROC_CATEGORY_CO;
}

bool is_bert_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  if (c < 0x80) return false;
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_cjk_ideograph(char32_t c) {
  // The CJK Unified Ideographs blocks as listed by BERT's tokenization.py (_is_chinese_char).
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_nonspacing_mark(char32_t c) { return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN; }

void nfd(std::vector<char32_t>* cps) {
  bool ascii = true;
  for (char32_t c : *cps) ascii = ascii && c < 0x80;
  if (ascii) return;
  const std::string s = utf8_encode(*cps, 0, cps->size());
  std::vector<utf8proc_int32_t> buf(s.size() + 8);
  const auto opts = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_STABLE);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const utf8proc_ssize_t n = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                                  static_cast<utf8proc_ssize_t>(s.size()), buf.data(),
                                                  static_cast<utf8proc_ssize_t>(buf.size()), opts);
    if (n < 0) throw ValueError(std::string("wordpiece: NFD failed: ") + utf8proc_errmsg(n));
    if (static_cast<std::size_t>(n) <= buf.size()) {
      cps->assign(buf.begin(), buf.begin() + n);
      return;
    }
    buf.resize(static_cast<std::size_t>(n));  // too small: n is the size needed
  }
  throw ValueError("wordpiece: NFD output size changed between calls");
}

void lower(std::vector<char32_t>* cps) {
  std::vector<char32_t> out;
  out.reserve(cps->size());
  for (char32_t c : *cps) {
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x130) {  // the one code point whose full lower case is two code points
      out.push_back(0x69);
      out.push_back(0x307);
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  cps->swap(out);
}

}  // namespace qkv::tokenize::detail
