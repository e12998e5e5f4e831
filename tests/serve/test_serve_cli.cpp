// `qkv serve` end to end, as a process: a corpus of hostile requests (malformed and truncated
// JSON, deep nesting, huge numbers, wrong types, invalid UTF-8, bad max_tokens, empty messages,
// unknown roles, oversized bodies, broken HTTP, slow clients) each answered with the right
// status while the server keeps serving (its RSS printed before and after); SIGTERM with
// requests in flight (exit 0, every client answered or refused, none left hanging); start-up
// errors named.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "serve_process.h"
#include "serve_test_util.h"

namespace {

using namespace qkv::testing;

// A write to a server that already answered (413) and closed must not kill the test.
[[maybe_unused]] const bool kIgnoreSigpipe = (std::signal(SIGPIPE, SIG_IGN), true);
using namespace std::chrono_literals;

std::vector<std::string> tiny_args(std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"--model", gpt2_tiny_dir(), "--chat-template", chatml_template()};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

struct Hostile {
  std::string what, path, body;
  int status;  // expected
};

std::vector<Hostile> json_corpus() {
  std::vector<Hostile> c;
  const std::string chat = "/v1/chat/completions", comp = "/v1/completions", emb = "/v1/embeddings";
  const std::string valid =
      R"({"model":"gpt2_tiny","messages":[{"role":"user","content":"Hello \u00e9 w\u00f6rld \ud83d\ude00"}],"max_tokens":4,"temperature":0})";
  // Every truncation of a valid body.
  for (std::size_t n = 0; n < valid.size(); ++n) c.push_back({"truncated at " + std::to_string(n), chat, valid.substr(0, n), 400});
  c.push_back({"valid", chat, valid, 200});
  const std::string m = R"("messages":[{"role":"user","content":"Hi"}])";
  auto with = [&](const std::string& extra) { return "{" + m + "," + extra + "}"; };
  // Malformed JSON.
  for (const std::string b : {"", " ", "null", "true", "\"text\"", "123", "[]", "{", "}", "{\"messages\"}", "{'messages': []}",
                              "{\"messages\":[],}", "{\"a\":1 \"b\":2}", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}x",
                              "{\"messages\": NaN}", "{\"messages\": Infinity}", "{\"max_tokens\": 0x10}",
                              "{\"max_tokens\": 01}", "{\"s\": \"\\x41\"}", "{\"s\": \"tab\there\"}"})
    c.push_back({"malformed " + b.substr(0, 20), chat, b, 400});
  // Deep nesting.
  for (int d : {33, 100, 1000, 30000}) {  // 30000: 60000 bytes, under --max-body
    c.push_back({"nested arrays " + std::to_string(d), chat, std::string(d, '[') + std::string(d, ']'), 400});
    std::string obj;
    for (int i = 0; i < d && obj.size() < 60000; ++i) obj += "{\"a\":";
    c.push_back({"nested objects " + std::to_string(d), chat, obj, 400});
  }
  c.push_back({"nesting inside a field", chat, with("\"temperature\":" + std::string(50, '[') + std::string(50, ']')), 400});
  // Huge and odd numbers.
  for (const std::string v : {"1e308", "1e999", "-1e999", "123456789012345678901234567890", "1.5", "-0.0", "1e-400"})
    c.push_back({"max_tokens " + v, chat, with("\"max_tokens\":" + v), 400});
  c.push_back({"temperature 1e-400 (0)", chat, with("\"temperature\":1e-400,\"max_tokens\":2"), 200});
  c.push_back({"temperature 1e308", chat, with("\"temperature\":1e308"), 400});
  c.push_back({"seed 2^64-1", chat, with("\"seed\":18446744073709551615,\"max_tokens\":2"), 200});
  c.push_back({"seed -2^63", chat, with("\"seed\":-9223372036854775808,\"max_tokens\":2"), 200});
  c.push_back({"seed 2^64", chat, with("\"seed\":18446744073709551616"), 400});
  // Wrong types, one field at a time.
  for (const std::string f :
       {"\"model\":1", "\"model\":[]", "\"max_tokens\":\"5\"", "\"max_tokens\":true", "\"temperature\":true", "\"temperature\":\"0\"",
        "\"top_p\":[]", "\"top_k\":1.5", "\"seed\":1.5", "\"stop\":{}", "\"stop\":[1]", "\"stream\":1", "\"stream\":\"true\"",
        "\"stream_options\":[]", "\"stream_options\":{\"include_usage\":\"yes\"}", "\"logprobs\":\"yes\"", "\"top_logprobs\":\"3\"",
        "\"n\":\"1\"", "\"n\":1.0", "\"max_completion_tokens\":{}"})
    c.push_back({"wrong type " + f, chat, with(f), 400});
  for (const std::string b : {R"({"messages":"hi"})", R"({"messages":[1]})", R"({"messages":[[]]})", R"({"messages":[null]})",
                              R"({"messages":[{"role":null,"content":"x"}]})", R"({"messages":[{"role":"user","content":5}]})",
                              R"({"messages":[{"role":"user","content":{"text":"x"}}]})", R"({"messages":[{"role":"user","content":[5]}]})",
                              R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})"})
    c.push_back({"wrong message " + b, chat, b, 400});
  // Invalid UTF-8 (raw bytes in strings and keys, overlong, surrogates, truncated) and bad escapes.
  for (const std::string bad : {"\xff", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80", "\x80", "a\xfe" "b"}) {
    c.push_back({"invalid UTF-8 in content", chat, R"({"messages":[{"role":"user","content":")" + bad + R"("}]})", 400});
    c.push_back({"invalid UTF-8 in a key", chat, "{" + m + ",\"" + bad + "\":1}", 400});
  }
  c.push_back({"lone surrogate escape", chat, R"({"messages":[{"role":"user","content":"\ud800"}]})", 400});
  c.push_back({"NUL escape (valid)", chat, R"({"messages":[{"role":"user","content":"a\u0000b"}],"max_tokens":2})", 200});
  std::string nul = R"({"messages":[{"role":"user","content":"a)";
  nul += '\0';
  nul += R"(b"}]})";
  c.push_back({"raw NUL byte", chat, nul, 400});
  // max_tokens out of range.
  for (const std::string v : {"-1", "0", "-9223372036854775808", "9223372036854775807", "129", "18446744073709551615"})
    c.push_back({"max_tokens " + v, chat, with("\"max_tokens\":" + v), 400});
  // Empty and unknown.
  for (const std::string b : {R"({"messages":[]})", R"({"messages":[{}]})", R"({"messages":[{"role":"robot","content":"x"}]})",
                              R"({"messages":[{"role":"","content":"x"}]})", R"({"messages":[{"role":"USER","content":"x"}]})",
                              R"({"messages":[{"role":"user"}]})", R"({"messages":[{"role":"user","content":null}]})"})
    c.push_back({"empty or unknown " + b, chat, b, 400});
  c.push_back({"empty content (valid)", chat, R"({"messages":[{"role":"user","content":""}],"max_tokens":2})", 200});
  c.push_back({"prompt too long for the context", chat,
               R"({"messages":[{"role":"user","content":")" + std::string(30000, 'x') + R"("}]})", 400});
  // Completions and embeddings.
  for (const std::string b : {R"({"prompt":null})", R"({"prompt":[]})", R"({"prompt":[[]]})", R"({"prompt":[-1]})",
                              R"({"prompt":[1000]})", R"({"prompt":[1e3]})", R"({"prompt":["a","b"]})", R"({"prompt":"a","max_tokens":0})",
                              R"({"prompt":"a","n":5})", R"({"prompt":"a","logprobs":-1})", R"({"prompt":""})"})
    c.push_back({"completion " + b, comp, b, 400});
  c.push_back({"completion ids (valid)", comp, R"({"prompt":[1,2,3],"max_tokens":2})", 200});
  c.push_back({"embeddings on a text-only server", emb, R"({"input":"x"})", 400});
  // Oversized bodies (--max-body 65536).
  c.push_back({"body over the limit", chat, with("\"pad\":\"" + std::string(70000, 'x') + "\""), 413});
  return c;
}

