// `qkv serve` as a child process for the end-to-end tests: started on port 0 of 127.0.0.1 (the
// port read from its first line of output), signalled, waited for, its resident memory read;
// spawn_child for other programs (the load balancer of the replica test).
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace qkv::testing {

// Starts argv[0] with the arguments argv[1..] and this process's environment plus `env`
// ("NAME=value" each): its standard output to `out_fd` (-1: inherited), its standard error to
// the file `err_path`. Returns its pid (-1 on failure). The child dies with the test: a test
// process that crashes, aborts or is killed by CTest's timeout leaves no server behind (it
// would hold its port, a CPU and every descriptor it inherited, such as the lock file of the
// run that started the tests), and it inherits no descriptor beyond 0, 1 and 2.
inline pid_t spawn_child(const std::vector<std::string>& args, const std::vector<std::string>& env, int out_fd,
                         const std::string& err_path) {
  // Everything the child needs is made before fork: between fork and exec a child of a
  // multithreaded process may call only async-signal-safe functions (no allocation).
  std::vector<std::string> a = args, e = env;
  std::vector<char*> argv, envp;
  for (auto& x : a) argv.push_back(x.data());
  argv.push_back(nullptr);
  for (char** v = environ; *v; ++v) envp.push_back(*v);
  for (auto& x : e) envp.push_back(x.data());
  envp.push_back(nullptr);
  const char* err = err_path.c_str();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
    if (out_fd >= 0) ::dup2(out_fd, 1);
    const int fd = ::open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) ::dup2(fd, 2);
    ::close_range(3, ~0U, 0);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

class ServeProcess {
 public:
  // Runs QKV_BIN serve ARGS... --port 0; waits (up to 60 s) for "listening on http://H:P".
  explicit ServeProcess(const std::vector<std::string>& args) {
    err_path_ = "/tmp/qkv_serve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++) + ".err";
    std::vector<std::string> all = {QKV_BIN, "serve"};
    all.insert(all.end(), args.begin(), args.end());
    all.push_back("--port");
    all.push_back("0");
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = spawn_child(all, {}, out[1], err_path_);
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
