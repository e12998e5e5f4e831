// qkv serve: an OpenAI-compatible HTTP server over the models given (serve/server.h), with a
// continuous-batching scheduler per text model (infer/scheduler.h).
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/serve/server.h"
#include "serve_models.h"

namespace qkv::tool {
namespace {

struct ServeOptions {
  std::vector<std::string> models;
  std::vector<std::string> aliases;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::int64_t parallel = 4;
  std::int64_t ctx = 0;
  std::int64_t queue = 64;
  std::int64_t prefill_chunk = 256;
  std::string api_key;
  std::string chat_template;
  std::string activations = "f32";
  std::string kv_cache = "f32";
  std::int64_t max_body = 1 << 20;
  double request_timeout = 10;
  double shutdown_grace = 4;
  bool quiet = false;
};

int run_serve(const ServeOptions& o) {
  // SIGINT / SIGTERM are taken by one thread (sigwait) that stops the server; every other thread
  // (those made from here on inherit the mask) leaves them alone. A write to a client that left
  // must not kill the process.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::string api_key = o.api_key;
  if (api_key.empty())
    if (const char* k = std::getenv("QKV_API_KEY")) api_key = k;

  ServedModels served = load_served_models(o.models, {.slots = o.parallel,
                                                      .context = o.ctx,
                                                      .max_queue = o.queue,
                                                      .prefill_chunk = o.prefill_chunk,
                                                      .chat_template_file = o.chat_template,
                                                      .activations = o.activations == "q8" ? kernels::QActivations::Q8
                                                                                           : kernels::QActivations::F32,
                                                      .kv_cache = infer::parse_kv_type(o.kv_cache, "--kv-cache"),
                                                      .aliases = o.aliases});
  serve::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.api_key = api_key;
  so.max_body_bytes = static_cast<std::size_t>(o.max_body);
  so.request_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.request_timeout * 1000));
  so.shutdown_grace = std::chrono::milliseconds(static_cast<std::int64_t>(o.shutdown_grace * 1000));
  so.log = o.quiet ? nullptr : &std::cerr;
  const std::string summary = served.summary;
  serve::Server server(so, std::move(served.text), std::move(served.embedding));
  const int port = server.bind();
  std::cout << "qkv serve: listening on http://" << o.host << ":" << port << " (" << summary << ")" << std::endl;

  std::atomic<bool> signalled{false};
  std::thread signals([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (signalled.exchange(true)) return;  // woken by run_serve itself
    std::cerr << "qkv serve: " << (sig == SIGINT ? "SIGINT" : "SIGTERM") << ", stopping (in-flight requests get "
              << o.shutdown_grace << " s)" << std::endl;
    server.stop();
  });
  server.run();
  if (!signalled.exchange(true)) pthread_kill(signals.native_handle(), SIGTERM);  // run() ended on its own
  signals.join();
  std::cerr << "qkv serve: stopped" << std::endl;
  return 0;
}

