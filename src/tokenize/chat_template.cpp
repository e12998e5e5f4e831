// ChatTemplate: parse once, render many times (see chat_template.h), and the OpenAI-style
// messages reader. The Jinja2 subset itself is src/jinja/.
#include "qkv/tokenize/chat_template.h"

#include <nlohmann/json.hpp>

#include "../jinja/ast.h"
#include "../jinja/error.h"
#include "../jinja/lexer.h"
#include "../jinja/render.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

using json = nlohmann::ordered_json;
namespace jj = ::qkv::jinja;

constexpr std::size_t kMaxTemplateBytes = std::size_t{4} << 20;

std::string where(const std::string& source, int line, int column) {
  return source + " line " + std::to_string(line) + ", column " + std::to_string(column) + ": ";
}

// A short JSON rendering of a value for a message.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

const char* json_type(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer: case json::value_t::number_unsigned: case json::value_t::number_float:
      return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a value";
  }
}

jj::Value to_value(const json& v, int depth, const std::string& what) {
  if (depth > jj::kMaxDepth)
    throw ValueError(what + " nests deeper than " + std::to_string(jj::kMaxDepth) + " levels");
  switch (v.type()) {
    case json::value_t::null: return jj::Value::none();
    case json::value_t::boolean: return jj::Value::boolean(v.get<bool>());
    case json::value_t::number_integer: return jj::Value::integer(v.get<std::int64_t>());
    case json::value_t::number_unsigned: {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return jj::Value::number(static_cast<double>(u));
      return jj::Value::integer(static_cast<std::int64_t>(u));
    }
    case json::value_t::number_float: return jj::Value::number(v.get<double>());
    case json::value_t::string: return jj::Value::str(v.get<std::string>());
    case json::value_t::array: {
      std::vector<jj::Value> items;
      for (const json& x : v) items.push_back(to_value(x, depth + 1, what));
      return jj::Value::list(std::move(items));
    }
    case json::value_t::object: {
      auto m = std::make_shared<jj::Map>();
      for (const auto& [k, x] : v.items()) m->set(jj::Value::str(k), to_value(x, depth + 1, what));
      return jj::Value::dict(std::move(m));
    }
    default: throw ValueError(what + " holds a value that is not JSON");
  }
}

json parse_json(std::string_view text, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e999
    std::string msg = e.what();
    const std::size_t at = msg.find("] ");
    throw ValueError(what + " is not valid JSON: " + (at == std::string::npos ? msg : msg.substr(at + 2)));
  }
}

// A message as transformers hands it to the template: role, content, then the other fields;
// transformers' _alias_reasoning_fields puts a reasoning text under "thinking" (first) and
// "reasoning_content" (last) as well.
jj::Value message_value(const ChatMessage& m, std::size_t k) {
  const std::string what = "message " + std::to_string(k);
  utf8::check(m.role, what + "'s role");
  utf8::check(m.content, what + "'s content");
  auto map = std::make_shared<jj::Map>();
  std::vector<std::pair<std::string, jj::Value>> extra;
  std::optional<jj::Value> parts;  // content given as a list of parts ({"type": "text", "text": ...})
  if (!m.extra_json.empty()) {
    const json x = parse_json(m.extra_json, what + "'s extra_json");
    if (!x.is_object()) throw ValueError(what + "'s extra_json is " + json_type(x) + ", not a JSON object");
    for (const auto& [key, v] : x.items()) {
      if (key == "content" && v.is_array()) parts = to_value(v, 1, what);
      if (key != "role" && key != "content" && !v.is_null()) extra.emplace_back(key, to_value(v, 1, what));
    }
  }
  std::optional<jj::Value> reasoning;
  for (const char* name : {"reasoning_content", "thinking", "reasoning"})
    for (const auto& [key, v] : extra)
      if (!reasoning && key == name) reasoning = v;
  if (reasoning) map->set(jj::Value::str("thinking"), *reasoning);
  map->set(jj::Value::str("role"), jj::Value::str(m.role));
  map->set(jj::Value::str("content"), parts ? *parts : jj::Value::str(m.content));
  for (auto& [key, v] : extra) map->set(jj::Value::str(key), std::move(v));
  if (reasoning) map->set(jj::Value::str("reasoning_content"), *reasoning);
  return jj::Value::dict(std::move(map));
}

}  // namespace

ChatTemplateError::ChatTemplateError(const std::string& source, int line, int column, std::string detail, bool raised)
    : ValueError(where(source, line, column) + (raised ? "the template raised an error: " : "") + detail),
      line_(line),
      column_(column),
      detail_(std::move(detail)),
      raised_(raised) {}

struct ChatTemplate::Impl {
  std::string source_name;
  jj::SourceMap map;
  jj::Program program;
};

ChatTemplate::ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

const std::string& ChatTemplate::source_name() const { return impl_->source_name; }

