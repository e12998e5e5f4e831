// The message layer of data-parallel training (internal header): point-to-point
// messages between the ranks of an MPI job, waits that time out naming the silent rank,
// heartbeats, and the few collectives train/ needs, built on those messages so that every
// wait can say which rank it is waiting for. comm_mpi.cpp implements it over MPI (the only
// file that includes mpi.h); comm_none.cpp is the build without MPI (one process, start()
// returns nothing).
//
// Threads: one thread (the training loop's) makes the calls; the heartbeat thread makes its
// own MPI calls only under the same mutex (MPI_THREAD_SERIALIZED).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qkv::train::detail {

// Messages of different purposes never match each other.
enum class Tag : int { Control = 11, Scatter = 12, Gather = 13, Heartbeat = 14 };

// One posted send or receive. done = completed (or never posted).
struct Request {
  std::uintptr_t handle = 0;  // the MPI_Request
  int peer = -1;
  bool done = true;
  bool recv = false;
};

class Comm {
 public:
  // The job this process belongs to, when it was launched by mpirun / mpiexec (Open MPI's
  // OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment) and qkv was built with
  // MPI; nullptr otherwise. timeout_s: how long a wait may go without a message from the
  // rank it waits for.
  static std::unique_ptr<Comm> start(double timeout_s);
  static bool built_with_mpi();
  static bool launched_by_mpirun();
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  double timeout_s() const { return timeout_s_; }
  // Ranks on this machine (for the default thread count); 1 if unknown.
  int local_size() const { return local_size_; }

  // Non-blocking messages of at most 2^31 - 1 bytes; the buffer must live (and, for a
  // receive, not be read) until the request is done.
  Request isend(const void* data, std::size_t bytes, int peer, Tag tag);
  Request irecv(void* data, std::size_t bytes, int peer, Tag tag);
  // Progresses every message; true when r is done.
  bool test(Request& r);
  // Waits until every request is done. DistributedError (not collective) naming the ranks
  // if one of them sends nothing (no message, no heartbeat) for timeout_s; `what` says what
  // was waited for ("the gradients of step 12"). On that error the pending receives are
  // cancelled (their buffers are free again) and the pending sends left to MPI.
  void wait(std::vector<Request>& reqs, const std::string& what);

  // Collectives over the messages above (every rank calls them in the same order).
  void barrier(const std::string& what);
  // Rank 0's bytes on every rank (any size).
  void broadcast(std::string& bytes, const std::string& what);
  // Every rank's bytes, by rank.
  std::vector<std::string> allgather(const std::string& mine, const std::string& what);

  // While busy, a thread sends a heartbeat to every other rank every second (or a
  // quarter of the timeout if shorter), so that ranks waiting for this one (rank 0
  // evaluating or saving) do not time out. Nesting counts.
  void set_busy(bool on);

  // Waits for every rank (barrier), then shuts MPI down; the object is unusable after.
  void finish();
  // Ends every process of the job with `code` (MPI_Abort).
  [[noreturn]] void abort(int code);

  // "rank 2 of 4" (for messages).
  std::string who() const;

  struct Impl;

 private:
  Comm() = default;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  double timeout_s_ = 60;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qkv::train::detail
