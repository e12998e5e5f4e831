// Helpers for the end-to-end tests of the qkv tool: run the built binary
// (QKV_BIN) and capture stdout, stderr and how it ended; scratch paths.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "testing/sanitizers.h"

namespace qkv::cli_test {

namespace fs = std::filesystem;

struct Result {
  int code = -1;    // exit code; -1 if the process did not exit normally
  int signal = 0;   // the signal that ended it (SIGSEGV, SIGABRT, SIGKILL ...), else 0
  std::string out, err;
};

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A fresh path under the temp directory (not created).
inline fs::path unique_temp(const std::string& stem) {
  static std::atomic<int> counter{0};
  return fs::temp_directory_path() /
         ("qkv_cli_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
}

// A shell prefix for run() that caps one run of qkv at `kib` KiB of memory, so a command that
// started allocating what it should refuse dies of it instead of printing its message: the
// address space (`ulimit -v`). Under AddressSanitizer, which reserves terabytes of address space
// for its shadow memory at start-up, the cap is ASan's own instead: no allocation larger than
// the cap (max_allocation_size_mb) and a resident size under it (hard_rss_limit_mb); passing
// either is an ASan error, which fails the test (and make test-asan through its report).
inline std::string memory_cap(long long kib) {
  if (qkv::testing::kUnderAsan) {
    const std::string mb = std::to_string(kib / 1024);
    return "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}max_allocation_size_mb=" + mb + ":hard_rss_limit_mb=" +
           mb + "\"; ";
  }
  return "ulimit -v " + std::to_string(kib) + "; ";
}

// Runs `qkv ARGS` through the shell (quote paths in ARGS), capturing stdout and
// stderr separately. `limits` is prepended in the shell, e.g. memory_cap(4000000).
inline Result run(const std::string& args, const std::string& limits = "") {
  const fs::path err_path = unique_temp("stderr");
  // exec: the shell becomes qkv, so a signal that kills qkv is what pclose reports.
  const std::string cmd = limits + "exec '" + std::string(QKV_BIN) + "' " + args + " 2>'" + err_path.string() + "'";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.err = read_file(err_path);
  fs::remove(err_path);
  return r;
}

// A qkv process started in the background (for signals): its pid and where its output goes.
struct Spawned {
  pid_t pid = -1;
  fs::path out, err;
};

// Starts `qkv ARGS` (through the shell, which exec's qkv so `pid` is qkv's own).
inline Spawned spawn(const std::string& args) {
  Spawned s;
  s.out = unique_temp("spawn_out");
  s.err = unique_temp("spawn_err");
  const std::string cmd = "exec '" + std::string(QKV_BIN) + "' " + args + " >'" + s.out.string() + "' 2>'" +
                          s.err.string() + "'";
  s.pid = ::fork();
  if (s.pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return s;
}

// Waits for a spawned process; its exit code or the signal that ended it, and its output.
inline Result wait_for(const Spawned& s) {
  Result r;
  int status = 0;
  ::waitpid(s.pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  r.out = read_file(s.out);
  r.err = read_file(s.err);
  fs::remove(s.out);
  fs::remove(s.err);
  return r;
}

// One JSON value per non-empty line of out (the --json outputs).
inline std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) v.push_back(nlohmann::json::parse(line));
  return v;
}

// Non-empty lines in s.
inline int count_lines(const std::string& s) {
  int n = 0;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) ++n;
  return n;
}

// The JSON objects (one per line) of `out` whose "event" is `event`.
inline std::vector<nlohmann::json> json_events(const std::string& out, const std::string& event) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == event) v.push_back(j);
  }
  return v;
}

inline std::string fixture(const std::string& name) { return std::string(QKV_FIXTURE_DIR) + "/" + name; }

}  // namespace qkv::cli_test
