#include "line_reader.h"

#include <editline/readline.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

namespace qkv::tool {

namespace fs = std::filesystem;

LineReader::LineReader(bool tty, std::string history_file) : tty_(tty), history_file_(std::move(history_file)) {
  if (!tty_) return;
  using_history();
  stifle_history(1000);
  if (!history_file_.empty()) read_history(history_file_.c_str());  // absent on the first run: fine
}

LineReader::~LineReader() = default;

bool LineReader::read(const char* prompt, std::string& line) {
  if (!tty_) return static_cast<bool>(std::getline(std::cin, line));
  char* got = readline(prompt);
  if (got == nullptr) return false;
  line = got;
  std::free(got);
  return true;
}

void LineReader::remember(const std::string& message) {
  if (!tty_ || message.empty()) return;
  add_history(message.c_str());
  if (history_file_.empty()) return;
  // The whole history rewritten (stifled to 1000 entries): a crash mid-write loses at most it.
  if (write_history(history_file_.c_str()) != 0) {
    std::cerr << "qkv: warning: cannot write the chat history " << history_file_ << " (--no-history turns it off)\n";
    history_file_.clear();
  }
}

std::string default_chat_history_file() {
  fs::path dir;
  if (const char* x = std::getenv("XDG_STATE_HOME"); x && *x) dir = fs::path(x) / "qkv";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = fs::path(h) / ".local" / "state" / "qkv";
  else return "";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "";
  return (dir / "chat_history").string();
}

}  // namespace qkv::tool
