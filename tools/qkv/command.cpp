#include "command.h"

#include <algorithm>

namespace qkv::tool {
namespace {
// Function-local so registration from any translation unit's static
// initialiser finds it constructed.
std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}
}  // namespace

bool register_command(Command c) {
  registry().push_back(std::move(c));
  return true;
}

std::vector<Command> registered_commands() {
  std::vector<Command> out = registry();
  std::stable_sort(out.begin(), out.end(), [](const Command& a, const Command& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  return out;
}

}  // namespace qkv::tool
