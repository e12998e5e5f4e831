// POST /v1/chat/completions and /v1/completions: the request -> a scheduler's sequence -> a JSON
// response, or server-sent events as the tokens come (see server.h).
#include <functional>

#include <nlohmann/json.hpp>

#include "qkv/tokenize/utf8.h"
#include "qkv/infer/reply.h"
#include "qkv/infer/text_stream.h"
#include "server_impl.h"

namespace qkv::serve {
namespace {

using json = nlohmann::json;
using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{50};  // how often a waiting response checks its client

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// A request checked and turned into a scheduler request.
struct Prepared {
  const TextModel* model = nullptr;
  GenerationParams params;
  infer::SequenceRequest request;
  std::string echo_text;  // with echo: the prompt as given (a text), or its ids decoded
};

[[noreturn]] void context_exceeded(const Prepared& p, i64 ctx, i64 P, const std::optional<i64>& max_tokens) {
  const char* where = p.params.kind == ApiKind::Chat ? "messages" : "prompt";
  std::string msg = "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, ";
  if (max_tokens)
    msg += "you requested " + std::to_string(P) + " + " + std::to_string(*max_tokens) + " tokens (" + std::to_string(P) +
           " in the " + where + ", " + std::to_string(*max_tokens) + " in the completion). Please reduce the length of the " +
           where + " or completion.";
  else
    msg += std::string("your ") + where + " resulted in " + std::to_string(P) + " tokens. Please reduce the length of the " +
           where + ".";
  throw ApiError(400, msg, where, "context_length_exceeded");
}

Prepared prepare(Server::Impl& s, const httplib::Request& req, ApiKind kind) {
  Prepared p;
  p.params = parse_generation_request(req.body, kind);
  const GenerationParams& g = p.params;
  p.model = &s.text_model(g.model);
  const TextModel& m = *p.model;
  request_record().model = m.id;
  std::vector<i64> prompt;
  if (kind == ApiKind::Chat) {
    try {
      prompt = m.lm->chat_prompt(g.messages, true, g.chat_template_kwargs);
    } catch (const tokenize::ChatTemplateError& e) {  // raise_exception(msg) of the template: msg itself
      throw ApiError(400, std::string("The model's chat template refused these messages: ") +
                              (e.raised_by_template() ? e.detail() : std::string(e.what())),
                     "messages", "invalid_messages");
    } catch (const ValueError& e) {
      if (!m.lm->chat_template)  // none, or one qkv cannot run (the loader's reason)
        throw ApiError(400, "The model '" + m.id + "' cannot chat: " + e.what() + ", or use /v1/completions.", "messages",
                       "no_chat_template");
      throw ApiError(400, std::string("The model's chat template refused these messages: ") + e.what(), "messages",
                     "invalid_messages");
    }
  } else if (g.prompt_is_ids) {
    const i64 V = m.scheduler->model().vocab_size();
    for (std::size_t i = 0; i < g.prompt_ids.size(); ++i)
      if (g.prompt_ids[i] >= V)
        throw ApiError(400, "Invalid 'prompt[" + std::to_string(i) + "]': token id " + std::to_string(g.prompt_ids[i]) +
                                " is out of range [0, " + std::to_string(V) + ").",
                       "prompt", "invalid_value");
    prompt = g.prompt_ids;
  } else {
    try {
      prompt = m.lm->encode_prompt(g.prompt);
    } catch (const ValueError& e) {
      throw ApiError(400, std::string("Invalid 'prompt': ") + e.what(), "prompt", "invalid_value");
    }
  }
  const i64 ctx = m.scheduler->options().context, P = static_cast<i64>(prompt.size());
  if (P == 0)
    throw ApiError(400, "The prompt is empty: it gives no tokens.", kind == ApiKind::Chat ? "messages" : "prompt",
                   "empty_prompt");
  // max_tokens 0 (with echo): the prompt alone, which may fill the context.
  const bool prompt_only = g.max_tokens && *g.max_tokens == 0;
  if (prompt_only ? P > ctx : (P >= ctx || (g.max_tokens && *g.max_tokens > ctx - P)))
    context_exceeded(p, ctx, P, g.max_tokens);
  if (g.echo) {
    try {
      p.echo_text = g.prompt_is_ids ? m.lm->tok().decode(prompt) : g.prompt;
    } catch (const ValueError& e) {
      throw ApiError(400, std::string("Invalid 'echo': ") + e.what(), "echo", "invalid_value");
    }
  }
  infer::SequenceRequest& r = p.request;
  r.prompt = std::move(prompt);
  r.max_new_tokens = g.max_tokens.value_or(ctx - P);
  // The request's sampling fields over the model's advice (over llama.cpp's defaults).
  r.sampling = m.lm->default_sampling;
  if (g.temperature) r.sampling.temperature = *g.temperature;
  if (g.top_k) r.sampling.top_k = *g.top_k;
  if (g.top_p) r.sampling.top_p = *g.top_p;
  if (g.min_p) r.sampling.min_p = *g.min_p;
  if (g.repeat_penalty) r.sampling.repeat_penalty = *g.repeat_penalty;
  if (g.repeat_last_n) r.sampling.repeat_last_n = *g.repeat_last_n;
  if (g.top_p && *g.top_p == 0) {  // OpenAI accepts 0: only the most likely token
    r.sampling.temperature = 0;
    r.sampling.top_p = 1;
  }
  r.sampling.seed = g.seed ? *g.seed : new_seed();
  r.sampling.frequency_penalty = g.frequency_penalty;
  r.sampling.presence_penalty = g.presence_penalty;
  const i64 V = m.scheduler->model().vocab_size();
  for (const auto& [id, bias] : g.logit_bias)
    if (id >= V)
      throw ApiError(400, "Invalid key in 'logit_bias': " + std::to_string(id) + ". Maximum value is " + std::to_string(V - 1) + ".",
                     "logit_bias", "invalid_value");
  r.sampling.logit_bias = g.logit_bias;
  if (!g.ignore_eos) r.stop_ids = m.lm->eos_ids;
  r.logprobs = g.logprobs ? g.top_logprobs : -1;
  // An echoed prompt with logprobs is scored in its prefill; a prompt alone (max_tokens 0) is
  // always run so (the scheduler's one way to end a sequence without a token).
  if (g.echo && (g.logprobs || prompt_only)) r.prompt_logprobs = g.top_logprobs;
  return p;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (const char c : s) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return b;
}

// One response: its text stream, token count, logprobs and metrics. A chat reply of a reasoning
// model (infer/reply.h: <think> ... </think>, gpt-oss's harmony channels) is split: the answer is
// the message's content, the reasoning its reasoning_content (as llama.cpp's server and vLLM name
// it), the format's markup neither; completions keep the raw text.
class Generation {
 public:
  Generation(Server::Impl& s, Prepared p, std::shared_ptr<infer::Sequence> seq)
      : s_(s), p_(std::move(p)), m_(*p_.model), seq_(std::move(seq)),
        text_(m_.lm->tokenizer,
              chat() && m_.lm->tokenizer ? infer::reply_format(*m_.lm->tokenizer) : infer::ReplyFormat::Plain,
              p_.request.prompt, {.stops = p_.params.stop, .skip = m_.lm->eos_ids, .mode = infer::StopMode::Drop}),
        id_(new_id(chat() ? "chatcmpl-" : "cmpl-")), created_(std::time(nullptr)), start_(detail::request_start()) {}

