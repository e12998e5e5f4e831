// Hostile chat templates (they come from model files): deep nesting, endless loops, exploding
// strings and lists, runaway recursion. Each is a ChatTemplateError naming the limit, never a
// crash, a hang or an exhausted memory. And one parsed template renders from many threads at
// once with the same result.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "qkv/tokenize/chat_template.h"

namespace {

using qkv::ValueError;
using qkv::tokenize::ChatTemplate;
using qkv::tokenize::ChatTemplateError;
using qkv::tokenize::ChatTemplateOptions;

std::string detail_of(const std::string& text, const ChatTemplateOptions& o = {}) {
  try {
    ChatTemplate::parse(text).render({{"user", "hi", ""}}, o);
  } catch (const ChatTemplateError& e) {
    EXPECT_FALSE(e.raised_by_template());
    EXPECT_GE(e.line(), 1);
    return e.detail();
  }
  return "no error";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

TEST(ChatTemplateHostile, NestingIsBoundedAtParseTime) {
  EXPECT_EQ(detail_of("{{ " + repeat("(", 300) + "1" + repeat(")", 300) + " }}"),
            "the template nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{{ " + repeat("not ", 5000) + "1 }}"), "the template nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{{ " + repeat("-", 5000) + "1 }}"), "the template nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{{ " + repeat("[", 300) + repeat("]", 300) + " }}"), "the template nests deeper than 128 levels");
  EXPECT_EQ(detail_of(repeat("{% if true %}", 300) + repeat("{% endif %}", 300)),
            "the template nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{% if x %}" + repeat("{% elif x %}", 300) + "{% endif %}"),
            "the template nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{{ x" + repeat(" if x else x", 300) + " }}"), "the template nests deeper than 128 levels");
  // Long chains nest as deeply as they are long.
  EXPECT_EQ(detail_of("{{ 1" + repeat(" + 1", 300) + " }}"), "an expression nests or chains deeper than 256 levels");
  EXPECT_EQ(detail_of("{{ 'x'" + repeat("|trim", 300) + " }}"), "an expression nests or chains deeper than 256 levels");
  EXPECT_EQ(detail_of("{{ x" + repeat(".a", 300) + " }}"), "an expression nests or chains deeper than 256 levels");
  EXPECT_EQ(detail_of("{{ 1" + repeat(" ~ 1", 100) + " }}"), "no error");  // ~ is one flat node
  EXPECT_EQ(detail_of(std::string(5 << 20, 'x')),
            "the template is 5242880 bytes, more than the 4194304 a chat template may be");
}

TEST(ChatTemplateHostile, OutputAndStringsAreBounded) {
  ChatTemplateOptions small;
  small.limits.max_output_bytes = 1000;
  EXPECT_EQ(detail_of("{% for i in range(100) %}{{ 'x' * 50 }}{% endfor %}", small),
            "the output would exceed the limit of 1000 bytes (max_output_bytes)");
  EXPECT_EQ(detail_of("{% for i in range(100) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}", small),
            "the output would exceed the limit of 1000 bytes (max_output_bytes)");
  // Doubling a string: 2^26 bytes passes the default limit of 32 MiB.
  EXPECT_EQ(detail_of("{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"),
            "a string of 67108864 bytes is longer than the output limit of 33554432 bytes (max_output_bytes)");
  EXPECT_EQ(detail_of("{{ 'x' * 1000000000 }}"),
            "repeating a string 1000000000 times exceeds the output limit of 33554432 bytes (max_output_bytes)");
  EXPECT_EQ(detail_of("{{ ('x' * 1000000).replace('', 'y' * 100) }}"),
            "replace: the result would exceed the limit of 33554432 bytes");
  EXPECT_EQ(detail_of("{{ ('x' * 900)|replace('', 'zz') }}", small), "replace: the result would exceed the limit of 1000 bytes");
  EXPECT_EQ(detail_of("{{ ('x' * 600) ~ ('y' * 600) }}", small),
            "a string of 1200 bytes is longer than the output limit of 1000 bytes (max_output_bytes)");
  EXPECT_EQ(detail_of("{{ " + repeat("[", 40) + repeat("]", 40) + "|tojson(indent=1000000) }}"),
            "tojson: the JSON would exceed the limit of 33554432 bytes");
  // A list holding one long string many times prints to more than it holds.
  EXPECT_EQ(detail_of("{{ ['x' * 1000000] * 100 }}"),
            "printing a value would exceed the limit of 33554432 bytes");
}

