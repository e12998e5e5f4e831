// Folders replaced as a whole: a model folder, a tokenizer folder, a heatmap folder.
//
// A new version of DIR is built in a temporary sibling and swapped into place once every
// file is in it, so DIR is at every instant either absent, its old self or the whole new
// version, whatever kills the process and when (docs/robustness.md, "Outputs").
//
//   io::StagedFolder f("runs/kjv", "train lm");       // mkdir runs/kjv.tmp-<pid>-<n>
//   models::save_gpt2(model, f.path());                // write every file into it
//   io::write_file_atomic(f.file("vocab.json"), ...);
//   f.commit();                                        // swap it into place
//
// The scheme (DIR the target, P the writer's pid, N a number unique in the process):
//   1. mkdir DIR.tmp-P-N beside DIR (the same file system, so renames stay renames);
//   2. the caller writes the files into it;
//   3. commit: fsync every file and DIR.tmp-P-N itself, then
//        DIR absent:   rename(DIR.tmp-P-N, DIR)                                   atomic
//        DIR present:  renameat2(DIR.tmp-P-N, DIR, RENAME_EXCHANGE)               atomic;
//                      DIR.tmp-P-N now holds the old version
//                      (a file system without RENAME_EXCHANGE: rename(DIR, DIR.old-P-N),
//                       then rename(DIR.tmp-P-N, DIR): two steps, recovered as below)
//      fsync(parent), then remove DIR.tmp-P-N or DIR.old-P-N (the old version).
// A directory rename over an existing non-empty directory fails on Linux (ENOTEMPTY),
// which is why the swap is an exchange (or two renames), never a plain rename.
//
// What a kill can leave, and what recover_folder(DIR) does with it (only for a P that is
// no longer running: a live writer's names are left alone):
//   DIR.tmp-P-N and no DIR.old-P-N   an unfinished staging, or an old version swapped out
//                                    before its removal: removed
//   DIR.old-P-N, DIR absent          killed between the fallback's two renames; DIR.tmp-P-N
//                                    is complete (the commit had begun): renamed to DIR
//                                    (or, if it is gone, DIR.old-P-N is renamed back)
//   DIR.old-P-N, DIR present         the commit was done but for the removal: removed
#pragma once
#include <string>
#include <vector>

namespace qkv::io {

class StagedFolder {
 public:
  // Creates an empty staging directory beside `dir` (and dir's missing parent folders).
  // `who` starts error messages. IOError naming the path and the reason if it cannot.
  // keep_other_files: commit() first links into the staging folder every entry of the
  // current DIR that the caller did not write (a resumed run keeps the user's own files).
  StagedFolder(const std::string& dir, const char* who, bool keep_other_files = false);
  ~StagedFolder();  // removes the staging directory unless committed
  StagedFolder(const StagedFolder&) = delete;
  StagedFolder& operator=(const StagedFolder&) = delete;

  const std::string& path() const { return stage_; }                    // write the files here
  std::string file(const std::string& name) const { return stage_ + "/" + name; }
  const std::string& target() const { return dir_; }

  // Makes the staged files DIR (see the scheme above). IOError naming DIR if a step fails;
  // DIR is then its old self (or, after a failure between the fallback's renames, what
  // recover_folder() puts back).
  void commit();

 private:
  std::string dir_, stage_, tag_, who_;
  bool keep_other_ = false, committed_ = false;
};

// Finishes or undoes what an interrupted commit of `dir` left and removes the staging
// folders and temp files ("<dir>.tmp.<pid>.*", io/files.h) of writers that are no longer
// running. Returns the paths it removed or renamed. Best effort for removals; IOError if a
// rename that would put DIR back fails.
std::vector<std::string> recover_folder(const std::string& dir);

// The same for a single file's leftover temp files ("<path>.tmp.<pid>.*").
std::vector<std::string> remove_stale_temp_files(const std::string& path);

// The entries of a folder (names, sorted); empty if it is missing or empty.
std::vector<std::string> folder_entries(const std::string& dir);

// Tests: false makes commit() use the two-rename fallback, as on a file system without
// RENAME_EXCHANGE. Not thread-safe; default true.
void set_folder_exchange_enabled(bool on);

}  // namespace qkv::io
