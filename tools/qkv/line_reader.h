// Reading the lines of `qkv chat`: on a terminal through libedit (Debian's libedit-dev: line
// editing with the arrow keys, Ctrl-A / Ctrl-E, history recalled with Up and kept in a file
// between sessions); otherwise plain lines from stdin, with no escape codes written.
#pragma once
#include <string>

namespace qkv::tool {

class LineReader {
 public:
  // tty: stdin and stderr are a terminal (libedit is used); history_file: where the history is
  // read from and appended to ("" for none).
  LineReader(bool tty, std::string history_file);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // One line (without its newline) after `prompt` (shown on a terminal only). False at the end of
  // the input (Ctrl-D) or when the read was interrupted (Ctrl-C at the prompt).
  bool read(const char* prompt, std::string& line);
  // Adds a whole message to the history (what Up recalls), and to the history file.
  void remember(const std::string& message);

 private:
  bool tty_;
  std::string history_file_;
};

// The chat history file: $XDG_STATE_HOME/qkv/chat_history, else ~/.local/state/qkv/chat_history
// (its folder made); "" when neither variable is set.
std::string default_chat_history_file();

}  // namespace qkv::tool
