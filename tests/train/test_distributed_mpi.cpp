// Data-parallel training under mpirun (docs/distributed.md), end to end through the qkv
// binary: `mpirun --oversubscribe --allow-run-as-root -np 2 qkv train ...`.
//  - 2 ranks x --grad-accum A give BITWISE the weights, optimiser state and data state of
//    1 process x --grad-accum 2A, for every trainer (language model, seq2seq, classifier;
//    dropout on): the step's gradient is a fixed-order sum in micro-batch order whatever
//    the rank count (train/grad_exchange.h), so nothing is within-tolerance here.
//  - resume: a 2-rank run stopped, continued in 1 process, then on 2 ranks again, ends
//    bitwise where the uninterrupted 1-process run ends; a rank count that does not divide
//    the step's micro-batches is refused, naming both.
//  - faults: a rank killed (SIGKILL) ends every rank with a non-zero exit naming it and
//    leaves a checkpoint that resumes; a rank that hangs (SIGSTOP) is named by the others
//    after --collective-timeout; ranks given different options or different data stop at
//    start-up naming the difference; a check that fails on one rank (a missing text, an
//    --out that holds files) stops every rank at once with one message and writes nothing;
//    a rank that fails alone later stops the job; Ctrl-C on one rank stops every rank after
//    the same step, which rank 0 saves (exit 130).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "testing/checkpoint_compare.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using testing::expect_same_checkpoint_tensors;

const std::string kBin = QKV_BIN;
const std::string kText = std::string(QKV_FIXTURE_DIR) + "/text/kjv_genesis.txt";

// As root in CI; more ranks than cores; no single-copy (CMA) transfers between ranks, which
// containers without ptrace rights refuse ("Read -1, expected ..., errno = 1").
const std::string kMpiexec = std::string(QKV_MPIEXEC) +
                             " --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none ";

std::string mpirun(int np) { return kMpiexec + "-np " + std::to_string(np) + " "; }

