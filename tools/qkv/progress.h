// A progress indicator for long-running commands.
//
// On a terminal it redraws one line in place:
//   train  [##########..........]  50%  150/300  ETA 1.2s  loss 0.31
// Otherwise (a pipe, a file, CI logs) it prints plain lines, at most one per
// `plain_interval_s` seconds plus a final one, so logs stay short:
//   train: 150/300 (50%), 1.2s elapsed, ETA 1.2s, loss 0.31
// It writes to stderr by default so it never mixes into --json on stdout.
//
//   ProgressBar bar("train", epochs);
//   for (int e = 1; e <= epochs; ++e) { ...; bar.update(e, "loss " + fixed(loss, 3)); }
//   bar.finish();
#pragma once
#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace qkv::tool {

struct ProgressOptions {
  bool enabled = true;              // false: prints nothing at all
  double plain_interval_s = 2.0;    // minimum gap between plain lines
  int width = 24;                   // bar cells on a terminal
};

class ProgressBar {
 public:
  // `out` defaults to std::cerr; is_tty is detected from stderr unless given.
  ProgressBar(std::string label, std::int64_t total, ProgressOptions opt = {});
  ProgressBar(std::string label, std::int64_t total, std::ostream& out, bool is_tty, ProgressOptions opt = {});
  // Not finished or stopped: ends the line as "failed" when an exception is unwinding,
  // else as "stopped" (never "done": the work did not complete).
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Marks `done` of `total` steps complete; `note` is appended (e.g. "loss 0.31").
  void update(std::int64_t done, const std::string& note = "");
  // The work completed: draws the final state ("done in ...") and ends the line. Call it
  // once everything the bar stands for succeeded (a save included).
  void finish(const std::string& note = "");
  // The work ended early (--stop-after, Ctrl-C): draws where it stopped and ends the line.
  void stop(const std::string& note = "");

  bool is_tty() const { return tty_; }
  double elapsed_s() const;

 private:
  enum class End { None, Done, Stopped, Failed };
  void draw(End end);

  std::string label_;
  std::int64_t total_, done_ = 0;
  std::string note_;
  std::ostream* out_;
  bool tty_;
  ProgressOptions opt_;
  bool finished_ = false;
  int uncaught_ = 0;  // std::uncaught_exceptions() at construction
  std::chrono::steady_clock::time_point start_, last_plain_;
  std::size_t last_len_ = 0;
};

// "1.2s", "3m05s", "1h02m".
std::string format_duration(double seconds);

}  // namespace qkv::tool
