// `qkv serve` as a child process for the end-to-end tests: started on port 0 of 127.0.0.1 (the
// port read from its first line of output), signalled, waited for, its resident memory read.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace qkv::testing {

class ServeProcess {
 public:
  // Runs QKV_BIN serve ARGS... --port 0; waits (up to 60 s) for "listening on http://H:P".
  explicit ServeProcess(const std::vector<std::string>& args) {
    err_path_ = "/tmp/qkv_serve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".err";
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      const int fd = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      ::dup2(fd, 2);
      ::close(out[0]);
      std::vector<std::string> all = {QKV_BIN, "serve"};
      all.insert(all.end(), args.begin(), args.end());
      all.push_back("--port");
      all.push_back("0");
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(QKV_BIN, argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_fd_ = out[0];
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (port_ == 0 && std::chrono::steady_clock::now() < until) {
      pollfd p{out_fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[512];
      const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n <= 0) break;
      out_.append(buf, static_cast<std::size_t>(n));
      const auto at = out_.find("listening on http://");
      if (at != std::string::npos && out_.find('\n', at) != std::string::npos) {
        const auto colon = out_.find(':', at + 20);
        port_ = std::atoi(out_.c_str() + colon + 1);
      }
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) ::close(out_fd_);
    ::unlink(err_path_.c_str());
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& first_output() const { return out_; }

  void signal(int sig) const { ::kill(pid_, sig); }

  // Waits up to `timeout` for the process to end: its exit code, or -1 (still running, or
  // ended by a signal: see term_signal()).
  int wait(std::chrono::milliseconds timeout, double* seconds = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    while (!exited_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        term_signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        break;
      }
      if (std::chrono::steady_clock::now() - t0 > timeout) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return code_;
  }
  int term_signal() const { return term_signal_; }

  // Its standard error so far (the request log).
  std::string log() const {
    std::ifstream f(err_path_);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }

  // VmRSS in KiB (0 if unknown).
  long rss_kib() const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
    return 0;
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  std::string out_, err_path_;
  bool exited_ = false;
  int code_ = -1, term_signal_ = 0;
};

}  // namespace qkv::testing
