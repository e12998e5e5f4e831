// qkv train TASK: dispatches to the training tasks registered in train_tasks.h, in one
// process or as one rank of a data-parallel MPI job (`mpirun -np N qkv train TASK ...`,
// docs/distributed.md).
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "command.h"
#include "qkv/core/parallel.h"
#include "qkv/train/distributed.h"
#include "train_tasks.h"

namespace qkv::tool {
namespace {

// The options given to the task, for the ranks' start-up check ("option --lr" -> "0.002").
train::Fields given_options(const CLI::App& task) {
  train::Fields f;
  for (const CLI::Option* o : task.get_options()) {
    if (o->count() == 0) continue;
    std::string v;
    for (const std::string& r : o->results()) v += (v.empty() ? "" : " ") + r;
    f.emplace_back("option " + o->get_name(), v);
  }
  return f;
}

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Runs the task as this process's part of the job. Failures every rank meets together
// (ranks that disagree, a non-finite loss) end every rank cleanly, rank 0 reporting; a
// failure of this rank alone (a missing file, a silent rank) is printed with the rank and
// ends the whole job at once (MPI_Abort), so no rank waits for it.
int run_task(const CLI::App& train_app, const CLI::App& task, const Action& action, double timeout) {
  train::World& w = train::start_distributed({.collective_timeout_s = timeout});
  if (!w.distributed()) {
    int rc = 0;
    try {
      rc = action();
    } catch (...) {
      train::stop_distributed();  // a job of one rank (mpirun -np 1) still leaves MPI properly
      throw;
    }
    train::stop_distributed();
    return rc;
  }
  // --threads is per rank; by default the machine's cores are shared by its ranks.
  const CLI::Option* threads = train_app.get_parent() ? train_app.get_parent()->get_option_no_throw("--threads") : nullptr;
  if ((!threads || threads->count() == 0) && !std::getenv("QKV_NUM_THREADS"))
    set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / w.local_size()));
  try {
    train::Fields f = given_options(task);
    f.emplace_back("the task", task.get_name());
    w.check_same(f, "the command line");
    const int rc = action();
    train::stop_distributed();
    return rc;
  } catch (const Error& e) {
    const auto* de = dynamic_cast<const train::DistributedError*>(&e);
    const bool together =
        ((de && de->collective()) || dynamic_cast<const NumericError*>(&e)) && !w.local_failure();
    const bool root = w.root();  // (after stop_distributed, this process is rank 0 of 1)
    if (together) {
      // Rank 0 prints it once, before the barrier of stop_distributed: mpirun ends the job as
      // soon as a rank exits non-zero, so no rank may leave before the message is out.
      if (root) std::cerr << "qkv: error: " << one_line(e.what()) << std::endl;
      try {
        train::stop_distributed();
      } catch (const Error&) {
        train::abort_distributed(1);
      }
      return 1;
    }
    const std::string rank = "rank " + std::to_string(w.rank()) + " of " + std::to_string(w.size());
    std::string msg = one_line(e.what());
    if (msg.rfind(rank, 0) != 0) msg = rank + ": " + msg;
    std::cerr << "qkv: error: " << msg << "; stopping every rank" << std::endl;
    train::abort_distributed(1);
    return 1;
  }
}

}  // namespace

QKV_TOOL_COMMAND(train, {
    .name = "train",
    .summary = "Train a model: classify and seq2seq (the tutorials' toy tasks), lm (a GPT-2 on your text files)",
    .order = 30,
    .group = "Train",
    .setup = [](CLI::App& sub) -> Action {
      auto tasks = std::make_shared<std::vector<MountedCommand>>(mount_commands(
          sub, train_tasks(),
          "Global options (anywhere): --threads N, worker threads (default: all cores; per rank under mpirun); "
          "--collective-timeout S (under mpirun)."));
      std::string names;
      for (const MountedCommand& t : *tasks) {
        t.app->fallthrough();  // global options (--threads) may follow the task's own
        names += (names.empty() ? "" : ", ") + t.app->get_name();
      }
      auto timeout = std::make_shared<double>(60.0);
      sub.add_option("--collective-timeout", *timeout,
                     "Under mpirun: seconds a rank waits for a silent rank before every rank stops with an error "
                     "naming it")
          ->check(CLI::Range(0.1, 1e6))
          ->capture_default_str();
      sub.fallthrough();
      sub.require_subcommand(1, 1);
      sub.footer("Tasks: " + names + ". Run 'qkv train TASK --help' for a task's options.\n\n"
                 "Data-parallel: mpirun -np N qkv train TASK ... runs N ranks, each on its share of every step's "
                 "micro-batches (--batch per rank; the step's batch is N x --grad-accum micro-batches); rank 0 "
                 "alone prints and writes. See docs/distributed.md.");
      CLI::App* train_app = &sub;
      return [tasks, timeout, train_app] {
        const Action* action = parsed_action(*tasks);
        if (!action) return 2;
        for (const MountedCommand& t : *tasks)
          if (t.app->parsed()) return run_task(*train_app, *t.app, *action, *timeout);
        return (*action)();
      };
    }});

}  // namespace qkv::tool
