// The server's endpoints and fields, against a serve::Server on port 0 of 127.0.0.1 (the tiny
// GPT-2 of the fixtures with a ChatML template; the MiniLM embedder of `make models`): response
// shapes, SSE framing, streaming = non-streaming, greedy text = infer::generate's, logprobs, the
// prompt forms, stop strings, seeds, max_tokens, /v1/models, /health, /metrics, embeddings.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "qkv/infer/generate.h"
#include "qkv/infer/score.h"
#include "serve_test_util.h"

namespace {

using namespace qkv::testing;
using i64 = std::int64_t;

constexpr qkv::infer::SchedulerOptions kSched{.slots = 4, .context = 128, .max_queue = 64, .prefill_chunk = 16};

TestServer& server() {
  static TestServer s({}, {tiny_text_model(kSched)});
  return s;
}

json post(const std::string& path, const json& body, int want_status = 200) {
  auto c = server().client();
  auto r = c->Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << path;
  if (!r) return json();
  EXPECT_EQ(r->status, want_status) << r->body;
  return r->body.empty() || r->get_header_value("Content-Type") != "application/json" ? json() : json::parse(r->body);
}

std::string post_raw(const std::string& path, const json& body, std::string* content_type = nullptr) {
  auto r = server().client()->Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return "";
  EXPECT_EQ(r->status, 200) << r->body;
  if (content_type) *content_type = r->get_header_value("Content-Type");
  return r->body;
}

const json kHello = json::array({{{"role", "system"}, {"content", "You are brief."}}, {{"role", "user"}, {"content", "Hello there"}}});

// What infer::generate makes of the same prompt, greedy (eos not shown as text).
std::string generate_text(const std::vector<i64>& prompt, i64 max_new, std::string* finish) {
  const auto tok = gpt2_tiny_tokenizer();
  const auto r = qkv::infer::generate(*gpt2_tiny_model(), {prompt},
                                      {.max_new_tokens = max_new, .eos_id = *tok->eos_id()});
  std::vector<i64> ids = r[0].new_ids;
  if (!ids.empty() && ids.back() == *tok->eos_id()) ids.pop_back();
  *finish = r[0].reason == qkv::infer::StopReason::Length ? "length" : "stop";
  return tok->decode(ids);
}

TEST(ServerChat, ResponseShapeAndGreedyTextOfGenerate) {
  const json r = post("/v1/chat/completions", {{"model", "gpt2_tiny"}, {"messages", kHello}, {"max_tokens", 12},
                                               {"temperature", 0}});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_TRUE(r["created"].is_number_integer());
  EXPECT_EQ(r["model"], "gpt2_tiny");
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& c = r["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_TRUE(c["logprobs"].is_null());
  // The prompt is the template's rendering, tokenized; the text is greedy generation's.
  const auto prompt = gpt2_tiny_lm()->chat_prompt({{.role = "system", .content = "You are brief."},
                                                   {.role = "user", .content = "Hello there"}});
  std::string finish;
  EXPECT_EQ(c["message"]["content"], generate_text(prompt, 12, &finish));
  EXPECT_EQ(c["finish_reason"], finish);
  const json& u = r["usage"];
  EXPECT_EQ(u["prompt_tokens"], static_cast<i64>(prompt.size()));
  EXPECT_EQ(u["total_tokens"].get<i64>(), u["prompt_tokens"].get<i64>() + u["completion_tokens"].get<i64>());
  if (finish == "length") {
    EXPECT_EQ(u["completion_tokens"], 12);
  }
}

TEST(ServerChat, StreamFramingEqualsTheNonStreamedResponse) {
  const json req = {{"messages", kHello}, {"max_tokens", 20}, {"temperature", 0}};
  const json whole = post("/v1/chat/completions", req);
  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  std::string type;
  const std::string body = post_raw("/v1/chat/completions", sreq, &type);
  EXPECT_EQ(type, "text/event-stream");
  const auto events = sse_events(body);
  ASSERT_GE(events.size(), 4u);
  for (const auto& e : events) EXPECT_NE(e[0], '!') << "not an SSE data event: " << e;
  EXPECT_EQ(events.back(), "[DONE]");
  const json first = json::parse(events.front());
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());
  // The usage chunk comes last, with no choices.
  const json usage_chunk = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage_chunk["choices"].empty());
  EXPECT_EQ(usage_chunk["usage"], whole["usage"]);
  // One id for every chunk; the text and finish reason of the whole response.
  for (std::size_t i = 0; i + 1 < events.size(); ++i) EXPECT_EQ(json::parse(events[i])["id"], first["id"]);
  const Streamed s = parse_stream(body);
  EXPECT_EQ(s.text, whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(s.finish_reason, whole["choices"][0]["finish_reason"]);
  EXPECT_TRUE(s.errors.empty());
  // Without include_usage no chunk carries a usage field.
  sreq.erase("stream_options");
  for (const auto& e : sse_events(post_raw("/v1/chat/completions", sreq)))
    if (e != "[DONE]") {
      EXPECT_FALSE(json::parse(e).contains("usage")) << e;
    }
}

TEST(ServerChat, LogprobsWithTopAlternatives) {
  for (bool stream : {false, true}) {
    json req = {{"messages", kHello}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3},
                {"stream", stream}};
    std::vector<json> entries;
    if (stream) {
      for (const auto& e : sse_events(post_raw("/v1/chat/completions", req))) {
        if (e == "[DONE]") continue;
        const json j = json::parse(e);
        if (!j["choices"][0]["logprobs"].is_null())
          for (const auto& x : j["choices"][0]["logprobs"]["content"]) entries.push_back(x);
      }
    } else {
      const json r = post("/v1/chat/completions", req);
      for (const auto& x : r["choices"][0]["logprobs"]["content"]) entries.push_back(x);
      EXPECT_EQ(static_cast<i64>(entries.size()), r["usage"]["completion_tokens"].get<i64>());
    }
    ASSERT_FALSE(entries.empty());
    for (const auto& x : entries) {
      ASSERT_TRUE(x["token"].is_string());
      ASSERT_TRUE(x["bytes"].is_array());
      EXPECT_LE(x["logprob"].get<double>(), 0.0);
      ASSERT_EQ(x["top_logprobs"].size(), 3u);
      // Greedy: the chosen token is the most likely one.
      EXPECT_EQ(x["top_logprobs"][0]["token"], x["token"]);
      EXPECT_DOUBLE_EQ(x["top_logprobs"][0]["logprob"].get<double>(), x["logprob"].get<double>());
      EXPECT_GE(x["top_logprobs"][0]["logprob"].get<double>(), x["top_logprobs"][1]["logprob"].get<double>());
    }
  }
}

