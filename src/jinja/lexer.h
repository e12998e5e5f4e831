// The lexer of qkv's Jinja2 subset: jinja2's Lexer with transformers' settings (trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False, the default delimiters {{ }} {% %} {# #}).
//
//   - line breaks (\r\n, \r, \n) become \n, and one final line break of the template is dropped;
//   - text before a tag: `{%-` / `{{-` / `{#-` strip all whitespace before the tag; otherwise a
//     block or comment tag alone on its line (after indentation) drops that indentation
//     (lstrip_blocks), unless written `{%+`;
//   - after a tag: `-%}` / `-}}` / `-#}` strip all whitespace after it; `%}` and `#}` eat one
//     following newline (trim_blocks) unless written `+%}`;
//   - comments vanish; `{% raw %}...{% endraw %}` is text.
// Inside tags: names, strings (Python escapes), integers (0x / 0o / 0b, `_` separators), floats,
// and the operators of jinja2. Positions are byte offsets into the normalized source.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv::jinja {

enum class Tok : std::uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::size_t pos;    // byte offset in the normalized source
  std::string text;   // Data / Name / String (unescaped) / Op
  std::int64_t i = 0;
  double f = 0.0;
};

// Where a template's error is: the normalized source and how to turn an offset into line:column.
struct SourceMap {
  std::string source;  // normalized
  std::vector<std::size_t> line_starts;
  void build();
  int line(std::size_t pos) const;
  int column(std::size_t pos) const;  // 1-based, in characters
};

// Normalizes the line breaks of `text` (and drops one final line break) as jinja2 does.
std::string normalize_source(const std::string& text);

// Thrown by the lexer and parser: an error at an offset.
struct SyntaxFail {
  std::size_t pos;
  std::string message;
};

// The tokens of a normalized source; SyntaxFail on a lexical error.
std::vector<Token> lex(const std::string& source);

}  // namespace qkv::jinja
