// Input and output checks of the writing commands (output.h).
#include "output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "qkv/core/error.h"
#include "qkv/io/folder.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;

std::string quote(const std::string& p) {
  std::string q = "'";
  q += p;
  q += '\'';
  return q;
}

// "a, b, c and 4 more"
std::string listing(const std::vector<std::string>& names) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(names.size(), 4);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i) s += ", ";
    s += names[i];
  }
  if (names.size() > shown) s += " and " + std::to_string(names.size() - shown) + " more";
  return s;
}

// The nearest existing folder at or above the parent of `path` must be writable (the
// output and its missing parents are created there).
void check_writable_parent(const std::string& path, const OutputSpec& spec) {
  fs::path p = fs::path(path).parent_path();
  if (p.empty()) p = ".";
  for (;;) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        throw IOError(spec.cmd + ": " + spec.flag + " " + path + ": '" + p.string() + "' is a file, not a folder");
      if (::access(p.c_str(), W_OK | X_OK) != 0)
        throw IOError(spec.cmd + ": " + spec.flag + " " + path + ": cannot write into '" + p.string() +
                      "': " + std::strerror(errno));
      return;
    }
    if (errno != ENOENT)
      throw IOError(spec.cmd + ": " + spec.flag + " " + path + ": cannot reach '" + p.string() +
                    "': " + std::strerror(errno));
    if (!p.has_parent_path() || p.parent_path() == p) return;
    p = p.parent_path();
  }
}

std::string taken_hint(const OutputSpec& spec, const std::string& what) {
  return "; give --overwrite to replace " + what + (spec.alternative.empty() ? "," : ", " + spec.alternative + ",") +
         " or another " + spec.flag;
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  if (a == b) return true;
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

std::string path_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "missing" : std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "a folder";
  if (S_ISREG(st.st_mode)) return "a file";
  return "not a regular file";
}

void check_output_folder(const std::string& path_in, const OutputSpec& spec) {
  std::string path = path_in;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path.empty()) throw ValueError(spec.cmd + ": " + spec.flag + " is empty; name the folder to write");
  io::recover_folder(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw IOError(spec.cmd + ": " + spec.flag + " " + path + " is a file, expected a folder (" + spec.cmd +
                    " writes a folder of files there)");
    if (::access(path.c_str(), W_OK | X_OK) != 0)
      throw IOError(spec.cmd + ": " + spec.flag + " " + path + ": cannot write into " + quote(path) + ": " +
                    std::strerror(errno));
    const std::vector<std::string> entries = io::folder_entries(path);
    if (!entries.empty() && !spec.overwrite)
      throw ValueError(spec.cmd + ": " + spec.flag + " " + path + " already holds " + listing(entries) +
                       taken_hint(spec, "the folder"));
  } else if (errno != ENOENT && errno != ENOTDIR) {  // ENOTDIR: a parent is a file (said below)
    throw IOError(spec.cmd + ": " + spec.flag + " " + path + ": cannot reach " + quote(path) + ": " +
                  std::strerror(errno));
  }
  check_writable_parent(path, spec);
}

void check_output_file(const std::string& path, const OutputSpec& spec) {
  if (path.empty()) throw ValueError(spec.cmd + ": " + spec.flag + " is empty; name the file to write");
  io::remove_stale_temp_files(path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode))
      throw IOError(spec.cmd + ": " + spec.flag + " " + path + " is a folder, expected a file name");
    if (!spec.overwrite) throw ValueError(spec.cmd + ": " + spec.flag + " " + path + " already exists" + taken_hint(spec, "it"));
    if (!S_ISREG(st.st_mode))
      throw IOError(spec.cmd + ": " + spec.flag + " " + path + " is not a regular file; it cannot be replaced");
  } else if (errno != ENOENT && errno != ENOTDIR) {
    throw IOError(spec.cmd + ": " + spec.flag + " " + path + ": cannot reach " + quote(path) + ": " +
                  std::strerror(errno));
  }
  check_writable_parent(path, spec);
}

void check_input_file(const std::string& path, const std::string& where, const std::string& kind) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IOError(where + " " + path + ": " + (errno == ENOENT ? std::string("no such file") : std::strerror(errno)) +
                  " (expected " + kind + ")");
  if (S_ISDIR(st.st_mode)) throw IOError(where + " " + path + " is a directory, expected " + kind);
  if (!S_ISREG(st.st_mode)) throw IOError(where + " " + path + " is not a regular file, expected " + kind);
  if (::access(path.c_str(), R_OK) != 0) throw IOError(where + " " + path + ": " + std::strerror(errno));
}

void check_input_folder(const std::string& path, const std::string& where, const std::string& kind) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IOError(where + " " + path + ": " + (errno == ENOENT ? std::string("no such folder") : std::strerror(errno)) +
                  " (expected " + kind + ")");
  if (!S_ISDIR(st.st_mode)) throw IOError(where + " " + path + " is a file, expected " + kind);
}

std::string shell_quote(const std::string& s) {
  if (s.empty()) return "''";
  bool plain = true;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("/._-+=:,@%", c))) plain = false;
  if (plain) return s;
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string s;
  for (const std::string& w : words) {
    if (!s.empty()) s += ' ';
    s += shell_quote(w);
  }
  return s;
}

}  // namespace qkv::tool
