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

// Runs `qkv ARGS` through the shell (quote paths in ARGS), capturing stdout and
// stderr separately. `limits` is prepended in the shell, e.g. "ulimit -v 4000000;".
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
