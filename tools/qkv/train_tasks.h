// The tasks of `qkv train TASK ...` (classify, seq2seq, ...).
//
// `train` is one registered Command (cmd_train.cpp) whose CLI11 subcommands are
// the tasks registered here. Each task lives in its own cmd_train_<task>.cpp and
// registers itself exactly like a top-level command does:
//
//   QKV_TRAIN_TASK(classify, {
//       .name = "classify", .summary = "...", .order = 10,
//       .setup = [](CLI::App& sub) -> qkv::tool::Action { ...; return [opt] { return run(*opt); }; }});
//
// Adding a task is one new file plus one line in sources.cmake.
#pragma once
#include <vector>

#include "command.h"

namespace qkv::tool {

// Same shape as a top-level Command: name, one-line summary, --help order, setup.
using TrainTask = Command;

bool register_train_task(TrainTask t);
// All registered tasks, sorted by (order, name).
std::vector<TrainTask> registered_train_tasks();

}  // namespace qkv::tool

#define QKV_TRAIN_TASK(id, ...) \
  [[maybe_unused]] static const bool qkv_train_task_registered_##id = \
      ::qkv::tool::register_train_task(::qkv::tool::TrainTask __VA_ARGS__)
