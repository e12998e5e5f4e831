// Python's str operations in code points (see text.h). Case mapping uses utf8proc's simple
// mappings plus the special cases Python applies to common letters (German sharp s, dotted I).
#include "text.h"

#include <utf8proc.h>

#include <algorithm>

#include "value.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::jinja::text {

namespace utf8 = ::qkv::tokenize::utf8;

std::u32string decode(std::string_view s) {
  charge(s.size() + 1);
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  std::size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = p[i];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (i + static_cast<std::size_t>(n) > s.size()) n = static_cast<int>(s.size() - i);  // never for valid text
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    out.push_back(cp);
    i += static_cast<std::size_t>(n);
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8::append_code_point(c, out);
  return out;
}

std::int64_t length(std::string_view s) {
  std::int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85) return true;
  if (c < 0xA0) return false;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string t = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string();
  const auto drop = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  std::size_t b = 0, e = t.size();
  if (left)
    while (b < e && drop(t[b])) ++b;
  if (right)
    while (e > b && drop(t[e - 1])) --e;
  return encode(std::u32string_view(t).substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit,
                               bool from_right) {
  std::vector<std::string> parts;
  charge(s.size() + 1);
  const auto full = [&] {
    if (parts.size() >= kMaxItems)
      throw Fail{"split: more than " + std::to_string(kMaxItems) + " parts (the most a list may hold)"};
  };
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw Fail{"split: the separator is empty"};
    if (!from_right) {
      std::size_t at = 0;
      for (std::int64_t k = 0; k < maxsplit; ++k) {
        const std::size_t hit = s.find(*sep, at);
        if (hit == std::string_view::npos) break;
        full(), parts.emplace_back(s.substr(at, hit - at));
        at = hit + sep->size();
      }
      full(), parts.emplace_back(s.substr(at));
    } else {
      std::size_t end = s.size();
      for (std::int64_t k = 0; k < maxsplit && end >= sep->size(); ++k) {
        const std::size_t hit = s.rfind(*sep, end - sep->size());
        if (hit == std::string_view::npos) break;
        full(), parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
        end = hit;
      }
      full(), parts.emplace_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  // Runs of whitespace; no empty strings.
  const std::u32string t = decode(s);
  if (!from_right) {
    std::size_t i = 0;
    std::int64_t done = 0;
    while (i < t.size()) {
      while (i < t.size() && is_space(t[i])) ++i;
      if (i == t.size()) break;
      if (done == maxsplit) {
        std::size_t e = t.size();
        while (e > i && is_space(t[e - 1])) --e;
        full(), parts.push_back(encode(std::u32string_view(t).substr(i, e - i)));
        break;
      }
      std::size_t j = i;
      while (j < t.size() && !is_space(t[j])) ++j;
      full(), parts.push_back(encode(std::u32string_view(t).substr(i, j - i)));
      ++done;
      i = j;
    }
  } else {
    std::size_t e = t.size();
    std::int64_t done = 0;
    while (e > 0) {
      while (e > 0 && is_space(t[e - 1])) --e;
      if (e == 0) break;
      if (done == maxsplit) {
        std::size_t b = 0;
        while (b < e && is_space(t[b])) ++b;
        full(), parts.push_back(encode(std::u32string_view(t).substr(b, e - b)));
        break;
      }
      std::size_t b = e;
      while (b > 0 && !is_space(t[b - 1])) --b;
      full(), parts.push_back(encode(std::u32string_view(t).substr(b, e - b)));
      ++done;
      e = b;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::string replace(std::string_view s, std::string_view old, std::string_view rep, std::int64_t count,
                    std::size_t max_bytes) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  charge(s.size() + 1);
  const auto add = [&](std::string_view piece) {
    charge(piece.size() + 1);
    if (out.size() + piece.size() > max_bytes)
      throw Fail{"replace: the result would exceed the limit of " + std::to_string(max_bytes) + " bytes"};
    out.append(piece);
  };
  if (old.empty()) {
    const std::u32string t = decode(s);
    std::int64_t done = 0;
    for (std::size_t k = 0; k <= t.size(); ++k) {
      if (done < count) {
        add(rep);
        ++done;
      }
      if (k < t.size()) add(encode(std::u32string_view(&t[k], 1)));
    }
    return out;
  }
  std::size_t at = 0;
  for (std::int64_t k = 0; k < count; ++k) {
    const std::size_t hit = s.find(old, at);
    if (hit == std::string_view::npos) break;
    add(s.substr(at, hit - at));
    add(rep);
    at = hit + old.size();
  }
  add(s.substr(at));
  return out;
}

std::int64_t find(std::string_view s, std::string_view sub) {
  charge(s.size() + 1);
  const std::size_t hit = s.find(sub);
  return hit == std::string_view::npos ? -1 : length(s.substr(0, hit));
}

std::int64_t count(std::string_view s, std::string_view sub) {
  charge(s.size() + 1);
  if (sub.empty()) return length(s) + 1;
  std::int64_t n = 0;
  for (std::size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

namespace {

bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

void put_upper(char32_t c, std::u32string& out) {
  if (c == 0xDF) {  // sharp s: "SS" (Python's full mapping)
    out += U"SS";
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}

void put_lower(char32_t c, std::u32string& out) {
  if (c == 0x130) {  // capital I with dot above: "i" + combining dot above
    out += U"i\u0307";
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

void put_title(char32_t c, std::u32string& out) {
  if (c == 0xDF) {
    out += U"Ss";
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
}

}  // namespace

std::string upper(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) put_upper(c, out);
  return encode(out);
}

std::string lower(std::string_view s) {
  std::u32string out;
  for (char32_t c : decode(s)) put_lower(c, out);
  return encode(out);
}

std::string title(std::string_view s) {
  std::u32string out;
  bool previous_cased = false;
  for (char32_t c : decode(s)) {
    if (previous_cased)
      put_lower(c, out);
    else
      put_title(c, out);
    previous_cased = is_cased(c);
  }
  return encode(out);
}

std::string capitalize(std::string_view s) {
  std::u32string out;
  bool first = true;
  for (char32_t c : decode(s)) {
    if (first)
      put_title(c, out);
    else
      put_lower(c, out);
    first = false;
  }
  return encode(out);
}

std::string title_filter(std::string_view s) {
  std::u32string out;
  bool piece_start = true;
  for (char32_t c : decode(s)) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c);
    if (sep) {
      out.push_back(c);
      piece_start = true;
    } else if (piece_start) {
      put_upper(c, out);
      piece_start = false;
    } else {
      put_lower(c, out);
    }
  }
  return encode(out);
}

bool is_lower(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode(s)) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || cat == UTF8PROC_CATEGORY_LL;
  }
  return cased;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (char32_t c : decode(s)) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || cat == UTF8PROC_CATEGORY_LU;
  }
  return cased;
}

std::vector<std::int64_t> slice_indices(std::int64_t n, std::optional<std::int64_t> start,
                                        std::optional<std::int64_t> stop, std::int64_t step) {
  // CPython's PySlice_AdjustIndices.
  std::int64_t lo, hi;
  if (step > 0) {
    lo = start ? *start : 0;
    hi = stop ? *stop : n;
    if (lo < 0) lo = std::max<std::int64_t>(lo + n, 0);
    if (hi < 0) hi = std::max<std::int64_t>(hi + n, 0);
    lo = std::min(lo, n);
    hi = std::min(hi, n);
  } else {
    lo = start ? *start : n - 1;
    hi = stop ? *stop : -1;
    if (start && lo < 0) lo = std::max<std::int64_t>(lo + n, -1);
    if (stop && hi < 0) hi = std::max<std::int64_t>(hi + n, -1);
    lo = std::min(lo, n - 1);
    hi = std::min(hi, n - 1);
  }
  std::vector<std::int64_t> idx;  // __int128: lo + step never overflows
  if (step > 0)
    for (__int128 k = lo; k < hi; k += step) idx.push_back(static_cast<std::int64_t>(k));
  else
    for (__int128 k = lo; k > hi; k += step) idx.push_back(static_cast<std::int64_t>(k));
  return idx;
}

}  // namespace qkv::jinja::text
