// qkv: the command-line front end. Parses arguments, applies global options
// and runs one registered subcommand (see command.h). Every failure ends as a
// single line on stderr and a non-zero exit code:
//   2  bad usage (unknown flag, bad value, missing argument)
//   1  the command failed (missing or corrupt file, invalid model settings ...)
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "command.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"

namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int fail(const std::string& msg, int code) {
  std::cerr << "qkv: error: " << one_line(msg) << '\n';
  return code;
}

// The deepest command the parser entered ("qkv train classify") and its CLI11 app.
std::pair<std::string, const CLI::App*> parsed_path(const CLI::App& app) {
  std::string path = "qkv";
  const CLI::App* at = &app;
  for (;;) {
    const std::vector<CLI::App*> subs = at->get_subcommands();  // the parsed ones
    if (subs.empty()) return {path, at};
    at = subs.front();
    path += " " + at->get_name();
  }
}

// The one-line message for a parse error, with a hint naming the --help of the
// command it happened in ("see 'qkv train classify --help'").
std::string usage_error(const CLI::App& app, const CLI::ParseError& e) {
  const auto [path, at] = parsed_path(app);
  std::string names;
  for (const CLI::App* sub : at->get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
  if (!names.empty()) {  // `at` has subcommands and none was parsed: a missing or misspelled one
    const std::vector<std::string> rest = app.remaining();
    const std::string word = !rest.empty() && !rest[0].empty() && rest[0][0] != '-' ? rest[0] : "";
    if (at == &app) {
      if (!word.empty() && dynamic_cast<const CLI::ExtrasError*>(&e))
        return "unknown command '" + word + "' (commands: " + names + "; see 'qkv --help')";
    } else if (!word.empty()) {
      return "unknown subcommand '" + word + "' of '" + path + "' (subcommands: " + names + "; see '" + path +
             " --help')";
    } else if (dynamic_cast<const CLI::RequiredError*>(&e)) {
      return "'" + path + "' needs a subcommand (" + names + "; see '" + path + " --help')";
    }
  }
  return std::string(e.what()) + " (see '" + path + " --help')";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qkv: a C++ Transformer attention engine. Each subcommand runs one of the tutorials' "
               "experiments and prints every shape and number it computes.",
               "qkv"};
  app.set_version_flag("--version", "qkv 0.1.0");
  app.fallthrough();  // global options may also follow the subcommand

  int threads = 0;
  app.add_option("--threads", threads,
                 "Worker threads for the library's kernels (default: all cores, or $QKV_NUM_THREADS)")
      ->check(qkv::tool::int_range(1, 4096));

  const std::vector<qkv::tool::MountedCommand> commands = qkv::tool::mount_commands(
      app, qkv::tool::tool_commands(),
      "Global option (before or after the command): --threads N, worker threads (default: all cores).");
  app.require_subcommand(0, 1);
  // Set after the subcommands exist so they do not inherit it.
  app.footer("Run 'qkv CMD --help' for a command's options. Examples:\n"
             "  qkv worked-example\n"
             "  qkv trace --sentence \"I love NLP\" --values 4\n"
             "  qkv variance --trials 10 --dims 2,8,32,64,128,512\n"
             "  qkv inspect tests/fixtures/linear.safetensors\n"
             "  qkv demo");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(usage_error(app, e), 2);
  }

  try {
    if (threads > 0) qkv::set_num_threads(threads);
    if (const qkv::tool::Action* action = qkv::tool::parsed_action(commands)) return (*action)();
  } catch (const qkv::Error& e) {
    return fail(e.what(), 1);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected failure: ") + e.what(), 1);
  }

  // No subcommand: show what there is.
  std::cout << app.help();
  return 1;
}
