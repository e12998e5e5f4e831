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
// main.cpp mounts the registered Commands as CLI11 subcommands (mount_commands,
// sorted by `order`; `setup` declares each one's options), parses, applies the
// global options (--threads) and runs the chosen command's Action. `qkv train`
// mounts its tasks the same way from a second registry (train_tasks.h). Adding
// a command is one new file plus one line in sources.cmake.
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
  std::string group;    // the heading it is listed under in `qkv --help` (empty: "Subcommands")
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

// Validators for a floating-point option: a finite number (NaN and infinities are refused,
// whatever the bounds) within the bounds, which the message prints as they are written:
// "expects a finite number in [0, 0.9], got nan", "expects a finite number > 0, got inf".
CLI::Validator real_range(double lo, double hi);  // [lo, hi]
CLI::Validator real_above(double lo);             // > lo
CLI::Validator real_at_least(double lo);          // >= lo
CLI::Validator real_finite();                     // any finite number

// Validator for a seed: an integer in [0, 2^64 - 1], refused (not wrapped) outside it:
// "expects an integer in [0, 18446744073709551615], got -1".
CLI::Validator seed_range();

// Validators for a path option that must exist and be of one kind (give the option a
// type_name, FILE or DIR, for the help); the message names the path and what is wrong ("x is a directory, expected a text
// file", "x: no such folder").
CLI::Validator input_file(const std::string& kind = "a file");
CLI::Validator input_folder(const std::string& kind = "a folder");
// An existing folder or regular file (a language model: a GGUF file or a model folder).
CLI::Validator input_file_or_folder(const std::string& kind);
// An existing model folder or GGUF file ("x is a file but not a GGUF file, ..."): what --model
// of a language model takes.
CLI::Validator lm_model_path();

// Options several commands share, declared alike everywhere (name, type hint, wording):
//   --model DIR       an existing model folder (`what` says which kind)
//   --no-progress     no progress bar on stderr (sets progress = false)
//   --overwrite       replace an output that holds something (`what` names the output)
//   --seed N          an integer in [0, 2^64 - 1], default shown
CLI::Option* add_model_option(CLI::App& sub, std::string& dir, const std::string& what);
// --model of a causal language model: a GGUF file or a Hugging Face / qkv folder.
CLI::Option* add_lm_model_option(CLI::App& sub, std::string& path, const std::string& what);
CLI::Option* add_no_progress_flag(CLI::App& sub, bool& progress);
CLI::Option* add_overwrite_flag(CLI::App& sub, bool& overwrite, const std::string& what);
CLI::Option* add_seed_option(CLI::App& sub, std::uint64_t& seed, const std::string& what);

// A warning on stderr, one line: "qkv: warning: <message>" (an option without effect, ...).
void warn(const std::string& message);

// An ordered list of Commands, filled by static initialisers (QKV_TOOL_COMMAND,
// QKV_TRAIN_TASK) before main() runs. One class serves both levels: the
// top-level commands and the tasks of `qkv train TASK`.
class CommandRegistry {
 public:
  bool add(Command c);  // returns true so it can initialise a static
  // All registered commands, sorted by (order, name).
  std::vector<Command> sorted() const;

 private:
  std::vector<Command> commands_;
};

// The registries (function-local statics, so registration from any
// translation unit's static initialiser finds them constructed).
CommandRegistry& tool_commands();  // qkv CMD
CommandRegistry& train_tasks();    // qkv train TASK (see train_tasks.h)

// A command added to a CLI11 parent: its subcommand and what to run.
struct MountedCommand {
  CLI::App* app = nullptr;
  Action action;
};

// Adds one CLI11 subcommand of `parent` per command of `registry` (sorted),
// lets each declare its options and appends `footer_note` to its --help.
std::vector<MountedCommand> mount_commands(CLI::App& parent, const CommandRegistry& registry,
                                           const std::string& footer_note);
// The action of the mounted command that was parsed, or nullptr if none was.
const Action* parsed_action(const std::vector<MountedCommand>& mounted);

}  // namespace qkv::tool

// QKV_REGISTER_COMMAND(registry, id, {...}): adds a Command to registry()
// from a static initialiser; `id` names the static (unique per file).
#define QKV_REGISTER_COMMAND(registry, id, ...) \
  [[maybe_unused]] static const bool qkv_registered_##id = (registry)().add(::qkv::tool::Command __VA_ARGS__)
#define QKV_TOOL_COMMAND(id, ...) QKV_REGISTER_COMMAND(::qkv::tool::tool_commands, id, __VA_ARGS__)
