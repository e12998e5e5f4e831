// cpp-httplib's Server with qkv's own connection loop (internal to serve/).
//
// httplib reads a request through per-read timeouts only, so a client that sends one byte a
// second would hold a worker thread for ever (slowloris). Here every connection is served by
// HttpServer::process_and_close_socket through a DeadlineStream, whose reads share one deadline
// and one byte budget per request (request line, headers and body): a slow or endless request is
// dropped when either runs out. The stream also tells a handler whether its client is still
// connected (is_writable: no FIN or RST seen), so a streaming response notices a disconnect
// without writing, and it stops reading and waiting once the server stops.
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstddef>

namespace qkv::serve::detail {

struct HttpLimits {
  std::chrono::milliseconds request_timeout{10000};  // to read a whole request (line, headers, body)
  std::chrono::milliseconds write_timeout{10000};    // for the client to take each write
  std::chrono::milliseconds keep_alive_timeout{5000};
  std::size_t keep_alive_max = 100;                   // requests per connection
  std::size_t max_request_bytes = (std::size_t{1} << 20) + 65536;  // body limit + room for the headers
};

// Called by a handler (on the connection's thread): close the connection after this response
// (e.g. after a 413, whose body was not read).
void close_after_response();
// Called by a handler: whether its client is still connected (no FIN or RST seen). True outside
// a connection of HttpServer.
bool client_connected();
// When the request the calling thread serves began to arrive.
std::chrono::steady_clock::time_point request_start();

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits) : limits_(limits) {}
  // True once stop() was called (the listening socket is closed).
  bool stopping() const { return svr_sock_ == INVALID_SOCKET; }
  // After binding: a listen backlog of `n` (httplib's is 5, which drops connections when a
  // burst of clients arrives at once).
  void set_backlog(int n);

 private:
  bool process_and_close_socket(socket_t sock) override;
  HttpLimits limits_;
};

}  // namespace qkv::serve::detail
