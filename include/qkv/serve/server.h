// `qkv serve`: an OpenAI-compatible HTTP/1.1 server (cpp-httplib) over infer/'s schedulers.
//
//   POST /v1/chat/completions   messages through the model's chat template; stream (SSE) or not
//   POST /v1/completions        prompt text or token ids
//   (both: OpenAI's sampling fields, plus top_k and llama.cpp's ignore_eos)
//   POST /v1/embeddings         input text(s); float or base64
//   GET  /v1/models, GET /health (slots busy and free; 503 while stopping), GET /metrics
// Errors are OpenAI's {"error": {"message", "type", "param", "code"}}: 400 (bad JSON, wrong types,
// values out of range, unknown model, prompt + max_tokens beyond the context), 401 (api_key set and
// the Authorization: Bearer header missing or wrong; compared in constant time), 404, 413 (body
// over max_body_bytes), 429 (queue full) and 503 (stopping), both with Retry-After.
//
// The server never touches a model: generation goes to each text model's infer::Scheduler
// (continuous batching), embeddings to its infer::EmbedBatcher. A client that disconnects has its
// sequence cancelled (its slot is free within a step). Every request is read under one deadline
// and byte budget (slow clients are dropped); every request is logged in one line (method, path,
// status, tokens, ms).
//
//   serve::Server server(options, {text_model}, {});
//   const int port = server.bind();
//   std::thread t([&] { server.run(); });
//   ... server.stop(); t.join();
//
// Thread safety: stop() may be called from any thread (not from a signal handler) while run()
// serves; the rest is set up before run().
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "qkv/infer/embed_batcher.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/scheduler.h"
#include "qkv/serve/openai.h"

namespace qkv::serve {

// A text model as the server sees it: the language model as every front end loads it
// (infer::load_language_model: tokenizer, chat template, stop tokens) and the scheduler that runs
// its network. Chat prompts go through LanguageModel::chat_prompt (a template that fails or is
// missing is answered 400 with its message), completion prompts through encode_prompt; every
// eos id ends a reply (and is not shown as text).
struct TextModel {
  std::string id;  // the model's name in the API (LanguageModel::name: its file or folder name)
  std::shared_ptr<const infer::LanguageModel> lm;  // with a tokenizer
  std::shared_ptr<infer::Scheduler> scheduler;     // over lm->model
  std::vector<std::string> aliases;                // more names requests may give it (qkv serve --model-alias)
};

// `lm` with a scheduler of its network (its options as Scheduler's; ValueError for a model
// without a tokenizer, naming it).
TextModel make_text_model(std::shared_ptr<const infer::LanguageModel> lm, const infer::SchedulerOptions& options);

struct EmbeddingModel {
  std::string id;
  std::shared_ptr<infer::EmbedBatcher> batcher;
  std::vector<std::string> aliases;  // more names requests may give it
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                                  // 0: any free port (bind() returns it)
  std::string api_key;                              // empty: no authentication
  std::size_t max_body_bytes = std::size_t{1} << 20;
  std::chrono::milliseconds request_timeout{10000};  // to read a whole request
  std::chrono::milliseconds write_timeout{10000};
  std::chrono::milliseconds shutdown_grace{4000};    // for in-flight requests once stop() is called
  int http_threads = 0;                              // 0: slots + queues + 8 (at least 16)
  std::ostream* log = nullptr;                       // one line per request (null: none)
};

class Server {
 public:
  // ValueError when no model is given, two share an id, or an option is out of range.
  Server(ServerOptions options, std::vector<TextModel> text_models, std::vector<EmbeddingModel> embedding_models);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; returns the port (the one picked for port 0). IOError naming the address.
  int bind();
  // Serves until stop(); returns once every in-flight request has ended.
  void run();
  // Stops gracefully: no new connections, 503 for new requests, in-flight generations finish
  // within shutdown_grace (then are cancelled), the schedulers stop. Idempotent.
  void stop();
  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv::serve
