// The threads the library starts (the pool's workers, the schedulers' and batchers' threads, the
// MPI heartbeat) never take the signals a user or a service manager sends to the process: SIGINT,
// SIGTERM, SIGHUP and SIGQUIT are blocked in them from their first instruction, so the kernel
// delivers those to the application's own threads (its handler, or the thread that sigwaits for
// them). Without it a process that blocks SIGTERM to sigwait for it (qkv serve) was killed by
// the default action whenever the kernel picked a worker started before the mask was set.
#pragma once
#include <pthread.h>

#include <csignal>

namespace qkv {

// While alive, the calling thread blocks the process-directed stop signals; a std::thread
// created in its scope inherits that mask. Restores the previous mask on destruction.
class StopSignalsBlocked {
 public:
  StopSignalsBlocked() {
    sigset_t s;
    sigemptyset(&s);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&s, sig);
    pthread_sigmask(SIG_BLOCK, &s, &previous_);
  }
  ~StopSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  StopSignalsBlocked(const StopSignalsBlocked&) = delete;
  StopSignalsBlocked& operator=(const StopSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

}  // namespace qkv
