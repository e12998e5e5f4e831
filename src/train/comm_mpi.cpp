
// The message layer of data-parallel training over MPI (see comm.h). MPI's errors are
// returned (MPI_ERRORS_RETURN on our own communicator), not fatal, and become
// DistributedErrors naming the rank; every wait polls with a deadline instead of blocking
// in MPI, so a rank that died or hangs is named after the collective timeout.
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

#include "comm.h"
#include "qkv/core/thread_signals.h"
#include "qkv/train/distributed.h"

namespace qkv::train::detail {
namespace {

using clock = std::chrono::steady_clock;
static_assert(sizeof(MPI_Request) <= sizeof(std::uintptr_t), "an MPI_Request must fit the opaque handle");

MPI_Request to_mpi(std::uintptr_t h) {
  MPI_Request r;
  std::memcpy(&r, &h, sizeof r);
  return r;
}
std::uintptr_t from_mpi(MPI_Request r) {
  std::uintptr_t h = 0;
  std::memcpy(&h, &r, sizeof r);
  return h;
}

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(code, buf, &n) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(n));
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

const unsigned char kBeat = 1;

}  // namespace

struct Comm::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mu;  // every MPI call (the loop's thread and the heartbeat thread)
  std::vector<clock::time_point> heard;  // when each rank was last heard from
  // Heartbeats.
  std::thread beat;
  std::mutex beat_mu;
  std::condition_variable beat_cv;
  int busy = 0;
  bool stop = false;
  bool finished = false;
};

bool Comm::built_with_mpi() { return true; }

bool Comm::launched_by_mpirun() {
  return env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK") || env("PMI_RANK");
}

std::unique_ptr<Comm> Comm::start(double timeout_s) {
  if (!launched_by_mpirun()) return nullptr;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
      throw DistributedError("distributed: MPI_Init_thread failed", false);
    if (provided < MPI_THREAD_SERIALIZED)
      throw DistributedError("distributed: this MPI library does not allow calls from a second thread "
                             "(MPI_THREAD_SERIALIZED), which the heartbeats need",
                             false);
  }
  std::unique_ptr<Comm> c(new Comm());
  c->impl_ = std::make_unique<Impl>();
  Impl& m = *c->impl_;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (MPI_Comm_dup(MPI_COMM_WORLD, &m.comm) != MPI_SUCCESS)
    throw DistributedError("distributed: MPI_Comm_dup failed", false);
  MPI_Comm_set_errhandler(m.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(m.comm, &c->rank_);
  MPI_Comm_size(m.comm, &c->size_);
  c->timeout_s_ = timeout_s;
  if (const char* l = env("OMPI_COMM_WORLD_LOCAL_SIZE")) c->local_size_ = std::max(1, std::atoi(l));
  else if (const char* l2 = env("MPI_LOCALNRANKS")) c->local_size_ = std::max(1, std::atoi(l2));
  m.heard.assign(static_cast<std::size_t>(c->size_), clock::now());
  Comm* self = c.get();
  const StopSignalsBlocked quiet;  // the heartbeat thread leaves SIGINT / SIGTERM to the program
  m.beat = std::thread([self] {
    Impl& im = *self->impl_;
    const double period = std::min(1.0, self->timeout_s_ / 4);
    std::unique_lock lk(im.beat_mu);
    while (!im.stop) {
      im.beat_cv.wait_for(lk, std::chrono::duration<double>(period));
      if (im.stop || im.busy == 0) continue;
      lk.unlock();
      {
        std::lock_guard g(im.mu);
        for (int p = 0; p < self->size_; ++p) {
          if (p == self->rank_) continue;
          MPI_Request q;
          if (MPI_Isend(&kBeat, 1, MPI_BYTE, p, static_cast<int>(Tag::Heartbeat), im.comm, &q) == MPI_SUCCESS)
            MPI_Request_free(&q);  // delivered in the background; nobody waits for it
        }
      }
      lk.lock();
    }
  });
  return c;
}

Comm::~Comm() {
  if (!impl_) return;
  {
    std::lock_guard lk(impl_->beat_mu);
    impl_->stop = true;
  }
  impl_->beat_cv.notify_all();
  if (impl_->beat.joinable()) impl_->beat.join();
}

std::string Comm::who() const { return "rank " + std::to_string(rank_) + " of " + std::to_string(size_); }

Request Comm::isend(const void* data, std::size_t bytes, int peer, Tag tag) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw ValueError("distributed: a message of " + std::to_string(bytes) + " bytes is larger than 2^31 - 1");
  std::lock_guard g(impl_->mu);
  MPI_Request q;
  const int rc = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag), impl_->comm, &q);
  if (rc != MPI_SUCCESS)
    throw DistributedError(who() + ": sending to rank " + std::to_string(peer) + " failed: " + mpi_error(rc), false);
  return {from_mpi(q), peer, false};
}

