#include "command.h"

#include <algorithm>

namespace qkv::tool {

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