TEST(ServerCompletions, PromptAsTextIdsAndListsGiveOneAnswer) {
  const std::string text = "In the beginning God created";
  const auto ids = gpt2_tiny_tokenizer()->encode(text);
  std::string finish;
  const std::string want = generate_text(ids, 10, &finish);
  for (const json& prompt : {json(text), json(ids), json::array({text}), json::array({ids})}) {
    const json r = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 10}, {"temperature", 0}, {"echo", false},
                                            {"n", 1}});
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_EQ(r["id"].get<std::string>().rfind("cmpl-", 0), 0u);
    EXPECT_EQ(r["choices"][0]["text"], want) << prompt.dump();
    EXPECT_EQ(r["choices"][0]["finish_reason"], finish);
    EXPECT_EQ(r["usage"]["prompt_tokens"], static_cast<i64>(ids.size()));
  }
  // Streamed the same.
  const Streamed s = parse_stream(post_raw("/v1/completions", {{"prompt", text}, {"max_tokens", 10}, {"temperature", 0},
                                                               {"stream", true}}));
  EXPECT_EQ(s.text, want);
  EXPECT_TRUE(s.done);
}

TEST(ServerCompletions, LogprobsListsHaveOneEntryPerToken) {
  const json r = post("/v1/completions", {{"prompt", "And God said"}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}});
  const json& lp = r["choices"][0]["logprobs"];
  const i64 n = r["usage"]["completion_tokens"];
  EXPECT_EQ(static_cast<i64>(lp["tokens"].size()), n);
  EXPECT_EQ(static_cast<i64>(lp["token_logprobs"].size()), n);
  EXPECT_EQ(static_cast<i64>(lp["top_logprobs"].size()), n);
  ASSERT_EQ(static_cast<i64>(lp["text_offset"].size()), n);
  std::string joined;
  for (i64 i = 0; i < n; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<std::size_t>(), joined.size());
    joined += lp["tokens"][i].get<std::string>();
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
  }
  EXPECT_EQ(joined, r["choices"][0]["text"]);
}

