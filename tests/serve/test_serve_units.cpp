// serve/'s pieces on their own: request parsing (fields, defaults, types), the JSON depth scan,
// the text stream (stop strings, UTF-8 never split), error bodies, Prometheus text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "qkv/serve/metrics.h"
#include "qkv/serve/openai.h"
#include "qkv/tokenize/bpe.h"

namespace {

using namespace qkv::serve;
using json = nlohmann::json;
using i64 = std::int64_t;

TEST(ServeParse, ChatFieldsAndDefaults) {
  const GenerationParams d = parse_generation_request(R"({"messages": [{"role": "user", "content": "Hi"}]})", ApiKind::Chat);
  EXPECT_EQ(d.model, "");
  ASSERT_EQ(d.messages.size(), 1u);
  EXPECT_EQ(d.messages[0].role, "user");
  EXPECT_EQ(d.messages[0].content, "Hi");
  EXPECT_FALSE(d.max_tokens);
  // Not given: the model's advice applies (generation.cpp), not OpenAI's temperature 1.
  EXPECT_FALSE(d.temperature || d.top_p || d.top_k || d.min_p || d.repeat_penalty || d.repeat_last_n);
  EXPECT_FALSE(d.seed);
  EXPECT_FALSE(d.stream);
  EXPECT_FALSE(d.ignore_eos);
  EXPECT_FALSE(d.logprobs);

  const GenerationParams p = parse_generation_request(R"({
      "model": "m", "messages": [{"role": "system", "content": "S"},
                                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                                 {"role": "assistant", "content": null}],
      "max_tokens": 7, "max_completion_tokens": 5, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
      "seed": -1, "stop": "x", "stream": true, "stream_options": {"include_usage": true},
      "logprobs": true, "top_logprobs": 4, "n": 1, "presence_penalty": 0, "tools": [], "ignore_eos": true})",
                                                      ApiKind::Chat);
  EXPECT_EQ(p.model, "m");
  ASSERT_EQ(p.messages.size(), 3u);
  EXPECT_EQ(p.messages[1].content, "ab");
  EXPECT_EQ(p.messages[2].content, "");
  EXPECT_EQ(*p.max_tokens, 5);  // max_completion_tokens wins
  EXPECT_EQ(*p.temperature, 0.5);
  EXPECT_EQ(*p.top_p, 0.9);
  EXPECT_EQ(*p.top_k, 40);
  EXPECT_EQ(*p.seed, ~std::uint64_t{0});
  EXPECT_EQ(p.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(p.stream && p.include_usage && p.logprobs && p.ignore_eos);
  EXPECT_EQ(p.top_logprobs, 4);
  // null means "not given".
  const GenerationParams n = parse_generation_request(
      R"({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": null, "temperature": null, "stop": null})",
      ApiKind::Chat);
  EXPECT_FALSE(n.max_tokens);
  EXPECT_FALSE(n.temperature);
  EXPECT_TRUE(n.stop.empty());
}

TEST(ServeParse, CompletionPromptForms) {
  EXPECT_EQ(parse_generation_request(R"({"prompt": "abc"})", ApiKind::Completion).prompt, "abc");
  const GenerationParams ids = parse_generation_request(R"({"prompt": [5, 6, 7]})", ApiKind::Completion);
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<i64>{5, 6, 7}));
  EXPECT_EQ(parse_generation_request(R"({"prompt": ["one"]})", ApiKind::Completion).prompt, "one");
  EXPECT_EQ(parse_generation_request(R"({"prompt": [[1, 2]]})", ApiKind::Completion).prompt_ids, (std::vector<i64>{1, 2}));
  const GenerationParams lp = parse_generation_request(R"({"prompt": "a", "logprobs": 3, "echo": false})", ApiKind::Completion);
  EXPECT_TRUE(lp.logprobs);
  EXPECT_EQ(lp.top_logprobs, 3);
  EXPECT_FALSE(lp.echo);
  // echo, and max_tokens 0 with it (the prompt alone).
  const GenerationParams e = parse_generation_request(R"({"prompt": "a", "echo": true, "max_tokens": 0, "logprobs": 1})",
                                                      ApiKind::Completion);
  EXPECT_TRUE(e.echo);
  EXPECT_EQ(e.max_tokens, 0);
  EXPECT_THROW(parse_generation_request(R"({"prompt": "a", "max_tokens": 0})", ApiKind::Completion), ApiError);
  EXPECT_THROW(parse_generation_request(R"({"prompt": "a", "echo": true, "max_tokens": -1})", ApiKind::Completion), ApiError);
}