  bool chat() const { return p_.params.kind == ApiKind::Chat; }

  // Non-streaming: waits for the end and answers with the whole completion.
  void complete(httplib::Response& res) {
    std::string content, reasoning;
    json lp = logprobs_init();
    if (!pump([&](const std::string& piece, const std::string& thought, const infer::GeneratedToken& t) {
          content += piece;
          reasoning += thought;
          add_logprob(lp, t, piece);
          return true;
        })) {
      res.status = 499;  // the client left; nobody reads this
      return;
    }
    const infer::ReplyStream::Piece tail = text_.finish();
    content += tail.content;
    reasoning += tail.reasoning;
    if (const auto err = failure()) return answer_error(res, *err);
    if (p_.params.echo) {
      content = p_.echo_text + content;
      if (p_.params.logprobs) {
        json all = prompt_logprobs();
        for (const char* k : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
          for (const json& v : lp[k]) all[k].push_back(v);
        lp = std::move(all);
      }
    }
    json choice = {{"index", 0}, {"logprobs", p_.params.logprobs ? lp : json(nullptr)}, {"finish_reason", finish_reason()}};
    if (chat()) {
      choice["message"] = {{"role", "assistant"}, {"content", content}};
      if (!reasoning.empty()) choice["message"]["reasoning_content"] = reasoning;
    } else
      choice["text"] = content;
    json out = {{"id", id_}, {"object", chat() ? "chat.completion" : "text_completion"}, {"created", created_},
                {"model", m_.id}, {"system_fingerprint", "qkv"}, {"choices", json::array({choice})}, {"usage", usage()}};
    res.set_content(dump(out), "application/json");
  }

  // Streaming: server-sent events as the text comes. False when the client is gone.
  bool stream(httplib::DataSink& sink) {
    const bool usage_chunks = p_.params.include_usage;
    if (chat()) {
      json delta = {{"role", "assistant"}, {"content", ""}};
      if (!send(sink, chunk(delta, nullptr, nullptr, usage_chunks))) return false;
    }
    // With echo, the prompt's text (and its scores) is the first chunk, once the prompt is
    // prefilled (its scores are set by then); a sequence that failed sends its error instead.
    auto echo = [&] {
      if (!p_.params.echo || failure()) return true;
      return send(sink, chunk(json(p_.echo_text), p_.params.logprobs ? prompt_logprobs() : json(nullptr), nullptr,
                              usage_chunks));
    };
    const bool ok = pump(
        [&](const std::string& piece, const std::string& thought, const infer::GeneratedToken& t) {
          if (!thought.empty() && !send(sink, chunk({{"reasoning_content", thought}}, nullptr, nullptr, usage_chunks)))
            return false;
          if (piece.empty() && (!p_.params.logprobs || !thought.empty())) return true;
          json lp = logprobs_init();
          add_logprob(lp, t, piece);
          return send(sink, chunk(content_delta(piece), p_.params.logprobs ? lp : json(nullptr), nullptr, usage_chunks));
        },
        &sink, echo);
    if (!ok) return false;
    const infer::ReplyStream::Piece tail = text_.finish();
    if (!tail.reasoning.empty() &&
        !send(sink, chunk({{"reasoning_content", tail.reasoning}}, nullptr, nullptr, usage_chunks)))
      return false;
    if (!tail.content.empty() && !send(sink, chunk(content_delta(tail.content), nullptr, nullptr, usage_chunks)))
      return false;
    if (const auto err = failure()) {
      if (!send(sink, json::parse(error_json(*err)))) return false;
    } else {
      if (!send(sink, chunk(chat() ? json::object() : json(""), nullptr, finish_reason(), usage_chunks))) return false;
      if (usage_chunks) {
        json last = {{"id", id_}, {"object", chunk_object()}, {"created", created_}, {"model", m_.id},
                     {"choices", json::array()}, {"usage", usage()}};
        if (!send(sink, last)) return false;
      }
    }
    constexpr std::string_view done = "data: [DONE]\n\n";
    if (!sink.write(done.data(), done.size())) return false;
    sink.done();
    return true;
  }

  // A client that left: its sequence is cancelled (the slot is free within a step).
  void abandon() {
    seq_->cancel();
    request_record().disconnected = true;
    finish_record();
  }

 private:
  // Takes tokens until the sequence ends or a stop string appears, calling on_token(text piece,
  // token) for each; false (sequence cancelled) when the client is gone or on_token says so.
  // on_start(), when given, runs once before the first token is handed on, or at the end when
  // there is none; false (the client is gone) ends the pump as on_token's false does.
  template <class Fn>
  bool pump(const Fn& on_token, httplib::DataSink* sink = nullptr, const std::function<bool()>& on_start = {}) {
    std::vector<infer::GeneratedToken> got;
    bool started = false;
    for (;;) {
      const bool ended = seq_->wait(got, kPoll);
      if (!started && (ended || !got.empty())) {
        started = true;
        if (on_start && !on_start()) {
          abandon();
          return false;
        }
      }
      for (const auto& t : got) {
        observe(t);
        const infer::ReplyStream::Piece piece = text_.push(t.id);
        if (!on_token(piece.content, piece.reasoning, t)) {
          abandon();
          return false;
        }
        if (text_.stopped()) break;
      }
      got.clear();
      if (text_.stopped()) {
        seq_->cancel();  // the rest is not needed
        break;
      }
      if (ended) break;
      if (!(sink ? sink->is_writable() : detail::client_connected())) {
        abandon();
        return false;
      }
    }
    finish_record();
    return true;
  }

  void observe(const infer::GeneratedToken& t) {
    ++completion_;
    if (completion_ == 1)
      s_.metrics.observe_ttft(m_.id, std::chrono::duration<double>(t.time - start_).count());
    else
      s_.metrics.observe_inter_token(m_.id, std::chrono::duration<double>(t.time - last_).count());
    last_ = t.time;
  }

  void finish_record() {
    if (recorded_) return;
    recorded_ = true;
    RequestRecord& r = request_record();
    r.prompt_tokens = static_cast<i64>(p_.request.prompt.size());
    r.completion_tokens = completion_;
    s_.metrics.add_tokens(m_.id, r.prompt_tokens, completion_);
  }

  std::optional<ApiError> failure() const {
    if (text_.stopped()) return std::nullopt;
    switch (seq_->finish_reason()) {
      case infer::FinishReason::Failed:
        return ApiError(500, "Generation failed: " + seq_->error(), "", "generation_failed", "server_error");
      case infer::FinishReason::Cancelled:
        return ApiError(503, "The server shut down before the completion ended.", "", "shutting_down", "server_error");
      default: return std::nullopt;
    }
  }

  const char* finish_reason() const {
    if (text_.stopped()) return "stop";
    return seq_->finish_reason() == infer::FinishReason::Length ? "length" : "stop";
  }

  json usage() const {
    const i64 P = static_cast<i64>(p_.request.prompt.size());
    return {{"prompt_tokens", P}, {"completion_tokens", completion_}, {"total_tokens", P + completion_}};
  }

  const char* chunk_object() const { return chat() ? "chat.completion.chunk" : "text_completion"; }

  json content_delta(const std::string& piece) const { return chat() ? json{{"content", piece}} : json(piece); }

  json chunk(const json& delta, const json& logprobs, const char* finish, bool usage_null) const {
    json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish ? json(finish) : json(nullptr)}};
    choice[chat() ? "delta" : "text"] = delta;
    json c = {{"id", id_}, {"object", chunk_object()}, {"created", created_}, {"model", m_.id},
              {"system_fingerprint", "qkv"}, {"choices", json::array({choice})}};
    if (usage_null) c["usage"] = nullptr;
    return c;
  }

