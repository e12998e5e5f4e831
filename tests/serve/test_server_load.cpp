// The server under load: 16 concurrent clients with mixed prompts, lengths, endpoints, streaming
// and sampling, each answer equal to the same request alone; a client that disconnects in the
// middle of its stream has its sequence cancelled while the others go on, equal to alone.
#include <gtest/gtest.h>

#include <atomic>
#include <sstream>

#include "qkv/core/rng.h"
#include "serve_test_util.h"
#include "testing/concurrent.h"
#include "testing/gated_model.h"

namespace {

using namespace qkv::testing;
using namespace std::chrono_literals;
using i64 = std::int64_t;

struct Answer {
  int status = 0;
  std::string text, finish;
  json usage;
  bool operator==(const Answer&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Answer& a) {
  return os << a.status << " '" << a.text << "' " << a.finish << " " << a.usage.dump();
}

// Request r of the mix: chat or completion, streamed or not, greedy or seeded, 1-30 prompt
// words, 1-30 new tokens, a stop string for some.
std::pair<std::string, json> mixed_request(int r) {
  qkv::Generator gen(900 + static_cast<std::uint64_t>(r));
  static const std::vector<std::string> words = {"light", "and", "the", "earth", "was", "without", "form", "void",
                                                 "darkness", "upon", "face", "of", "deep", "God", "said", "let"};
  std::string text;
  const int n = 1 + static_cast<int>(gen.next_u64() % 30);
  for (int i = 0; i < n; ++i) text += (i ? " " : "") + words[gen.next_u64() % words.size()];
  json body = {{"max_tokens", 1 + static_cast<int>(gen.next_u64() % 30)}, {"stream", r % 2 == 1}};
  if (r % 3 == 0) {
    body["temperature"] = 0;
  } else {
    body["temperature"] = 0.9;
    body["seed"] = r;
    body["top_p"] = 0.95;
  }
  if (r % 7 == 3) body["stop"] = json::array({"\n", " the"});
  if (r % 2 == 0) {
    body["messages"] = json::array({{{"role", "user"}, {"content", text}}});
    if (r % 4 == 0) body["stream_options"] = {{"include_usage", true}};
    return {"/v1/chat/completions", body};
  }
  body["prompt"] = text;
  if (r % 4 == 1) body["stream_options"] = {{"include_usage", true}};
  return {"/v1/completions", body};
}

Answer ask(const TestServer& s, const std::pair<std::string, json>& req) {
  auto r = s.client()->Post(req.first.c_str(), req.second.dump(), "application/json");
  Answer a;
  if (!r) {
    a.text = "client error: " + httplib::to_string(r.error());
    return a;
  }
  a.status = r->status;
  if (r->status != 200) return a;
  if (req.second.value("stream", false)) {
    const Streamed st = parse_stream(r->body);
    a.text = st.text;
    a.finish = st.finish_reason;
    a.usage = st.usage;
    if (!st.done || !st.errors.empty()) a.finish = "!bad stream";
  } else {
    const json j = json::parse(r->body);
    const json& c = j["choices"][0];
    a.text = c.contains("message") ? c["message"]["content"].get<std::string>() : c["text"].get<std::string>();
    a.finish = c["finish_reason"];
    a.usage = j["usage"];
  }
  return a;
}

TEST(ServerLoad, SixteenConcurrentClientsEachGetTheirAnswerAlone) {
  TestServer s({}, {tiny_text_model({.slots = 4, .context = 128, .max_queue = 64, .prefill_chunk = 8})});
  constexpr int kRequests = 64;
  std::vector<Answer> alone, together(kRequests);
  for (int r = 0; r < kRequests; ++r) {
    alone.push_back(ask(s, mixed_request(r)));
    ASSERT_EQ(alone.back().status, 200) << "request " << r;
  }
  const auto errors = serve_concurrently(16, kRequests, [&](int r) {
    together[static_cast<std::size_t>(r)] = ask(s, mixed_request(r));
  });
  EXPECT_TRUE(errors.empty()) << errors.front();
  for (int r = 0; r < kRequests; ++r) EXPECT_EQ(together[static_cast<std::size_t>(r)], alone[static_cast<std::size_t>(r)]) << "request " << r;
  auto h = s.client()->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(json::parse(h->body)["models"][0]["slots_busy"], 0);
}

TEST(ServerLoad, ClientThatDisconnectsMidStreamIsCancelledOthersContinue) {
  const json other_req = {{"prompt", "In the beginning"}, {"max_tokens", 60}, {"temperature", 0}};
  const json leaver_req = {{"prompt", "And God said"}, {"max_tokens", 100}, {"temperature", 0}, {"stream", true}};
  // The other request alone, for comparison.
  Answer other_alone;
  {
    TestServer s({}, {tiny_text_model({.slots = 2, .context = 128})});
    other_alone = ask(s, {"/v1/completions", other_req});
    ASSERT_EQ(other_alone.status, 200);
  }
  auto paced = std::make_shared<qkv::testing::GatedModel>(gpt2_tiny_model());
  qkv::serve::TextModel tm = tiny_text_model({.slots = 2, .context = 128}, paced);
  auto sched = tm.scheduler;
  std::ostringstream log;
  TestServer s({.log = &log}, {tm});

  // The leaver reads three events, then drops the connection.
  std::atomic<int> events{0};
  std::atomic<bool> left{false};
  std::thread leaver([&] {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = leaver_req.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      const std::string chunk(data, n);
      for (std::size_t p = chunk.find("data: "); p != std::string::npos; p = chunk.find("data: ", p + 1)) ++events;
      return events.load() < 3;
    };
    s.client()->send(req);
    left = true;
  });
  Answer other;
  std::thread other_client([&] { other = ask(s, {"/v1/completions", other_req}); });
  // Steps one at a time until the leaver is gone; then none until the server has noticed.
  for (int i = 0; i < 1000 && !left; ++i) {
    paced->allow(1);
    std::this_thread::sleep_for(5ms);
  }
  leaver.join();
  ASSERT_TRUE(left.load());
  for (int i = 0; i < 2000 && log.str().find(" 499 ") == std::string::npos; ++i) std::this_thread::sleep_for(5ms);
  paced->open();
  other_client.join();
  EXPECT_EQ(other, other_alone);
  // The leaver's line: status 499 (client closed), only the tokens made before it left.
  const std::string text = log.str();
  const auto at = text.find(" 499 model=gpt2_tiny tokens=");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string counts = text.substr(at + 28, text.find(' ', at + 28) - at - 28);  // "P+N"
  const i64 generated = std::stoll(counts.substr(counts.find('+') + 1));
  EXPECT_LT(generated, 100) << text;
  // Its slot is free again.
  for (int i = 0; i < 2000 && sched->stats().busy != 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(sched->stats().busy, 0);
}

}  // namespace