TEST(ServeParse, ErrorsNameTheParamAndCode) {
  auto err = [](const char* body, ApiKind k = ApiKind::Chat) -> std::pair<std::string, std::string> {
    try {
      parse_generation_request(body, k);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      return {e.param(), e.code()};
    }
    return {"no error", ""};
  };
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": 5}]})"), P("messages[0].content", "invalid_type"));
  EXPECT_EQ(err(R"({"messages": [5]})"), P("messages[0]", "invalid_type"));
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "a"}], "stop": ["a", 1]})"), P("stop[1]", "invalid_type"));
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "a"}], "stream_options": {"include_usage": 1}})"),
            P("stream_options.include_usage", "invalid_type"));
  EXPECT_EQ(err(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": 1})"), P("logprobs", "invalid_type"));
  EXPECT_EQ(err(R"({"prompt": "a", "logprobs": 21})", ApiKind::Completion), P("logprobs", "integer_above_max_value"));
  EXPECT_EQ(err(R"({"prompt": [[1], [2]]})", ApiKind::Completion), P("prompt", "invalid_value"));
  EXPECT_EQ(err(R"({"prompt": [true]})", ApiKind::Completion), P("prompt[0]", "invalid_type"));
  EXPECT_EQ(err(R"({"prompt": "a"} trailing)", ApiKind::Completion), P("", "invalid_json"));
  EXPECT_EQ(err(""), P("", "invalid_json"));
  EXPECT_EQ(err("null"), P("", "invalid_json"));
}