// echo: the prompt's text before the completion's, and with logprobs the prompt's tokens too (the
// first with null logprob and top_logprobs), the same numbers as infer::score_tokens over the
// prompt; the completion is the one without echo; text_offset counts from the start of the
// returned text.
TEST(ServerCompletions, EchoReturnsAndScoresThePrompt) {
  const std::string text = "And God said, Let there be light";
  const auto ids = gpt2_tiny_tokenizer()->encode(text);
  const i64 P = static_cast<i64>(ids.size());
  const json plain = post("/v1/completions", {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}});
  const json r = post("/v1/completions",
                      {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 2}, {"echo", true}});
  const json& c = r["choices"][0];
  EXPECT_EQ(c["text"], text + plain["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(c["finish_reason"], plain["choices"][0]["finish_reason"]);
  EXPECT_EQ(r["usage"], plain["usage"]);
  const json& lp = c["logprobs"];
  const i64 n = plain["usage"]["completion_tokens"];
  ASSERT_EQ(static_cast<i64>(lp["tokens"].size()), P + n);
  ASSERT_EQ(static_cast<i64>(lp["token_logprobs"].size()), P + n);
  ASSERT_EQ(static_cast<i64>(lp["top_logprobs"].size()), P + n);
  ASSERT_EQ(static_cast<i64>(lp["text_offset"].size()), P + n);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  const qkv::infer::ScoreResult want = qkv::infer::score_tokens(*gpt2_tiny_model(), ids, {.context = P, .stride = P, .top = 2});
  const auto tok = gpt2_tiny_tokenizer();
  for (i64 i = 1; i < P; ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want.tokens[static_cast<std::size_t>(i - 1)].logprob, 1e-5) << i;
    ASSERT_EQ(lp["top_logprobs"][i].size(), 2u);
    EXPECT_TRUE(lp["top_logprobs"][i].contains(tok->token_text(want.tokens[static_cast<std::size_t>(i - 1)].top[0].first)));
  }
  // The completion's entries are those of the request without echo (the first token's numbers
  // come from the prefill's head over every row, which rounds apart from the last row's alone by
  // ~1e-7); the offsets run on.
  const json& plp = plain["choices"][0]["logprobs"];
  for (i64 i = 0; i < n; ++i) {
    EXPECT_EQ(lp["tokens"][P + i], plp["tokens"][i]) << i;
    EXPECT_NEAR(lp["token_logprobs"][P + i].get<double>(), plp["token_logprobs"][i].get<double>(), 1e-5) << i;
    ASSERT_EQ(lp["top_logprobs"][P + i].size(), plp["top_logprobs"][i].size()) << i;
    for (const auto& [t, l] : plp["top_logprobs"][i].items())
      EXPECT_NEAR(lp["top_logprobs"][P + i][t].get<double>(), l.get<double>(), 1e-5) << i << " " << t;
  }
  std::string joined;
  for (i64 i = 0; i < P + n; ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<std::size_t>(), joined.size()) << i;
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, c["text"]);

  // max_tokens 0: the prompt alone, scored; as ids, echoed as their text.
  for (const json& prompt : {json(text), json(ids)}) {
    const json z = post("/v1/completions", {{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 0}});
    EXPECT_EQ(z["choices"][0]["text"], text);
    EXPECT_EQ(z["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(z["usage"]["completion_tokens"], 0);
    EXPECT_EQ(z["choices"][0]["logprobs"]["tokens"].size(), static_cast<std::size_t>(P));
    for (i64 i = 1; i < P; ++i)
      EXPECT_EQ(z["choices"][0]["logprobs"]["token_logprobs"][i], lp["token_logprobs"][i]) << i;
  }
  // echo without logprobs: the text only; max_tokens 0 without logprobs the prompt alone.
  const json e = post("/v1/completions", {{"prompt", text}, {"max_tokens", 8}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(e["choices"][0]["text"], c["text"]);
  EXPECT_TRUE(e["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(post("/v1/completions", {{"prompt", text}, {"max_tokens", 0}, {"echo", true}})["choices"][0]["text"], text);
}

// Streamed with echo: the first event is the prompt's text (with its logprobs), then the
// completion's events as without echo, offsets counted from the start of the whole text.
TEST(ServerCompletions, EchoStreamsThePromptFirst) {
  const std::string text = "In the beginning God";
  const json body = {{"prompt", text}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 1}, {"echo", true}};
  const json whole = post("/v1/completions", body);
  json streamed_body = body;
  streamed_body["stream"] = true;
  const std::string raw = post_raw("/v1/completions", streamed_body);
  const Streamed s = parse_stream(raw);
  EXPECT_TRUE(s.done);
  EXPECT_EQ(s.text, whole["choices"][0]["text"]);
  const std::vector<std::string> ev = sse_events(raw);
  ASSERT_GE(ev.size(), 2u);
  const json first = json::parse(ev[0]);
  EXPECT_EQ(first["choices"][0]["text"], text);
  const json& lp = first["choices"][0]["logprobs"];
  const auto P = gpt2_tiny_tokenizer()->encode(text).size();
  ASSERT_EQ(lp["tokens"].size(), P);
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  // Every streamed logprob entry, in order, is the non-streamed response's.
  json tokens = json::array(), offsets = json::array();
  for (const std::string& e : ev) {
    if (e == "[DONE]") continue;
    const json j = json::parse(e);
    const json& l = j["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (const json& t : l["tokens"]) tokens.push_back(t);
    for (const json& o : l["text_offset"]) offsets.push_back(o);
  }
  EXPECT_EQ(tokens, whole["choices"][0]["logprobs"]["tokens"]);
  EXPECT_EQ(offsets, whole["choices"][0]["logprobs"]["text_offset"]);
  // The prompt alone, streamed.
  const Streamed z = parse_stream(post_raw("/v1/completions", {{"prompt", text}, {"max_tokens", 0}, {"echo", true},
                                                               {"stream", true}}));
  EXPECT_EQ(z.text, text);
  EXPECT_EQ(z.finish_reason, "length");
}

// A prompt that fills the context (128 positions): scored alone with echo, refused with a token
// to generate.
TEST(ServerCompletions, EchoOfAPromptAtTheContextLimit) {
  std::vector<i64> ids(128);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<i64>(100 + i % 50);
  const json z = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}});
  EXPECT_EQ(z["choices"][0]["logprobs"]["tokens"].size(), 128u);
  const json r = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 1}, {"echo", true}}, 400);
  EXPECT_EQ(r["error"]["code"], "context_length_exceeded");
  ids.push_back(5);
  const json over = post("/v1/completions", {{"prompt", ids}, {"max_tokens", 0}, {"echo", true}}, 400);
  EXPECT_EQ(over["error"]["code"], "context_length_exceeded");
}

