// The server's set-up: routes, authentication, limits, errors, logging, and the small endpoints
// (/v1/models, /health, /metrics). See server.h.
#include "qkv/serve/server.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string_view>

#include <thread>

#include "server_impl.h"

namespace qkv::serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t next_random() {
  static const std::uint64_t base = [] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }();
  static std::atomic<std::uint64_t> counter{0};
  return splitmix(base + counter.fetch_add(1, std::memory_order_relaxed));
}

// The metrics' endpoint label: a route, or "other" (clients cannot grow the label set). A
// constant table, not a static set: a server thread may still log a request while the process
// exits, after static objects with destructors are gone (ASan: heap-use-after-free).
std::string endpoint_label(const std::string& path) {
  static constexpr std::string_view kKnown[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                                "/v1/models", "/health", "/metrics"};
  for (const std::string_view k : kKnown)
    if (path == k) return path;
  return "other";
}

// A path as the log prints it: printable ASCII, other bytes as \xNN, at most 200 bytes.
std::string printable(const std::string& s) {
  std::string o;
  for (const char ch : s.substr(0, 200)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x21 && c < 0x7f && c != '\\') {
      o += ch;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      o += buf;
    }
  }
  if (s.size() > 200) o += "...";
  return o;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

template <class Fn>
httplib::Server::Handler guarded(Fn fn) {
  return [fn](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const ApiError& e) {
      answer_error(res, e);
    } catch (const std::exception& e) {
      answer_error(res, ApiError(500, std::string("Internal error: ") + e.what(), "", "internal_error", "server_error"));
    }
  };
}

}  // namespace

RequestRecord& request_record() {
  thread_local RequestRecord r;
  return r;
}

std::string new_id(const char* prefix) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(next_random()),
                static_cast<unsigned long long>(next_random() & 0xffffffffULL));
  return std::string(prefix) + buf;
}

std::uint64_t new_seed() { return next_random(); }

void answer_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.status() == 429 || e.status() == 503) res.set_header("Retry-After", "1");
  if (e.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(error_json(e), "application/json");
}

namespace {

template <class M>
bool named(const M& m, const std::string& id) {
  return m.id == id || std::find(m.aliases.begin(), m.aliases.end(), id) != m.aliases.end();
}

}  // namespace

// A name no model has is OpenAI's 404 model_not_found; a model of the other kind is a 400.
[[noreturn]] void Server::Impl::no_such_model(const std::string& id, const char* kind) const {
  const bool elsewhere = std::any_of(text.begin(), text.end(), [&](const TextModel& m) { return named(m, id); }) ||
                         std::any_of(embed.begin(), embed.end(), [&](const EmbeddingModel& m) { return named(m, id); });
  if (elsewhere)
    throw ApiError(400, "The model '" + id + "' is not " + kind + " model (see /v1/models).", "model", "model_not_found");
  throw ApiError(404, "The model '" + id + "' does not exist (see /v1/models; qkv serve --model-alias gives a model more names).",
                 "model", "model_not_found");
}

const TextModel& Server::Impl::text_model(const std::string& id) const {
  if (id.empty()) {
    if (text.size() == 1) return text[0];
    throw ApiError(400, text.empty() ? "This server has no text generation model." :
                                       "You must provide a model parameter (this server has several models).",
                   "model", text.empty() ? "model_not_found" : "missing_required_parameter");
  }
  for (const auto& m : text)
    if (named(m, id)) return m;
  no_such_model(id, "a text generation");
}

const EmbeddingModel& Server::Impl::embedding_model(const std::string& id) const {
  if (id.empty()) {
    if (embed.size() == 1) return embed[0];
    throw ApiError(400, embed.empty() ? "This server has no embedding model." :
                                        "You must provide a model parameter (this server has several embedding models).",
                   "model", embed.empty() ? "model_not_found" : "missing_required_parameter");
  }
  for (const auto& m : embed)
    if (named(m, id)) return m;
  no_such_model(id, "an embedding");
}

