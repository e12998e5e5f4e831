#include "command.h"

#include <filesystem>

#include "qkv/io/gguf.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>

namespace qkv::tool {

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.10g", v);
  return b;
}

// A finite double from the whole of s, or nullopt.
std::optional<double> parse_real(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

CLI::Validator real_check(double lo, bool lo_open, double hi, bool hi_open, const std::string& bounds) {
  std::string hint = bounds;  // "in [0, 1]" -> "[0, 1]" in the help's type column
  if (hint.rfind("in ", 0) == 0) hint = hint.substr(3);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        const std::string want = "expects a finite number" + (bounds.empty() ? std::string() : " " + bounds);
        const std::optional<double> v = parse_real(s);
        if (!v) return want + ", got '" + s + "'";
        if (!std::isfinite(*v) || (lo_open ? !(*v > lo) : !(*v >= lo)) || (hi_open ? !(*v < hi) : !(*v <= hi)))
          return want + ", got " + s;
        return {};
      },
      hint.empty() ? "FINITE" : hint);
}

}  // namespace

CLI::Validator real_range(double lo, double hi) {
  return real_check(lo, false, hi, false, "in [" + num(lo) + ", " + num(hi) + "]");
}
CLI::Validator real_above(double lo) {
  return real_check(lo, true, std::numeric_limits<double>::infinity(), false, "> " + num(lo));
}
CLI::Validator real_at_least(double lo) {
  return real_check(lo, false, std::numeric_limits<double>::infinity(), false, ">= " + num(lo));
}
CLI::Validator real_finite() {
  const double inf = std::numeric_limits<double>::infinity();
  return real_check(-inf, false, inf, false, "");
}

CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        const std::string want = "expects an integer in [0, 18446744073709551615]";
        bool digits = !s.empty();
        for (char c : s) digits = digits && c >= '0' && c <= '9';
        if (!digits) return want + (s.rfind('-', 0) == 0 ? ", got " + s : ", got '" + s + "'");
        errno = 0;
        std::strtoull(s.c_str(), nullptr, 10);
        if (errno == ERANGE) return want + ", got " + s;
        return {};
      },
      "[0, 2^64 - 1]");
}

namespace {

// want_dir: 1 a folder, 0 a regular file, -1 either.
CLI::Validator input_path(int want_dir, const std::string& kind) {
  return CLI::Validator(
      [want_dir, kind](std::string& s) -> std::string {
        struct stat st {};
        if (::stat(s.c_str(), &st) != 0)
          return s + ": " +
                 (errno == ENOENT ? std::string(want_dir == 1 ? "no such folder" : want_dir == 0 ? "no such file" : "no such file or folder")
                                  : std::strerror(errno)) +
                 " (expected " + kind + ")";
        if (want_dir < 0) return S_ISDIR(st.st_mode) || S_ISREG(st.st_mode) ? "" : s + " is not a regular file or folder, expected " + kind;
        if (want_dir && !S_ISDIR(st.st_mode)) return s + " is a file, expected " + kind;
        if (!want_dir && S_ISDIR(st.st_mode)) return s + " is a directory, expected " + kind;
        if (!want_dir && !S_ISREG(st.st_mode)) return s + " is not a regular file, expected " + kind;
        return {};
      },
      "");
}

}  // namespace

CLI::Validator input_file(const std::string& kind) { return input_path(0, kind); }
CLI::Validator input_folder(const std::string& kind) { return input_path(1, kind); }
CLI::Validator input_file_or_folder(const std::string& kind) { return input_path(-1, kind); }

CLI::Option* add_model_option(CLI::App& sub, std::string& dir, const std::string& what) {
  return sub.add_option("--model", dir, what)->check(input_folder("a model folder"))->type_name("DIR");
}

CLI::Validator lm_model_path() {
  const CLI::Validator exists = input_file_or_folder("a GGUF file or a model folder");
  return CLI::Validator(
      [exists](std::string& s) -> std::string {
        if (std::string e = exists(s); !e.empty()) return e;
        std::error_code ec;
        if (std::filesystem::is_regular_file(s, ec) && !io::is_gguf_file(s))
          return s + " is a file but not a GGUF file, expected a GGUF file or a model folder";
        return {};
      },
      "");
}

CLI::Option* add_lm_model_option(CLI::App& sub, std::string& path, const std::string& what) {
  return sub.add_option("--model", path, what)->check(lm_model_path())->type_name("PATH");
}

CLI::Option* add_no_progress_flag(CLI::App& sub, bool& progress) {
  return sub.add_flag_callback("--no-progress", [&progress] { progress = false; }, "Do not show the progress bar on stderr");
}

CLI::Option* add_overwrite_flag(CLI::App& sub, bool& overwrite, const std::string& what) {
  return sub.add_flag("--overwrite", overwrite, "Replace " + what + " if it already holds something (else the command refuses)");
}

CLI::Option* add_seed_option(CLI::App& sub, std::uint64_t& seed, const std::string& what) {
  return sub.add_option("--seed", seed, what)->check(seed_range())->capture_default_str();
}

void warn(const std::string& message) { std::cerr << "qkv: warning: " << message << '\n'; }

bool CommandRegistry::add(Command c) {
  commands_.push_back(std::move(c));
  return true;
}

std::vector<Command> CommandRegistry::sorted() const {
  std::vector<Command> out = commands_;
  std::stable_sort(out.begin(), out.end(), [](const Command& a, const Command& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return out;
}

CommandRegistry& tool_commands() {
  static CommandRegistry r;
  return r;
}

CommandRegistry& train_tasks() {
  static CommandRegistry r;
  return r;
}

std::vector<MountedCommand> mount_commands(CLI::App& parent, const CommandRegistry& registry,
                                           const std::string& footer_note) {
  std::vector<MountedCommand> mounted;
  for (const Command& cmd : registry.sorted()) {
    CLI::App* sub = parent.add_subcommand(cmd.name, cmd.summary);
    if (!cmd.group.empty()) sub->group(cmd.group);
    mounted.push_back({sub, cmd.setup(*sub)});
    const std::string long_help = sub->get_footer();
    sub->footer((long_help.empty() ? "" : long_help + "\n\n") + footer_note);
  }
  return mounted;
}

const Action* parsed_action(const std::vector<MountedCommand>& mounted) {
  for (const MountedCommand& m : mounted)
    if (m.app->parsed()) return &m.action;
  return nullptr;
}

}  // namespace qkv::tool