QKV_TOOL_COMMAND(serve, {
    .name = "serve",
    .summary = "Serve models over an OpenAI-compatible HTTP API (continuous batching)",
    .order = 12,
    .group = "Chat with and serve a model",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Serves POST /v1/chat/completions (through the model's chat template, or --chat-template's), "
          "/v1/completions (text models, loaded as qkv generate loads them: " + role_needs(models::ModelRole::CausalLM) +
          "; every end-of-sequence token ends a reply), POST /v1/embeddings (" + role_needs(models::ModelRole::Encoder) +
          "), GET /v1/models, /health and /metrics "
          "(Prometheus), in the OpenAI API's shapes; streaming is server-sent events. A model's id is its file or "
          "folder name. Each text model has --parallel KV-cache slots: every step decodes one token for every "
          "running request in one batched forward pass, and requests join and leave at any step (continuous "
          "batching). Listens on 127.0.0.1 unless --host says otherwise; --port 0 picks a free port (printed). "
          "With --api-key (or $QKV_API_KEY) the /v1/ routes need 'Authorization: Bearer KEY'. One log line per "
          "request on stderr (method, path, status, tokens, ms). SIGINT / SIGTERM: stop accepting, let in-flight "
          "requests finish for up to --shutdown-grace seconds (then cancel them), exit 0.\n\n"
          "Examples:\n"
          "  qkv serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf --parallel 8\n"
          "  qkv serve --model tests/fixtures/gpt2_tiny --chat-template chat.jinja --port 0\n"
          "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
          "       -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Hi!\"}], \"max_tokens\": 32}'");
      auto opt = std::make_shared<ServeOptions>();
      sub.add_option("--model", opt->models,
                     "A model: a GGUF file or a folder of a text model, or a sentence-transformers folder "
                     "(embeddings); repeatable")
          ->check(lm_model_path())
          ->type_name("PATH")
          ->required();
      sub.add_option("--model-alias", opt->aliases,
                     "Another name requests may give a model (OpenAI clients that ask for 'gpt-4o-mini', say): NAME "
                     "with one model, NAME=ID (ID: a model's file or folder name) with several; repeatable. Other "
                     "names are answered 404, as OpenAI answers them")
          ->type_name("NAME[=ID]");
      sub.add_option("--host", opt->host, "Address to listen on")->capture_default_str();
      sub.add_option("--port", opt->port, "Port (0: any free one)")->check(int_range(0, 65535))->capture_default_str();
      sub.add_option("--parallel", opt->parallel, "KV-cache slots per text model (sequences decoded together)")
          ->check(int_range(1, 256))
          ->capture_default_str();
      sub.add_option("--ctx", opt->ctx, "Positions per slot, prompt + completion (default: the model's, at most 4096)")
          ->check(int_range(1, 1 << 20));
      sub.add_option("--queue", opt->queue, "Requests waiting for a slot before 429s")
          ->check(int_range(0, 100000))
          ->capture_default_str();
      sub.add_option("--prefill-chunk", opt->prefill_chunk, "Prompt tokens per prefill pass and per step")
          ->check(int_range(1, 1 << 16))
          ->capture_default_str();
      sub.add_option("--api-key", opt->api_key, "Bearer key the /v1/ routes require (default: $QKV_API_KEY, else none)");
      sub.add_option("--chat-template", opt->chat_template, "A Jinja chat template file replacing the models' own")
          ->check(input_file("a Jinja template file"))
          ->type_name("FILE");
      sub.add_option("--activations", opt->activations,
                     "f32 (exact, the default) or q8 (products with quantized weights take activations quantized per "
                     "32 values: faster prefill, and faster batched decoding of Q4_0/Q4_1/Q8_0 weights on AVX-512 VNNI; "
                     "as qkv generate --activations q8)")
          ->check(CLI::IsMember({"f32", "q8"}))
          ->capture_default_str();
      sub.add_option("--kv-cache", opt->kv_cache,
                     "f32 (the default) or f16: the slots' KV caches in half precision (half the memory per slot; "
                     "as qkv generate --kv-cache f16)")
          ->check(CLI::IsMember({"f32", "f16"}))
          ->capture_default_str();
      sub.add_option("--max-body", opt->max_body, "Largest request body in bytes (413 beyond)")
          ->check(int_range(1024, std::int64_t{1} << 30))
          ->capture_default_str();
      sub.add_option("--request-timeout", opt->request_timeout, "Seconds to read a whole request (slow clients are dropped)")
          ->check(real_range(0.1, 3600.0))
          ->capture_default_str();
      sub.add_option("--shutdown-grace", opt->shutdown_grace, "Seconds in-flight requests get after SIGTERM")
          ->check(real_range(0.0, 3600.0))
          ->capture_default_str();
      sub.add_flag("--quiet", opt->quiet, "No request log");
      return [opt] { return run_serve(*opt); };
    }});

}  // namespace
}  // namespace qkv::tool