// Raw HTTP a client library never sends: each answered 4xx or closed, never 2xx or 5xx.
std::vector<std::string> http_corpus() {
  return {"GARBAGE\r\n\r\n",
          "\r\n\r\n",
          "GET\r\n\r\n",
          "get /health HTTP/1.1\r\n\r\n",
          "GET /health HTTP/9.9\r\n\r\n",
          "GET /health HTTX/1.1\r\n\r\n",
          "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
          "POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
          "POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
          "POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\":",
          "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
          "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n",
          "GET /" + std::string(10000, 'a') + " HTTP/1.1\r\n\r\n",
          "GET /health HTTP/1.1\r\nX-Big: " + std::string(10000, 'b') + "\r\n\r\n",
          "GET /v1/../../etc/passwd HTTP/1.1\r\n\r\n",
          std::string("GET /he\0alth HTTP/1.1\r\n\r\n", 26),
          "OPTIONS * HTTP/1.1\r\n\r\n",
          "DELETE /v1/models HTTP/1.1\r\n\r\n",
          // A body of 4 MiB announced (answered 413 before it is read, or the connection closed).
          "POST /v1/completions HTTP/1.1\r\nContent-Length: 4194304\r\n\r\n" + std::string(1 << 16, ' ')};
}

TEST(ServeCli, HostileCorpusIsAnsweredAndTheServerKeepsServing) {
  ServeProcess p(tiny_args({"--parallel", "2", "--max-body", "65536", "--request-timeout", "1", "--queue", "16"}));
  ASSERT_GT(p.port(), 0) << p.first_output() << p.log();
  const std::string probe = R"({"messages":[{"role":"user","content":"Hello"}],"max_tokens":8,"temperature":0})";
  httplib::Client cli("127.0.0.1", p.port());
  cli.set_read_timeout(30, 0);
  auto before = cli.Post("/v1/chat/completions", probe, "application/json");
  ASSERT_TRUE(before);
  ASSERT_EQ(before->status, 200);
  const long rss_before = p.rss_kib();

  int total = 0, right = 0;
  for (const Hostile& h : json_corpus()) {
    httplib::Client c("127.0.0.1", p.port());
    c.set_read_timeout(30, 0);
    auto r = c.Post(h.path.c_str(), h.body, "application/json");
    ++total;
    const bool ok = r && r->status == h.status &&
                    (h.status == 200 || json::parse(r->body, nullptr, false).contains("error"));
    right += ok;
    EXPECT_TRUE(ok) << h.what << ": got " << (r ? std::to_string(r->status) + " " + r->body.substr(0, 200) : "no answer");
  }
  for (const std::string& raw : http_corpus()) {
    RawClient c(p.port());
    ASSERT_TRUE(c.connected());
    c.send_all(raw);
    const std::string got = c.read_response(5000ms);
    const int st = RawClient::status_of(got);
    ++total;
    const bool ok = st == -1 || (st >= 400 && st < 500);
    right += ok;
    EXPECT_TRUE(ok) << raw.substr(0, 50) << " -> " << got.substr(0, 100);
  }
  // Slow clients (a byte every 100 ms), three at once: dropped after the 1 s request deadline.
  std::vector<std::thread> slow;
  std::atomic<int> dropped{0};
  for (int i = 0; i < 3; ++i)
    slow.emplace_back([&] {
      RawClient c(p.port());
      const std::string req = "POST /v1/completions HTTP/1.1\r\nContent-Length: 30\r\n\r\n{\"prompt\":\"x\",\"max_tokens\":2}";
      bool closed = false;
      for (std::size_t k = 0; k < req.size() && !closed; ++k) {
        if (!c.send_all(req.substr(k, 1))) closed = true;
        else c.read_until_close(100ms, &closed);
      }
      dropped += closed;
    });
  for (auto& t : slow) t.join();
  total += 3;
  right += dropped.load();
  EXPECT_EQ(dropped.load(), 3);

  // Still serving, and the same answer as before.
  auto after = cli.Post("/v1/chat/completions", probe, "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
  EXPECT_EQ(json::parse(after->body)["choices"][0], json::parse(before->body)["choices"][0]);
  const long rss_after = p.rss_kib();
  std::printf("hostile corpus: %d requests, %d answered as expected, 0 crashes; server RSS %ld KiB before, %ld KiB after\n",
              total, right, rss_before, rss_after);
  EXPECT_EQ(right, total);
  EXPECT_LT(rss_after, rss_before + 200 * 1024) << "the corpus grew the server by more than 200 MiB";
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(60s), 0) << p.log();
  EXPECT_EQ(p.term_signal(), 0);
}