// No field is silently ignored: one the server does not implement is a 400 naming it
// (unsupported_parameter), unless it holds the value that changes nothing (clients that always
// send frequency_penalty 0 or tools [] work); a field no API knows is refused as OpenAI refuses it.
TEST(ServeParse, FieldsTheServerDoesNotImplementAreRefusedByName) {
  auto code_of = [](const std::string& body, ApiKind k) -> std::pair<std::string, std::string> {
    try {
      parse_generation_request(body, k);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << body;
      EXPECT_NE(std::string(e.what()).find(e.param()), std::string::npos) << e.what();
      return {e.param(), e.code()};
    }
    return {"accepted", ""};
  };
  using P = std::pair<std::string, std::string>;
  const std::string chat = R"({"messages": [{"role": "user", "content": "a"}], )";
  const std::string completion = R"({"prompt": "a", )";
  // The penalties, min_p and logit_bias are implemented: parsed, and their bad values refused.
  for (const ApiKind k : {ApiKind::Chat, ApiKind::Completion}) {
    const std::string head = k == ApiKind::Chat ? chat : completion;
    const GenerationParams g = parse_generation_request(
        head + R"("frequency_penalty": 0.5, "presence_penalty": -1, "logit_bias": {"5": 100, "12": -7.5}, "min_p": 0.05,
                   "repeat_penalty": 1.1, "repeat_last_n": -1})",
        k);
    EXPECT_EQ(g.frequency_penalty, 0.5);
    EXPECT_EQ(g.presence_penalty, -1);
    EXPECT_EQ(*g.min_p, 0.05);
    EXPECT_EQ(*g.repeat_penalty, 1.1);
    EXPECT_EQ(*g.repeat_last_n, -1);
    EXPECT_EQ(g.logit_bias, (std::vector<std::pair<i64, double>>{{12, -7.5}, {5, 100}}));  // the keys in string order
    EXPECT_EQ(code_of(head + R"("frequency_penalty": 2.5})", k), P("frequency_penalty", "decimal_above_max_value"));
    EXPECT_EQ(code_of(head + R"("presence_penalty": "x"})", k), P("presence_penalty", "invalid_type"));
    EXPECT_EQ(code_of(head + R"("min_p": 1.5})", k), P("min_p", "decimal_above_max_value"));
    EXPECT_EQ(code_of(head + R"("repeat_penalty": 0})", k), P("repeat_penalty", "invalid_value"));
    EXPECT_EQ(code_of(head + R"("repeat_last_n": -2})", k), P("repeat_last_n", "integer_below_min_value"));
    EXPECT_EQ(code_of(head + R"("logit_bias": {"x": 1}})", k), P("logit_bias", "invalid_value"));
    EXPECT_EQ(code_of(head + R"("logit_bias": {"-3": 1}})", k), P("logit_bias", "invalid_value"));
    EXPECT_EQ(code_of(head + R"("logit_bias": {"3": 101}})", k), P("logit_bias.3", "decimal_above_max_value"));
    EXPECT_EQ(code_of(head + R"("logit_bias": [1, 2]})", k), P("logit_bias", "invalid_type"));
  }
  for (const char* f : {R"("tools": [{"type": "function", "function": {"name": "f"}}])", R"("tool_choice": "required")",
                        R"("response_format": {"type": "json_object"})", R"("store": true)", R"("functions": [{"name": "f"}])",
                        R"("modalities": ["text", "audio"])", R"("reasoning_effort": "low")", R"("audio": {})"}) {
    const std::string name = std::string(f).substr(1, std::string(f).find('"', 1) - 1);
    EXPECT_EQ(code_of(chat + f + "}", ApiKind::Chat), P(name, "unsupported_parameter")) << f;
  }
  EXPECT_EQ(code_of(completion + R"("best_of": 3})", ApiKind::Completion), P("best_of", "unsupported_parameter"));
  EXPECT_EQ(code_of(chat + R"("whatever": {"deep": [1, 2]}})", ApiKind::Chat), P("whatever", "unsupported_parameter"));
  EXPECT_EQ(code_of(completion + R"("max_token": 2})", ApiKind::Completion), P("max_token", "unsupported_parameter"));
  // Chat-only fields on the completions endpoint, and the other way round.
  EXPECT_EQ(code_of(completion + R"("tools": []})", ApiKind::Completion), P("tools", "unsupported_parameter"));
  EXPECT_EQ(code_of(chat + R"("echo": false})", ApiKind::Chat), P("echo", "unsupported_parameter"));
  EXPECT_EQ(code_of(chat + R"("user": 5})", ApiKind::Chat), P("user", "invalid_type"));
  // Neutral values, null and user are accepted.
  EXPECT_EQ(code_of(chat + R"("tools": [], "tool_choice": "auto", "parallel_tool_calls": true, "functions": [],
      "response_format": {"type": "text"}, "store": false, "metadata": {"a": "b"}, "service_tier": "auto",
      "modalities": ["text"], "cache_prompt": true, "user": "u", "reasoning_effort": null})", ApiKind::Chat),
            P("accepted", ""));
  EXPECT_EQ(code_of(completion + R"("best_of": 1, "frequency_penalty": 0, "user": "u"})", ApiKind::Completion), P("accepted", ""));
  // Embeddings: dimensions (the served models' vectors have one size) and unknown fields.
  for (const char* body : {R"({"input": "a", "dimensions": 8})", R"({"input": "a", "truncate": true})"}) {
    try {
      parse_embedding_request(body);
      ADD_FAILURE() << body << " accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.code(), "unsupported_parameter") << body;
    }
  }
  EXPECT_EQ(parse_embedding_request(R"({"input": "a", "user": "u", "dimensions": null})").input.size(), 1u);
}

