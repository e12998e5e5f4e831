// The subcommand registry of the qkv tool.
//
// Each subcommand lives in its own cmd_<name>.cpp and registers itself:
//
//   QKV_TOOL_COMMAND(trace_command, {
//       .name = "trace", .summary = "...", .order = 20,
//       .setup = [](CLI::App& sub) -> qkv::tool::Action {
//         sub.footer("Longer description shown by 'qkv trace --help'.");
//         auto opt = std::make_shared<TraceOptions>();
//         sub.add_option("--d-model", opt->d_model, "...");
//         return [opt] { return run_trace(*opt, std::cout); };
//       }});
//
// main.cpp adds one CLI11 subcommand per registered Command (sorted by
// `order`), lets `setup` declare its options, parses, applies the global
// options (--threads) and runs the chosen command's Action. Adding a command
// is one new file plus one line in sources.cmake.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace qkv::tool {

// Runs a parsed command; returns the process exit code.
using Action = std::function<int()>;

struct Command {
  std::string name;
  std::string summary;  // one line, shown in `qkv --help`
  int order = 100;      // position in `qkv --help`
  // Declares the subcommand's options on `sub` (flags, a longer help text
  // in sub.footer()) and
  // returns what to run once parsing succeeded.
  std::function<Action(CLI::App& sub)> setup;
};

// Validator for an integer option in [lo, hi] whose message says what was
// wrong: "expects an integer in [1, 100000], got 'abc'".
inline CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        const std::string want = "expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
        std::int64_t v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return want + ", got '" + s + "'";
        if (v < lo || v > hi) return want + ", got " + s;
        return {};
      },
      "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// Adds a command to the registry (called from static initialisers).
bool register_command(Command c);
// All registered commands, sorted by (order, name).
std::vector<Command> registered_commands();

}  // namespace qkv::tool

#define QKV_TOOL_COMMAND(id, ...) \
  [[maybe_unused]] static const bool qkv_tool_registered_##id = ::qkv::tool::register_command(::qkv::tool::Command __VA_ARGS__)
