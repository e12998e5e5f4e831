// Data-parallel training over MPI (docs/distributed.md): the ranks of an `mpirun -np N`
// job, each running the same training loop on its own share of every global batch.
//
//   world()              this process's place in the job: rank 0 of 1 unless
//                        start_distributed() found an MPI launch
//   start_distributed()  joins the job (MPI) when launched by mpirun / mpiexec
//   stop_distributed()   waits for every rank, then leaves the job
//   abort_distributed()  ends every rank of the job now (a failure only this rank knows of)
//
// What train::Loop does with it (train/loop.h): micro-batch k of a step runs on rank
// k mod N; gradients are exchanged in buckets while the backward runs and summed in micro-
// batch order, so N ranks give bitwise the result of one process with N times the
// accumulation; rank 0 alone evaluates (the others receive its metrics).
//
// Every wait on another rank ends after collective_timeout_s without a message from it
// with a DistributedError naming that rank ("rank 1 sent nothing for 60 s ..."). Rank 0's
// own long work (evaluation, saving) runs inside World::Busy, which sends heartbeats.
// Without MPI (built without it, or not launched by mpirun) everything here is a cheap
// no-op for one process.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/checkpoint.h"
#include "qkv/nn/module.h"

namespace qkv::train {

namespace detail {
class Comm;
}

// A failure of the job: a rank silent past the collective timeout, an MPI error, or ranks
// that disagree on the run. collective(): every rank threw this same error at the same
// point (ranks that disagree), so all of them can stop cleanly; otherwise only this rank
// knows, and the job must be aborted (abort_distributed).
class DistributedError : public Error {
 public:
  DistributedError(const std::string& msg, bool collective) : Error(msg), collective_(collective) {}
  bool collective() const { return collective_; }

 private:
  bool collective_;
};

struct DistributedOptions {
  double collective_timeout_s = 60;   // a wait on a rank that sends nothing for this long fails
  // Gradients are exchanged in buckets of about this many bytes; 0: max(1 MiB, ranks x 256 KiB),
  // so each rank's shard of a bucket stays >= 256 KiB as ranks grow ($QKV_DP_BUCKET_KIB sets it).
  std::int64_t bucket_bytes = 0;
  bool overlap = true;  // exchange buckets during the backward (false: after it; $QKV_DP_OVERLAP=0)
};

// Named values that must be equal on every rank ("option --lr" -> "0.001").
using Fields = std::vector<std::pair<std::string, std::string>>;

class World {
 public:
  int rank() const;
  int size() const;
  bool root() const { return rank() == 0; }
  bool distributed() const { return size() > 1; }
  int local_size() const;  // ranks on this machine
  const DistributedOptions& options() const { return o_; }
  std::int64_t bucket_bytes() const;  // options().bucket_bytes, or the default for size()

  // Collectives: every rank calls them in the same order; no-ops with one rank.
  void barrier(const std::string& what);
  void broadcast(std::string& bytes, const std::string& what);  // rank 0's bytes everywhere
  std::vector<std::string> allgather(const std::string& mine, const std::string& what);
  // DistributedError (collective) on every rank if a rank's fields differ from rank 0's,
  // naming the first such field, its values and the ranks ("ranks disagree on <what>: ...").
  void check_same(const Fields& fields, const std::string& what);
  // Runs f on this rank (each rank may do its own share: rank 0 the checks of what it alone
  // writes), then, if f threw an Error on any rank, throws on every rank the same collective
  // DistributedError: the message of the lowest failing rank, prefixed "rank r of N: " unless
  // r is 0. So a check that fails on one rank stops every rank at once and cleanly, rank 0
  // reporting it. f must not call collectives. With one process: f() (its own exception).
  void fail_together(const std::function<void()>& f, const std::string& what);

  // While one lives, this rank sends heartbeats (it works alone: evaluating, saving). An
  // exception leaving it marks a failure of this rank alone (local_failure()).
  class Busy {
   public:
    explicit Busy(World& w);
    ~Busy();
    Busy(const Busy&) = delete;
    Busy& operator=(const Busy&) = delete;

   private:
    World& w_;
    int exceptions_;
  };
  // An exception left a Busy section: the other ranks do not know of it (abort the job).
  bool local_failure() const { return local_failure_; }

  detail::Comm* comm() const { return comm_.get(); }  // nullptr with one process

 private:
  friend World& start_distributed(const DistributedOptions&);
  friend void stop_distributed();
  std::unique_ptr<detail::Comm> comm_;
  DistributedOptions o_;
  bool local_failure_ = false;
};

World& world();
// Joins the MPI job when this process was launched by mpirun / mpiexec and qkv was built
// with MPI (else world() stays one process). Call once, before any training. $QKV_DP_OVERLAP=0
// turns o.overlap off (for measurements).
World& start_distributed(const DistributedOptions& o = {});
// Waits for every rank (within the collective timeout), then leaves the job.
void stop_distributed();
// Ends every rank of the job with `code` now (MPI_Abort); without a job, returns.
void abort_distributed(int code);
bool built_with_mpi();

// The checkpoint at `path`, read by rank 0 alone and sent to the others (which need not see
// the file); with one process, io::load_checkpoint(path).
io::Checkpoint shared_checkpoint(const std::string& path);

// "" if every rank's fields equal rank 0's; else the message check_same throws (without the
// "ranks disagree on <what>: " prefix). by_rank[r]: rank r's fields.
std::string describe_disagreement(const std::vector<Fields>& by_rank);
// A flat JSON object as fields "<prefix><key>" -> its JSON text.
Fields json_fields(const std::string& json, const std::string& prefix);
// 16 hex digits: a digest of the module's parameters (names, shapes, bytes) in order.
std::string weights_digest(const nn::Module& m);

}  // namespace qkv::train
