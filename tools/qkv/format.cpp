#include "format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "qkv/core/tensor.h"

namespace qkv::tool {

std::string fixed(double v, int precision) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  std::string s = buf;
  // Avoid "-0.000": a value that rounds to zero prints without a sign.
  if (s.size() > 1 && s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string general(double v, int significant) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  return buf;
}

static std::string join_shape(const Shape& s, const char* open, const char* close) {
  std::string out = open;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + close;
}

std::string shape_paren(const Shape& s) { return join_shape(s, "(", ")"); }
std::string shape_list(const Shape& s) { return join_shape(s, "[", "]"); }

std::string first_values(const Tensor& t, std::int64_t n, int precision) {
  if (n <= 0) return "";
  const std::int64_t total = t.numel();
  const std::int64_t k = std::min(n, total);
  // Only the first k elements: narrow a flattened contiguous copy's prefix.
  Tensor flat = t.contiguous().view({total}).narrow(0, 0, k);
  std::vector<double> v = flat.to_vector<double>();
  std::string out;
  for (std::int64_t i = 0; i < k; ++i) {
    if (i) out += ' ';
    out += fixed(v[static_cast<std::size_t>(i)], precision);
  }
  if (total > k) out += " ...";
  return out;
}

void print_section(std::ostream& os, const std::string& title) {
  os << "\n== " << title << " ==\n";
}

std::size_t display_width(const std::string& s) {
  std::size_t w = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++w;  // count code points, not continuation bytes
  return w;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {
  align_.assign(headers_.size(), Align::Right);
  if (!align_.empty()) align_[0] = Align::Left;
}

Table& Table::align(std::size_t column, Align a) {
  if (column < align_.size()) align_[column] = a;
  return *this;
}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::add_rule() { rows_.emplace_back(); }

void Table::print(std::ostream& os, const std::string& indent) const {
  const std::size_t n = headers_.size();
  std::vector<std::size_t> width(n, 0);
  for (std::size_t c = 0; c < n; ++c) width[c] = display_width(headers_[c]);
  for (const auto& r : rows_)
    for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], display_width(r[c]));

  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = indent;
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t pad = width[c] - display_width(cells[c]);
      if (c) out += "  ";
      if (align_[c] == Align::Right) out += std::string(pad, ' ') + cells[c];
      else out += cells[c] + (c + 1 < n ? std::string(pad, ' ') : std::string());
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    os << out << '\n';
  };
  auto rule = [&] {
    std::size_t total = 0;
    for (std::size_t c = 0; c < n; ++c) total += width[c] + (c ? 2 : 0);
    os << indent << std::string(total, '-') << '\n';
  };
  line(headers_);
  rule();
  for (const auto& r : rows_) {
    if (r.empty()) rule();
    else line(r);
  }
}

ReplacingStreambuf::ReplacingStreambuf(std::ostream& dest, std::string from, std::string to)
    : dest_(dest), from_(std::move(from)), to_(std::move(to)) {}

ReplacingStreambuf::~ReplacingStreambuf() { forward(); }

void ReplacingStreambuf::forward() {
  if (line_.empty()) return;
  if (!from_.empty())
    for (std::size_t at = line_.find(from_); at != std::string::npos; at = line_.find(from_, at + to_.size()))
      line_.replace(at, from_.size(), to_);
  dest_ << line_;
  line_.clear();
}

ReplacingStreambuf::int_type ReplacingStreambuf::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  line_ += traits_type::to_char_type(c);
  if (c == '\n') forward();
  return c;
}

std::streamsize ReplacingStreambuf::xsputn(const char* s, std::streamsize n) {
  for (std::streamsize i = 0; i < n; ++i) overflow(traits_type::to_int_type(s[i]));
  return n;
}

int ReplacingStreambuf::sync() {
  forward();
  dest_.flush();
  return 0;
}

}  // namespace qkv::tool