Request Comm::irecv(void* data, std::size_t bytes, int peer, Tag tag) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw ValueError("distributed: a message of " + std::to_string(bytes) + " bytes is larger than 2^31 - 1");
  std::lock_guard g(impl_->mu);
  MPI_Request q;
  const int rc = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag), impl_->comm, &q);
  if (rc != MPI_SUCCESS)
    throw DistributedError(who() + ": receiving from rank " + std::to_string(peer) + " failed: " + mpi_error(rc),
                           false);
  return {from_mpi(q), peer, false, true};
}

// Under impl_->mu.
static void drain_heartbeats(Comm::Impl& m) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, static_cast<int>(Tag::Heartbeat), m.comm, &flag, &st) != MPI_SUCCESS || !flag)
      return;
    unsigned char b = 0;
    MPI_Recv(&b, 1, MPI_BYTE, st.MPI_SOURCE, static_cast<int>(Tag::Heartbeat), m.comm, MPI_STATUS_IGNORE);
    if (st.MPI_SOURCE >= 0 && static_cast<std::size_t>(st.MPI_SOURCE) < m.heard.size())
      m.heard[static_cast<std::size_t>(st.MPI_SOURCE)] = clock::now();
  }
}

bool Comm::test(Request& r) {
  if (r.done) return true;
  std::lock_guard g(impl_->mu);
  MPI_Request q = to_mpi(r.handle);
  int flag = 0;
  const int rc = MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
  if (rc != MPI_SUCCESS)
    throw DistributedError(who() + ": a message with rank " + std::to_string(r.peer) + " failed: " + mpi_error(rc),
                           false);
  r.handle = from_mpi(q);
  if (flag) {
    r.done = true;
    impl_->heard[static_cast<std::size_t>(r.peer)] = clock::now();
  }
  return r.done;
}

void Comm::wait(std::vector<Request>& reqs, const std::string& what) {
  const auto t0 = clock::now();
  const auto limit = std::chrono::duration<double>(timeout_s_);
  auto moved = t0;  // when a request last completed
  for (std::uint64_t spins = 0;; ++spins) {
    bool all = true;
    for (Request& r : reqs) {
      const bool was = r.done;
      all = test(r) && all;
      if (r.done && !was) moved = clock::now();
    }
    if (all) return;
    const auto now = clock::now();
    {
      std::lock_guard g(impl_->mu);
      drain_heartbeats(*impl_);
      std::vector<int> silent;
      for (const Request& r : reqs) {
        if (r.done) continue;
        const auto since = std::max(t0, impl_->heard[static_cast<std::size_t>(r.peer)]);
        if (now - since > limit && std::find(silent.begin(), silent.end(), r.peer) == silent.end())
          silent.push_back(r.peer);
      }
      if (!silent.empty()) {
        for (Request& r : reqs) {
          if (r.done) continue;
          MPI_Request q = to_mpi(r.handle);
          if (r.recv) {
            MPI_Cancel(&q);  // an unmatched receive completes at once; never block here
            int flag = 0;
            MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
          } else {
            MPI_Request_free(&q);
          }
          r.done = true;
        }
        std::sort(silent.begin(), silent.end());
        std::string names;
        for (std::size_t i = 0; i < silent.size(); ++i)
          names += (i == 0 ? "" : i + 1 == silent.size() ? " and " : ", ") + std::to_string(silent[i]);
        char t[32];
        std::snprintf(t, sizeof t, "%g", timeout_s_);
        throw DistributedError(who() + ": rank" + (silent.size() > 1 ? "s " : " ") + names + " sent nothing for " +
                                   t + " s while this rank waited for " + what + " (--collective-timeout " + t +
                                   "): " + (silent.size() > 1 ? "they died, hang" : "it died, hangs") +
                                   " or cannot be reached",
                               false);
      }
    }
    // Spin while messages are moving (the other ranks finishing the same step), then poll
    // gently: a rank waiting for rank 0's evaluation must not take a core from it.
    if (now - moved < std::chrono::milliseconds(20)) {
      if (spins % 64 == 63) sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(now - moved < std::chrono::seconds(1) ? 100 : 1000));
    }
  }
}

void Comm::set_busy(bool on) {
  // The thread sends at its next tick: work shorter than a tick needs no heartbeat.
  std::lock_guard lk(impl_->beat_mu);
  impl_->busy += on ? 1 : -1;
}

void Comm::finish() {
  if (impl_->finished) return;
  barrier("the other ranks to finish");
  {
    std::lock_guard lk(impl_->beat_mu);
    impl_->stop = true;
  }
  impl_->beat_cv.notify_all();
  if (impl_->beat.joinable()) impl_->beat.join();
  std::lock_guard g(impl_->mu);
  drain_heartbeats(*impl_);
  MPI_Comm_free(&impl_->comm);
  MPI_Finalize();
  impl_->finished = true;
}

void Comm::abort(int code) {
  // Not under the mutex: the heartbeat thread may hold it, and MPI_Abort does not return.
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace qkv::train::detail
