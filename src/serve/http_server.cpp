// qkv's connection loop for cpp-httplib (see http_server.h).
#include "http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace qkv::serve::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Waits are cut into slices so that a stopping server is noticed within one.
constexpr milliseconds kSlice{100};

thread_local bool t_close_after_response = false;
thread_local std::chrono::steady_clock::time_point t_request_start;

void address(socket_t fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  ip.clear();
  port = -1;
  if (rc != 0) return;
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

// poll() for `events` up to `timeout`; > 0 ready, 0 timed out, < 0 error.
int wait_for(socket_t fd, short events, milliseconds timeout) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int rc = ::poll(&p, 1, static_cast<int>(std::max<milliseconds::rep>(timeout.count(), 0)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc > 0 && (p.revents & (POLLERR | POLLNVAL))) return -1;
    return rc;
  }
}

class DeadlineStream : public httplib::Stream {
 public:
  DeadlineStream(socket_t fd, const HttpLimits& limits, const HttpServer& server)
      : fd_(fd), limits_(limits), server_(server) {}

  // A new request starts: its deadline and byte budget.
  void start_request() {
    deadline_ = Clock::now() + limits_.request_timeout;
    budget_ = limits_.max_request_bytes;
  }

  // Waits (idle, between requests) until the next request's first byte; false on timeout, a
  // closed connection or a stopping server.
  bool wait_next_request(milliseconds timeout) { return begin_ < end_ || wait_readable_until(Clock::now() + timeout); }

  bool is_readable() const override {
    if (begin_ < end_) return true;
    return const_cast<DeadlineStream*>(this)->wait_readable();
  }

  // Writable (within write_timeout), and the client has not closed or reset the connection.
  bool is_writable() const override {
    if (wait_for(fd_, POLLOUT, limits_.write_timeout) <= 0) return false;
    return alive();
  }

  // No FIN or RST from the client (bytes it sent ahead do not count as a close).
  bool alive() const {
    pollfd p{fd_, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) > 0) {
      if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
      char c;
      if (::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
    }
    return true;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (begin_ == end_) {
      if (!wait_readable()) return -1;
      ssize_t n;
      do {
        n = ::recv(fd_, buf_, sizeof(buf_), 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<std::size_t>(n);
    }
    std::size_t n = std::min(size, end_ - begin_);
    if (n > budget_) return -1;  // the request is larger than any we accept
    budget_ -= n;
    std::memcpy(ptr, buf_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (wait_for(fd_, POLLOUT, limits_.write_timeout) <= 0) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(fd_, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(fd_, false, ip, port); }
  socket_t socket() const override { return fd_; }

 private:
  // Waits for bytes until the request's deadline (false when it passes, on error or when the
  // server stops).
  bool wait_readable() { return wait_readable_until(deadline_); }
  bool wait_readable_until(Clock::time_point until) {
    while (!server_.stopping()) {
      const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now());
      if (left.count() <= 0) return false;
      const int rc = wait_for(fd_, POLLIN, std::min(left, kSlice));
      if (rc < 0) return false;
      if (rc > 0) return true;
    }
    return false;
  }

  socket_t fd_;
  const HttpLimits& limits_;
  const HttpServer& server_;
  Clock::time_point deadline_ = Clock::now();
  std::size_t budget_ = 0;
  char buf_[4096];
  std::size_t begin_ = 0, end_ = 0;
};

thread_local const DeadlineStream* t_stream = nullptr;

}  // namespace

void close_after_response() { t_close_after_response = true; }
bool client_connected() { return t_stream == nullptr || t_stream->alive(); }
std::chrono::steady_clock::time_point request_start() { return t_request_start; }

void HttpServer::set_backlog(int n) {
  const socket_t fd = svr_sock_;
  if (fd != INVALID_SOCKET) ::listen(fd, n);  // a second listen() on Linux only changes the backlog
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  DeadlineStream strm(sock, limits_, *this);
  t_stream = &strm;
  bool ret = false;
  for (std::size_t left = limits_.keep_alive_max; left > 0 && !stopping(); --left) {
    if (!strm.wait_next_request(limits_.keep_alive_timeout)) break;
    strm.start_request();
    t_request_start = Clock::now();
    bool closed = false;
    t_close_after_response = false;
    ret = process_request(strm, left == 1 || stopping(), closed, nullptr);
    if (!ret || closed || t_close_after_response) break;
  }
  t_stream = nullptr;
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace qkv::serve::detail