TEST(ServerGeneration, StopStringsEndTheTextBeforeThem) {
  const json base = {{"prompt", "In the beginning"}, {"max_tokens", 30}, {"temperature", 0}};
  const std::string full = post("/v1/completions", base)["choices"][0]["text"];
  ASSERT_GT(full.size(), 12u);
  const std::string stop = full.substr(8, 3);
  const std::string want = full.substr(0, full.find(stop));
  for (bool stream : {false, true}) {
    json req = base;
    req["stop"] = json::array({"never appears \xe2\x9c\x93", stop});
    req["stream"] = stream;
    if (stream) {
      const Streamed s = parse_stream(post_raw("/v1/completions", req));
      EXPECT_EQ(s.text, want);
      EXPECT_EQ(s.finish_reason, "stop");
    } else {
      const json r = post("/v1/completions", req);
      EXPECT_EQ(r["choices"][0]["text"], want);
      EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
      EXPECT_LT(r["usage"]["completion_tokens"].get<i64>(), 30);
    }
  }
  json one = base;
  one["stop"] = stop;  // a string, not a list
  EXPECT_EQ(post("/v1/completions", one)["choices"][0]["text"], want);
}

TEST(ServerGeneration, SeedsAndSamplingFields) {
  const json req = {{"messages", kHello}, {"max_tokens", 16}, {"temperature", 1.2}, {"top_p", 0.95}, {"top_k", 40},
                    {"seed", 1234}};
  const std::string a = post("/v1/chat/completions", req)["choices"][0]["message"]["content"];
  EXPECT_EQ(post("/v1/chat/completions", req)["choices"][0]["message"]["content"], a);  // same seed, same text
  int differ = 0;
  for (int seed = 1; seed <= 4; ++seed) {
    json r = req;
    r["seed"] = seed;
    differ += post("/v1/chat/completions", r)["choices"][0]["message"]["content"] != a;
  }
  EXPECT_GE(differ, 1);
  // top_p 0 is greedy.
  json g = req;
  g["top_p"] = 0;
  json t0 = req;
  t0.erase("top_p");
  t0["temperature"] = 0;
  EXPECT_EQ(post("/v1/chat/completions", g)["choices"][0]["message"]["content"],
            post("/v1/chat/completions", t0)["choices"][0]["message"]["content"]);
}

