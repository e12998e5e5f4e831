// The server's use of infer::LanguageModel: every end-of-sequence id ends a reply (and is not
// shown; ignore_eos turns that off), chat prompts go through the model's template, and a template that is missing, cannot
// run or refuses the conversation is answered 400 with its message while completions still work;
// chat_template_kwargs reaches the template (Qwen3's enable_thinking, on the committed tiny Qwen3
// whose reply is transformers' greedy one).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "qkv/infer/generate.h"
#include "qkv/infer/reply.h"
#include "serve_test_util.h"

namespace {

using namespace qkv::testing;
using i64 = std::int64_t;

constexpr qkv::infer::SchedulerOptions kSched{.slots = 2, .context = 128, .max_queue = 8, .prefill_chunk = 64};

const json kHello = json::array({{{"role", "user"}, {"content", "Hello there"}}});

// The tiny GPT-2 with `edit` applied to its language model, served as `id`.
template <class Edit>
qkv::serve::TextModel edited(const std::string& id, const Edit& edit) {
  auto lm = std::make_shared<qkv::infer::LanguageModel>(*gpt2_tiny_lm());
  edit(*lm);
  auto m = qkv::serve::make_text_model(std::move(lm), kSched);
  m.id = id;
  return m;
}

json post(int port, const std::string& path, const json& body, int want) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return {};
  EXPECT_EQ(r->status, want) << r->body;
  return json::parse(r->body);
}

TEST(ServerLanguageModel, EveryEosIdEndsTheReply) {
  // Greedy, the tiny model's reply (up to its own eos); a token of it becomes a second eos id.
  const auto lm = gpt2_tiny_lm();
  const auto prompt = lm->chat_prompt({{.role = "user", .content = "Hello there"}});
  const auto gen = qkv::infer::generate(*lm->model, {prompt}, {.max_new_tokens = 12, .eos_id = lm->eos_id()});
  const std::vector<i64>& ids = gen[0].new_ids;
  std::size_t cut = 1;  // the first token not seen before it (from the second on)
  while (cut < ids.size() && (lm->is_eos(ids[cut]) || std::count(ids.begin(), ids.begin() + cut, ids[cut]) > 0)) ++cut;
  ASSERT_LT(cut, ids.size()) << "the tiny model's reply has no token to make an eos id of";
  const i64 other_eos = ids[cut];
  TestServer s({}, {edited("two_eos", [&](qkv::infer::LanguageModel& m) { m.eos_ids.push_back(other_eos); })});
  for (const bool stream : {false, true}) {
    const json body = {{"messages", kHello}, {"max_tokens", 12}, {"temperature", 0}, {"stream", stream},
                       {"stream_options", {{"include_usage", true}}}};
    httplib::Client c("127.0.0.1", s.port);
    auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::string text, finish;
    json usage;
    if (stream) {
      const Streamed st = parse_stream(r->body);
      text = st.text, finish = st.finish_reason, usage = st.usage;
    } else {
      const json j = json::parse(r->body);
      text = j["choices"][0]["message"]["content"], finish = j["choices"][0]["finish_reason"], usage = j["usage"];
    }
    EXPECT_EQ(finish, "stop");
    EXPECT_EQ(text, lm->tok().decode(std::vector<i64>(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(cut))));
    EXPECT_EQ(usage["completion_tokens"], static_cast<i64>(cut) + 1);  // the eos counts, unshown
  }
  // ignore_eos (llama.cpp's extension): no eos id stops the reply.
  const json j = post(s.port, "/v1/chat/completions",
                      {{"messages", kHello}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}, 200);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  post(s.port, "/v1/chat/completions", {{"messages", kHello}, {"ignore_eos", "yes"}}, 400);
}

