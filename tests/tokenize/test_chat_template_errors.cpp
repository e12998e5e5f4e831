// Chat template errors: every construct outside the subset, every syntax error and every runtime
// failure is a ChatTemplateError whose message names the line and column; a template's
// raise_exception message comes through exactly; the messages JSON reader names the element at
// fault; bad options are refused.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "qkv/tokenize/chat_template.h"

namespace {

using qkv::ValueError;
using qkv::tokenize::ChatMessage;
using qkv::tokenize::ChatTemplate;
using qkv::tokenize::ChatTemplateError;
using qkv::tokenize::ChatTemplateOptions;
using qkv::tokenize::parse_chat_messages_json;

// The error of parsing and rendering `text` over one user message (none: "").
ChatTemplateError error_of(const std::string& text, const ChatTemplateOptions& o = {}) {
  try {
    const ChatTemplate t = ChatTemplate::parse(text);
    t.render({{"user", "hi", ""}}, o);
  } catch (const ChatTemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for template: " << text;
  return ChatTemplateError("none", 0, 0, "", false);
}

void expect_error(const std::string& text, const std::string& message) {
  SCOPED_TRACE(text);
  const ChatTemplateError e = error_of(text);
  EXPECT_EQ(std::string(e.what()), message);
  EXPECT_FALSE(e.raised_by_template());
}

TEST(ChatTemplateErrors, UnsupportedConstructsNameLineAndColumn) {
  expect_error("Hello\n{{ 'x'|wordcount }}", "chat template line 2, column 8: the filter 'wordcount' is not supported");
  expect_error("{% if true %}\n  {{ x is frobnicated }}\n{% endif %}",
               "chat template line 2, column 11: the test 'frobnicated' is not supported");
  expect_error("{% include 'other.jinja' %}", "chat template line 1, column 4: the tag 'include' is not supported");
  expect_error("{% call f() %}x{% endcall %}", "chat template line 1, column 4: the tag 'call' is not supported");
  expect_error("{% filter upper %}x{% endfilter %}", "chat template line 1, column 4: the tag 'filter' is not supported");
  expect_error("{% extends 'base' %}", "chat template line 1, column 4: the tag 'extends' is not supported");
  expect_error("{% foo %}", "chat template line 1, column 4: unknown tag 'foo'");
  expect_error("{{ f(*args) }}", "chat template line 1, column 6: *args and **kwargs in calls are not supported");
  expect_error("{% for x in y recursive %}{% endfor %}",
               "chat template line 1, column 15: recursive for loops are not supported");
  expect_error("{{ '%s!' % 'hi' }}",
               "chat template line 1, column 10: printf-style string formatting (str % value) is not supported");
  expect_error("{{ '{}'.format(1) }}", "chat template line 1, column 15: str.format is not supported in chat templates");
  expect_error("{{ x[1, 2] }}", "chat template line 1, column 7: subscripts with several indices (a[i, j]) are not supported");
  expect_error("{{ x|a.b }}", "chat template line 1, column 7: dotted filter names are not supported");
  expect_error("{% set x | upper %}y{% endset %}", "chat template line 1, column 10: filters on {% set %} blocks are not supported");
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  expect_error("{% if true %}open",
               "chat template line 1, column 4: this if block is never closed: expected {% elif %} or {% else %} or "
               "{% endif %} before the end of the template");
  expect_error("{% for x in y %}\n{% endif %}",
               "chat template line 2, column 4: unexpected {% endif %}: the innermost open block is a for loop, closed "
               "by {% endfor %}");
  expect_error("text {% endfor %}", "chat template line 1, column 9: unexpected {% endfor %}: no block is open here");
  expect_error("{{ 'unterminated }}", "chat template line 1, column 4: unterminated string (no closing ')");
  expect_error("{{ 1 + }}", "chat template line 1, column 8: unexpected end of print statement (}})");
  expect_error("a\n{# never closed", "chat template line 2, column 1: missing end of comment tag (#})");
  expect_error("{{ a\n", "chat template line 1, column 5: unexpected end of template: the {{ }} tag opened here is never closed");
  expect_error("{{ [1, 2 }}", "chat template line 1, column 10: unexpected '}', expected ']'");
  expect_error("{% set 1 = 2 %}", "chat template line 1, column 8: cannot assign to a number");
  expect_error("{% set x.y = 2 %}x", "chat template line 1, column 4: cannot assign the attribute 'y' of 'x': it is not a namespace (make it with namespace())");
  expect_error("{% break %}", "chat template line 1, column 4: 'break' is outside of a for loop");
  expect_error("{{ 99999999999999999999 }}", "chat template line 1, column 4: the integer 99999999999999999999 does not fit in 64 bits");
  expect_error("{{ \"\\N{DASH}\" }}", "chat template line 1, column 4: \\N{...} escapes in strings are not supported");
  expect_error("{{ 'a' ? 1 }}", "chat template line 1, column 8: unexpected character '?' in a tag");
  expect_error("{% macro f(a=1, b) %}{% endmacro %}",
               "chat template line 1, column 18: a macro parameter without a default follows one with a default");
  // Columns count characters, not bytes.
  expect_error("héllo wörld {{ x|nope }}", "chat template line 1, column 18: the filter 'nope' is not supported");
  // Line breaks of any style count.
  expect_error("a\r\nb\rc\n{{ x|nope }}", "chat template line 4, column 6: the filter 'nope' is not supported");
  // Not UTF-8: the line and column of the bad byte.
  expect_error("ok\nab\xff", "chat template line 2, column 3: the template is not valid UTF-8 (0xff never appears in UTF-8)");
}

TEST(ChatTemplateErrors, RuntimeErrorsNameLineAndColumn) {
  expect_error("{{ x.y }}", "chat template line 1, column 5: 'x' is undefined");
  expect_error("{{ messages[0]['nope'].x }}", "chat template line 1, column 23: 'dict object' has no attribute 'nope'");
  expect_error("{{ messages[3].role }}", "chat template line 1, column 15: list object has no element 3");
  expect_error("{{ missing + 1 }}", "chat template line 1, column 12: 'missing' is undefined");
  expect_error("{{ 'a' + 1 }}", "chat template line 1, column 8: can only concatenate str (not \"int\") to str");
  expect_error("{{ 1 + 'a' }}", "chat template line 1, column 6: unsupported operand type(s) for +: 'int' and 'str'");
  expect_error("{{ 'a' < 1 }}", "chat template line 1, column 4: '<' is not supported between instances of 'str' and 'int'");
  expect_error("{{ 1 // 0 }}", "chat template line 1, column 6: integer division or modulo by zero");
  expect_error("{{ 1 / 0 }}", "chat template line 1, column 6: division by zero");
  expect_error("{{ 2 ** 64 }}", "chat template line 1, column 6: integer overflow: the result does not fit in 64 bits");
  expect_error("{% for x in 5 %}{% endfor %}", "chat template line 1, column 4: 'int' object is not iterable");
  expect_error("{% set a, b = [1] %}", "chat template line 1, column 4: cannot unpack 1 values into 2 names");
  expect_error("{% set l = [1] %}{{ l.append(2) }}",
               "chat template line 1, column 29: access to attribute 'append' of 'list' object is unsafe (chat "
               "templates cannot change a list)");
  expect_error("{{ {}.update({'a': 1}) }}",
               "chat template line 1, column 13: access to attribute 'update' of 'dict' object is unsafe (chat "
               "templates cannot change a dict)");
  expect_error("{{ 'abc'|upper(1) }}", "chat template line 1, column 10: the filter 'upper' takes no arguments (1 given)");
  expect_error("{{ 'a,b'.split(1) }}", "chat template line 1, column 15: str.split: the argument must be a string or None, not int");
  expect_error("{{ [1]|join(d=',', e=1) }}", "chat template line 1, column 8: the filter 'join' got an unexpected keyword argument 'e'");
  expect_error("{{ 5|items }}", "chat template line 1, column 6: Can only get item pairs from a mapping.");
  expect_error("{{ x|tojson }}", "chat template line 1, column 6: tojson: Object of type Undefined is not JSON serializable");
  expect_error("{{ range(1, 2, 0) }}", "chat template line 1, column 9: range() arg 3 must not be zero");
  expect_error("{{ 1() }}", "chat template line 1, column 5: 'int' object is not callable");
  expect_error("{% set ns = namespace(_secret=1) %}",
               "chat template line 1, column 22: chat templates cannot store underscore-prefixed attributes on a "
               "namespace ('_secret')");
  expect_error("{% set ns = namespace() %}{% set ns.me = ns %}",
               "chat template line 1, column 30: the namespace attribute 'me' cannot hold a Namespace");
  expect_error("{% set ns = namespace() %}{% set ns.l = [ns] %}",
               "chat template line 1, column 30: the namespace attribute 'l' cannot hold a list holding a namespace, "
               "loop or function");
  expect_error("{% set ns = namespace() %}{{ namespace(inner=ns) }}",
               "chat template line 1, column 39: a namespace cannot hold a namespace, loop or function");
  expect_error("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}",
               "chat template line 1, column 35: macro 'f' takes not more than 1 argument(s)");
}

std::string read_fixture(const std::string& name) {
  std::ifstream f(std::string(QKV_FIXTURE_DIR) + "/chat_templates/" + name, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(ChatTemplateErrors, RaiseExceptionGivesTheTemplatesMessage) {
  const ChatTemplate mistral = ChatTemplate::parse(read_fixture("mistral.jinja"), "Mistral-7B-Instruct-v0.2");
  ChatTemplateOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  try {
    mistral.render({{"user", "a", ""}, {"user", "b", ""}}, o);
    FAIL() << "two user messages in a row must be refused";
  } catch (const ChatTemplateError& e) {
    EXPECT_TRUE(e.raised_by_template());
    EXPECT_EQ(e.detail(), "Conversation roles must alternate user/assistant/user/assistant/...");
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(std::string(e.what()),
              "Mistral-7B-Instruct-v0.2 line 1, column " + std::to_string(e.column()) +
                  ": the template raised an error: Conversation roles must alternate user/assistant/user/assistant/...");
  }
  // The same template renders an alternating conversation.
  EXPECT_EQ(mistral.render({{"user", "a", ""}, {"assistant", "b", ""}}, o), "<s>[INST] a [/INST]b</s>");
  const ChatTemplateError e = error_of("line one\n{% if true %}\n  {{ raise_exception('nope: ' ~ messages|length) }}\n{% endif %}");
  EXPECT_TRUE(e.raised_by_template());
  EXPECT_EQ(e.detail(), "nope: 1");
  EXPECT_EQ(e.line(), 3);
  EXPECT_EQ(e.column(), 21);
}

TEST(ChatTemplateErrors, MessagesJsonShapeErrorsNameTheElement) {
  const auto message = [](const std::string& json) {
    try {
      parse_chat_messages_json(json, "messages.json");
    } catch (const ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("{\"role\": \"user\"}"),
            "messages.json: messages must be a JSON array of {\"role\": ..., \"content\": ...} objects, not an object");
  EXPECT_EQ(message("[{\"role\": \"user\", \"content\": \"hi\"}, 3]"),
            "messages.json: element 1 is a number (3), not an object");
  EXPECT_EQ(message("[{\"content\": \"hi\"}]"), "messages.json: element 0 has no \"role\"");
  EXPECT_EQ(message("[{\"role\": \"user\"}]"), "messages.json: element 0 has no \"content\"");
  EXPECT_EQ(message("[{\"role\": 1, \"content\": \"hi\"}]"), "messages.json: element 0's \"role\" is a number, not a string");
  EXPECT_EQ(message("[{\"role\": \"user\", \"content\": null}]"),
            "messages.json: element 0's \"content\" is null, not a string or a list of parts");
  // Content as a list of parts: each a {"type": ...} object, text parts with their text.
  EXPECT_EQ(message("[{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]"),
            "messages.json: element 0's text part {\"type\":\"text\"} has no \"text\" string");
  EXPECT_EQ(message("[{\"role\": \"user\", \"content\": [3]}]"),
            "messages.json: element 0's \"content\" list holds 3, not a {\"type\": ...} part");
  const auto parts = parse_chat_messages_json(
      "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image\"}, "
      "{\"type\": \"text\", \"text\": \"b\"}]}]",
      "m");
  EXPECT_EQ(parts.at(0).content, "ab");
  EXPECT_EQ(message("[{\"role\": \"user\", \"content\": \"hi\"}"),
            "messages.json is not valid JSON: parse error at line 1, column 35: syntax error while parsing array - "
            "unexpected end of input; expected ']'");
  EXPECT_EQ(message("[\"\xff\"]").rfind("messages.json is not valid JSON: parse error", 0), 0u);
  EXPECT_EQ(message("[{\"role\": \"user\", \"content\": \"hi\", \"n\": 1e999}]"),
            "messages.json is not valid JSON: number overflow parsing '1e999'");

  // A good array: role and content, other fields (not null) kept in their order.
  const auto msgs = parse_chat_messages_json(
      "[{\"role\": \"system\", \"content\": \"Be brief.\"},"
      " {\"content\": \"\", \"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}], \"name\": null,"
      " \"id\": 7}]",
      "messages.json");
  ASSERT_EQ(msgs.size(), 2u);
  EXPECT_EQ(msgs[0].role, "system");
  EXPECT_EQ(msgs[0].content, "Be brief.");
  EXPECT_EQ(msgs[0].extra_json, "");
  EXPECT_EQ(msgs[1].role, "assistant");
  EXPECT_EQ(msgs[1].extra_json, "{\"tool_calls\":[{\"function\":{\"name\":\"f\"}}],\"id\":7}");
  EXPECT_TRUE(parse_chat_messages_json("[]").empty());
}

TEST(ChatTemplateErrors, BadOptionsAndTextAreRefused) {
  const ChatTemplate t = ChatTemplate::parse("{{ x }}{{ bos_token }}|{{ bos_token is defined }}");
  ChatTemplateOptions o;
  o.extra_vars_json["x"] = "{not json";
  EXPECT_THROW(
      {
        try {
          t.render({}, o);
        } catch (const ValueError& e) {
          EXPECT_EQ(std::string(e.what()).rfind("chat template variable 'x' is not valid JSON: parse error", 0), 0u)
              << e.what();
          throw;
        }
      },
      ValueError);
  o.extra_vars_json = {{"messages", "[]"}};
  try {
    t.render({}, o);
    ADD_FAILURE() << "messages cannot be an extra variable";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "chat template variable 'messages' cannot be set as an extra variable");
  }
  o.extra_vars_json = {{"x", "\"X\""}};
  EXPECT_EQ(t.render({}, o), "X|False");  // bos_token unset: undefined
  o.bos_token = "<s>";
  EXPECT_EQ(t.render({}, o), "X<s>|True");
  try {
    t.render({{"user", "bad \xc3", ""}}, o);
    ADD_FAILURE() << "content that is not UTF-8 must be refused";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("message 0's content: invalid UTF-8 at byte 4", 0), 0u) << e.what();
  }
  try {
    t.render({{"user", "hi", "[1]"}}, o);
    ADD_FAILURE() << "extra_json must be an object";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "message 0's extra_json is an array, not a JSON object");
  }
}

TEST(ChatTemplateErrors, SourceNameNamesTheTemplate) {
  try {
    ChatTemplate::parse("{{ x|nope }}", "models/x.gguf tokenizer.chat_template");
    FAIL();
  } catch (const ChatTemplateError& e) {
    EXPECT_EQ(std::string(e.what()), "models/x.gguf tokenizer.chat_template line 1, column 6: the filter 'nope' is not supported");
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(e.column(), 6);
    EXPECT_EQ(e.detail(), "the filter 'nope' is not supported");
  }
  EXPECT_EQ(ChatTemplate::parse("x", "").source_name(), "chat template");
}

}  // namespace
