// Helpers of the server tests: a serve::Server on port 0 of 127.0.0.1 in the test process
// (the tiny GPT-2 of the fixtures with a ChatML template, optionally the MiniLM embedder),
// cpp-httplib clients, SSE parsing, and raw sockets for what a well-behaved client never sends.
#pragma once
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/language_model.h"
#include "qkv/serve/server.h"

namespace qkv::testing {

using json = nlohmann::json;

inline std::string gpt2_tiny_dir() { return std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny"; }
inline std::string chatml_template() { return std::string(QKV_FIXTURE_DIR) + "/serve/chatml.jinja"; }
inline std::string minilm_dir() { return std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2"; }

// The tiny GPT-2 as infer::load_language_model loads it, with the ChatML template.
inline std::shared_ptr<const infer::LanguageModel> gpt2_tiny_lm() {
  static const auto lm = std::make_shared<const infer::LanguageModel>(
      infer::load_language_model(gpt2_tiny_dir(), {.chat_template_file = chatml_template()}));
  return lm;
}
inline std::shared_ptr<const infer::CausalLM> gpt2_tiny_model() { return gpt2_tiny_lm()->model; }
inline const tokenize::Tokenizer* gpt2_tiny_tokenizer() { return &gpt2_tiny_lm()->tok(); }

// The tiny GPT-2 as a served text model (id "gpt2_tiny"), with the ChatML template; `model`
// replaces the network (a gated one, say).
inline serve::TextModel tiny_text_model(const infer::SchedulerOptions& so,
                                        std::shared_ptr<const infer::CausalLM> model = gpt2_tiny_model()) {
  auto lm = gpt2_tiny_lm();
  if (model != lm->model) {
    auto other = std::make_shared<infer::LanguageModel>(*lm);
    other->model = std::move(model);
    lm = std::move(other);
  }
  return serve::make_text_model(std::move(lm), so);
}

// A server running on its own thread; stopped and joined on destruction.
struct TestServer {
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  int port = 0;

  TestServer(serve::ServerOptions o, std::vector<serve::TextModel> text, std::vector<serve::EmbeddingModel> embed = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    server = std::make_unique<serve::Server>(o, std::move(text), std::move(embed));
    port = server->bind();
    thread = std::thread([this] { server->run(); });
  }
  ~TestServer() {
    server->stop();
    thread.join();
  }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_read_timeout(60, 0);
    c->set_write_timeout(60, 0);
    return c;
  }
};

// The data lines of an SSE body: each event's JSON text (or "[DONE]"), in order. Framing errors
// (a line that is not "data: ...", an event not ended by a blank line) come back as "!<line>".
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos < body.size()) {
    const std::size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      out.push_back("!" + body.substr(pos));
      break;
    }
    const std::string ev = body.substr(pos, end - pos);
    if (ev.rfind("data: ", 0) != 0 || ev.find('\n') != std::string::npos) out.push_back("!" + ev);
    else out.push_back(ev.substr(6));
    pos = end + 2;
  }
  return out;
}

// A streamed response's text (chat deltas or completion texts) and its finish reason.
struct Streamed {
  std::string text, finish_reason;
  json usage;
  bool done = false;  // ended by [DONE]
  std::vector<std::string> errors;
};
inline Streamed parse_stream(const std::string& body) {
  Streamed s;
  for (const std::string& e : sse_events(body)) {
    if (e == "[DONE]") {
      s.done = true;
      continue;
    }
    if (!e.empty() && e[0] == '!') {
      s.errors.push_back(e);
      continue;
    }
    const json j = json::parse(e);
    if (j.contains("error")) {
      s.errors.push_back(e);
      continue;
    }
    if (j.contains("usage") && !j["usage"].is_null()) s.usage = j["usage"];
    for (const auto& c : j["choices"]) {
      if (c.contains("delta") && c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
      if (c.contains("text")) s.text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
    }
  }
  return s;
}

// A raw TCP connection to 127.0.0.1:port (for malformed requests and slow clients).
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send_all(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  // Reads until the server closes the connection or `timeout` passes; the bytes read.
  std::string read_until_close(std::chrono::milliseconds timeout, bool* closed = nullptr) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        if (closed) *closed = true;
        return out;
      }
      out.append(buf, static_cast<std::size_t>(n));
    }
    if (closed) *closed = false;
    return out;
  }
  // Reads until the first response is whole (headers and Content-Length bytes of body), the
  // server closes the connection, or `timeout` passes; the bytes read.
  std::string read_response(std::chrono::milliseconds timeout) {
    std::string out;
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto head_end = out.find("\r\n\r\n");
      if (head_end != std::string::npos) {
        std::size_t length = 0;
        for (const char* name : {"Content-Length: ", "content-length: "})
          if (const auto at = out.find(name); at != std::string::npos && at < head_end)
            length = std::strtoull(out.c_str() + at + 16, nullptr, 10);
        if (out.size() >= head_end + 4 + length) return out;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      bool closed = false;
      const std::string more = read_until_close(std::min(left, std::chrono::milliseconds(50)), &closed);
      out += more;
      if (closed || left.count() <= 0) return out;
    }
  }
  // The status of the first response in `raw` ("HTTP/1.1 400 ..." -> 400), or -1.
  static int status_of(const std::string& raw) {
    if (raw.rfind("HTTP/1.1 ", 0) != 0 || raw.size() < 12) return -1;
    return std::atoi(raw.substr(9, 3).c_str());
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace qkv::testing