std::string scratch(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("qkv_mpi_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a shell command with its output in `log`; its exit code (-1 if it did not exit).
int run(const std::string& cmd, const std::string& log) {
  const int st = std::system(("timeout -k 10 600 " + cmd + " > " + log + " 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

const std::string kLM = " train lm --text " + kText +
                        " --vocab-size 300 --context 16 --layers 2 --d-model 32 --heads 2 --batch 2 --dropout 0.1"
                        " --val-windows 4 --sample-tokens 4 --no-progress --threads 1";

io::Checkpoint lm_state(const std::string& dir) { return io::load_checkpoint(dir + "/qkv_train_state.safetensors"); }

void expect_same_run(const io::Checkpoint& a, const io::Checkpoint& b) {
  expect_same_checkpoint_tensors(a, b);
  EXPECT_EQ(a.metadata.at("step"), b.metadata.at("step"));
}

TEST(DistributedMpi, LanguageModelTwoRanksEqualOneProcessBitwise) {
  const std::string d = scratch("lm");
  const std::string common = kLM + " --steps 4 --eval-every 2";
  ASSERT_EQ(run(kBin + common + " --grad-accum 2 --out " + d + "/one", d + "/one.log"), 0) << slurp(d + "/one.log");
  ASSERT_EQ(run(mpirun(2) + kBin + common + " --out " + d + "/two", d + "/two.log"), 0) << slurp(d + "/two.log");
  expect_same_run(lm_state(d + "/one"), lm_state(d + "/two"));
  EXPECT_EQ(slurp(d + "/one/model.safetensors"), slurp(d + "/two/model.safetensors"));
  // Rank 0 alone printed: one header, and its line names the ranks.
  const std::string out = slurp(d + "/two.log");
  EXPECT_NE(out.find("x 2 accumulation (2 ranks x 1)"), std::string::npos) << out;
  EXPECT_EQ(out.find("GPT-2"), out.rfind("GPT-2")) << out;
  // Two micro-batches per rank: the rounds of the exchange.
  ASSERT_EQ(run(kBin + common + " --grad-accum 4 --out " + d + "/one4", d + "/one4.log"), 0) << slurp(d + "/one4.log");
  ASSERT_EQ(run(mpirun(2) + kBin + common + " --grad-accum 2 --out " + d + "/two4", d + "/two4.log"), 0)
      << slurp(d + "/two4.log");
  expect_same_run(lm_state(d + "/one4"), lm_state(d + "/two4"));
}

TEST(DistributedMpi, Seq2SeqTwoRanksEqualOneProcessBitwise) {
  const std::string d = scratch("s2s");
  const std::string common =
      " train seq2seq --task reverse --train-size 64 --test-size 8 --min-len 2 --max-len 5 --d-model 16 --heads 2"
      " --layers 1 --d-ff 32 --batch 8 --epochs 2 --warmup 2 --dropout 0.1 --examples 0 --no-progress --threads 1";
  ASSERT_EQ(run(kBin + common + " --grad-accum 2 --save " + d + "/one.safetensors", d + "/one.log"), 0)
      << slurp(d + "/one.log");
  ASSERT_EQ(run(mpirun(2) + kBin + common + " --save " + d + "/two.safetensors", d + "/two.log"), 0)
      << slurp(d + "/two.log");
  expect_same_run(io::load_checkpoint(d + "/one.safetensors"), io::load_checkpoint(d + "/two.safetensors"));
}

std::string epoch_rows(const std::string& log) {
  std::istringstream in(slurp(log));
  std::string rows, line;
  while (std::getline(in, line))
    if (line.rfind("epoch ", 0) == 0) rows += line + "\n";
  return rows;
}

TEST(DistributedMpi, ClassifierTwoRanksEqualOneProcessBitwise) {
  const std::string d = scratch("clf");
  const std::string common =
      " train classify --epochs 6 --log-every 3 --train-size 40 --val-size 10 --no-progress --threads 1";  // dropout 0.1
  ASSERT_EQ(run(kBin + common + " --grad-accum 2 --save " + d + "/one.safetensors", d + "/one.log"), 0)
      << slurp(d + "/one.log");
  ASSERT_EQ(run(mpirun(2) + kBin + common + " --save " + d + "/two.safetensors", d + "/two.log"), 0)
      << slurp(d + "/two.log");
  expect_same_run(io::load_checkpoint(d + "/one.safetensors"), io::load_checkpoint(d + "/two.safetensors"));
  EXPECT_EQ(epoch_rows(d + "/one.log"), epoch_rows(d + "/two.log"));  // losses and accuracies as printed
}

TEST(DistributedMpi, ResumeFromTwoRanksInOneProcessAndBack) {
  const std::string d = scratch("resume");
  const std::string common = kLM + " --steps 6 --eval-every 2";
  ASSERT_EQ(run(kBin + common + " --grad-accum 2 --out " + d + "/whole", d + "/whole.log"), 0) << slurp(d + "/whole.log");
  ASSERT_EQ(run(mpirun(2) + kBin + common + " --stop-after 2 --out " + d + "/run", d + "/a.log"), 0) << slurp(d + "/a.log");
  const std::string cont = kLM.substr(0, kLM.find(" --vocab-size")) + " --no-progress --threads 1 --resume --out " + d + "/run";
  ASSERT_EQ(run(kBin + cont + " --stop-after 4", d + "/b.log"), 0) << slurp(d + "/b.log");  // 1 process, 2 micro-batches
  EXPECT_EQ(lm_state(d + "/run").metadata.at("step"), "4");
  ASSERT_EQ(run(mpirun(2) + kBin + cont, d + "/c.log"), 0) << slurp(d + "/c.log");
  expect_same_run(lm_state(d + "/whole"), lm_state(d + "/run"));

  // A run of 1 micro-batch per step cannot be shared by 2 ranks.
  ASSERT_EQ(run(kBin + kLM + " --steps 3 --init-only --out " + d + "/k1", d + "/k1.log"), 0) << slurp(d + "/k1.log");
  const std::string k1 = kLM.substr(0, kLM.find(" --vocab-size")) + " --no-progress --threads 1 --resume --out " + d + "/k1";
  EXPECT_NE(run(mpirun(2) + kBin + k1, d + "/k1r.log"), 0);
  const std::string msg = slurp(d + "/k1r.log");
  EXPECT_NE(msg.find("a step of 1 micro-batch(es) (the global --grad-accum) cannot be shared by 2 ranks"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("qkv: error"), msg.rfind("qkv: error")) << "rank 0 alone reports it: " << msg;
}

// ---------------------------------------------------------------- faults

// The pid of rank `rank` of the job whose command line mentions `marker`; 0 if none.
pid_t rank_pid(const std::string& marker, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = slurp(e.path().string() + "/cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(kBin) != 0 || cmd.find(marker) == std::string::npos) continue;
    std::string env = slurp(e.path().string() + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    if (("\n" + env).find("\nOMPI_COMM_WORLD_RANK=" + std::to_string(rank) + "\n") != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return 0;
}

// Starts a job in the background; waits until its log shows `ready` (an evaluation of rank
// 0), does `act` to rank 1, and returns the job's exit code and its run time after `act`.
struct FaultResult {
  int code = -1;
  double seconds_after = 0;
  std::string log;
};
FaultResult fault(const std::string& cmd, const std::string& log, const std::string& marker, int sig) {
  FaultResult r;
  const pid_t job = ::fork();
  if (job == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd + " > " + log + " 2>&1").c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  int st = 0;
  bool exited = false;
  // Ready: rank 0 has saved at least once (its first evaluation is printed after its save).
  while (slurp(log).find("\"event\":\"eval\"") == std::string::npos && clock::now() - t0 < std::chrono::seconds(120)) {
    if (::waitpid(job, &st, WNOHANG) == job) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const pid_t victim = exited ? 0 : rank_pid(marker, 1);
  EXPECT_NE(victim, 0) << "rank 1 not found; log: " << slurp(log);
  if (victim) ::kill(victim, sig);
  const auto t1 = clock::now();
  while (!exited && clock::now() - t1 < std::chrono::seconds(120)) {
    if (::waitpid(job, &st, WNOHANG) == job) exited = true;
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds_after = std::chrono::duration<double>(clock::now() - t1).count();
  if (!exited) {  // a hang of the test itself: fail, and clean up
    ADD_FAILURE() << "the job did not end within 120 s of the fault";
    ::kill(job, SIGKILL);
    ::waitpid(job, &st, 0);
  }
  for (int rank : {0, 1})  // nothing of the job may survive it
    if (const pid_t p = rank_pid(marker, rank)) {
      ADD_FAILURE() << "rank " << rank << " outlived the job";
      ::kill(p, SIGKILL);
    }
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.log = slurp(log);
  return r;
}

// The step of the run saved in `out`, after checking that one process resumes it for one
// more step (its log in `d`).
int resumes_one_more_step(const std::string& out, const std::string& d) {
  const int step = std::stoi(lm_state(out).metadata.at("step"));
  const std::string cont = kLM.substr(0, kLM.find(" --vocab-size")) + " --no-progress --threads 1 --resume --out " + out +
                           " --stop-after " + std::to_string(step + 1);
  EXPECT_EQ(run(kBin + cont, d + "/resume.log"), 0) << slurp(d + "/resume.log");
  EXPECT_EQ(lm_state(out).metadata.at("step"), std::to_string(step + 1));
  return step;
}

TEST(DistributedMpi, KilledRankStopsEveryRankAndLeavesTheCheckpointWhole) {
  const std::string d = scratch("killed");
  const std::string out = d + "/run";
  const FaultResult r = fault(mpirun(2) + kBin + kLM + " --steps 100000 --eval-every 1 --json --out " + out,
                              d + "/job.log", out, SIGKILL);
  EXPECT_NE(r.code, 0) << r.log;
  EXPECT_NE(r.log.find("rank 1"), std::string::npos) << r.log;  // mpirun: "process rank 1 ... exited on signal 9"
  // Whatever rank 0 was doing (often saving), the folder holds a whole checkpoint that resumes.
  EXPECT_GE(resumes_one_more_step(out, d), 1);
}

TEST(DistributedMpi, HungRankIsNamedAfterTheCollectiveTimeout) {
  const std::string d = scratch("hung");
  const std::string out = d + "/run";
  const FaultResult r = fault(mpirun(2) + kBin + kLM + " --steps 100000 --eval-every 1 --json --collective-timeout 3 --out " + out,
                              d + "/job.log", out, SIGSTOP);
  EXPECT_NE(r.code, 0) << r.log;
  EXPECT_NE(r.log.find("rank 0 of 2: rank 1 sent nothing for 3 s while this rank waited for"), std::string::npos)
      << r.log;
  EXPECT_NE(r.log.find("(--collective-timeout 3): it died, hangs or cannot be reached"), std::string::npos) << r.log;
  io::load_checkpoint(out + "/qkv_train_state.safetensors");  // whole
}

TEST(DistributedMpi, CtrlCOnOneRankStopsEveryRankAfterTheSameStepAndSaves) {
  const std::string d = scratch("sigint");
  const std::string out = d + "/run";
  const FaultResult r = fault(mpirun(2) + kBin + kLM + " --steps 100000 --eval-every 1 --json --out " + out,
                              d + "/job.log", out, SIGINT);
  EXPECT_EQ(r.code, 130) << r.log;
  EXPECT_NE(r.log.find("qkv: interrupted; stopping once the current step is done"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("\"interrupted\":true"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("\"resume\":\"qkv train lm --resume --out "), std::string::npos) << r.log;
  EXPECT_EQ(r.log.find("qkv: error"), std::string::npos) << r.log;
  // Rank 0 saved the step every rank stopped after, and it resumes.
  const int step = resumes_one_more_step(out, d);
  EXPECT_NE(r.log.find("{\"event\":\"done\",\"step\":" + std::to_string(step) + ","), std::string::npos) << r.log;
}

TEST(DistributedMpi, RanksThatDisagreeFailAtStartUpNamingTheDifference) {
  const std::string d = scratch("disagree");
  // Different options (MPMD: one command line per rank).
  const std::string base = kLM + " --steps 2 --out " + d + "/run";
  EXPECT_NE(run(kMpiexec + "-np 1 " + kBin + base + " --lr 0.001 : -np 1 " +
                    kBin + base + " --lr 0.002",
                d + "/opt.log"),
            0);
  std::string log = slurp(d + "/opt.log");
  EXPECT_NE(log.find("ranks disagree on the command line: option --lr is '0.002' on rank 1 but '0.001' on rank 0"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("qkv: error"), log.rfind("qkv: error")) << "rank 0 alone reports it: " << log;
  EXPECT_FALSE(fs::exists(d + "/run")) << "nothing is written before the first save";

  // The same command line, another text on rank 1 (its own working directory).
  for (const char* r : {"/a", "/b", "/c"}) fs::create_directories(d + r);
  fs::copy_file(kText, d + "/a/text.txt");
  std::string other = slurp(kText);
  other[100] = other[100] == 'x' ? 'y' : 'x';
  std::ofstream(d + "/b/text.txt", std::ios::binary) << other;
  const std::string rel = " train lm --text text.txt --vocab-size 300 --context 16 --layers 1 --d-model 16 --heads 2"
                          " --batch 2 --steps 2 --no-progress --threads 1 --out run";
  EXPECT_NE(run(kMpiexec + "-np 1 -wdir " + d + "/a " + kBin + rel +
                    " : -np 1 -wdir " + d + "/b " + kBin + rel,
                d + "/data.log"),
            0);
  log = slurp(d + "/data.log");
  EXPECT_NE(log.find("ranks disagree on the language-model run: the corpus (digest of the texts and tokenizer) is '"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("on rank 1 but '"), std::string::npos) << log;

  // A check that fails on one rank (its text is missing) stops every rank at once and
  // cleanly: rank 0 reports it, naming the rank.
  EXPECT_NE(run(kMpiexec + "-np 1 -wdir " + d + "/a " + kBin + rel +
                    " : -np 1 -wdir " + d + "/c " + kBin + rel,
                d + "/missing.log"),
            0);
  log = slurp(d + "/missing.log");
  EXPECT_NE(log.find("qkv: error: rank 1 of 2: train lm: --text"), std::string::npos) << log;
  EXPECT_NE(log.find("text.txt"), std::string::npos) << log;
  EXPECT_EQ(log.find("qkv: error"), log.rfind("qkv: error")) << "rank 0 alone reports it: " << log;
  EXPECT_FALSE(fs::exists(d + "/a/run")) << log;

  // A rank that fails alone later (its text is not UTF-8, found while tokenizing) stops the
  // job, naming itself.
  std::ofstream(d + "/c/text.txt", std::ios::binary) << "In the beginning \xff\xfe God";
  EXPECT_NE(run(kMpiexec + "-np 1 -wdir " + d + "/a " + kBin + rel +
                    " : -np 1 -wdir " + d + "/c " + kBin + rel,
                d + "/utf8.log"),
            0);
  log = slurp(d + "/utf8.log");
  EXPECT_NE(log.find("qkv: error: rank 1 of 2: "), std::string::npos) << log;
  EXPECT_NE(log.find("text.txt"), std::string::npos) << log;
  EXPECT_NE(log.find("; stopping every rank"), std::string::npos) << log;
  EXPECT_FALSE(fs::exists(d + "/a/run")) << log;
}

TEST(DistributedMpi, OutputThatHoldsFilesIsRefusedOnEveryRank) {
  const std::string d = scratch("taken");
  fs::create_directories(d + "/run");
  std::ofstream(d + "/run/notes.txt") << "mine";
  const std::string cmd = mpirun(2) + kBin + kLM + " --steps 2 --collective-timeout 30 --out " + d + "/run";
  EXPECT_NE(run(cmd, d + "/a.log"), 0);
  const std::string log = slurp(d + "/a.log");
  EXPECT_NE(log.find("qkv: error: train lm: --out " + d + "/run already holds"), std::string::npos) << log;
  EXPECT_EQ(log.find("qkv: error"), log.rfind("qkv: error")) << "rank 0 alone reports it: " << log;
  // Every rank left through the check, none through the collective timeout.
  EXPECT_EQ(log.find("sent nothing for"), std::string::npos) << log;
  EXPECT_EQ(io::folder_entries(d + "/run"), std::vector<std::string>{"notes.txt"});
  EXPECT_EQ(slurp(d + "/run/notes.txt"), "mine");
  EXPECT_FALSE(fs::exists(d + "/run.tokens"));
}

}  // namespace
}  // namespace qkv