// logit_bias, the penalties and min_p reach the sampler: banning the greedy answer's first token
// changes it (and the token never appears), a bias past the vocabulary is a 400 naming it.
TEST(ServerGeneration, LogitBiasAndPenaltiesReachTheSampler) {
  const auto lm = gpt2_tiny_lm();
  const std::vector<i64> prompt = lm->encode_prompt("Unto");
  auto library = [&](const qkv::infer::SamplingOptions& so) {
    auto ids = qkv::infer::generate(*lm->model, {prompt}, {.max_new_tokens = 6, .sampling = so, .stop_ids = lm->eos_ids})[0].new_ids;
    if (!ids.empty() && lm->is_eos(ids.back())) ids.pop_back();  // the server does not print it
    return lm->tokenizer->decode(ids);
  };
  const json base = {{"prompt", "Unto"}, {"max_tokens", 6}, {"temperature", 0}};
  const std::string text = post("/v1/completions", base)["choices"][0]["text"];
  ASSERT_EQ(text, library({}));
  const i64 first = qkv::infer::generate(*lm->model, {prompt}, {.max_new_tokens = 1})[0].new_ids[0];
  json banned = base;
  banned["logit_bias"] = {{std::to_string(first), -100}, {"3", 2.5}};
  const std::string other = post("/v1/completions", banned)["choices"][0]["text"];
  EXPECT_NE(other, text);
  EXPECT_EQ(other, library({.logit_bias = {{3, 2.5}, {first, -100.0}}}));
  json penalised = base;
  penalised["frequency_penalty"] = 1.5;
  penalised["presence_penalty"] = 0.5;
  penalised["repeat_penalty"] = 1.7;
  penalised["repeat_last_n"] = 4;
  EXPECT_EQ(post("/v1/completions", penalised)["choices"][0]["text"],
            library({.repeat_penalty = 1.7, .repeat_last_n = 4, .frequency_penalty = 1.5, .presence_penalty = 0.5}));
  json past = base;
  past["logit_bias"] = {{"1000000", 1}};
  const json e = post("/v1/completions", past, 400);
  EXPECT_EQ(e["error"]["param"], "logit_bias") << e;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("1000000"), std::string::npos) << e;
}

