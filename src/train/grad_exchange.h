// The gradient sum of one optimiser step over its K micro-batches and the N ranks that
// compute them (internal header; used by train::Loop).
//
// The sum is a fixed-order fold, the same whatever N is and whenever messages arrive:
//   G = (((G_0 + G_1) + G_2) + ... + G_{K-1})      elementwise in float32
// where G_k is micro-batch k's gradient alone (the backward of loss_k / K from cleared
// gradients). Micro-batch k runs on rank k mod N, in round j = k div N (A = K / N rounds
// per rank). So N ranks with A micro-batches each give bitwise what one process gives with
// K = N * A, and a run may resume on any N that divides K.
//
// How (per step):
//   flat layout   every parameter's gradient in one float32 vector, parameters in reverse
//                 order (the backward produces the last layers first), cut into buckets of
//                 whole parameters (~bucket_bytes each); each bucket is cut into N shards
//                 and rank s owns shard s of every bucket.
//   round j       as the backward of its micro-batch finishes a bucket's parameters
//                 (autograd's leaf-ready hook), the bucket is posted, in bucket order:
//                 shard s of this rank's G_k goes to rank s (an all-to-all). The owner of a
//                 shard folds what it received in rank order, i.e. in micro-batch order
//                 k = jN + 0, jN + 1, ..., into its running sum (round 0, rank 0: a copy).
//   end           after the last round each owner sends its summed shards to every rank
//                 (an all-gather), in bucket order; every rank then holds G.
// Each rank sends A (N-1)/N + (N-1)/N parameter bytes a step: with A = 1, 2 (N-1)/N, the
// volume of a ring all-reduce. The losses of the micro-batches (and which parameters got a
// gradient at all) are all-gathered at the end of the step.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "comm.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/tensor.h"

namespace qkv::train::detail {

class GradExchange {
 public:
  // params: float32 leaves (TypeError otherwise); comm nullptr: one process (N = 1).
  // K must be a multiple of N (ValueError naming both otherwise).
  GradExchange(const std::vector<Tensor>& params, Comm* comm, std::int64_t K, std::int64_t bucket_bytes, bool overlap);

  std::int64_t rounds() const { return A_; }
  std::int64_t ranks() const { return N_; }
  std::int64_t rank() const { return me_; }

  // Per step: begin_step, then for j in 0..rounds()-1: begin_micro(j), the micro-batch's
  // backward under hook(), end_micro(); then finish.
  void begin_step(std::int64_t step);
  void begin_micro(std::int64_t j);  // drops every parameter's gradient
  autograd::LeafReadyHook hook();
  void end_micro();  // also after a micro-batch that had no backward (its gradient counts as 0)
  // Completes the exchange; each parameter's gradient becomes its sum over the step's
  // micro-batches (a view of one flat buffer, valid until the next step; none if no micro-
  // batch gave it one). Returns every micro-batch's loss, in micro-batch order.
  std::vector<double> finish(const std::vector<double>& my_losses);

  double waited_s() const { return waited_s_; }        // blocked on other ranks, so far
  std::int64_t bytes_sent_per_step() const;            // by this rank
  std::int64_t parameter_bytes() const { return 4 * P_; }
  std::int64_t buckets() const { return static_cast<std::int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::int64_t lo = 0, hi = 0;       // flat range
    std::vector<std::int64_t> cut;     // N + 1 shard boundaries (flat offsets)
    std::int64_t pending = 0;          // parameters not ready in this round
    std::int64_t nparams = 0;
    std::vector<float> recv;           // (N - 1) pieces of this rank's shard, by source rank
    std::vector<Request> scatter_send, scatter_recv, gather;
    std::int64_t posted = -1, folded = -1;  // last round posted / folded
  };
  void on_ready(std::int64_t i);
  void settle(Bucket& b);   // before round j writes into b: round j-1's sends done, its fold done
  void post_ready(bool all);
  void post(Bucket& b);
  void fold(Bucket& b);
  void post_gathers();
  void progress();
  void wait(std::vector<Request>& reqs, const char* what);
  float* recv_piece(Bucket& b, std::int64_t src);

  std::vector<Tensor> params_;
  std::unordered_map<const TensorImpl*, std::int64_t> index_;
  std::vector<std::int64_t> off_, numel_, bucket_of_;
  Comm* comm_;
  std::int64_t N_ = 1, me_ = 0, K_ = 1, A_ = 1, P_ = 0, step_ = 0, round_ = 0;
  bool overlap_ = true;
  std::vector<float> g_;    // this rank's G_k of the current round
  Tensor result_;           // [P]: own shards summed, then everyone's
  std::vector<Bucket> buckets_;
  std::vector<char> ready_, had_;
  std::size_t next_post_ = 0, next_gather_ = 0;
  double waited_s_ = 0;
};

}  // namespace qkv::train::detail
