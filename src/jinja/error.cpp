// The Jinja engine's error (see error.h).
#include "error.h"

#include "lexer.h"

namespace qkv::jinja {

TemplateError::TemplateError(std::string source, int line, int column, std::string detail, bool raised)
    : ValueError(source + " line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + detail),
      source_(std::move(source)),
      line_(line),
      column_(column),
      detail_(std::move(detail)),
      raised_(raised) {}

void throw_template_error(const SourceMap& map, const std::string& source_name, std::size_t pos,
                          const std::string& message, bool raised) {
  throw TemplateError(source_name, map.line(pos), map.column(pos), message, raised);
}

}  // namespace qkv::jinja