namespace {

// The engine's error as the chat template's.
ChatTemplateError chat_error(const jj::TemplateError& e) {
  return ChatTemplateError(e.source(), e.line(), e.column(), e.detail(), e.raised());
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string text, std::string source_name) try {
  auto impl = std::make_shared<Impl>();
  impl->source_name = source_name.empty() ? "chat template" : std::move(source_name);
  if (text.size() > kMaxTemplateBytes)
    throw ChatTemplateError(impl->source_name, 1, 1,
                            "the template is " + std::to_string(text.size()) + " bytes, more than the " +
                                std::to_string(kMaxTemplateBytes) + " a chat template may be",
                            false);
  if (const auto bad = utf8::find_invalid(text)) {
    impl->map.source = text.substr(0, bad->offset);
    impl->map.build();
    jj::throw_template_error(impl->map, impl->source_name, bad->offset,
                             "the template is not valid UTF-8 (" + bad->reason + ")", false);
  }
  impl->map.source = jj::normalize_source(text);
  impl->map.build();
  try {
    impl->program = jj::parse_tokens(jj::lex(impl->map.source));
  } catch (const jj::SyntaxFail& f) {
    jj::throw_template_error(impl->map, impl->source_name, f.pos, f.message, false);
  }
  return ChatTemplate(std::move(impl));
} catch (const jj::TemplateError& e) {
  throw chat_error(e);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const {
  jj::Renderer::Frame vars;
  std::vector<jj::Value> msgs;
  msgs.reserve(messages.size());
  try {
    for (std::size_t k = 0; k < messages.size(); ++k) msgs.push_back(message_value(messages[k], k));
    vars["messages"] = jj::Value::list(std::move(msgs));
    vars["tools"] = jj::Value::none();
    vars["documents"] = jj::Value::none();
    vars["add_generation_prompt"] = jj::Value::boolean(options.add_generation_prompt);
    if (options.bos_token) {
      utf8::check(*options.bos_token, "bos_token");
      vars["bos_token"] = jj::Value::str(*options.bos_token);
    }
    if (options.eos_token) {
      utf8::check(*options.eos_token, "eos_token");
      vars["eos_token"] = jj::Value::str(*options.eos_token);
    }
    for (const auto& [name, text] : options.extra_vars_json) {
      if (name == "messages" || name == "add_generation_prompt")
        throw ValueError("chat template variable '" + name + "' cannot be set as an extra variable");
      vars[name] = to_value(parse_json(text, "chat template variable '" + name + "'"), 0,
                            "chat template variable '" + name + "'");
    }
  } catch (const jj::Fail& f) {
    throw ValueError("chat template variables: " + f.message);
  }
  const jj::Limits limits{options.limits.max_output_bytes, options.limits.max_work,
                          options.limits.max_loop_iterations, options.limits.max_call_depth};
  jj::Renderer r(impl_->program, impl_->map, impl_->source_name, limits);
  try {
    return r.render(std::move(vars));
  } catch (const jj::TemplateError& e) {
    throw chat_error(e);
  }
}

std::vector<ChatMessage> parse_chat_messages_json(std::string_view text, const std::string& source) {
  const json doc = parse_json(text, source);
  if (!doc.is_array())
    throw ValueError(source + ": messages must be a JSON array of {\"role\": ..., \"content\": ...} objects, not " +
                     json_type(doc));
  std::vector<ChatMessage> out;
  out.reserve(doc.size());
  for (std::size_t k = 0; k < doc.size(); ++k) {
    const json& m = doc[k];
    const std::string el = source + ": element " + std::to_string(k);
    if (!m.is_object()) throw ValueError(el + " is " + json_type(m) + " (" + shown(m) + "), not an object");
    ChatMessage msg;
    json extra = json::object();
    for (const char* field : {"role", "content"}) {
      const auto it = m.find(field);
      if (it == m.end()) throw ValueError(el + " has no \"" + field + "\"");
      // Content may be a list of parts (OpenAI's and transformers' multimodal form): the template
      // sees the list; `content` keeps the text of its text parts.
      if (std::string(field) == "content" && it->is_array()) {
        for (const json& part : *it) {
          if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
            throw ValueError(el + "'s \"content\" list holds " + shown(part) + ", not a {\"type\": ...} part");
          if (part["type"] == "text") {
            if (!part.contains("text") || !part["text"].is_string())
              throw ValueError(el + "'s text part " + shown(part) + " has no \"text\" string");
            msg.content += part["text"].get<std::string>();
          }
        }
        extra["content"] = *it;
        continue;
      }
      if (!it->is_string())
        throw ValueError(el + "'s \"" + field + "\" is " + json_type(*it) + ", not a string" +
                         (std::string(field) == "content" ? " or a list of parts" : ""));
      (std::string(field) == "role" ? msg.role : msg.content) = it->get<std::string>();
    }
    for (const auto& [key, v] : m.items())
      if (key != "role" && key != "content" && !v.is_null()) extra[key] = v;
    if (!extra.empty()) msg.extra_json = extra.dump(-1, ' ', false, json::error_handler_t::strict);
    out.push_back(std::move(msg));
  }
  return out;
}

std::map<std::string, std::string> parse_chat_template_kwargs(std::string_view text, const std::string& source) {
  const json doc = parse_json(text, source);
  if (!doc.is_object())
    throw ValueError(source + " must be a JSON object of template variables (e.g. {\"enable_thinking\": false}), not " +
                     json_type(doc));
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : doc.items()) {
    if (key == "messages" || key == "add_generation_prompt")
      throw ValueError(source + ": '" + key + "' is set by qkv itself, not a variable to pass");
    out[key] = v.dump(-1, ' ', false, json::error_handler_t::strict);
  }
  return out;
}

}  // namespace qkv::tokenize
