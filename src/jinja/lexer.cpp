// jinja2's lexer with trim_blocks and lstrip_blocks (see lexer.h). It follows jinja2's own
// rules (jinja2/lexer.py, Lexer.tokeniter) step by step, so text and whitespace come out byte for
// byte as jinja2 renders them.
#include "lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "text.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::jinja {

namespace utf8 = ::qkv::tokenize::utf8;

void SourceMap::build() {
  line_starts.assign(1, 0);
  for (std::size_t k = 0; k < source.size(); ++k)
    if (source[k] == '\n') line_starts.push_back(k + 1);
}

int SourceMap::line(std::size_t pos) const {
  return static_cast<int>(std::upper_bound(line_starts.begin(), line_starts.end(), pos) - line_starts.begin());
}

int SourceMap::column(std::size_t pos) const {
  const std::size_t start = line_starts[static_cast<std::size_t>(line(pos) - 1)];
  pos = std::min(pos, source.size());
  return static_cast<int>(text::length(std::string_view(source).substr(start, pos - start))) + 1;
}

std::string normalize_source(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t k = 0; k < text.size(); ++k) {
    if (text[k] == '\r') {
      out += '\n';
      if (k + 1 < text.size() && text[k + 1] == '\n') ++k;
    } else {
      out += text[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

namespace {

// The length of the whitespace character at s[pos] (Python's \s), or 0.
std::size_t space_at(const std::string& s, std::size_t pos) {
  const unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return text::is_space(c) ? 1 : 0;
  const std::size_t n = c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  if (pos + n > s.size()) return 0;
  const std::u32string cp = text::decode(std::string_view(s).substr(pos, n));
  return !cp.empty() && text::is_space(cp[0]) ? n : 0;
}

std::size_t skip_spaces(const std::string& s, std::size_t pos) {
  while (pos < s.size()) {
    const std::size_t n = space_at(s, pos);
    if (!n) break;
    pos += n;
  }
  return pos;
}

bool all_space(const std::string& s, std::size_t from, std::size_t to) {
  if (from >= to) return false;  // jinja2's \s+ needs one character
  return skip_spaces(s.substr(0, to), from) == to;
}

bool starts(const std::string& s, std::size_t pos, const char* lit) {
  return s.compare(pos, std::strlen(lit), lit) == 0;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body, as jinja2 applies it (after
// encoding the body with "backslashreplace", which turns a non-ASCII character written right
// after a backslash into its \x / \u / \U spelling).
std::string unescape(const std::string& body, std::size_t pos) {
  std::string out;
  const auto put = [&](char32_t cp) {
    if (cp > 0x10FFFF) throw SyntaxFail{pos, "a string escape gives an illegal Unicode character"};
    if (cp >= 0xD800 && cp <= 0xDFFF) throw SyntaxFail{pos, "a string escape gives a lone surrogate"};
    utf8::append_code_point(cp, out);
  };
  const auto hex = [&](std::size_t at, int digits, const char* what) {
    char32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = at + static_cast<std::size_t>(k) < body.size() ? hex_value(body[at + static_cast<std::size_t>(k)]) : -1;
      if (h < 0) throw SyntaxFail{pos, std::string("truncated ") + what + " escape in a string"};
      v = v * 16 + static_cast<char32_t>(h);
    }
    return v;
  };
  for (std::size_t k = 0; k < body.size(); ++k) {
    const char c = body[k];
    if (c != '\\') {
      out += c;
      continue;
    }
    if (k + 1 == body.size()) throw SyntaxFail{pos, "a string ends with a lone backslash"};
    const char e = body[++k];
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': put(hex(k + 1, 2, "\\xXX")); k += 2; break;
      case 'u': put(hex(k + 1, 4, "\\uXXXX")); k += 4; break;
      case 'U': put(hex(k + 1, 8, "\\UXXXXXXXX")); k += 8; break;
      case 'N': throw SyntaxFail{pos, "\\N{...} escapes in strings are not supported"};
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int d = 0; d < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7'; ++d)
            v = v * 8 + static_cast<char32_t>(body[++k] - '0');
          put(v);
        } else if (static_cast<unsigned char>(e) >= 0x80) {
          // "\é" was "\\xe9" after backslashreplace: a backslash, then the escape's letters.
          const unsigned char lead = static_cast<unsigned char>(e);
          const std::size_t n = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
          const char32_t cp = text::decode(std::string_view(body).substr(k, n))[0];
          char buf[16];
          if (cp < 0x100)
            std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
          else if (cp < 0x10000)
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
          else
            std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
          out += buf;
          k += n - 1;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Token> run() {
    std::size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      const std::size_t t = next_tag(pos);
      if (t == std::string::npos) {
        emit_data(s_.substr(pos), pos);
        break;
      }
      const char kind = s_[t + 1];  // '{' variable, '%' block, '#' comment
      std::size_t after = t + 2;
      char sign = 0;
      if (after < s_.size() && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];
      const std::size_t raw_end = kind == '%' ? raw_begin_end(after) : std::string::npos;
      std::string text = s_.substr(pos, t - pos);
      strip_before(text, sign, kind != '{', line_starting);
      emit_data(std::move(text), pos);
      if (raw_end != std::string::npos) {
        pos = raw_body(raw_end, line_starting);
      } else if (kind == '#') {
        pos = comment(t, after, line_starting);
      } else {
        pos = tag(t, after, kind == '%', line_starting);
      }
    }
    out_.push_back(Token{Tok::Eof, s_.size(), "", 0, 0.0});
    return std::move(out_);
  }

 private:
  std::size_t next_tag(std::size_t pos) const {
    for (std::size_t k = s_.find('{', pos); k != std::string::npos; k = s_.find('{', k + 1))
      if (k + 1 < s_.size() && (s_[k + 1] == '{' || s_[k + 1] == '%' || s_[k + 1] == '#')) return k;
    return std::string::npos;
  }

  void emit_data(std::string text, std::size_t pos) {
    if (!text.empty()) out_.push_back(Token{Tok::Data, pos, std::move(text), 0, 0.0});
  }

  // jinja2's OptionalLStrip: `-` strips all whitespace before the tag; otherwise (not `+`, not a
  // variable) lstrip_blocks drops indentation alone on the tag's line.
  void strip_before(std::string& text, char sign, bool lstrip, bool line_starting) const {
    if (sign == '-') {
      text = text::strip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip) {
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && all_space(text, l_pos, text.size())) text.resize(l_pos);
    }
  }

  // `{% raw %}` (after "{%" and its sign): the offset after the tag, or npos when this is no raw tag.
  std::size_t raw_begin_end(std::size_t p) const {
    p = skip_spaces(s_, p);
    if (!starts(s_, p, "raw")) return std::string::npos;
    p = skip_spaces(s_, p + 3);
    if (starts(s_, p, "-%}")) return skip_spaces(s_, p + 3);
    if (starts(s_, p, "%}")) return p + 2;
    return std::string::npos;
  }

  std::size_t raw_body(std::size_t p, bool& line_starting) {
    for (std::size_t t = s_.find("{%", p); t != std::string::npos; t = s_.find("{%", t + 1)) {
      std::size_t q = t + 2;
      char sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      q = skip_spaces(s_, q);
      if (!starts(s_, q, "endraw")) continue;
      q = skip_spaces(s_, q + 6);
      std::size_t end;
      if (starts(s_, q, "+%}"))
        end = q + 3;
      else if (starts(s_, q, "-%}"))
        end = skip_spaces(s_, q + 3);
      else if (starts(s_, q, "%}"))
        end = q + 2 + (q + 2 < s_.size() && s_[q + 2] == '\n');
      else
        continue;
      std::string text = s_.substr(p, t - p);
      strip_before(text, sign, true, line_starting);
      emit_data(std::move(text), p);
      line_starting = s_[end - 1] == '\n';
      return end;
    }
    throw SyntaxFail{p, "missing {% endraw %} for this raw block"};
  }

  std::size_t comment(std::size_t start, std::size_t p, bool& line_starting) {
    for (; p < s_.size(); ++p) {
      std::size_t end = 0;
      if (starts(s_, p, "+#}"))
        end = p + 3;
      else if (starts(s_, p, "-#}"))
        end = skip_spaces(s_, p + 3);
      else if (starts(s_, p, "#}"))
        end = p + 2 + (p + 2 < s_.size() && s_[p + 2] == '\n');
      if (end) {
        line_starting = s_[end - 1] == '\n';
        return end;
      }
    }
    throw SyntaxFail{start, "missing end of comment tag (#})"};
  }

  // The tokens of a {{ }} or {% %} tag; returns the offset after its end.
  std::size_t tag(std::size_t start, std::size_t p, bool block, bool& line_starting) {
    out_.push_back(Token{block ? Tok::BlockBegin : Tok::VarBegin, start, "", 0, 0.0});
    std::vector<char> balance;
    while (true) {
      if (p >= s_.size())
        throw SyntaxFail{s_.size(), std::string("unexpected end of template: the ") + (block ? "{% %}" : "{{ }}") +
                                        " tag opened here is never closed"};
      if (balance.empty()) {
        std::size_t end = 0;
        if (block) {
          if (starts(s_, p, "+%}"))
            end = p + 3;
          else if (starts(s_, p, "-%}"))
            end = skip_spaces(s_, p + 3);
          else if (starts(s_, p, "%}"))
            end = p + 2 + (p + 2 < s_.size() && s_[p + 2] == '\n');
        } else {
          if (starts(s_, p, "-}}"))
            end = skip_spaces(s_, p + 3);
          else if (starts(s_, p, "}}"))
            end = p + 2;
        }
        if (end) {
          out_.push_back(Token{block ? Tok::BlockEnd : Tok::VarEnd, p, "", 0, 0.0});
          line_starting = s_[end - 1] == '\n';
          return end;
        }
      }
      if (const std::size_t n = space_at(s_, p)) {
        p = skip_spaces(s_, p + n);
        continue;
      }
      p = token(p, balance);
    }
  }

  std::size_t token(std::size_t p, std::vector<char>& balance) {
    const char c = s_[p];
    if (is_digit(c)) return number(p);
    if (is_name_start(c)) {
      std::size_t e = p;
      while (e < s_.size() && is_name_char(s_[e])) ++e;
      out_.push_back(Token{Tok::Name, p, s_.substr(p, e - p), 0, 0.0});
      return e;
    }
    if (c == '\'' || c == '"') return string(p);
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (starts(s_, p, op)) {
        out_.push_back(Token{Tok::Op, p, op, 0, 0.0});
        return p + 2;
      }
    if (std::strchr("+-/*%~[](){}<>=.:|,;", c) && c != '\0') {
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty()) throw SyntaxFail{p, std::string("unexpected '") + c + "'"};
        if (balance.back() != c)
          throw SyntaxFail{p, std::string("unexpected '") + c + "', expected '" + balance.back() + "'"};
        balance.pop_back();
      }
      out_.push_back(Token{Tok::Op, p, std::string(1, c), 0, 0.0});
      return p + 1;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    std::string shown = u < 0x80 ? std::string(1, c) : s_.substr(p, u < 0xE0 ? 2 : u < 0xF0 ? 3 : 4);
    throw SyntaxFail{p, "unexpected character '" + shown + "' in a tag"};
  }

  // jinja2's float_re, then integer_re (digits with single `_` separators).
  std::size_t number(std::size_t p) {
    const auto digits = [&](std::size_t q) {  // (\d+_)*\d+ ; returns the end or q when none
      std::size_t e = q;
      while (e < s_.size() && is_digit(s_[e])) {
        while (e < s_.size() && is_digit(s_[e])) ++e;
        if (e + 1 < s_.size() && s_[e] == '_' && is_digit(s_[e + 1])) ++e;
      }
      return e;
    };
    const bool after_dot = p > 0 && s_[p - 1] == '.';
    const std::size_t int_end = digits(p);
    if (!after_dot) {
      std::size_t e = int_end;
      bool is_float = false;
      if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
        e = digits(e + 1);
        is_float = true;
      }
      if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
        std::size_t q = e + 1;
        if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
        if (q < s_.size() && is_digit(s_[q])) {
          e = digits(q);
          is_float = true;
        }
      }
      if (is_float) {
        std::string t = s_.substr(p, e - p);
        t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
        out_.push_back(Token{Tok::Float, p, "", 0, std::strtod(t.c_str(), nullptr)});
        return e;
      }
    }
    // Integers: 0b / 0o / 0x with `_?digit` groups, [1-9](_?\d)*, or 0(_?0)*.
    int base = 10;
    std::size_t q = p;
    if (s_[p] == '0' && p + 1 < s_.size()) {
      const char x = static_cast<char>(s_[p + 1] | 0x20);
      base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
      if (base != 10) q = p + 2;
    }
    const auto ok = [&](char d) {
      const int h = hex_value(d);
      return h >= 0 && h < base;
    };
    std::size_t e = q;
    std::string t;
    if (base == 10 && s_[p] == '0') {
      t = "0";
      ++e;
      while (e < s_.size() && (s_[e] == '0' || (s_[e] == '_' && e + 1 < s_.size() && s_[e + 1] == '0')))
        e += s_[e] == '_' ? 2 : 1;
    } else {
      while (e < s_.size()) {
        if (ok(s_[e])) {
          t += s_[e++];
        } else if (s_[e] == '_' && e + 1 < s_.size() && ok(s_[e + 1]) && (base != 10 || e > q)) {
          ++e;
        } else {
          break;
        }
      }
      if (t.empty()) {  // "0x" with no digits: the integer 0, then a name
        t = "0";
        e = p + 1;
        base = 10;
      }
    }
    errno = 0;
    char* stop = nullptr;
    const unsigned long long v = std::strtoull(t.c_str(), &stop, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      throw SyntaxFail{p, "the integer " + s_.substr(p, e - p) + " does not fit in 64 bits"};
    out_.push_back(Token{Tok::Int, p, "", static_cast<std::int64_t>(v), 0.0});
    return e;
  }

  std::size_t string(std::size_t p) {
    const char q = s_[p];
    std::size_t e = p + 1;
    while (e < s_.size() && s_[e] != q) e += s_[e] == '\\' ? 2 : 1;
    if (e >= s_.size()) throw SyntaxFail{p, "unterminated string (no closing " + std::string(1, q) + ")"};
    out_.push_back(Token{Tok::String, p, unescape(s_.substr(p + 1, e - p - 1), p), 0, 0.0});
    return e + 1;
  }

  const std::string& s_;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace qkv::jinja
