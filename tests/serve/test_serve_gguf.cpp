// `qkv serve` on SmolLM2-135M-Instruct Q4_1 (the GGUF file `make models` fetches; a Llama-family
// model with grouped-query attention and quantized weights), as a process on port 0: a chat
// completion is `qkv generate --chat ... --json` token for token (greedy: the same ids, shown by
// each token's bytes in logprobs), the streamed text joined is the non-streamed one, and clients
// running at once — more of them than the quantized products' decode path takes rows in one
// pass — each get what they get alone.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <thread>

#include "cli/cli_test_util.h"
#include "qkv/infer/language_model.h"
#include "serve_process.h"
#include "serve_test_util.h"
#include "testing/sanitizers.h"

namespace {

using namespace qkv::testing;
using i64 = std::int64_t;

const std::string kSmol = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kSmolId = "SmolLM2-135M-Instruct.Q4_1.gguf";

// Questions (no single quotes: they go through the shell) and their max_tokens: some end at
// <|im_end|>, some at the length.
const std::vector<std::pair<std::string, i64>> kQuestions = {
    {"What is the capital of France?", 24},
    {"Write a haiku about the sea.", 20},
    {"List three colors.", 16},
    {"Explain in one sentence what a transformer is in machine learning.", 28},
    {"Hi!", 12},
    {"What is 2 + 2?", 10},
};

// The questions the tests ask: all of them, or under the sanitizers (QKV_TEST_REDUCED, where a
// token costs ~13x) three: two end at <|im_end|> (0, 4), one at its max_tokens (5).
const std::vector<std::size_t>& asked() {
  static const std::vector<std::size_t> all = {0, 1, 2, 3, 4, 5}, reduced = {0, 4, 5};
  return reduced_size() ? reduced : all;
}

struct Reference {
  std::vector<i64> prompt_ids, new_ids;
  std::vector<double> logprobs;  // of each new token, from the float32 logits
  std::string text, finish_reason;
};

// `qkv generate --chat Q --json` (greedy) with the model flags `flags` (as the server's), once
// per question and flags.
const Reference& generated(std::size_t q, const std::string& flags = "") {
  static std::map<std::pair<std::size_t, std::string>, Reference> cache;
  if (auto it = cache.find({q, flags}); it != cache.end()) return it->second;
  const auto& [question, max_new] = kQuestions[q];
  const auto r = qkv::cli_test::run("generate --model '" + kSmol + "' --chat '" + question + "' --max-new " +
                                    std::to_string(max_new) + " " + flags + " --logprobs 0 --json");
  EXPECT_EQ(r.code, 0) << r.err;
  Reference ref;
  const json j = json::parse(r.out);
  ref.prompt_ids = j["prompt_ids"].get<std::vector<i64>>();
  ref.new_ids = j["new_ids"].get<std::vector<i64>>();
  for (const json& t : j["logprobs"]) ref.logprobs.push_back(t["logprob"]);
  ref.text = j["text"];
  ref.finish_reason = j["stop_reason"] == "eos" ? "stop" : "length";
  return cache[{q, flags}] = ref;
}

const qkv::tokenize::Tokenizer& smol_tokenizer() {
  static const qkv::infer::LanguageModel lm = qkv::infer::load_language_model(kSmol);
  return lm.tok();
}

json chat_body(std::size_t q, bool stream) {
  return {{"model", kSmolId},
          {"messages", json::array({{{"role", "user"}, {"content", kQuestions[q].first}}})},
          {"max_tokens", kQuestions[q].second},
          {"temperature", 0},
          {"logprobs", !stream},
          {"stream", stream},
          {"stream_options", {{"include_usage", true}}}};
}

// One chat completion: its text, finish reason and usage; the bytes of each token (from
// logprobs) when not streamed.
struct Answer {
  int status = 0;
  std::string text, finish_reason, body;
  std::vector<std::string> token_bytes;
  std::vector<double> logprobs;
  i64 prompt_tokens = -1, completion_tokens = -1;
};

Answer ask(int port, std::size_t q, bool stream) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  Answer a;
  auto r = c.Post("/v1/chat/completions", chat_body(q, stream).dump(), "application/json");
  if (!r) return a;
  a.status = r->status;
  a.body = r->body;
  if (r->status != 200) return a;
  json usage;
  if (stream) {
    const Streamed s = parse_stream(r->body);
    EXPECT_TRUE(s.done && s.errors.empty()) << r->body;
    a.text = s.text;
    a.finish_reason = s.finish_reason;
    usage = s.usage;
  } else {
    const json j = json::parse(r->body);
    const json& c0 = j["choices"][0];
    a.text = c0["message"]["content"];
    a.finish_reason = c0["finish_reason"];
    for (const json& t : c0["logprobs"]["content"]) {
      std::string b;
      for (const json& x : t["bytes"]) b += static_cast<char>(x.get<int>());
      a.token_bytes.push_back(b);
      a.logprobs.push_back(t["logprob"]);
    }
    usage = j["usage"];
  }
  if (usage.is_object()) {
    a.prompt_tokens = usage["prompt_tokens"];
    a.completion_tokens = usage["completion_tokens"];
  }
  return a;
}

