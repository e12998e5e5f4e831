// Scale-out, tested small: two `qkv serve` replicas behind HAProxy on loopback ports, with the
// configuration docs/serving.md shows (examples/serving/haproxy.cfg, run as committed). Requests
// sent to the balancer reach both replicas and get the same answers from either; after one
// replica is killed (SIGKILL, in the middle of the run) every request still succeeds, served by
// the other, and the balancer's health check takes the dead one out.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>

#include "serve_process.h"
#include "serve_test_util.h"

namespace {

using namespace qkv::testing;
using namespace std::chrono_literals;

[[maybe_unused]] const bool kIgnoreSigpipe = (std::signal(SIGPIPE, SIG_IGN), true);

// A loopback port free right now (bound, read, released).
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t n = sizeof(a);
  if (s < 0 || ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n) != 0) {
    if (s >= 0) ::close(s);
    return 0;
  }
  ::close(s);
  return ntohs(a.sin_port);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The lines of a replica's request log for POST /v1/completions answered 200.
int completions_logged(const ServeProcess& p) {
  static const std::regex line(R"(POST /v1/completions 200 )");
  const std::string log = p.log();
  return static_cast<int>(std::distance(std::sregex_iterator(log.begin(), log.end(), line), std::sregex_iterator()));
}

// The servers log a request once its answer is sent: the client may read the answer before the
// line is written. Waits (up to 10 s) until `total` lines are in the replicas' logs.
void wait_for_logged(const std::vector<const ServeProcess*>& ps, int total) {
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(10ms)) {
    int n = 0;
    for (const ServeProcess* p : ps) n += completions_logged(*p);
    if (n >= total) return;
  }
}

class Haproxy {
 public:
  Haproxy(int port, int replica1, int replica2) : port_(port) {
    err_path_ = "/tmp/qkv_haproxy_test_" + std::to_string(::getpid()) + ".err";
    const std::string cfg = std::string(QKV_SOURCE_DIR) + "/examples/serving/haproxy.cfg";
    pid_ = spawn_child({QKV_HAPROXY, "-db", "-f", cfg},
                       {"QKV_LB=127.0.0.1:" + std::to_string(port), "QKV_REPLICA_1=127.0.0.1:" + std::to_string(replica1),
                        "QKV_REPLICA_2=127.0.0.1:" + std::to_string(replica2)},
                       -1, err_path_);
  }
  ~Haproxy() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::unlink(err_path_.c_str());
  }
  // Waits (up to 20 s) until the balancer answers /health; false if it never does or exited.
  bool ready() const {
    for (auto until = std::chrono::steady_clock::now() + 20s; std::chrono::steady_clock::now() < until;) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return false;
      httplib::Client c("127.0.0.1", port_);
      c.set_connection_timeout(1s);
      if (auto r = c.Get("/health"); r && r->status == 200) return true;
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }
  std::string log() const { return read_file(err_path_); }

 private:
  int port_;
  pid_t pid_ = -1;
  std::string err_path_;
};

TEST(ServeReplicas, TwoReplicasBehindHaproxyShareTheRequestsAndSurviveOneKilled) {
  ASSERT_TRUE(std::filesystem::exists(QKV_HAPROXY))
      << QKV_HAPROXY << " is missing: scripts/setup.sh installs the Debian package haproxy";
  const std::vector<std::string> args = {"--model", gpt2_tiny_dir(), "--parallel", "2"};
  ServeProcess r1(args), r2(args);
  ASSERT_GT(r1.port(), 0) << r1.log();
  ASSERT_GT(r2.port(), 0) << r2.log();
  const int lb_port = free_port();
  ASSERT_GT(lb_port, 0);
  Haproxy lb(lb_port, r1.port(), r2.port());
  ASSERT_TRUE(lb.ready()) << "haproxy did not answer on port " << lb_port << ":\n" << lb.log();

  httplib::Client c("127.0.0.1", lb_port);
  c.set_read_timeout(60s);
  auto complete = [&](int i) {
    const json body = {{"model", "gpt2_tiny"}, {"prompt", "request " + std::to_string(i % 3)}, {"max_tokens", 6},
                       {"temperature", 0}};
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_TRUE(r) << "request " << i << ": " << httplib::to_string(r.error()) << "\n" << lb.log();
    if (!r) return std::string();
    EXPECT_EQ(r->status, 200) << "request " << i << ": " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    return j.is_object() ? j["choices"][0]["text"].get<std::string>() : std::string();
  };

  // Both replicas serve, and a prompt gets the same greedy text from either.
  std::vector<std::string> texts;
  for (int i = 0; i < 12; ++i) texts.push_back(complete(i));
  for (int i = 3; i < 12; ++i) EXPECT_EQ(texts[static_cast<std::size_t>(i)], texts[static_cast<std::size_t>(i % 3)]);
  wait_for_logged({&r1, &r2}, 12);
  const int served1 = completions_logged(r1), served2 = completions_logged(r2);
  EXPECT_EQ(served1 + served2, 12);
  EXPECT_GE(served1, 3) << r1.log();
  EXPECT_GE(served2, 3) << r2.log();

  // One replica dies; not one request fails: HAProxy retries a refused connection on the other.
  r1.signal(SIGKILL);
  EXPECT_EQ(r1.wait(10s), -1);
  EXPECT_EQ(r1.term_signal(), SIGKILL);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(complete(i), texts[static_cast<std::size_t>(i % 3)]);
  wait_for_logged({&r2}, served2 + 12);
  EXPECT_EQ(completions_logged(r2), served2 + 12) << r2.log();

  // The health checks (every 500 ms, 2 failures) mark it down: HAProxy says so in its log.
  std::string log;
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(100ms)) {
    log = lb.log();
    if (log.find("replica1 is DOWN") != std::string::npos) break;
  }
  EXPECT_NE(log.find("replica1 is DOWN"), std::string::npos) << log;
}

}  // namespace