void Server::Impl::log_request(const httplib::Request& req, const httplib::Response& res) {
  const RequestRecord& r = request_record();
  const double seconds = std::chrono::duration<double>(Clock::now() - detail::request_start()).count();
  const int status = r.disconnected ? 499 : res.status;
  metrics.count_request(endpoint_label(req.path), status, seconds);
  if (!opt.log) return;
  char ms[32];
  std::snprintf(ms, sizeof(ms), "%.1f", seconds * 1e3);
  std::string line = utc_now() + " " + printable(req.method) + " " + printable(req.path) + " " + std::to_string(status);
  if (!r.model.empty())
    line += " model=" + printable(r.model) + " tokens=" + std::to_string(r.prompt_tokens) + "+" +
            std::to_string(r.completion_tokens);
  line += " ms=" + std::string(ms) + " client=" + req.remote_addr + ":" + std::to_string(req.remote_port) + "\n";
  std::lock_guard lk(log_mu);
  *opt.log << line << std::flush;
}

void Server::Impl::setup() {
  std::int64_t slots = 0, queues = 0;
  for (const auto& m : text) {
    slots += m.scheduler->options().slots;
    queues += m.scheduler->options().max_queue;
  }
  const int threads = opt.http_threads > 0 ? opt.http_threads
                                           : static_cast<int>(std::clamp<std::int64_t>(slots + queues + 8, 16, 512));
  http = std::make_unique<detail::HttpServer>(detail::HttpLimits{
      .request_timeout = opt.request_timeout,
      .write_timeout = opt.write_timeout,
      .max_request_bytes = opt.max_body_bytes + 65536,
  });
  http->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  http->set_payload_max_length(opt.max_body_bytes);
  http->set_tcp_nodelay(true);

  http->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_record() = {};
    const bool api = req.path.rfind("/v1/", 0) == 0;
    if (api && !opt.api_key.empty()) {
      const std::string h = req.get_header_value("Authorization");
      if (h.empty()) {
        answer_error(res, ApiError(401, "You didn't provide an API key. You need to provide your API key in an "
                                        "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                                   "", "missing_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
      const std::string token = h.rfind("Bearer ", 0) == 0 ? h.substr(7) : std::string();
      if (!constant_time_equal(token, opt.api_key)) {
        answer_error(res, ApiError(401, "Incorrect API key provided.", "", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (api && draining.load()) {
      answer_error(res, ApiError(503, "The server is shutting down; retry on another replica.", "", "shutting_down",
                                 "server_error"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  http->Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(*this, req, res, ApiKind::Chat);
  }));
  http->Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(*this, req, res, ApiKind::Completion);
  }));
  http->Post("/v1/embeddings", guarded([this](const httplib::Request& req, httplib::Response& res) {
    handle_embeddings(*this, req, res);
  }));
  http->Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    // One entry per name (a client that picks from the list finds an alias too); "root" is the
    // model an alias names, as vLLM reports it.
    auto add = [&](const std::string& id, const std::vector<std::string>& aliases) {
      data.push_back({{"id", id}, {"object", "model"}, {"created", created}, {"owned_by", "qkv"}, {"root", id}});
      for (const auto& a : aliases)
        data.push_back({{"id", a}, {"object", "model"}, {"created", created}, {"owned_by", "qkv"}, {"root", id}});
    };
    for (const auto& m : text) add(m.id, m.aliases);
    for (const auto& m : embed) add(m.id, m.aliases);
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }));
  http->Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
    json models = json::array();
    for (const auto& m : text) {
      const infer::SchedulerStats st = m.scheduler->stats();
      models.push_back({{"id", m.id}, {"slots", st.slots}, {"slots_busy", st.busy}, {"slots_free", st.slots - st.busy},
                        {"queued", st.queued}});
    }
    for (const auto& m : embed) models.push_back({{"id", m.id}, {"queued", m.batcher->queued()}});
    const bool ok = !draining.load();
    res.status = ok ? 200 : 503;
    if (!ok) res.set_header("Retry-After", "1");
    res.set_content(json{{"status", ok ? "ok" : "shutting_down"}, {"models", models}}.dump(), "application/json");
  }));
  http->Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
    std::vector<ModelGauges> g;
    for (const auto& m : text) {
      const infer::SchedulerStats st = m.scheduler->stats();
      g.push_back({m.id, st.slots, st.busy, st.queued});
    }
    res.set_content(metrics.render(g), "text/plain; version=0.0.4");
  }));

  http->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    switch (res.status) {
      case 404:
        answer_error(res, ApiError(404, "Unknown request URL: " + printable(req.method) + " " + printable(req.path) + ".",
                                   "", "unknown_url"));
        break;
      case 413:
        answer_error(res, ApiError(413, "The request body is larger than the limit of " +
                                            std::to_string(opt.max_body_bytes) + " bytes.",
                                   "", "request_too_large"));
        detail::close_after_response();  // the body was not read
        break;
      default:
        answer_error(res, ApiError(res.status, "The request could not be served (HTTP " + std::to_string(res.status) + ").",
                                   "", "bad_request"));
        detail::close_after_response();
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  http->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    answer_error(res, ApiError(500, "Internal error: " + what, "", "internal_error", "server_error"));
  });
  http->set_logger([this](const httplib::Request& req, const httplib::Response& res) { log_request(req, res); });
}

