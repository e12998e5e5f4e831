// Chat templates: a model's Jinja2 template (GGUF `tokenizer.chat_template`, `chat_template` in
// tokenizer_config.json, or chat_template.jinja) rendered exactly as transformers'
// apply_chat_template(..., tokenize=False) renders it: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, plus transformers' globals raise_exception, strftime_now,
// namespace and dict, and its tojson (ensure_ascii=False, indent, separators, sort_keys).
//
// The Jinja2 subset (what real chat templates use):
//   tags      for (loop.index / index0 / first / last / length / revindex / previtem / nextitem /
//             cycle, `for x in xs if c`, else, break / continue), if / elif / else, set (names,
//             tuples, `ns.x` on namespace() objects, {% set x %}...{% endset %}), macro, with,
//             raw, transformers' generation; whitespace control {%- -%} {{- -}} {#- -#} {%+ +%}
//   values    strings (Python escapes), ints, floats, true/false/none, lists, tuples, dicts
//   operators . [] [a:b:c] () | is; not and or; in, not in; == != < <= > >=; + - * / // % ** ~;
//             x if c else y
//   filters   abs capitalize count d default first float indent int items join last length list
//             lower map reject rejectattr replace reverse safe select selectattr sort string title
//             tojson trim unique upper
//   tests     defined undefined none boolean true false integer float number string mapping
//             iterable sequence callable lower upper odd even divisibleby in eq ne lt le gt ge
//             (and ==, !=, <, ... equalto, greaterthan, lessthan) sameas
//   methods   str: strip lstrip rstrip split rsplit startswith endswith upper lower title
//             capitalize replace find index count join isspace isdigit isalpha isalnum islower
//             isupper; dict: items keys values get; list / tuple: index count
//   globals   range namespace dict raise_exception strftime_now
// Undefined variables behave as jinja2's default Undefined: empty when printed, false, nothing
// when iterated, an error when used as a value (`x.y`, `x + 1`). Anything else is a
// ChatTemplateError naming the line and column: "chat template line 3, column 12: the filter
// 'wordcount' is not supported".
//
// Templates come from model files: a hostile one cannot crash, hang or exhaust memory. Parsing
// bounds the size and nesting; rendering bounds the output, the work, the loop iterations and
// the macro call depth (ChatTemplateLimits), each a ChatTemplateError when passed.
//
// A parsed ChatTemplate is immutable: render() is const and may run from many threads at once.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::tokenize {

// An error of a chat template, at parse or render time. what() is the whole line
// "<source> line L, column C: <detail>"; raised_by_template() tells a raise_exception(msg) of the
// template itself (detail() is then exactly msg, e.g. "Conversation roles must alternate
// user/assistant/user/assistant/...") from a template the engine cannot render.
class ChatTemplateError : public ValueError {
 public:
  ChatTemplateError(const std::string& source, int line, int column, std::string detail, bool raised);
  int line() const { return line_; }
  int column() const { return column_; }
  const std::string& detail() const { return detail_; }
  bool raised_by_template() const { return raised_; }

 private:
  int line_, column_;
  std::string detail_;
  bool raised_;
};

// One message of a conversation. `extra_json`, when not empty, is a JSON object of the message's
// other fields ("name", "tool_calls", "tool_call_id", ...), which the template sees after role and
// content (a template may read message.tool_calls); a "content" list there (parts such as
// {"type": "text", "text": ...}) is what the template sees as the content, `content` then
// holding the text of its text parts.
struct ChatMessage {
  std::string role;
  std::string content;
  std::string extra_json;
};

struct ChatTemplateLimits {
  std::size_t max_output_bytes = std::size_t{32} << 20;   // the rendered text, and any string built
  std::uint64_t max_work = std::uint64_t{1} << 31;         // evaluation steps + bytes touched
  std::uint64_t max_loop_iterations = std::uint64_t{1} << 20;
  int max_call_depth = 64;                                  // macro calls inside macro calls
};

struct ChatTemplateOptions {
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;  // unset: `bos_token` is undefined in the template
  std::optional<std::string> eos_token;
  // More variables, as JSON texts by name (e.g. {"enable_thinking", "false"},
  // {"tools", "[{...}]"}, {"date_string", "\"26 Jul 2024\""}). They override bos_token / eos_token;
  // `messages` and `add_generation_prompt` cannot be set here (ValueError).
  std::map<std::string, std::string> extra_vars_json;
  ChatTemplateLimits limits;
};

class ChatTemplate {
 public:
  // Parses a template. source_name names it in errors ("chat template" if empty; e.g.
  // "models/x.gguf chat template"). ChatTemplateError at the line and column of a syntax error or
  // of a construct outside the subset; a template over 4 MiB or not UTF-8 is refused too.
  static ChatTemplate parse(std::string text, std::string source_name = "chat template");

  // Renders a conversation (transformers' variables: messages, add_generation_prompt, bos_token,
  // eos_token, tools = none, documents = none, and the extra variables). ChatTemplateError on
  // any failure (with raised_by_template() for the template's raise_exception); ValueError for
  // text that is not UTF-8 or an extra variable that is not JSON.
  std::string render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options = {}) const;

  const std::string& source_name() const;

  // Copies share the parsed template (cheap; it is immutable).
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// Parses OpenAI-style messages: a JSON array of objects with string "role" and "content"; other
// fields (with a non-null value) go to ChatMessage::extra_json. ValueError naming `source` and the
// element otherwise, e.g. "messages.json: element 2 has no \"content\"",
// "messages.json: element 0's \"role\" is a number, not a string".
std::vector<ChatMessage> parse_chat_messages_json(std::string_view json, const std::string& source = "messages");

// Variables for a template given as one JSON object (transformers' apply_chat_template(...,
// **kwargs); llama-server's chat_template_kwargs), e.g. {"enable_thinking": false}: name ->
// the value's JSON text, for ChatTemplateOptions::extra_vars_json. ValueError naming `source`
// for malformed JSON, another JSON value, or a name the template's own variables take
// (messages, add_generation_prompt).
std::map<std::string, std::string> parse_chat_template_kwargs(std::string_view json, const std::string& source);

}  // namespace qkv::tokenize
