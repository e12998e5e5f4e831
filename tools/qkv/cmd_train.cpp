// qkv train TASK: dispatches to the training tasks registered in train_tasks.h.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "command.h"
#include "train_tasks.h"

namespace qkv::tool {
namespace {

std::vector<TrainTask>& task_registry() {
  static std::vector<TrainTask> tasks;  // filled by static initialisers before main()
  return tasks;
}

}  // namespace

bool register_train_task(TrainTask t) {
  task_registry().push_back(std::move(t));
  return true;
}

std::vector<TrainTask> registered_train_tasks() {
  std::vector<TrainTask> v = task_registry();
  std::sort(v.begin(), v.end(), [](const TrainTask& a, const TrainTask& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return v;
}

QKV_TOOL_COMMAND(train, {
    .name = "train",
    .summary = "Train a small model on a toy task (qkv train classify | ...)",
    .order = 40,
    .setup = [](CLI::App& sub) -> Action {
      std::string names;
      auto chosen = std::make_shared<std::vector<std::pair<CLI::App*, Action>>>();
      for (const auto& t : registered_train_tasks()) {
        CLI::App* task = sub.add_subcommand(t.name, t.summary);
        task->fallthrough();  // global options (--threads) may follow the task's own
        chosen->emplace_back(task, t.setup(*task));
        const std::string long_help = task->get_footer();
        task->footer((long_help.empty() ? "" : long_help + "\n\n") +
                     "Global option (anywhere): --threads N, worker threads (default: all cores).");
        names += (names.empty() ? "" : ", ") + t.name;
      }
      sub.fallthrough();
      sub.require_subcommand(1, 1);
      sub.footer("Tasks: " + names + ". Run 'qkv train TASK --help' for a task's options.");
      return [chosen] {
        for (auto& [task, action] : *chosen)
          if (task->parsed()) return action();
        return 2;
      };
    }});

}  // namespace qkv::tool
