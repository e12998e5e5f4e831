// The tasks of `qkv train TASK ...` (classify, seq2seq, ...).
//
// `train` is one registered Command (cmd_train.cpp) whose CLI11 subcommands are
// the tasks registered here, in the same kind of registry as the top-level
// commands (command.h). Each task lives in its own cmd_train_<task>.cpp and
// registers itself exactly like a top-level command does:
//
//   QKV_TRAIN_TASK(classify, {
//       .name = "classify", .summary = "...", .order = 10,
//       .setup = [](CLI::App& sub) -> qkv::tool::Action { ...; return [opt] { return run(*opt); }; }});
//
// Adding a task is one new file plus one line in sources.cmake.
#pragma once
#include "command.h"

#define QKV_TRAIN_TASK(id, ...) QKV_REGISTER_COMMAND(::qkv::tool::train_tasks, train_task_##id, __VA_ARGS__)