TEST(ServerLanguageModel, TemplateFailuresAre400WithTheTemplatesMessage) {
  const std::string refusing =
      "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System messages are not supported.') }}"
      "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:";
  TestServer s({}, {edited("none",
                           [](qkv::infer::LanguageModel& m) {
                             m.chat_template = nullptr;
                             m.chat_template_error.clear();
                           }),
                    edited("unusable",
                           [](qkv::infer::LanguageModel& m) {
                             m.chat_template = nullptr;
                             m.chat_template_error = "x.gguf chat template line 3, column 7: 'macro' is not supported";
                           }),
                    edited("refusing", [&](qkv::infer::LanguageModel& m) {
                      m.chat_template = std::make_shared<const qkv::tokenize::ChatTemplate>(
                          qkv::tokenize::ChatTemplate::parse(refusing, "refusing.jinja"));
                    })});
  auto error_of = [&](const std::string& model, const json& messages) {
    const json j = post(s.port, "/v1/chat/completions", {{"model", model}, {"messages", messages}, {"max_tokens", 2}}, 400);
    EXPECT_EQ(j["error"]["param"], "messages");
    return j["error"];
  };
  json e = error_of("none", kHello);
  EXPECT_EQ(e["code"], "no_chat_template");
  EXPECT_NE(e["message"].get<std::string>().find("gpt2_tiny has no chat template; pass one with --chat-template FILE, or "
                                                 "use /v1/completions."),
            std::string::npos)
      << e;
  e = error_of("unusable", kHello);
  EXPECT_EQ(e["code"], "no_chat_template");
  EXPECT_NE(e["message"].get<std::string>().find("line 3, column 7: 'macro' is not supported (pass another template"),
            std::string::npos)
      << e;
  const json with_system = json::array({{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  e = error_of("refusing", with_system);
  EXPECT_EQ(e["code"], "invalid_messages");
  EXPECT_EQ(e["message"], "The model's chat template refused these messages: System messages are not supported.");
  // What the template accepts is answered; completions never need it.
  post(s.port, "/v1/chat/completions", {{"model", "refusing"}, {"messages", kHello}, {"max_tokens", 2}}, 200);
  for (const char* model : {"none", "unusable", "refusing"})
    post(s.port, "/v1/completions", {{"model", model}, {"prompt", "Hello"}, {"max_tokens", 2}}, 200);
}

TEST(ServerLanguageModel, ChatTemplateKwargsReachTheTemplate) {
  const std::string dir = std::string(QKV_FIXTURE_DIR) + "/arch/qwen3";
  std::ifstream f(std::string(QKV_FIXTURE_DIR) + "/arch/reference.json");
  const json ref = json::parse(f)["qwen3"];
  auto lm = std::make_shared<const qkv::infer::LanguageModel>(qkv::infer::load_language_model(dir, {}));
  auto m = qkv::serve::make_text_model(lm, kSched);
  m.id = "qwen3";
  TestServer s({}, {m});
  const json chat = json::array({{{"role", "user"}, {"content", "Who divided the light from the darkness?"}}});
  // enable_thinking false: the prompt transformers rendered (make_arch_fixtures.py) and its greedy reply.
  const json j = post(s.port, "/v1/chat/completions",
                      {{"messages", chat}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true},
                       {"chat_template_kwargs", {{"enable_thinking", false}}}},
                      200);
  const auto prompt = ref["prompts"][2].get<std::vector<i64>>();
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<i64>(prompt.size()));
  const auto gen = ref["generated"][2].get<std::vector<i64>>();
  std::string want = lm->tok().decode(std::vector<i64>(gen.begin(), gen.begin() + 8));
  want.erase(0, want.find_first_not_of(" \t\r\n"));  // (the answer after the closed <think>: its spacing dropped)
  EXPECT_EQ(j["choices"][0]["message"]["content"], want);
  // Without it the template leaves the thinking block to the model: a shorter prompt.
  const json t = post(s.port, "/v1/chat/completions", {{"messages", chat}, {"max_tokens", 1}}, 200);
  EXPECT_EQ(t["usage"]["prompt_tokens"],
            static_cast<i64>(prompt.size() - lm->tok().encode("<think>\n\n</think>\n\n").size()));
  // Not an object, or a variable qkv sets itself: 400 naming the field.
  for (const json& bad : {json("enable_thinking"), json{{"messages", json::array()}}}) {
    const json e = post(s.port, "/v1/chat/completions", {{"messages", chat}, {"chat_template_kwargs", bad}}, 400);
    EXPECT_EQ(e["error"]["param"], "chat_template_kwargs") << e;
  }
}

// A reasoning model's chat reply: the reasoning in reasoning_content (a delta of its own when
// streaming), the answer in content, the <think> markup in neither; completions keep the raw
// text. The tiny Qwen3 (its vocabulary has <think> and </think>) under a template that leaves
// <think> open, and under its own with enable_thinking false (the block closed in the prompt);
// the expected parts are the library's split (infer::ReplySplitter) of the greedy reply.
TEST(ServerLanguageModel, ReasoningIsApartFromTheAnswer) {
  const std::string dir = std::string(QKV_FIXTURE_DIR) + "/arch/qwen3";
  auto base = qkv::infer::load_language_model(dir, {});
  auto open = std::make_shared<qkv::infer::LanguageModel>(base);
  open->chat_template = std::make_shared<const qkv::tokenize::ChatTemplate>(qkv::tokenize::ChatTemplate::parse(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}",
      "open_think.jinja"));
  auto mo = qkv::serve::make_text_model(open, kSched);
  mo.id = "open";
  auto mc = qkv::serve::make_text_model(std::make_shared<const qkv::infer::LanguageModel>(base), kSched);
  mc.id = "closed";
  TestServer s({}, {mo, mc});
  const json chat = json::array({{{"role", "user"}, {"content", "Who divided the light from the darkness?"}}});
  for (const auto& [model, kwargs] : {std::pair{std::string("open"), json::object()},
                                      {std::string("closed"), json{{"enable_thinking", false}}}}) {
    const qkv::infer::LanguageModel& lm = model == "open" ? *open : base;
    std::map<std::string, std::string> vars;
    for (const auto& [k, v] : kwargs.items()) vars[k] = v.dump();
    const auto prompt = lm.chat_prompt({{.role = "user", .content = chat[0]["content"]}}, true, vars);
    const auto ids = qkv::infer::generate(*lm.model, {prompt}, {.max_new_tokens = 12})[0].new_ids;
    qkv::infer::ReplySplitter split(lm.tok(), qkv::infer::ReplyFormat::Think, prompt);
    std::vector<i64> thought, answer;
    for (i64 id : ids) {
      const auto part = split.push(id);
      if (part == qkv::infer::ReplyPart::Reasoning) thought.push_back(id);
      if (part == qkv::infer::ReplyPart::Content) answer.push_back(id);
    }
    std::string want_answer = lm.tok().decode(answer);
    want_answer.erase(0, want_answer.find_first_not_of(" \t\r\n"));
    const std::string want_thought = lm.tok().decode(thought);
    EXPECT_EQ(model == "open", !want_thought.empty()) << model;
    const json body = {{"model", model}, {"messages", chat}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true},
                       {"chat_template_kwargs", kwargs}};
    const json j = post(s.port, "/v1/chat/completions", body, 200);
    EXPECT_EQ(j["choices"][0]["message"]["content"], want_answer) << model;
    EXPECT_EQ(j["choices"][0]["message"].value("reasoning_content", ""), want_thought) << model;
    // Streamed: reasoning_content deltas, then content deltas; the same texts.
    json sb = body;
    sb["stream"] = true;
    httplib::Client c("127.0.0.1", s.port);
    auto r = c.Post("/v1/chat/completions", sb.dump(), "application/json");
    ASSERT_TRUE(r);
    std::string thought_text, answer_text;
    for (const std::string& e : sse_events(r->body)) {
      if (e == "[DONE]") continue;
      const json d = json::parse(e)["choices"][0]["delta"];
      if (d.contains("reasoning_content")) thought_text += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) answer_text += d["content"].get<std::string>();
    }
    EXPECT_EQ(thought_text, want_thought) << model;
    EXPECT_EQ(answer_text, want_answer) << model;
  }
  // A completion is the raw text, <think> and all.
  const auto prompt = base.encode_prompt("<think>");
  const auto ids = qkv::infer::generate(*base.model, {prompt}, {.max_new_tokens = 6})[0].new_ids;
  const json j = post(s.port, "/v1/completions",
                      {{"model", "closed"}, {"prompt", "<think>"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}},
                      200);
  EXPECT_EQ(j["choices"][0]["text"], base.tok().decode(ids));
}

}  // namespace
