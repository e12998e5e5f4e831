// The server's state and its handlers (internal to serve/): server.cpp sets up the routes, auth,
// limits, logging and the small endpoints; generation.cpp answers chat and completion requests;
// embeddings.cpp answers embedding requests.
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "http_server.h"
#include "qkv/serve/metrics.h"
#include "qkv/serve/server.h"

namespace qkv::serve {

// What the request the calling thread serves did, for its log line and the metrics (a request is
// served by one thread from start to end).
struct RequestRecord {
  std::string model;
  std::int64_t prompt_tokens = 0, completion_tokens = 0;
  bool disconnected = false;  // the client left before the response ended
};
RequestRecord& request_record();

struct Server::Impl {
  ServerOptions opt;
  std::vector<TextModel> text;
  std::vector<EmbeddingModel> embed;
  Metrics metrics;
  std::unique_ptr<detail::HttpServer> http;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  // run() and stop() meet here: a stop() that comes before run() listens makes run() return at
  // once; one that comes while run() is starting waits until it listens (httplib's stop() closes
  // only a socket it is accepting on), so a SIGTERM just after "listening" is never lost.
  std::mutex run_mu;
  bool run_started = false;                 // under run_mu
  std::atomic<bool> run_returned{false};
  int port = -1;
  std::time_t created = std::time(nullptr);
  std::mutex log_mu;

  // The text model `id` names ("" picks the only one). ApiError 400 model_not_found.
  const TextModel& text_model(const std::string& id) const;
  const EmbeddingModel& embedding_model(const std::string& id) const;
  [[noreturn]] void no_such_model(const std::string& id, const char* kind) const;
  void setup();
  void log_request(const httplib::Request& req, const httplib::Response& res);
};

// "chatcmpl-" / "cmpl-" + 24 hex digits, and a seed for a request that gives none.
std::string new_id(const char* prefix);
std::uint64_t new_seed();

// Writes an ApiError as the response (status, JSON body, Retry-After for 429 and 503).
void answer_error(httplib::Response& res, const ApiError& e);

void handle_generation(Server::Impl& s, const httplib::Request& req, httplib::Response& res, ApiKind kind);
void handle_embeddings(Server::Impl& s, const httplib::Request& req, httplib::Response& res);

}  // namespace qkv::serve