TEST(ServeParse, EmbeddingInputs) {
  EXPECT_EQ(parse_embedding_request(R"({"input": "a"})").input, std::vector<std::string>{"a"});
  const EmbeddingParams p = parse_embedding_request(R"({"input": ["a", "b"], "model": "m", "encoding_format": "base64"})");
  EXPECT_EQ(p.input, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p.model, "m");
  EXPECT_TRUE(p.base64);
  const EmbeddingParams one = parse_embedding_request(R"({"input": [5, 6]})");
  EXPECT_TRUE(one.input_is_ids && one.input.empty());
  EXPECT_EQ(one.input_ids, (std::vector<std::vector<i64>>{{5, 6}}));
  EXPECT_EQ(parse_embedding_request(R"({"input": [[5], [6, 7]]})").input_ids, (std::vector<std::vector<i64>>{{5}, {6, 7}}));
  std::string many = R"({"input": [)";
  for (int i = 0; i < 2049; ++i) many += std::string(i ? "," : "") + "\"x\"";
  many += "]}";
  try {
    parse_embedding_request(many);
    FAIL() << "2049 inputs accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "array_above_max_length");
  }
}

TEST(ServeParse, JsonDepthSkipsStringsAndStopsEarly) {
  EXPECT_EQ(json_depth("{}", 32), 1);
  EXPECT_EQ(json_depth(R"({"a": [1, {"b": []}]})", 32), 4);
  EXPECT_EQ(json_depth(R"({"a": "[[[[[{{{{"})", 32), 1);
  EXPECT_EQ(json_depth(R"({"a": "\"[[[["})", 32), 1);
  EXPECT_EQ(json_depth(std::string(1000000, '['), 32), 33);  // stops at the first level past the limit
  EXPECT_EQ(json_depth("", 32), 0);
}

TEST(ServeParse, ErrorJsonShape) {
  const json j = json::parse(error_json(ApiError(400, "bad \xff value", "temperature", "invalid_value")));
  EXPECT_EQ(j["error"]["message"], "bad \xef\xbf\xbd value");  // invalid UTF-8 replaced
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], "invalid_value");
  const json n = json::parse(error_json(ApiError(404, "x")));
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_TRUE(n["error"]["code"].is_null());
}

TEST(ServeMetrics, PrometheusTextFormat) {
  Metrics m;
  m.count_request("/v1/completions", 200, 0.02);
  m.count_request("/v1/completions", 200, 3.0);
  m.count_request("other", 404, 0.001);
  m.add_tokens("a\"b", 5, 7);
  m.observe_ttft("a\"b", 0.03);
  m.observe_inter_token("a\"b", 0.004);
  const std::string t = m.render({{"a\"b", 4, 1, 2}});
  for (const char* want : {"qkv_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n",
                           "qkv_requests_total{endpoint=\"other\",status=\"404\"} 1\n",
                           "qkv_request_duration_seconds_bucket{endpoint=\"/v1/completions\",le=\"0.025\"} 1\n",
                           "qkv_request_duration_seconds_bucket{endpoint=\"/v1/completions\",le=\"+Inf\"} 2\n",
                           "qkv_request_duration_seconds_count{endpoint=\"/v1/completions\"} 2\n",
                           "qkv_prompt_tokens_total{model=\"a\\\"b\"} 5\n", "qkv_completion_tokens_total{model=\"a\\\"b\"} 7\n",
                           "qkv_queue_depth{model=\"a\\\"b\"} 2\n", "qkv_slots_busy{model=\"a\\\"b\"} 1\n",
                           "qkv_slots{model=\"a\\\"b\"} 4\n",
                           "qkv_time_to_first_token_seconds_bucket{model=\"a\\\"b\",le=\"0.05\"} 1\n",
                           "qkv_inter_token_latency_seconds_sum{model=\"a\\\"b\"} 0.004\n",
                           "# TYPE qkv_inter_token_latency_seconds histogram\n"})
    EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  // Every line is a comment or "name{labels} value".
  std::size_t pos = 0;
  while (pos < t.size()) {
    const std::size_t end = t.find('\n', pos);
    ASSERT_NE(end, std::string::npos);
    const std::string line = t.substr(pos, end - pos);
    EXPECT_TRUE(line.rfind("# ", 0) == 0 || (line.rfind("qkv_", 0) == 0 && line.find(' ') != std::string::npos)) << line;
    pos = end + 1;
  }
  EXPECT_EQ(prometheus_escape("a\\b\n\"c"), "a\\\\b\\n\\\"c");
}

}  // namespace