TEST(ChatTemplateHostile, ListsAndDepthAreBounded) {
  EXPECT_EQ(detail_of("{% set ns = namespace(x=[1]) %}{% for i in range(30) %}{% set ns.x = ns.x + ns.x %}{% endfor %}"),
            "a list of more than 1048576 items is more than a chat template may build");
  EXPECT_EQ(detail_of("{{ [1] * 10000000 }}"),
            "repeating a list 10000000 times makes more than the 1048576 items a chat template may build");
  EXPECT_EQ(detail_of("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
            "a dict or namespace nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{% set l = [] %}{% for i in range(200) %}{% set l = [l] %}{% endfor %}"), "no error");  // scoped
  EXPECT_EQ(detail_of("{{ " + repeat("[", 120) + repeat("]", 120) + "|tojson|length }}"), "no error");
  EXPECT_EQ(detail_of("{% set ns = namespace(x={}) %}{% for i in range(1000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}"),
            "a dict or namespace nests deeper than 128 levels");
  EXPECT_EQ(detail_of("{{ range(1000000)|length }}"),
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(detail_of("{% for c in 'x' * 2000000 %}{% endfor %}"),
            "iterating over a string of more than 1048576 characters");
  EXPECT_EQ(detail_of("{{ ('a,' * 1100000).split(',')|length }}"), "split: more than 1048576 parts (the most a list may hold)");
  // Deep JSON in a variable.
  ChatTemplateOptions o;
  o.extra_vars_json["x"] = repeat("[", 200) + repeat("]", 200);
  try {
    ChatTemplate::parse("{{ x }}").render({}, o);
    ADD_FAILURE() << "a variable nesting 200 levels must be refused";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), "chat template variable 'x' nests deeper than 128 levels");
  }
}

TEST(ChatTemplateHostile, LoopsWorkAndRecursionAreBounded) {
  ChatTemplateOptions o;
  o.limits.max_loop_iterations = 10000;
  EXPECT_EQ(detail_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", o),
            "the template runs more than 10000 loop iterations (max_loop_iterations)");
  o = {};
  o.limits.max_work = 100000;
  EXPECT_EQ(detail_of("{% for i in range(100000) %}{{ i }}{% endfor %}", o),
            "the template does too much work (over 100000 steps: max_work); it may loop or build huge values");
  EXPECT_EQ(detail_of("{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{% if s == s ~ '' %}{% endif %}{% endfor %}", o),
            "the template does too much work (over 100000 steps: max_work); it may loop or build huge values");
  EXPECT_EQ(detail_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
            "macro calls nest deeper than 64 (max_call_depth)");
  o = {};
  o.limits.max_call_depth = 3;
  EXPECT_EQ(detail_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", o),
            "macro calls nest deeper than 3 (max_call_depth)");
  EXPECT_EQ(detail_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(2) }}", o), "no error");
}

TEST(ChatTemplateHostile, OneTemplateRendersFromManyThreads) {
  const ChatTemplate t = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "<|{{ m.role }}|>{{ m.content|trim }}{{ eos_token }}{% endfor %}{{ ns.n }}{% if add_generation_prompt %}"
      "<|assistant|>{% endif %}");
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  o.eos_token = "</s>";
  const std::vector<qkv::tokenize::ChatMessage> msgs = {{"system", " s ", ""}, {"user", "u", ""}};
  const std::string expected = "<|system|>s</s><|user|>u</s>2<|assistant|>";
  ASSERT_EQ(t.render(msgs, o), expected);
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      const ChatTemplate copy = t;  // copies share the parsed template
      for (int r = 0; r < 200; ++r) ok[static_cast<std::size_t>(k)] += (r % 2 ? copy : t).render(msgs, o) == expected;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(ok[static_cast<std::size_t>(k)], 200);
}

}  // namespace