TEST(ServeCli, SigtermWithRequestsInFlightEndsEveryOneAndExitsZero) {
  for (const char* grace : {"0", "30"}) {
    ServeProcess p(tiny_args({"--parallel", "2", "--queue", "64", "--shutdown-grace", grace}));
    ASSERT_GT(p.port(), 0) << p.log();
    constexpr int kClients = 24;
    std::vector<std::thread> clients;
    std::vector<int> outcome(kClients, -1);  // 200 complete, 503 cut short, 0 refused (or no connection), -2 bad
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&, i] {
        httplib::Client c("127.0.0.1", p.port());
        c.set_read_timeout(120, 0);
        const bool stream = i % 2 == 1;
        const json body = {{"prompt", "In the beginning " + std::to_string(i)}, {"max_tokens", 100}, {"temperature", 0},
                           {"stream", stream}};
        auto r = c.Post("/v1/completions", body.dump(), "application/json");
        if (!r) {
          outcome[static_cast<std::size_t>(i)] = 0;
          return;
        }
        if (r->status == 503) {  // refused on arrival (it came after SIGTERM), or cut short while running
          const json e = json::parse(r->body)["error"];
          const std::string m = e["message"];
          outcome[static_cast<std::size_t>(i)] =
              e["code"] != "shutting_down"                                ? -2
              : m.find("before the completion ended") != std::string::npos ? 503
              : m.find("retry on another replica") != std::string::npos    ? 0
                                                                           : -2;
          return;
        }
        if (r->status != 200) return;
        if (!stream) {
          outcome[static_cast<std::size_t>(i)] = json::parse(r->body)["choices"][0]["finish_reason"].is_string() ? 200 : -2;
          return;
        }
        // A stream ends with [DONE], after a finish reason or after an error event (cut short).
        const Streamed s = parse_stream(r->body);
        if (!s.done) outcome[static_cast<std::size_t>(i)] = -2;
        else if (!s.finish_reason.empty() && s.errors.empty()) outcome[static_cast<std::size_t>(i)] = 200;
        else if (s.errors.size() == 1 && s.errors[0].find("shutting_down") != std::string::npos)
          outcome[static_cast<std::size_t>(i)] = 503;
        else outcome[static_cast<std::size_t>(i)] = -2;
      });
    // SIGTERM once requests are running and waiting.
    httplib::Client h("127.0.0.1", p.port());
    for (int k = 0; k < 2000; ++k) {
      auto r = h.Get("/health");
      if (r && r->status == 200 && json::parse(r->body)["models"][0]["slots_busy"].get<int>() > 0) break;
      std::this_thread::sleep_for(1ms);
    }
    p.signal(SIGTERM);
    double seconds = 0;
    const int code = p.wait(120s, &seconds);
    for (auto& t : clients) t.join();
    EXPECT_EQ(code, 0) << p.log();
    EXPECT_EQ(p.term_signal(), 0);
    int done = 0, cut = 0, refused = 0;
    for (int i = 0; i < kClients; ++i) {
      const int o = outcome[static_cast<std::size_t>(i)];
      EXPECT_TRUE(o == 200 || o == 503 || o == 0) << "client " << i << ": " << o;
      done += o == 200;
      cut += o == 503;
      refused += o == 0;
    }
    EXPECT_NE(p.log().find("SIGTERM, stopping"), std::string::npos) << p.log();
    if (std::string(grace) == "30") {
      EXPECT_EQ(cut, 0);  // time enough: every accepted request finished
    }
    std::printf("SIGTERM, --shutdown-grace %s: exit %d after %.2f s; %d completed, %d cut short (503), %d refused\n", grace,
                code, seconds, done, cut, refused);
  }
}

