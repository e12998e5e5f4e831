#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>

namespace qkv::tool {

std::string format_duration(double s) {
  char buf[32];
  if (s < 0) s = 0;
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, (static_cast<int>(s) / 60) % 60);
  return buf;
}

ProgressBar::ProgressBar(std::string label, std::int64_t total, ProgressOptions opt)
    : ProgressBar(std::move(label), total, std::cerr, ::isatty(STDERR_FILENO) == 1, opt) {}

ProgressBar::ProgressBar(std::string label, std::int64_t total, std::ostream& out, bool is_tty, ProgressOptions opt)
    : label_(std::move(label)), total_(std::max<std::int64_t>(total, 1)), out_(&out), tty_(is_tty), opt_(opt) {
  start_ = last_plain_ = std::chrono::steady_clock::now();
  uncaught_ = std::uncaught_exceptions();
}

ProgressBar::~ProgressBar() {
  if (finished_) return;
  finished_ = true;
  if (opt_.enabled) draw(std::uncaught_exceptions() > uncaught_ ? End::Failed : End::Stopped);
}

double ProgressBar::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::update(std::int64_t done, const std::string& note) {
  if (finished_ || !opt_.enabled) return;
  done_ = std::clamp<std::int64_t>(done, 0, total_);
  note_ = note;
  if (tty_) {
    draw(End::None);
  } else {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - last_plain_).count() >= opt_.plain_interval_s) {
      last_plain_ = now;
      draw(End::None);
    }
  }
}

void ProgressBar::finish(const std::string& note) {
  if (finished_) return;
  finished_ = true;
  if (!opt_.enabled) return;
  done_ = total_;
  note_ = note;  // a step's note ("d_k 512") is stale once done
  draw(End::Done);
}

void ProgressBar::stop(const std::string& note) {
  if (finished_) return;
  finished_ = true;
  if (!opt_.enabled) return;
  if (!note.empty()) note_ = note;
  draw(End::Stopped);
}

void ProgressBar::draw(End end) {
  const bool final_line = end != End::None;
  const std::string ended = end == End::Done      ? "done in " + format_duration(elapsed_s())
                            : end == End::Stopped ? "stopped after " + format_duration(elapsed_s())
                                                  : "failed after " + format_duration(elapsed_s());
  const double el = elapsed_s();
  const double frac = static_cast<double>(done_) / static_cast<double>(total_);
  const double eta = done_ > 0 ? el * (1.0 - frac) / frac : 0.0;
  const int pct = static_cast<int>(frac * 100.0 + 1e-9);
  const std::string counts = std::to_string(done_) + "/" + std::to_string(total_);
  std::string line;
  if (tty_) {
    const int filled = static_cast<int>(frac * opt_.width);
    line = label_ + "  [" + std::string(filled, '#') + std::string(opt_.width - filled, '.') + "]  " +
           std::to_string(pct) + "%  " + counts + "  " +
           (final_line ? ended : "ETA " + format_duration(eta));
    if (!note_.empty()) line += "  " + note_;
    std::string padded = line;
    if (padded.size() < last_len_) padded += std::string(last_len_ - padded.size(), ' ');
    last_len_ = line.size();
    *out_ << '\r' << padded;
    if (final_line) *out_ << '\n';
  } else {
    line = label_ + ": " + counts + " (" + std::to_string(pct) + "%), " + format_duration(el) + " elapsed" +
           (final_line ? ", " + ended.substr(0, ended.find(' ')) : ", ETA " + format_duration(eta));
    if (!note_.empty()) line += ", " + note_;
    *out_ << line << '\n';
  }
  out_->flush();
}

}  // namespace qkv::tool
