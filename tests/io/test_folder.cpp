// Folders replaced as a whole (io::StagedFolder, io::recover_folder): the new version appears
// at once, a failure or a kill at any write point leaves the old version bitwise (or no
// folder), and recovery finishes or undoes every state a kill can leave, with the atomic
// exchange and with the two-rename fallback of file systems without RENAME_EXCHANGE.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "train/fault_util.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using Tree = std::map<std::string, std::string>;  // relative path -> bytes ("/" for a folder)

// Everything under dir, bytes included; empty if dir is missing.
Tree snapshot(const fs::path& dir) {
  Tree t;
  if (!fs::exists(dir)) return t;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = fs::relative(e.path(), dir).string();
    t[rel] = e.is_directory() ? "/" : io::read_file(e.path().string(), "test");
  }
  return t;
}

// Names in dir's parent that start with dir's name (the folder and any sibling it left).
std::vector<std::string> siblings(const fs::path& dir) {
  std::vector<std::string> v;
  const std::string name = dir.filename().string();
  for (const auto& e : fs::directory_iterator(dir.parent_path()))
    if (e.path().filename().string().rfind(name, 0) == 0) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

const Tree kOld = {{"config.json", "{\"old\": 1}"}, {"model.bin", std::string(3000, 'o')}, {"sub", "/"},
                   {"sub/a.txt", "old a"}};
const Tree kNew = {{"config.json", "{\"new\": 2}"}, {"model.bin", std::string(5000, 'n')}, {"vocab.json", "{}"}};

void write_tree(const fs::path& dir, const Tree& t) {
  fs::create_directories(dir);
  for (const auto& [rel, bytes] : t) {
    if (bytes == "/") fs::create_directories(dir / rel);
    else io::write_file_atomic((dir / rel).string(), bytes, "test");
  }
}

void stage_new(const fs::path& dir, bool keep = false) {
  io::StagedFolder f(dir.string(), "test", keep);
  for (const auto& [rel, bytes] : kNew) io::write_file_atomic(f.file(rel), bytes, "test");
  f.commit();
}

struct ExchangeMode {
  explicit ExchangeMode(bool on) { io::set_folder_exchange_enabled(on); }
  ~ExchangeMode() { io::set_folder_exchange_enabled(true); }
};

TEST(StagedFolder, CommitsANewFolderAndReplacesAnOldOneWhole) {
  for (bool exchange : {true, false}) {
    ExchangeMode mode(exchange);
    const fs::path d = fs::path(fault_test::scratch_dir("staged")) / "out";
    stage_new(d);
    EXPECT_EQ(snapshot(d), kNew);
    fs::remove_all(d);
    write_tree(d, kOld);
    stage_new(d);
    EXPECT_EQ(snapshot(d), kNew) << "exchange " << exchange;  // old files not written again are gone
    EXPECT_EQ(siblings(d), std::vector<std::string>{"out"});  // no staging or old version left
  }
}

TEST(StagedFolder, KeepOtherFilesCarriesTheUsersFilesOver) {
  const fs::path d = fs::path(fault_test::scratch_dir("staged_keep")) / "out";
  write_tree(d, kOld);
  stage_new(d, /*keep=*/true);
  Tree want = kNew;
  want["sub"] = "/";
  want["sub/a.txt"] = "old a";
  EXPECT_EQ(snapshot(d), want);
}

TEST(StagedFolder, AnUncommittedStagingFolderIsRemovedAndTheTargetUntouched) {
  const fs::path d = fs::path(fault_test::scratch_dir("staged_abandon")) / "out";
  write_tree(d, kOld);
  try {
    io::StagedFolder f(d.string(), "test");
    io::write_file_atomic(f.file("config.json"), "half", "test");
    throw ValueError("the run failed");
  } catch (const ValueError&) {
  }
  EXPECT_EQ(snapshot(d), kOld);
  EXPECT_EQ(siblings(d), std::vector<std::string>{"out"});
  // A file where the folder should be is refused at commit, and left alone.
  const fs::path file = d.parent_path() / "file";
  io::write_file_atomic(file.string(), "x", "test");
  io::StagedFolder f(file.string(), "test");
  try {
    f.commit();
    ADD_FAILURE() << "commit over a file";
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("exists and is not a folder"), std::string::npos) << e.what();
  }
  EXPECT_EQ(io::read_file(file.string(), "test"), "x");
}