  bool send(httplib::DataSink& sink, const json& j) const {
    const std::string data = "data: " + dump(j) + "\n\n";
    return sink.write(data.data(), data.size());
  }

  json logprobs_init() const {
    if (chat()) return {{"content", json::array()}};
    return {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
            {"text_offset", json::array()}};
  }

  // A token's own text (its leading space kept, as OpenAI shows tokens), invalid UTF-8 as U+FFFD.
  // An id past the tokenizer's vocabulary (a padded embedding row) has no text.
  std::string raw_of(std::int64_t id) const {
    const tokenize::Tokenizer& tok = m_.lm->tok();
    return id < tok.vocab_size() ? tok.token_text(id) : std::string();
  }
  std::string text_of(std::int64_t id) const {
    std::string out;
    tokenize::utf8::append_lossy(raw_of(id), /*final=*/true, out);
    return out;
  }

  // The legacy logprobs object of the echoed prompt: every prompt token, the first with a null
  // logprob and top_logprobs (nothing predicts it); text_offset the byte where the token's text
  // starts as the prompt's tokens decode one by one (a BOS the server added shows no text: 0).
  json prompt_logprobs() const {
    json lp = logprobs_init();
    const std::vector<infer::TokenLogprob> scores = seq_->prompt_logprobs();
    const std::vector<i64>& ids = p_.request.prompt;
    const infer::LanguageModel& lm = *m_.lm;
    std::vector<i64> skip;
    if (!p_.params.prompt_is_ids && lm.add_bos && lm.bos_id && !ids.empty() && ids[0] == *lm.bos_id)
      skip.push_back(*lm.bos_id);
    infer::TextStream ts(lm.tokenizer, {.skip = skip});
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::string piece = ts.push(ids[i]);
      lp["tokens"].push_back(text_of(ids[i]));
      lp["text_offset"].push_back(ts.released() - piece.size());
      if (i == 0 || i - 1 >= scores.size()) {
        lp["token_logprobs"].push_back(nullptr);
        lp["top_logprobs"].push_back(nullptr);
        continue;
      }
      const infer::TokenLogprob& t = scores[i - 1];
      json top = json::object();
      for (const auto& [id, l] : t.top) top[text_of(id)] = l;
      lp["token_logprobs"].push_back(t.logprob);
      lp["top_logprobs"].push_back(top);
    }
    return lp;
  }

