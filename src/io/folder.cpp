// Folders replaced as a whole: staging beside the target, fsync, atomic exchange (or two
// renames), and recovery from every state a kill can leave. The scheme is described at the
// top of qkv/io/folder.h and in docs/robustness.md.
#include "qkv/io/folder.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "qkv/core/error.h"
#include "qkv/io/files.h"

namespace qkv::io {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_exchange{true};

std::string strip_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// (parent, name) of a path without trailing slashes; parent "." when there is none.
std::pair<std::string, std::string> split(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

[[noreturn]] void fail(const std::string& who, const std::string& what, const std::string& path, int err) {
  throw IOError(who + ": cannot " + what + " '" + path + "': " + std::strerror(err));
}

void fsync_path(const std::string& path, bool dir, const std::string& who) {
  const int fd = ::open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail(who, "open", path, errno);
  int rc;
  while ((rc = ::fsync(fd)) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL): nothing more can be done there.
  if (rc != 0 && !(dir && err == EINVAL)) fail(who, "fsync", path, err);
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  if (pid == static_cast<long>(::getpid())) return true;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

// "<name><sep><pid><sep2>..." -> pid, or nullopt if `entry` is not such a name.
std::optional<long> pid_after(const std::string& entry, const std::string& prefix, char sep2) {
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  std::size_t i = prefix.size();
  long pid = 0;
  const std::size_t start = i;
  while (i < entry.size() && entry[i] >= '0' && entry[i] <= '9' && i - start < 10) pid = pid * 10 + (entry[i++] - '0');
  if (i == start || i >= entry.size() || entry[i] != sep2) return std::nullopt;
  return pid;
}

void remove_quietly(const fs::path& p, std::vector<std::string>& done) {
  std::error_code ec;
  if (fs::remove_all(p, ec) > 0 && !ec) done.push_back(p.string());
}

bool exists_nofollow(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

}  // namespace

void set_folder_exchange_enabled(bool on) { g_exchange = on; }

std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

StagedFolder::StagedFolder(const std::string& dir, const char* who, bool keep_other_files)
    : dir_(strip_slashes(dir)), who_(who), keep_other_(keep_other_files) {
  if (dir_.empty()) throw IOError(who_ + ": empty output folder name");
  std::error_code ec;
  if (fs::is_symlink(dir_, ec)) {  // replace what the link points at, not the link
    const fs::path real = fs::canonical(dir_, ec);
    if (!ec) dir_ = real.string();
  }
  const auto [parent, name] = split(dir_);
  if (name == "." || name == ".." || name.empty())
    throw IOError(who_ + ": '" + dir + "' cannot be replaced as a whole; name a folder to write, e.g. '" + dir +
                  "/out'");
  fs::create_directories(parent, ec);
  if (ec) throw IOError(who_ + ": cannot create the folder '" + parent + "': " + ec.message());
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0;; ++attempt) {
    tag_ = std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    stage_ = dir_ + ".tmp-" + tag_;
    if (::mkdir(stage_.c_str(), 0755) == 0) break;
    if (errno != EEXIST || attempt >= 1000) fail(who_, "create the folder", stage_, errno);
  }
  write_point("folder: staging created");
}

StagedFolder::~StagedFolder() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(stage_, ec);  // best effort: recover_folder() removes what is left
}

void StagedFolder::commit() {
  if (committed_) throw IOError(who_ + ": '" + dir_ + "' was already committed");
  std::error_code ec;
  struct stat st {};
  const bool present = ::lstat(dir_.c_str(), &st) == 0;
  if (present && !S_ISDIR(st.st_mode))
    throw IOError(who_ + ": '" + dir_ + "' exists and is not a folder; nothing was written there");
  if (present && keep_other_) {
    for (const std::string& n : folder_entries(dir_)) {
      const fs::path from = fs::path(dir_) / n, to = fs::path(stage_) / n;
      if (exists_nofollow(to.string())) continue;
      if (::link(from.c_str(), to.c_str()) == 0) continue;  // a file: the same inode, no copy
      fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
      if (ec) throw IOError(who_ + ": cannot keep '" + from.string() + "' in the new version: " + ec.message());
    }
  }
  // Every file and folder of the new version on disk before it becomes DIR.
  for (fs::recursive_directory_iterator it(stage_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_symlink()) continue;
    fsync_path(it->path().string(), it->is_directory(), who_);
  }
  if (ec) throw IOError(who_ + ": cannot list '" + stage_ + "': " + ec.message());
  fsync_path(stage_, true, who_);
  write_point("folder: staged");

  const std::string parent = split(dir_).first;
  std::string old;  // the old version's path once swapped out
  if (!present) {
    if (::rename(stage_.c_str(), dir_.c_str()) != 0) fail(who_, "rename '" + stage_ + "' to", dir_, errno);
    write_point("folder: renamed");
  } else {
    bool exchanged = false;
    if (g_exchange) {
      if (::renameat2(AT_FDCWD, stage_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
        exchanged = true;
        old = stage_;
        write_point("folder: exchanged");
      } else if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
        fail(who_, "exchange '" + stage_ + "' with", dir_, errno);
      }
    }
    if (!exchanged) {
      old = dir_ + ".old-" + tag_;
      if (::rename(dir_.c_str(), old.c_str()) != 0) fail(who_, "move aside the old version of", dir_, errno);
      write_point("folder: old moved aside");
      if (::rename(stage_.c_str(), dir_.c_str()) != 0) {
        const int err = errno;
        ::rename(old.c_str(), dir_.c_str());  // put the old version back
        fail(who_, "rename '" + stage_ + "' to", dir_, err);
      }
      write_point("folder: renamed");
    }
  }
  committed_ = true;
  fsync_path(parent, true, who_);
  write_point("folder: parent fsynced");
  if (!old.empty()) {
    fs::remove_all(old, ec);  // best effort: recover_folder() removes what is left
    write_point("folder: old removed");
  }
}

std::vector<std::string> recover_folder(const std::string& dir_in) {
  std::vector<std::string> done;
  std::string dir = strip_slashes(dir_in);
  std::error_code ec;
  if (fs::is_symlink(dir, ec)) {
    const fs::path real = fs::canonical(dir, ec);
    if (!ec) dir = real.string();
  }
  const auto [parent, name] = split(dir);
  if (name.empty() || name == "." || name == "..") return done;
  const std::vector<std::string> entries = folder_entries(parent);
  auto has = [&](const std::string& n) { return std::binary_search(entries.begin(), entries.end(), n); };
  const std::string tmp_prefix = name + ".tmp-", old_prefix = name + ".old-";
  // First the interrupted fallback commits (DIR.old-P-N), which may need their DIR.tmp-P-N.
  for (const std::string& e : entries) {
    const auto pid = pid_after(e, old_prefix, '-');
    if (!pid || process_alive(*pid)) continue;
    const std::string tag = e.substr(old_prefix.size());
    const fs::path old = fs::path(parent) / e, stage = fs::path(parent) / (tmp_prefix + tag);
    if (!exists_nofollow(dir)) {
      const fs::path back = has(tmp_prefix + tag) ? stage : old;
      if (::rename(back.c_str(), dir.c_str()) != 0)
        fail("recover", "rename '" + back.string() + "' to", dir, errno);
      done.push_back(back.string() + " -> " + dir);
      fsync_path(parent, true, "recover");
    }
    remove_quietly(old, done);
  }
  // Then stale staging folders and temp files of writers that are gone.
  for (const std::string& e : folder_entries(parent)) {
    const auto staged = pid_after(e, tmp_prefix, '-');
    const auto temp = pid_after(e, name + ".tmp.", '.');
    if (staged && !process_alive(*staged)) remove_quietly(fs::path(parent) / e, done);
    else if (temp && !process_alive(*temp)) remove_quietly(fs::path(parent) / e, done);
  }
  return done;
}

std::vector<std::string> remove_stale_temp_files(const std::string& path_in) {
  std::vector<std::string> done;
  const std::string path = strip_slashes(path_in);
  const auto [parent, name] = split(path);
  for (const std::string& e : folder_entries(parent)) {
    const auto pid = pid_after(e, name + ".tmp.", '.');
    if (pid && !process_alive(*pid)) remove_quietly(fs::path(parent) / e, done);
  }
  return done;
}

}  // namespace qkv::io
