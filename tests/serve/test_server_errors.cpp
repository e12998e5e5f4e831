// The server's errors, in OpenAI's shape {"error": {"message", "type", "param", "code"}}: 400 for
// every bad field (wrong types, out of range, bad JSON, unknown model, beyond the context), 401
// (API key in constant time), 404, 413, 429 and 503 with Retry-After; slow clients dropped
// after the request deadline while the server keeps serving.
#include <gtest/gtest.h>


#include "serve_test_util.h"
#include "testing/gated_model.h"

namespace {

using namespace qkv::testing;
using namespace std::chrono_literals;
using i64 = std::int64_t;

constexpr qkv::infer::SchedulerOptions kSched{.slots = 2, .context = 128, .max_queue = 8, .prefill_chunk = 64};

TestServer& server() {
  static TestServer s({.max_body_bytes = 4096, .request_timeout = 1000ms}, {tiny_text_model(kSched)});
  return s;
}

struct Case {
  const char* path;
  std::string body;
  int status;
  const char* param;  // "" for null
  const char* code;
  const char* in_message;
};

void check_error(const std::string& body, const Case& c) {
  json j;
  ASSERT_NO_THROW(j = json::parse(body)) << body;
  ASSERT_TRUE(j.contains("error")) << body;
  const json& e = j["error"];
  ASSERT_TRUE(e["message"].is_string()) << body;
  EXPECT_TRUE(e["type"].is_string()) << body;
  if (std::string(c.param).empty()) {
    EXPECT_TRUE(e["param"].is_null()) << body;
  } else {
    EXPECT_EQ(e["param"], c.param) << body;
  }
  if (std::string(c.code).empty()) {
    EXPECT_TRUE(e["code"].is_null()) << body;
  } else {
    EXPECT_EQ(e["code"], c.code) << body;
  }
  EXPECT_NE(e["message"].get<std::string>().find(c.in_message), std::string::npos) << e["message"] << " lacks " << c.in_message;
}

const std::string kMsgs = R"("messages": [{"role": "user", "content": "Hi"}])";

TEST(ServerErrors, BadRequestsAreNamedWith400) {
  const std::vector<Case> cases = {
      {"/v1/chat/completions", "{", 400, "", "invalid_json", "could not parse"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "Hi"}])", 400, "", "invalid_json", "could not parse"},
      {"/v1/chat/completions", "[1, 2]", 400, "", "invalid_json", "must be a JSON object"},
      {"/v1/chat/completions", std::string(40, '[') + std::string(40, ']'), 400, "", "invalid_json", "nested deeper"},
      {"/v1/chat/completions", "{\"messages\": \"\xff\xfe\"}", 400, "", "invalid_json", "could not parse"},
      {"/v1/chat/completions", "{}", 400, "messages", "missing_required_parameter", "'messages'"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages", "empty_array", "empty array"},
      {"/v1/chat/completions", R"({"messages": {"role": "user"}})", 400, "messages", "invalid_type", "expected an array"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "Hi"}]})", 400, "messages[0].role",
       "invalid_value", "'wizard'"},
      {"/v1/chat/completions", R"({"messages": [{"role": 7, "content": "Hi"}]})", 400, "messages[0].role", "invalid_type",
       "expected a string"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content",
       "missing_required_parameter", "content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
       "messages[0].content[0].type", "invalid_value", "only 'text'"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "temperature": "hot"})", 400, "temperature", "invalid_type",
       "expected a number, but got a string"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "temperature": 2.5})", 400, "temperature", "decimal_above_max_value",
       "<= 2"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "temperature": -1})", 400, "temperature", "decimal_below_min_value", ">= 0"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "temperature": 1e999})", 400, "", "invalid_json", "number overflow"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "top_p": 1.5})", 400, "top_p", "decimal_above_max_value", "<= 1"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "top_k": -3})", 400, "top_k", "integer_below_min_value", ">= 0"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "max_tokens": 0})", 400, "max_tokens", "integer_below_min_value", ">= 1"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "max_tokens": -5})", 400, "max_tokens", "integer_below_min_value", ">= 1"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "max_tokens": 2.5})", 400, "max_tokens", "invalid_type",
       "expected an integer, but got a decimal"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "max_tokens": 99999999999999999999999})", 400, "max_tokens",
       "invalid_type", "expected an integer"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "max_tokens": 9223372036854775807})", 400, "messages",
       "context_length_exceeded", "maximum context length is 128"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "max_completion_tokens": 18446744073709551615})", 400,
       "max_completion_tokens", "integer_above_max_value", "<= 9223372036854775807"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "n": 2})", 400, "n", "invalid_value", "only n = 1"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "stream": "yes"})", 400, "stream", "invalid_type", "boolean"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "stop": 5})", 400, "stop", "invalid_type", "string"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "stop": ["a", "b", "c", "d", "e"]})", 400, "stop", "array_above_max_length",
       "maximum length 4"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "stop": [""]})", 400, "stop[0]", "invalid_value", "empty string"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "top_logprobs": 3})", 400, "top_logprobs", "invalid_value",
       "requires 'logprobs'"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "logprobs": true, "top_logprobs": 21})", 400, "top_logprobs",
       "integer_above_max_value", "<= 20"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "seed": "x"})", 400, "seed", "invalid_type", "integer"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "stream_options": 1})", 400, "stream_options", "invalid_type", "object"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "model": "gpt-4"})", 404, "model", "model_not_found", "'gpt-4' does not exist"},
      {"/v1/chat/completions", "{" + kMsgs + R"(, "model": 3})", 400, "model", "invalid_type", "string"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": ")" + std::string(600, 'x') + R"("}]})", 400,
       "messages", "context_length_exceeded", "maximum context length"},
      {"/v1/completions", "{}", 400, "prompt", "missing_required_parameter", "'prompt'"},
      {"/v1/completions", R"({"prompt": []})", 400, "prompt", "invalid_value", "empty array"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", 400, "prompt", "invalid_value", "one prompt per request"},
      {"/v1/completions", R"({"prompt": [1, -2]})", 400, "prompt[1]", "integer_below_min_value", ">= 0"},
      {"/v1/completions", R"({"prompt": [1, 1000]})", 400, "prompt", "invalid_value", "out of range [0, 1000)"},
      {"/v1/completions", R"({"prompt": {"text": "a"}})", 400, "prompt", "invalid_type", "expected a string"},
      {"/v1/completions", R"({"prompt": "", "max_tokens": 3})", 400, "prompt", "empty_prompt", "empty"},
      {"/v1/completions", R"({"prompt": "a", "echo": "yes"})", 400, "echo", "invalid_type", "boolean"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400, "max_tokens", "integer_below_min_value", ">= 1"},
      {"/v1/completions", R"({"prompt": "a", "echo": true, "max_tokens": -1})", 400, "max_tokens", "integer_below_min_value",
       ">= 0"},
      {"/v1/completions", R"({"prompt": "a", "logprobs": true})", 400, "logprobs", "invalid_type", "integer"},
      {"/v1/completions", R"({"prompt": "a", "suffix": "b"})", 400, "suffix", "invalid_value", "not supported"},
      {"/v1/embeddings", R"({"input": "a"})", 400, "model", "model_not_found", "no embedding model"},
      {"/v1/embeddings", R"({"model": "x"})", 400, "input", "missing_required_parameter", "'input'"},
      {"/v1/embeddings", R"({"input": [1, -2]})", 400, "input[1]", "integer_below_min_value", ">= 0"},
      {"/v1/embeddings", R"({"input": [[1], "a"]})", 400, "input[1]", "invalid_type", "array of token ids"},
      {"/v1/embeddings", R"({"input": ["a", [1]]})", 400, "input[1]", "invalid_type", "a string"},
      {"/v1/embeddings", R"({"input": [[1], []]})", 400, "input[1]", "invalid_value", "empty array"},
      {"/v1/embeddings", R"({"input": ""})", 400, "input", "invalid_value", "empty string"},
      {"/v1/embeddings", R"({"input": "a", "encoding_format": "hex"})", 400, "encoding_format", "invalid_value", "'base64'"},
  };
  auto c = server().client();
  for (const Case& k : cases) {
    auto r = c->Post(k.path, k.body, "application/json");
    ASSERT_TRUE(r) << k.body;
    EXPECT_EQ(r->status, k.status) << k.path << " " << k.body << " -> " << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    check_error(r->body, k);
  }
  // Still serving.
  auto ok = c->Post("/v1/completions", R"({"prompt": "Unto", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(ServerErrors, NotFoundAndBodyTooLarge) {
  auto c = server().client();
  auto r = c->Get("/v2/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  check_error(r->body, {"", "", 404, "", "unknown_url", "Unknown request URL: GET /v2/nothing"});
  r = c->Get("/v1/chat/completions");  // a POST route
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  // Over max_body_bytes (4096 here): 413, the connection closed, the server fine.
  const std::string big = R"({"prompt": ")" + std::string(5000, 'a') + R"("})";
  r = c->Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  check_error(r->body, {"", "", 413, "", "request_too_large", "limit of 4096 bytes"});
  r = server().client()->Post("/v1/completions", R"({"prompt": "Unto", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(ServerErrors, ApiKeyIsRequiredOnV1Routes) {
  TestServer s({.api_key = "sk-test-123"}, {tiny_text_model(kSched)});
  auto c = s.client();
  const std::string body = R"({"prompt": "Unto", "max_tokens": 2})";
  auto r = c->Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  check_error(r->body, {"", "", 401, "", "missing_api_key", "didn't provide an API key"});
  for (const char* wrong : {"Bearer sk-test-12", "Bearer sk-test-1234", "Bearer SK-TEST-123", "Basic sk-test-123",
                            "sk-test-123", "Bearer "}) {
    r = c->Post("/v1/completions", {{"Authorization", wrong}}, body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << wrong;
    check_error(r->body, {"", "", 401, "", "invalid_api_key", "Incorrect API key"});
    EXPECT_EQ(r->body.find("sk-test"), std::string::npos) << "the key is never echoed";
  }
  r = c->Post("/v1/completions", {{"Authorization", "Bearer sk-test-123"}}, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c->Get("/v1/models");
  EXPECT_EQ(r->status, 401);
  r = c->Get("/health");  // for load balancers: no key
  EXPECT_EQ(r->status, 200);
}

TEST(ServerErrors, ConstantTimeComparison) {
  using qkv::serve::constant_time_equal;
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_FALSE(constant_time_equal("abd", "abc"));
  EXPECT_FALSE(constant_time_equal("ab", "abc"));
  EXPECT_FALSE(constant_time_equal("abcd", "abc"));
  EXPECT_FALSE(constant_time_equal(std::string("ab\0", 3), "ab"));
  EXPECT_FALSE(constant_time_equal("", "x"));
}

TEST(ServerErrors, FullQueueIs429AndStoppingIs503WithRetryAfter) {
  auto held = std::make_shared<qkv::testing::GatedModel>(gpt2_tiny_model());
  qkv::serve::TextModel tm = tiny_text_model({.slots = 1, .context = 128, .max_queue = 0}, held);
  auto sched = tm.scheduler;
  TestServer s({}, {tm});
  // One request takes the only slot and waits at the gate; the queue holds none.
  std::thread first([&] {
    auto r = s.client()->Post("/v1/completions", R"({"prompt": "Unto", "max_tokens": 2})", "application/json");
    EXPECT_TRUE(r && r->status == 200);
  });
  held->wait_entered();
  auto r = s.client()->Post("/v1/completions", R"({"prompt": "Unto", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  check_error(r->body, {"", "", 429, "", "queue_full", "queue is full"});
  held->open();
  first.join();
  // A scheduler that has shut down (as stop() does) answers 503.
  sched->shutdown(0ms);
  r = s.client()->Post("/v1/completions", R"({"prompt": "Unto", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  check_error(r->body, {"", "", 503, "", "shutting_down", "shutting down"});
}

TEST(ServerErrors, SlowClientIsDroppedAfterTheRequestDeadline) {
  // A client sending a byte every 100 ms: the server (1 s to read a request) closes the
  // connection long before the request is complete, and serves others meanwhile.
  RawClient slow(server().port);
  ASSERT_TRUE(slow.connected());
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          "Content-Length: 40\r\n\r\n{\"prompt\": \"Unto\", \"max_tokens\": 2}    ";
  std::size_t sent = 0;
  bool closed = false;
  std::string got;
  for (; sent < req.size(); ++sent) {
    if (!slow.send_all(req.substr(sent, 1))) break;
    got = slow.read_until_close(100ms, &closed);
    if (closed) break;
    if (sent == 3) {  // meanwhile, a normal client is served
      auto r = server().client()->Post("/v1/completions", R"({"prompt": "Unto", "max_tokens": 2})", "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200);
    }
  }
  EXPECT_TRUE(closed || sent < req.size()) << "the slow client was never dropped";
  EXPECT_LT(sent, req.size());
  EXPECT_EQ(got.find("200 OK"), std::string::npos);
}

TEST(ServerErrors, MalformedHttpIsAnsweredAndTheServerGoesOn) {
  // Request lines and headers a client library never sends.
  const std::vector<std::pair<std::string, int>> raw = {
      {"GARBAGE\r\n\r\n", 400},
      {"GET /health HTTP/9.9\r\n\r\n", 400},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400},
      {"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n", 414},
  };
  for (const auto& [text, status] : raw) {
    RawClient c(server().port);
    ASSERT_TRUE(c.connected());
    c.send_all(text);
    const std::string got = c.read_until_close(3000ms);
    const int st = RawClient::status_of(got);
    // httplib may close a connection it cannot parse without an answer; never a 2xx or 5xx.
    EXPECT_TRUE(st == -1 || (st >= 400 && st < 500)) << text.substr(0, 60) << " -> " << got.substr(0, 80);
  }
  auto r = server().client()->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
