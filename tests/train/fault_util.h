// Fault injection for the checkpoint tests: kill a save with SIGKILL at its k-th
// write point (io::set_write_point_hook) or after a delay, in a forked child, and
// damage files (truncate, flip bytes).
#pragma once
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "qkv/io/files.h"

namespace qkv::fault_test {

namespace fs = std::filesystem;

inline int g_kill_at = 0;                          // the child's countdown to SIGKILL
inline std::vector<std::string>* g_points = nullptr;  // where record_points collects

inline void kill_hook(const char*) {
  if (--g_kill_at == 0) ::raise(SIGKILL);
}
inline void record_hook(const char* point) { g_points->push_back(point); }

// The write points one call of save() passes, in order (runs save here, unkilled).
inline std::vector<std::string> record_points(const std::function<void()>& save) {
  std::vector<std::string> points;
  g_points = &points;
  io::set_write_point_hook(record_hook);
  save();
  io::set_write_point_hook(nullptr);
  g_points = nullptr;
  return points;
}

// 1-based index of the last point named `name` (the commit point of a file), 0 if none.
inline int last_point(const std::vector<std::string>& points, const std::string& name) {
  int at = 0;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (points[i] == name) at = static_cast<int>(i) + 1;
  return at;
}

// Forks; the child runs prepare() (no hook yet), then save() with a hook that SIGKILLs
// it at its k-th write point. True if the child died by SIGKILL, false if it finished.
inline bool save_killed_at(int k, const std::function<void()>& prepare, const std::function<void()>& save) {
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return false;
  }
  if (pid == 0) {
    try {
      prepare();
      g_kill_at = k;
      io::set_write_point_hook(kill_hook);
      save();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) return true;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child ended with status " << st;
  return false;
}

// Forks; the child runs work() (which saves, maybe in a loop); the parent SIGKILLs it
// after `delay` (or waits for it when delay is negative). Returns the child's
// run time as the parent saw it.
inline std::chrono::microseconds run_killed_after(std::chrono::microseconds delay, const std::function<void()>& work) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed";
    return {};
  }
  if (pid == 0) {
    try {
      work();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int st = 0;
  if (delay.count() >= 0) {
    std::this_thread::sleep_for(delay);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || (WIFEXITED(st) && WEXITSTATUS(st) == 0))
        << "child ended with status " << st;
  } else {
    ::waitpid(pid, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child ended with status " << st;
  }
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
}

// Removes the temp files ("<target>.tmp.<pid>.<n>") a killed save leaves in dir; returns how many.
inline int remove_temp_files(const fs::path& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) {
      fs::remove(e.path());
      ++n;
    }
  return n;
}

inline std::string scratch_dir(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("qkv_fault_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

}  // namespace qkv::fault_test
