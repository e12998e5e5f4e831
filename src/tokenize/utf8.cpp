#include "qkv/tokenize/utf8.h"

#include <cstdio>

#include "qkv/core/error.h"

namespace qkv::tokenize::utf8 {

namespace {

std::string hex_byte(unsigned char b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", b);
  return buf;
}

}  // namespace

Seq scan(const unsigned char* s, std::size_t n) {
  const unsigned b = s[0];
  if (b < 0x80) return {SeqKind::Valid, 1};
  std::size_t need;             // continuation bytes after the lead
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b == 0xE0) {
    need = 2, lo = 0xA0;  // no overlong 3-byte forms
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2;
  } else if (b == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates U+D800..U+DFFF
  } else if (b == 0xF0) {
    need = 3, lo = 0x90;  // no overlong 4-byte forms
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3;
  } else if (b == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {SeqKind::Invalid, 1};  // 80..C1, F5..FF never start a character
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (k >= n) return {SeqKind::Truncated, k};
    const unsigned c = s[k];
    if (c < lo || c > hi) return {SeqKind::Invalid, k};
    lo = 0x80, hi = 0xBF;
  }
  return {SeqKind::Valid, need + 1};
}

std::optional<Invalid> find_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    const Seq q = scan(p + i, n - i);
    if (q.kind == SeqKind::Valid) {
      i += q.len;
      continue;
    }
    const unsigned char b = p[i];
    const bool lead = b >= 0xC2 && b <= 0xF4;  // a lead byte whose continuation went wrong
    std::string why;
    if (q.kind == SeqKind::Truncated) {
      why = "the text ends inside a multi-byte character (" + std::to_string(q.len) + " of its bytes present)";
    } else if (lead) {
      why = "byte " + std::to_string(i + q.len) + " (" + hex_byte(p[i + q.len]) +
            ") cannot follow the bytes before it (a bad continuation, an overlong form, a surrogate or a code "
            "point above U+10FFFF)";
    } else if (b >= 0x80 && b <= 0xBF) {
      why = "a continuation byte without a lead byte";
    } else if (b == 0xC0 || b == 0xC1) {
      why = "a lead byte of an overlong 2-byte form";
    } else {
      why = hex_byte(b) + " never appears in UTF-8";
    }
    return Invalid{i, why};
  }
  return std::nullopt;
}

void check(std::string_view s, std::string_view what) {
  const auto bad = find_invalid(s);
  if (!bad) return;
  throw ValueError(std::string(what) + ": invalid UTF-8 at byte " + std::to_string(bad->offset) + " (" +
                   hex_byte(static_cast<unsigned char>(s[bad->offset])) + "): " + bad->reason);
}

std::size_t append_lossy(std::string_view s, bool final, std::string& out) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const Seq q = scan(p + i, n - i);
    if (q.kind == SeqKind::Valid) {
      out.append(s.data() + i, q.len);
    } else if (q.kind == SeqKind::Invalid || final) {
      out.append(kReplacement, 3);  // a truncated tail at the very end is one U+FFFD too
    } else {
      return i;  // truncated: wait for more bytes
    }
    i += q.len;
  }
  return n;
}

void append_code_point(char32_t cp, std::string& out) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    throw ValueError("utf8::append_code_point: U+" + std::to_string(static_cast<unsigned long>(cp)) +
                     " (decimal) is not a Unicode scalar value");
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace qkv::tokenize::utf8
