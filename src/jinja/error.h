// The error of qkv's Jinja2 engine (internal header of jinja/): a template that cannot be parsed
// or rendered, or one that raised its own error (raise_exception), at a line and column of its
// source. tokenize/chat_template.cpp gives it to users as a ChatTemplateError.
#pragma once
#include <cstddef>
#include <string>

#include "qkv/core/error.h"

namespace qkv::jinja {

struct SourceMap;

class TemplateError : public ValueError {
 public:
  TemplateError(std::string source, int line, int column, std::string detail, bool raised);
  const std::string& source() const { return source_; }
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& detail() const { return detail_; }
  bool raised() const { return raised_; }

 private:
  std::string source_;
  int line_, column_;
  std::string detail_;
  bool raised_;
};

// A TemplateError at byte `pos` of the (normalized) template text `map` describes.
[[noreturn]] void throw_template_error(const SourceMap& map, const std::string& source_name, std::size_t pos,
                                       const std::string& message, bool raised);

}  // namespace qkv::jinja
