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

  std::vector<std::pair<CLI::App*, qkv::tool::Action>> actions;
  for (const auto& cmd : qkv::tool::registered_commands()) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.summary);
    actions.emplace_back(sub, cmd.setup(*sub));
    const std::string long_help = sub->get_footer();
    sub->footer((long_help.empty() ? "" : long_help + "\n\n") +
                "Global option (before or after the command): --threads N, worker threads (default: all cores).");
  }
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
    std::string where = "qkv";
    for (const CLI::App* sub : app.get_subcommands()) where += " " + sub->get_name();
    const std::vector<std::string> extra = app.remaining();
    if (app.get_subcommands().empty() && dynamic_cast<const CLI::ExtrasError*>(&e) && !extra.empty() &&
        !extra[0].empty() && extra[0][0] != '-') {
      std::string names;
      for (const auto& [sub, action] : actions) names += (names.empty() ? "" : ", ") + sub->get_name();
      return fail("unknown command '" + extra[0] + "' (commands: " + names + "; see 'qkv --help')", 2);
    }
    return fail(std::string(e.what()) + " (see '" + where + " --help')", 2);
  }

  try {
    if (threads > 0) qkv::set_num_threads(threads);
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
  } catch (const qkv::Error& e) {
    return fail(e.what(), 1);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected failure: ") + e.what(), 1);
  }

  // No subcommand: show what there is.
  std::cout << app.help();
  return 1;
}