// The answer is the reference, token for token (and bit for bit: each token's log-probability,
// printed in full, is the same double).
void expect_generated(const Answer& a, std::size_t q, const std::string& flags = "") {
  const Reference& ref = generated(q, flags);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.text, ref.text) << kQuestions[q].first;
  EXPECT_EQ(a.finish_reason, ref.finish_reason) << kQuestions[q].first;
  EXPECT_EQ(a.prompt_tokens, static_cast<i64>(ref.prompt_ids.size()));
  EXPECT_EQ(a.completion_tokens, static_cast<i64>(ref.new_ids.size()));
  if (a.token_bytes.empty()) return;  // streamed
  ASSERT_EQ(a.token_bytes.size(), ref.new_ids.size()) << kQuestions[q].first;
  ASSERT_EQ(ref.logprobs.size(), ref.new_ids.size());
  for (std::size_t i = 0; i < ref.new_ids.size(); ++i) {
    EXPECT_EQ(a.token_bytes[i], smol_tokenizer().token_text(ref.new_ids[i])) << kQuestions[q].first << ", token " << i;
    EXPECT_EQ(a.logprobs[i], ref.logprobs[i]) << kQuestions[q].first << ", token " << i;
  }
}

void need_smol() { ASSERT_TRUE(std::filesystem::exists(kSmol)) << kSmol << " is missing: run `make models` first"; }

TEST(ServeGguf, ChatIsGenerateTokenForTokenStreamedOrNot) {
  need_smol();
  ServeProcess p({"--model", kSmol, "--parallel", "2", "--ctx", "512"});
  ASSERT_GT(p.port(), 0) << p.first_output() << p.log();
  EXPECT_NE(p.first_output().find(kSmolId + " (llama, 2 slots x 512 positions, chat)"), std::string::npos)
      << p.first_output();
  for (std::size_t q : asked()) {
    const Answer whole = ask(p.port(), q, false);
    expect_generated(whole, q);
    const Answer streamed = ask(p.port(), q, true);
    expect_generated(streamed, q);
    EXPECT_EQ(streamed.text, whole.text);
  }
  // /v1/models names the file.
  httplib::Client c("127.0.0.1", p.port());
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], kSmolId);
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.log();
}

// --activations q8 (products on quantized activations) is qkv generate --activations q8.
TEST(ServeGguf, Q8ActivationsAreThoseOfGenerate) {
  need_smol();
  ServeProcess p({"--model", kSmol, "--parallel", "2", "--ctx", "512", "--activations", "q8"});
  ASSERT_GT(p.port(), 0) << p.first_output() << p.log();
  for (std::size_t q : {std::size_t{0}, std::size_t{3}}) expect_generated(ask(p.port(), q, false), q, "--activations q8");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.log();
}