TEST(ServeCli, StartupErrorsAreNamed) {
  auto run = [](const std::vector<std::string>& args) {
    ServeProcess p(args);
    EXPECT_EQ(p.port(), 0);
    const int code = p.wait(60s);
    return std::make_pair(code, p.log());
  };
  auto [c1, e1] = run({"--model", "/no/such/model"});
  EXPECT_EQ(c1, 2);
  EXPECT_NE(e1.find("/no/such/model"), std::string::npos) << e1;
  auto [c2, e2] = run({"--model", std::string(QKV_FIXTURE_DIR) + "/linear.safetensors"});
  EXPECT_EQ(c2, 2);
  EXPECT_NE(e2.find("linear.safetensors is a file but not a GGUF file"), std::string::npos) << e2;
  auto [c6, e6] = run({"--model", std::string(QKV_FIXTURE_DIR)});  // a folder, but no model
  EXPECT_EQ(c6, 1);
  EXPECT_NE(e6.find("is not a model folder qkv reads"), std::string::npos) << e6;
  auto [c3, e3] = run(tiny_args({"--ctx", "4096"}));
  EXPECT_EQ(c3, 1);
  EXPECT_NE(e3.find("--ctx 4096"), std::string::npos) << e3;
  auto [c4, e4] = run({"--model", gpt2_tiny_dir(), "--host", "203.0.113.7"});
  EXPECT_EQ(c4, 1);
  EXPECT_NE(e4.find("cannot listen on 203.0.113.7"), std::string::npos) << e4;
  auto [c7, e7] = run({"--model", gpt2_tiny_dir(), "--activations", "q9"});
  EXPECT_EQ(c7, 2);
  EXPECT_NE(e7.find("--activations: q9 not in {f32,q8}"), std::string::npos) << e7;
  auto [c8, e8] = run({"--model", gpt2_tiny_dir(), "--kv-cache", "f8"});
  EXPECT_EQ(c8, 2);
  EXPECT_NE(e8.find("--kv-cache: f8 not in {f32,f16}"), std::string::npos) << e8;
  auto [c5, e5] = run({"--model", gpt2_tiny_dir(), "--parallel", "0"});
  EXPECT_EQ(c5, 2);
  EXPECT_NE(e5.find("--parallel"), std::string::npos) << e5;
}