TextModel make_text_model(std::shared_ptr<const infer::LanguageModel> lm, const infer::SchedulerOptions& options) {
  if (!lm) throw ValueError("serve: no language model");
  if (!lm->tokenizer)
    throw ValueError("serve: " + lm->path + " has no tokenizer (tokenizer.json, or vocab.json and merges.txt); the server "
                     "needs one");
  TextModel m;
  m.id = lm->name;
  m.scheduler = std::make_shared<infer::Scheduler>(lm->model, options);
  m.lm = std::move(lm);
  return m;
}

Server::Server(ServerOptions options, std::vector<TextModel> text_models, std::vector<EmbeddingModel> embedding_models)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.opt = std::move(options);
  s.text = std::move(text_models);
  s.embed = std::move(embedding_models);
  if (s.text.empty() && s.embed.empty()) throw ValueError("serve: no model to serve");
  std::set<std::string> ids;
  for (const auto& m : s.text) {
    if (!m.lm || !m.scheduler) throw ValueError("serve: text model '" + m.id + "' lacks its language model or scheduler");
    if (!m.lm->tokenizer) throw ValueError("serve: text model '" + m.id + "' has no tokenizer");
    if (!ids.insert(m.id).second) throw ValueError("serve: two models are named '" + m.id + "'");
    for (const auto& a : m.aliases)
      if (a.empty() || !ids.insert(a).second) throw ValueError("serve: two models are named '" + a + "'");
  }
  for (const auto& m : s.embed) {
    if (!m.batcher) throw ValueError("serve: embedding model '" + m.id + "' lacks a batcher");
    if (!ids.insert(m.id).second) throw ValueError("serve: two models are named '" + m.id + "'");
    for (const auto& a : m.aliases)
      if (a.empty() || !ids.insert(a).second) throw ValueError("serve: two models are named '" + a + "'");
  }
  if (s.opt.port < 0 || s.opt.port > 65535)
    throw ValueError("serve: port must be in [0, 65535], got " + std::to_string(s.opt.port));
  if (s.opt.max_body_bytes < 1024)
    throw ValueError("serve: max_body_bytes must be >= 1024, got " + std::to_string(s.opt.max_body_bytes));
  s.setup();
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& s = *impl_;
  const int p = s.opt.port == 0 ? s.http->bind_to_any_port(s.opt.host)
                                : (s.http->bind_to_port(s.opt.host, s.opt.port) ? s.opt.port : -1);
  if (p < 0)
    throw IOError("serve: cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) +
                  " (address in use, not an address of this machine, or not permitted)");
  s.http->set_backlog(1024);
  s.port = p;
  return p;
}

void Server::run() {
  Impl& s = *impl_;
  if (s.port < 0) bind();
  {
    std::lock_guard lk(s.run_mu);
    if (s.stopped) return;  // stopped before it listened
    s.run_started = true;
  }
  s.http->listen_after_bind();
  s.run_returned = true;
}

void Server::stop() {
  Impl& s = *impl_;
  bool started = false;
  {
    std::lock_guard lk(s.run_mu);
    if (s.stopped.exchange(true)) return;
    started = s.run_started;
  }
  s.draining = true;
  // run() is listening or about to (httplib marks itself running first thing): wait for it, so
  // that the listening socket is the one closed.
  while (started && !s.http->is_running() && !s.run_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s.http->stop();  // no new connections; idle keep-alive connections close
  for (auto& m : s.text) m.scheduler->shutdown(s.opt.shutdown_grace);
  for (auto& m : s.embed) m.batcher->shutdown();
}

int Server::port() const { return impl_->port; }

}  // namespace qkv::serve