// A server started with `flags` (besides the model), `clients` clients at once (client i asks
// question i % n, streamed when i % stream_every == stream_at): each answer is what `qkv generate`
// with the same flags gives it alone, bit for bit.
void expect_concurrent_clients_get_generate(const std::vector<std::string>& flags, std::size_t clients,
                                            std::size_t stream_every, std::size_t stream_at) {
  std::vector<std::string> args = {"--model", kSmol};
  args.insert(args.end(), flags.begin(), flags.end());
  ServeProcess p(args);
  ASSERT_GT(p.port(), 0) << p.first_output() << p.log();
  std::vector<Answer> got(clients);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < clients; ++i)
    threads.emplace_back([&, i] { got[i] = ask(p.port(), asked()[i % asked().size()], i % stream_every == stream_at); });
  for (auto& t : threads) t.join();
  std::string generate_flags;  // the model flags only: the server's --parallel / --ctx are not generate's
  for (std::size_t i = 0; i < flags.size(); i += 2)
    if (flags[i] == "--activations" || flags[i] == "--kv-cache")
      generate_flags += (generate_flags.empty() ? "" : " ") + flags[i] + " " + flags[i + 1];
  for (std::size_t i = 0; i < clients; ++i) {
    SCOPED_TRACE("client " + std::to_string(i));
    expect_generated(got[i], asked()[i % asked().size()], generate_flags);
  }
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.log();
}

// With --activations q8 too: a decode step's rows take the Q8 path (Q4_1 / Q8_0 weights on AVX-512
// VNNI), whose rows are independent of each other, so each client still gets its text alone.
TEST(ServeGguf, Q8ConcurrentClientsEachGetWhatTheyGetAlone) {
  need_smol();
  expect_concurrent_clients_get_generate({"--parallel", "5", "--ctx", "256", "--activations", "q8"}, 8, 3, 1);
}

// --kv-cache f16 (keys and values kept as halves) with --activations q8: concurrent clients each
// get what `qkv generate` with the same flags gives, bit for bit.
TEST(ServeGguf, HalfCacheClientsEachGetWhatGenerateGives) {
  need_smol();
  expect_concurrent_clients_get_generate({"--parallel", "3", "--ctx", "256", "--activations", "q8", "--kv-cache", "f16"}, 4, 2, 1);
}

TEST(ServeGguf, ConcurrentClientsEachGetWhatTheyGetAlone) {
  need_smol();
  // 12 slots: a decode pass of up to 12 rows (beyond the 8 the quantized products' decode path
  // takes at once); 18 clients (13 under the sanitizers), so some wait in the queue and join the
  // running batch later.
  expect_concurrent_clients_get_generate({"--parallel", "12", "--ctx", "256"}, full_or_reduced<std::size_t>(18, 13), 3, 2);
}

// SIGTERM and SIGINT end a server on the real model with several threads, idle or answering, with
// status 0 after "stopping" and "stopped". `--threads` starts the pool's workers before the
// server blocks the two signals to wait for them on one thread; the kernel delivered SIGTERM to
// such a worker, where its default action killed the process (status 143, nothing logged, the
// requests in flight cut). The library's threads now start with them blocked.
TEST(ServeGguf, StopSignalsEndAServerWithSeveralThreadsCleanly) {
  need_smol();
  // The signal at once after "listening" (the server may not be accepting yet: it stops before it
  // starts) and after a moment idle.
  for (const int sig : {SIGTERM, SIGINT})
    for (const char* threads : {"2", "3"})
      for (const int after_ms : {0, 200}) {
        const std::string what = std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + ", --threads " + threads + " after " +
                                 std::to_string(after_ms) + " ms";
        ServeProcess p({"--model", kSmol, "--threads", threads, "--parallel", "2", "--ctx", "256"});
        ASSERT_GT(p.port(), 0) << what << "\n" << p.first_output() << p.log();
        std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
        p.signal(sig);
        EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << what << ": ended by signal " << p.term_signal() << "\n" << p.log();
        EXPECT_NE(p.log().find(std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + ", stopping"), std::string::npos)
            << what << "\n" << p.log();
        EXPECT_NE(p.log().find("qkv serve: stopped"), std::string::npos) << what << "\n" << p.log();
      }
  // Busy: SIGTERM while a request is being answered; the answer is whole (it needs less than the
  // grace period) and the server then exits 0.
  ServeProcess p({"--model", kSmol, "--threads", "2", "--parallel", "2", "--ctx", "512"});
  ASSERT_GT(p.port(), 0) << p.first_output() << p.log();
  Answer a;
  std::thread client([&] { a = ask(p.port(), asked()[0], true); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the answer takes ~0.5-2 s here
  p.signal(SIGTERM);
  client.join();
  EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << "ended by signal " << p.term_signal() << "\n" << p.log();
  expect_generated(a, asked()[0]);
}

}  // namespace