// A name no model has is OpenAI's 404; --model-alias gives a model more names (NAME with one
// model, NAME=ID with several), listed by /v1/models; a bad alias is one line at startup.
TEST(ServeCli, ModelAliasesAnswerAndOtherNamesAre404) {
  ServeProcess p({"--model", gpt2_tiny_dir(), "--model", minilm_dir(), "--model-alias", "gpt-4o-mini=gpt2_tiny",
                  "--model-alias", "text-embedding-3-small=all-MiniLM-L6-v2"});
  ASSERT_GT(p.port(), 0) << p.first_output() << p.log();
  httplib::Client c("127.0.0.1", p.port());
  auto chat = [&](const std::string& model) {
    return c.Post("/v1/completions", json{{"model", model}, {"prompt", "Hi"}, {"max_tokens", 2}}.dump(), "application/json");
  };
  auto a = chat("gpt-4o-mini");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(json::parse(a->body)["model"], "gpt2_tiny");
  auto e = c.Post("/v1/embeddings", json{{"model", "text-embedding-3-small"}, {"input", "x"}}.dump(), "application/json");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 200) << e->body;
  auto missing = chat("gpt-5");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404) << missing->body;
  EXPECT_EQ(json::parse(missing->body)["error"]["code"], "model_not_found");
  auto wrong_kind = chat("text-embedding-3-small");  // an alias of the embedding model
  ASSERT_TRUE(wrong_kind);
  EXPECT_EQ(wrong_kind->status, 400) << wrong_kind->body;
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  std::vector<std::string> ids;
  const json listed = json::parse(m->body);
  for (const auto& d : listed["data"]) ids.push_back(d["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"gpt2_tiny", "gpt-4o-mini", "all-MiniLM-L6-v2", "text-embedding-3-small"}))
      << m->body;
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(60s), 0) << p.log();

  ServeProcess two({"--model", gpt2_tiny_dir(), "--model", minilm_dir(), "--model-alias", "x"});
  EXPECT_EQ(two.port(), 0);
  EXPECT_EQ(two.wait(60s), 1);
  EXPECT_NE(two.log().find("--model-alias 'x': with several models give NAME=ID, ID one of gpt2_tiny, all-MiniLM-L6-v2"),
            std::string::npos)
      << two.log();
  ServeProcess clash({"--model", gpt2_tiny_dir(), "--model-alias", "gpt2_tiny"});
  EXPECT_EQ(clash.port(), 0);
  EXPECT_EQ(clash.wait(60s), 1);
  EXPECT_NE(clash.log().find("two models are named 'gpt2_tiny'"), std::string::npos) << clash.log();
}

}  // namespace