TEST(ServerGeneration, MaxTokensAndMaxCompletionTokens) {
  const json r = post("/v1/completions", {{"prompt", [] { return "Unto"; }()}, {"max_tokens", 50}, {"max_completion_tokens", 3},
                                          {"temperature", 0}});
  EXPECT_LE(r["usage"]["completion_tokens"].get<i64>(), 3);
  // No max_tokens: up to the context (128 positions).
  const json all = post("/v1/completions", {{"prompt", "Unto"}, {"temperature", 0}});
  EXPECT_LE(all["usage"]["total_tokens"].get<i64>(), 128);
  if (all["choices"][0]["finish_reason"] == "length") {
    EXPECT_EQ(all["usage"]["total_tokens"], 128);
  }
  // No field is silently ignored: one the server does not implement is a 400 naming it, unless it
  // holds the value that changes nothing; user is accepted.
  EXPECT_EQ(post("/v1/completions", {{"prompt", "Unto"}, {"max_tokens", 2}, {"frequency_penalty", 0}, {"user", "x"}})
                ["usage"]["completion_tokens"],
            2);
  for (const json& extra : {json{{"best_of", 2}}, json{{"whatever", {{"deep", {1, 2}}}}}}) {
    json req = {{"prompt", "Unto"}, {"max_tokens", 2}};
    req.update(extra);
    const json e = post("/v1/completions", req, 400);
    EXPECT_EQ(e["error"]["code"], "unsupported_parameter") << e;
    EXPECT_EQ(e["error"]["param"], extra.begin().key()) << e;
  }
}

TEST(ServerInfo, ModelsHealthMetrics) {
  auto c = server().client();
  auto m = c->Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const json models = json::parse(m->body);
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "gpt2_tiny");
  EXPECT_EQ(models["data"][0]["object"], "model");

  auto h = c->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  const json health = json::parse(h->body);
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["models"][0]["slots"], 4);
  EXPECT_EQ(health["models"][0]["slots_busy"].get<i64>() + health["models"][0]["slots_free"].get<i64>(), 4);

  post("/v1/completions", {{"prompt", "Unto"}, {"max_tokens", 3}});
  c->Get("/no/such/path");
  const std::vector<const char*> wants = {
      "# TYPE qkv_requests_total counter", "qkv_requests_total{endpoint=\"/v1/completions\",status=\"200\"} ",
      "qkv_requests_total{endpoint=\"other\",status=\"404\"} ", "qkv_prompt_tokens_total{model=\"gpt2_tiny\"} ",
      "qkv_completion_tokens_total{model=\"gpt2_tiny\"} ", "qkv_queue_depth{model=\"gpt2_tiny\"} 0",
      "qkv_slots{model=\"gpt2_tiny\"} 4", "qkv_slots_busy{model=\"gpt2_tiny\"} ",
      "# TYPE qkv_time_to_first_token_seconds histogram",
      "qkv_time_to_first_token_seconds_bucket{model=\"gpt2_tiny\",le=\"+Inf\"} ",
      "qkv_inter_token_latency_seconds_count{model=\"gpt2_tiny\"} ", "qkv_request_duration_seconds_sum{endpoint="};
  // A request is counted once its answer is sent (the server's logger): the client may ask for
  // the metrics before that. Wait (up to 10 s) for every line.
  std::string t;
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
    auto x = c->Get("/metrics");
    ASSERT_TRUE(x);
    EXPECT_EQ(x->get_header_value("Content-Type"), "text/plain; version=0.0.4");
    t = x->body;
    const bool all = std::all_of(wants.begin(), wants.end(), [&](const char* w) { return t.find(w) != std::string::npos; });
    if (all || std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const char* want : wants) EXPECT_NE(t.find(want), std::string::npos) << want << "\n" << t;
  EXPECT_EQ(t.find("/no/such/path"), std::string::npos);  // unknown paths do not become labels
}

// ---- embeddings (the MiniLM folder of `make models`) ----

