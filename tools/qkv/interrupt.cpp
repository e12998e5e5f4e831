// Ctrl-C during training (interrupt.h).
#include "interrupt.h"

#include <signal.h>
#include <unistd.h>

#include "qkv/train/loop.h"

namespace qkv::tool {
namespace {

struct sigaction g_previous {};
bool g_allowed = true;
bool g_installed = false;

// Only async-signal-safe calls in the handlers: an atomic store, write(2), _exit(2).
void quit_at_once(int) {
  constexpr char quit[] = "\nqkv: interrupted again; exiting now (the last complete save is kept)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, quit, sizeof quit - 1);
  ::_exit(kInterruptedExit);
}

void on_sigint(int sig) {
  if (train::stop_requested()) quit_at_once(sig);
  train::request_stop();
  constexpr char msg[] =
      "\nqkv: interrupted; stopping once the current step is done (press Ctrl-C again to quit at once)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

}  // namespace

void allow_training_interrupt(bool allow) { g_allowed = allow; }

TrainingInterrupt::TrainingInterrupt() {
  train::clear_stop_request();
  if (!g_allowed) return;
  g_installed = true;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_previous);
}

TrainingInterrupt::~TrainingInterrupt() {
  if (!g_installed) return;
  g_installed = false;
  if (!train::stop_requested()) {
    ::sigaction(SIGINT, &g_previous, nullptr);
    return;
  }
  // Interrupted: the command is saving the step or on its way out with status 130. A second
  // Ctrl-C from now on still quits at once with 130; the default action would end the process
  // by the signal instead (seen under ASan, whose leak check at exit takes a while).
  struct sigaction sa {};
  sa.sa_handler = quit_at_once;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
}

bool TrainingInterrupt::requested() { return train::stop_requested(); }

}  // namespace qkv::tool