// SIGKILL at every write point of a save (files, staging, exchange or renames, removal):
// after recover_folder() the target is bitwise the old version (or absent) before the
// commit point and bitwise the new one after it, and nothing else is left beside it.
void kill_everywhere(bool exchange, bool had_old) {
  ExchangeMode mode(exchange);
  const fs::path d = fs::path(fault_test::scratch_dir(std::string("staged_kill_") + (exchange ? "x" : "r") +
                                                      (had_old ? "_old" : "_new"))) / "out";
  auto prepare = [&] {
    fs::remove_all(d.parent_path());
    fs::create_directories(d.parent_path());
    if (had_old) write_tree(d, kOld);
  };
  prepare();
  const std::vector<std::string> points = fault_test::record_points([&] { stage_new(d); });
  // The commit point: the exchange; with the fallback, the old version moved aside (recovery
  // then renames the complete new one into place); for a first save, the rename.
  const int commit = fault_test::last_point(
      points, !had_old ? "folder: renamed" : exchange ? "folder: exchanged" : "folder: old moved aside");
  ASSERT_GT(commit, 0);
  int old_seen = 0, new_seen = 0;
  for (int k = 1; k <= static_cast<int>(points.size()); ++k) {
    prepare();
    EXPECT_TRUE(fault_test::save_killed_at(k, [] {}, [&] { stage_new(d); })) << "point " << k;
    io::recover_folder(d.string());
    const Tree now = snapshot(d);
    const Tree& want = k >= commit ? kNew : (had_old ? kOld : Tree{});
    EXPECT_EQ(now, want) << "killed at point " << k << " (" << points[k - 1] << ")";
    EXPECT_EQ(siblings(d), now.empty() ? std::vector<std::string>{} : std::vector<std::string>{"out"})
        << "killed at point " << k << " (" << points[k - 1] << ")";
    (k >= commit ? new_seen : old_seen)++;
  }
  EXPECT_GT(old_seen, 0);
  EXPECT_GT(new_seen, 0);
  std::cout << "  exchange " << exchange << ", " << (had_old ? "over an old folder" : "first save") << ": "
            << points.size() << " write points, " << old_seen << " kills kept the old state, " << new_seen
            << " landed the new one\n";
}

TEST(StagedFolder, KilledAtEveryWritePointLeavesTheOldOrTheNewVersion) {
  kill_everywhere(true, true);
  kill_everywhere(true, false);
  kill_everywhere(false, true);
  kill_everywhere(false, false);
}

TEST(StagedFolder, RecoveryLeavesALiveWritersFilesAlone) {
  const fs::path d = fs::path(fault_test::scratch_dir("staged_live")) / "out";
  write_tree(d, kOld);
  io::StagedFolder f(d.string(), "test");  // ours: this process is alive
  io::write_file_atomic(f.file("config.json"), "x", "test");
  io::recover_folder(d.string());
  EXPECT_TRUE(fs::exists(f.path()));
  // A dead writer's staging folder and temp file go.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);  // a pid no process has now
  const std::string dead = std::to_string(child);
  fs::create_directories(d.string() + ".tmp-" + dead + "-0");
  io::write_file_atomic(d.string() + ".tmp." + dead + ".7", "x", "test");
  const auto removed = io::recover_folder(d.string());
  EXPECT_EQ(removed.size(), 2u);
  EXPECT_EQ(snapshot(d), kOld);
}

}  // namespace
}  // namespace qkv