  // Appends token t (whose text piece was just released) to a logprobs object.
  void add_logprob(json& lp, const infer::GeneratedToken& t, const std::string& piece) const {
    if (!p_.params.logprobs) return;
    if (chat()) {
      json top = json::array();
      for (const auto& [id, l] : t.top)
        top.push_back({{"token", text_of(id)}, {"logprob", l}, {"bytes", bytes_of(raw_of(id))}});
      lp["content"].push_back({{"token", text_of(t.id)}, {"logprob", t.logprob},
                               {"bytes", bytes_of(raw_of(t.id))}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const auto& [id, l] : t.top) top[text_of(id)] = l;
      lp["tokens"].push_back(text_of(t.id));
      lp["token_logprobs"].push_back(t.logprob);
      lp["top_logprobs"].push_back(top);
      // Offsets count from the start of the returned text: after the echoed prompt, if any.
      lp["text_offset"].push_back(p_.echo_text.size() + text_.content_stream().released() - piece.size());
    }
  }

  Server::Impl& s_;
  Prepared p_;
  const TextModel& m_;
  std::shared_ptr<infer::Sequence> seq_;
  infer::ReplyStream text_;
  std::string id_;
  std::time_t created_;
  Clock::time_point start_, last_;
  i64 completion_ = 0;
  bool recorded_ = false;
};

}  // namespace

void handle_generation(Server::Impl& s, const httplib::Request& req, httplib::Response& res, ApiKind kind) {
  Prepared p = prepare(s, req, kind);
  std::shared_ptr<infer::Sequence> seq;
  try {
    seq = p.model->scheduler->submit(p.request);
  } catch (const infer::QueueFullError&) {
    throw ApiError(429, "The server is busy (its queue is full); retry shortly.", "", "queue_full", "server_busy");
  } catch (const infer::ShutdownError&) {
    throw ApiError(503, "The server is shutting down; retry on another replica.", "", "shutting_down", "server_error");
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "", "invalid_value");
  }
  const bool streaming = p.params.stream;
  auto gen = std::make_shared<Generation>(s, std::move(p), std::move(seq));
  if (!streaming) {
    gen->complete(res);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: pass events on at once
  res.set_chunked_content_provider(
      "text/event-stream", [gen](std::size_t, httplib::DataSink& sink) { return gen->stream(sink); },
      [gen](bool success) {
        if (!success) gen->abandon();
      });
}

}  // namespace qkv::serve
