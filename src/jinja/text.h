// Python's str operations on UTF-8 text, in code points, for qkv's Jinja2 subset: length, index,
// slice, strip / split / replace / find, case mapping (upper, lower, title, capitalize) and what
// repr() escapes. The text is valid UTF-8 (checked where it enters: template, messages, variables).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::jinja::text {

std::u32string decode(std::string_view s);  // valid UTF-8 -> code points
std::string encode(std::u32string_view s);
std::int64_t length(std::string_view s);     // in code points

// Python's str.isspace() for one code point (\t \n \v \f \r, \x1c-\x1f, space, \x85, \xa0, Zs, ...).
bool is_space(char32_t c);
// Python's str.isprintable() for one code point (what repr() leaves unescaped).
bool is_printable(char32_t c);

// s.strip(chars) / lstrip / rstrip; chars = nullopt: whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// s.split(sep, maxsplit) (sep = nullopt: runs of whitespace); s.rsplit when from_right.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit,
                               bool from_right);
// s.replace(old, new, count) (count < 0: all); an empty `old` inserts `new` around every character.
// Fails (jinja::Fail) past max_bytes.
std::string replace(std::string_view s, std::string_view old, std::string_view rep, std::int64_t count,
                    std::size_t max_bytes);
// s.find(sub) in code points, or -1.
std::int64_t find(std::string_view s, std::string_view sub);
// s.count(sub).
std::int64_t count(std::string_view s, std::string_view sub);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
// jinja2's title filter (not str.title): split before runs of `-`, whitespace, `(`, `{`, `[`, `<`;
// each piece's first character upper-cased, the rest lower-cased.
std::string title_filter(std::string_view s);
bool is_lower(std::string_view s);  // str.islower()
bool is_upper(std::string_view s);  // str.isupper()

// Python's slice s[start:stop:step] on n items: the indices taken, in order. step != 0.
std::vector<std::int64_t> slice_indices(std::int64_t n, std::optional<std::int64_t> start,
                                        std::optional<std::int64_t> stop, std::int64_t step);

}  // namespace qkv::jinja::text
