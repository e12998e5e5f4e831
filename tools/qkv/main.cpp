// qkv: the command-line front end. Parses arguments, applies global options
// and runs one registered subcommand (see command.h). Every failure ends as a
// single line on stderr and a non-zero exit code:
//   2  bad usage (unknown flag, bad value, missing argument)
//   1  the command failed (missing or corrupt file, invalid model settings ...)
#include <exception>
#include <filesystem>
#include <new>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "command.h"
#include "qkv/core/env.h"
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

// The first word that is not an option (nor --threads' value) must name a command:
// "qkv foo generate ..." is an unknown command, not generate with a stray word.
std::string unknown_command(int argc, char** argv, const std::vector<qkv::tool::MountedCommand>& commands,
                            std::string* names) {
  for (const auto& c : commands) *names += (names->empty() ? "" : ", ") + c.app->get_name();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads") {
      ++i;
      continue;
    }
    if (a.empty() || a[0] == '-') continue;
    for (const auto& c : commands)
      if (c.app->get_name() == a) return "";
    return a;
  }
  return "";
}

// A file-system error as one line: "cannot create directories '/x/y': Permission denied".
std::string filesystem_message(const std::filesystem::filesystem_error& e) {
  std::string what = e.what();
  const std::string prefix = "filesystem error: ";
  if (what.rfind(prefix, 0) == 0) what = what.substr(prefix.size());
  const std::string reason = e.code().message();
  const std::size_t at = what.find(": " + reason);
  std::string op = at == std::string::npos ? what : what.substr(0, at);
  if (op == "status" || op == "symlink_status") op = "check";
  if (op.rfind("cannot ", 0) != 0) op = "cannot " + op;
  std::string paths;
  if (!e.path1().empty()) paths += " '" + e.path1().string() + "'";
  if (!e.path2().empty()) paths += " and '" + e.path2().string() + "'";
  return op + paths + ": " + reason;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"qkv: a C++ Transformer engine for the CPU. Chat with and serve the open models people download "
               "(GGUF files and Hugging Face folders), embed and search text, train small models, and see every "
               "shape and number of attention in the tutorials' experiments.",
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
  app.footer("Run 'qkv CMD --help' for a command's options. One example of each group:\n"
             "  qkv chat --model models/SmolLM2-135M-Instruct.Q4_1.gguf        # a terminal chat\n"
             "  qkv serve --model models/SmolLM2-135M-Instruct.Q4_1.gguf       # an OpenAI-style server\n"
             "  qkv embed --model models/all-MiniLM-L6-v2 --file corpus.txt --out index.safetensors\n"
             "  qkv search --index index.safetensors --model models/all-MiniLM-L6-v2 \"Who is eating?\"\n"
             "  qkv train lm --text data/kjv.txt --vocab-size 4096 --steps 600 --out runs/kjv\n"
             "  qkv demo                                                       # every tutorial experiment\n"
             "  qkv trace --sentence \"I love NLP\" --values 4\n"
             "  qkv inspect models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
             "  qkv convert --model runs/kjv --out kjv.gguf");

  std::string names;
  if (const std::string word = unknown_command(argc, argv, commands, &names); !word.empty())
    return fail("unknown command '" + word + "' (commands: " + names + "; see 'qkv --help')", 2);
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
    qkv::check_environment();  // QKV_NUM_THREADS, QKV_ISA, QKV_CACHE_MB: an invalid value names the variable
    if (threads > 0) qkv::set_num_threads(threads);
    if (const qkv::tool::Action* action = qkv::tool::parsed_action(commands)) return (*action)();
  } catch (const qkv::Error& e) {
    return fail(e.what(), 1);
  } catch (const std::filesystem::filesystem_error& e) {
    return fail(filesystem_message(e), 1);
  } catch (const std::bad_alloc&) {
    return fail("out of memory: the system refused an allocation (try smaller sizes)", 1);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected failure: ") + e.what(), 1);
  }

  // No subcommand: show what there is.
  std::cout << app.help();
  return 1;
}