TEST(ServerEmbeddings, FloatAndBase64EqualTheEmbedderAlone) {
  ASSERT_TRUE(std::filesystem::exists(minilm_dir())) << minilm_dir() << " is missing: run `make models`";
  auto embedder = std::make_shared<const qkv::infer::SentenceEmbedder>(qkv::infer::SentenceEmbedder::from_folder(minilm_dir()));
  TestServer s({}, {}, {{"all-MiniLM-L6-v2", std::make_shared<qkv::infer::EmbedBatcher>(embedder)}});
  const std::vector<std::string> texts = {"The cat sat on the mat.", "Let there be light", "x"};
  const qkv::Tensor want = embedder->embed(texts);
  const i64 C = want.shape()[1];
  auto c = s.client();
  for (bool b64 : {false, true}) {
    json req = {{"model", "all-MiniLM-L6-v2"}, {"input", texts}};
    if (b64) req["encoding_format"] = "base64";
    auto r = c->Post("/v1/embeddings", req.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["object"], "list");
    EXPECT_EQ(j["model"], "all-MiniLM-L6-v2");
    ASSERT_EQ(j["data"].size(), texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(j["data"][i]["object"], "embedding");
      EXPECT_EQ(j["data"][i]["index"], static_cast<i64>(i));
      std::vector<float> got;
      if (b64) {
        const std::string s64 = j["data"][i]["embedding"];
        std::string raw;
        int val = 0, bits = -8;
        for (const char ch : s64) {
          const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
          const char* p = std::strchr(abc, ch);
          if (ch == '=' || !p) break;
          val = (val << 6) + static_cast<int>(p - abc);
          bits += 6;
          if (bits >= 0) {
            raw.push_back(static_cast<char>((val >> bits) & 0xff));
            bits -= 8;
          }
        }
        ASSERT_EQ(raw.size(), static_cast<std::size_t>(C) * 4);
        got.resize(static_cast<std::size_t>(C));
        std::memcpy(got.data(), raw.data(), raw.size());
      } else {
        got = j["data"][i]["embedding"].get<std::vector<float>>();
      }
      ASSERT_EQ(static_cast<i64>(got.size()), C);
      // Bitwise: float32 values written in their shortest round-trip form.
      EXPECT_EQ(std::memcmp(got.data(), want.data<float>() + static_cast<i64>(i) * C, static_cast<std::size_t>(C) * 4), 0)
          << "text " << i << (b64 ? " (base64)" : " (float)");
    }
    EXPECT_GT(j["usage"]["prompt_tokens"].get<i64>(), 0);
    EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"]);
  }
  // A single string; no model named (the only embedding model).
  auto r = c->Post("/v1/embeddings", json{{"input", "Let there be light"}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["data"][0]["embedding"].get<std::vector<float>>(),
            (std::vector<float>(want.data<float>() + C, want.data<float>() + 2 * C)));
  // Token ids of the model's vocabulary (without [CLS] / [SEP]): one input, or a list; the
  // embedding is the text's, bitwise (LangChain's OpenAIEmbeddings sends ids).
  const auto& tok = embedder->tokenizer();
  std::vector<std::vector<i64>> ids;
  for (const auto& t : texts) ids.push_back(tok.encode(t));
  for (const json& input : {json(ids), json(ids[1])}) {
    auto ri = c->Post("/v1/embeddings", json{{"input", input}}.dump(), "application/json");
    ASSERT_TRUE(ri);
    ASSERT_EQ(ri->status, 200) << ri->body;
    const json j = json::parse(ri->body);
    const bool one = input[0].is_number();
    ASSERT_EQ(j["data"].size(), one ? 1u : texts.size());
    for (std::size_t i = 0; i < j["data"].size(); ++i) {
      const std::size_t t = one ? 1 : i;
      EXPECT_EQ(j["data"][i]["embedding"].get<std::vector<float>>(),
                (std::vector<float>(want.data<float>() + static_cast<i64>(t) * C, want.data<float>() + static_cast<i64>(t + 1) * C)))
          << "input " << i;
    }
  }
  auto past = c->Post("/v1/embeddings", json{{"input", {1, 2, 1000000}}}.dump(), "application/json");
  ASSERT_TRUE(past);
  EXPECT_EQ(past->status, 400) << past->body;
  EXPECT_NE(past->body.find("token id 1000000 (position 2) is out of range"), std::string::npos) << past->body;
  // Chat on an embedding-only server is a 400 naming the model.
  auto bad = c->Post("/v1/chat/completions", json{{"model", "all-MiniLM-L6-v2"}, {"messages", kHello}}.dump(),
                     "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["code"], "model_not_found");
}

}  // namespace
