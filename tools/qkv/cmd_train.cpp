// qkv train TASK: dispatches to the training tasks registered in train_tasks.h.
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "train_tasks.h"

namespace qkv::tool {

QKV_TOOL_COMMAND(train, {
    .name = "train",
    .summary = "Train a model: classify and seq2seq (the tutorials' toy tasks), lm (a GPT-2 on your text files)",
    .order = 40,
    .setup = [](CLI::App& sub) -> Action {
      auto tasks = std::make_shared<std::vector<MountedCommand>>(mount_commands(
          sub, train_tasks(), "Global option (anywhere): --threads N, worker threads (default: all cores)."));
      std::string names;
      for (const MountedCommand& t : *tasks) {
        t.app->fallthrough();  // global options (--threads) may follow the task's own
        names += (names.empty() ? "" : ", ") + t.app->get_name();
      }
      sub.fallthrough();
      sub.require_subcommand(1, 1);
      sub.footer("Tasks: " + names + ". Run 'qkv train TASK --help' for a task's options.");
      return [tasks] {
        const Action* action = parsed_action(*tasks);
        return action ? (*action)() : 2;
      };
    }});

}  // namespace qkv::tool
