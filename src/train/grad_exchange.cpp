// The fixed-order gradient sum over micro-batches and ranks (see grad_exchange.h).
#include "grad_exchange.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "qkv/core/error.h"
#include "qkv/train/distributed.h"

namespace qkv::train::detail {
namespace {

using i64 = std::int64_t;
using clock = std::chrono::steady_clock;

// dst[i] = dst[i] + src[i]: the one addition of the fold (also the one of the one-process run).
void add_into(float* dst, const float* src, i64 n) {
  for (i64 i = 0; i < n; ++i) dst[i] = dst[i] + src[i];
}

}  // namespace

GradExchange::GradExchange(const std::vector<Tensor>& params, Comm* comm, i64 K, i64 bucket_bytes, bool overlap)
    : params_(params), comm_(comm), K_(K), overlap_(overlap) {
  N_ = comm ? comm->size() : 1;
  me_ = comm ? comm->rank() : 0;
  if (K < 1 || K % N_ != 0)  // every rank finds this alike
    throw DistributedError("train: a step of " + std::to_string(K) + " micro-batch(es) (the global --grad-accum) cannot be "
                     "shared by " + std::to_string(N_) + " ranks; it must be a multiple of the rank count",
                           true);
  A_ = K / N_;
  // Flat layout: parameters in reverse order.
  const auto np = static_cast<i64>(params_.size());
  off_.assign(static_cast<std::size_t>(np), 0);
  numel_.assign(static_cast<std::size_t>(np), 0);
  bucket_of_.assign(static_cast<std::size_t>(np), 0);
  const i64 target = std::max<i64>(1, bucket_bytes / 4);
  Bucket cur;
  for (i64 i = np - 1; i >= 0; --i) {
    const Tensor& p = params_[static_cast<std::size_t>(i)];
    if (p.dtype() != DType::F32)
      throw TypeError("train: data-parallel and accumulated steps need float32 parameters; parameter " +
                      std::to_string(i) + " " + p.shape_str() + " is " + dtype_name(p.dtype()));
    if (!index_.emplace(p.impl(), i).second)
      throw ValueError("train: parameter " + std::to_string(i) + " " + p.shape_str() + " is listed twice");
    off_[i] = P_;
    numel_[i] = p.numel();
    bucket_of_[i] = static_cast<i64>(buckets_.size());
    P_ += p.numel();
    ++cur.nparams;
    cur.hi = P_;
    if (cur.hi - cur.lo >= target || i == 0) {
      buckets_.push_back(std::move(cur));
      cur = Bucket{};
      cur.lo = P_;
    }
  }
  for (Bucket& b : buckets_) {
    const i64 n = b.hi - b.lo;
    for (i64 s = 0; s <= N_; ++s) b.cut.push_back(b.lo + n * s / N_);
    const i64 mine = b.cut[me_ + 1] - b.cut[me_];
    b.recv.assign(static_cast<std::size_t>(std::max<i64>(0, (N_ - 1) * mine)), 0.0f);
  }
  g_.assign(static_cast<std::size_t>(P_), 0.0f);
  ready_.assign(static_cast<std::size_t>(np), 0);
  had_.assign(static_cast<std::size_t>(np), 0);
}

i64 GradExchange::bytes_sent_per_step() const {
  i64 mine = 0;
  for (const Bucket& b : buckets_) mine += b.cut[me_ + 1] - b.cut[me_];
  return 4 * (A_ * (P_ - mine) + (N_ - 1) * mine);
}

float* GradExchange::recv_piece(Bucket& b, i64 src) {
  const i64 mine = b.cut[me_ + 1] - b.cut[me_];
  return b.recv.data() + (src < me_ ? src : src - 1) * mine;
}

void GradExchange::wait(std::vector<Request>& reqs, const char* what) {
  if (!comm_) return;
  bool pending = false;
  for (Request& r : reqs) pending = pending || !comm_->test(r);
  if (!pending) return;
  const auto t0 = clock::now();
  comm_->wait(reqs, std::string(what) + " of step " + std::to_string(step_ + 1));
  waited_s_ += std::chrono::duration<double>(clock::now() - t0).count();
}

void GradExchange::begin_step(i64 step) {
  step_ = step;
  result_ = Tensor::empty({P_});
  std::fill(had_.begin(), had_.end(), 0);
  for (Bucket& b : buckets_) {
    b.posted = b.folded = -1;
    b.gather.clear();
  }
  next_gather_ = 0;
}

void GradExchange::begin_micro(i64 j) {
  round_ = j;
  for (const Tensor& p : params_) p.zero_grad();
  std::fill(ready_.begin(), ready_.end(), 0);
  for (Bucket& b : buckets_) b.pending = b.nparams;
  next_post_ = 0;
}

autograd::LeafReadyHook GradExchange::hook() {
  return [this](const std::shared_ptr<TensorImpl>& leaf) {
    const auto it = index_.find(leaf.get());
    if (it != index_.end()) on_ready(it->second);
  };
}

void GradExchange::settle(Bucket& b) {
  if (round_ == 0 || b.posted != round_ - 1) return;
  wait(b.scatter_send, "sending gradients");
  if (b.folded < b.posted) {
    wait(b.scatter_recv, "the gradients");
    fold(b);
  }
}

void GradExchange::on_ready(i64 i) {
  const auto u = static_cast<std::size_t>(i);
  if (ready_[u]) return;
  Bucket& b = buckets_[static_cast<std::size_t>(bucket_of_[u])];
  settle(b);
  float* dst = g_.data() + off_[u];
  const std::shared_ptr<TensorImpl>& gi = params_[u].impl()->grad;
  if (gi) {
    const Tensor g = Tensor(gi).contiguous();
    std::memcpy(dst, g.data<float>(), static_cast<std::size_t>(numel_[u]) * sizeof(float));
    had_[u] = 1;
  } else {
    std::fill(dst, dst + numel_[u], 0.0f);
  }
  ready_[u] = 1;
  --b.pending;
  if (overlap_) {
    post_ready(false);
    progress();
  }
}

void GradExchange::end_micro() {
  for (i64 i = 0; i < static_cast<i64>(params_.size()); ++i)
    if (!ready_[static_cast<std::size_t>(i)]) on_ready(i);
  post_ready(true);
  progress();
}

void GradExchange::post_ready(bool all) {
  while (next_post_ < buckets_.size() && buckets_[next_post_].pending == 0 && (overlap_ || all))
    post(buckets_[next_post_++]);
}

void GradExchange::post(Bucket& b) {
  b.posted = round_;
  if (N_ == 1) {
    fold(b);
    return;
  }
  const i64 mine = b.cut[me_ + 1] - b.cut[me_];
  b.scatter_recv.clear();
  b.scatter_send.clear();
  for (i64 s = 0; s < N_; ++s)
    if (s != me_)
      b.scatter_recv.push_back(comm_->irecv(recv_piece(b, s), static_cast<std::size_t>(mine) * 4, static_cast<int>(s),
                                            Tag::Scatter));
  for (i64 s = 0; s < N_; ++s)
    if (s != me_)
      b.scatter_send.push_back(comm_->isend(g_.data() + b.cut[s], static_cast<std::size_t>(b.cut[s + 1] - b.cut[s]) * 4,
                                            static_cast<int>(s), Tag::Scatter));
}

void GradExchange::fold(Bucket& b) {
  const i64 c0 = b.cut[me_], n = b.cut[me_ + 1] - c0;
  float* dst = result_.data<float>() + c0;
  for (i64 src = 0; src < N_; ++src) {
    const float* x = src == me_ ? g_.data() + c0 : recv_piece(b, src);
    if (b.posted == 0 && src == 0) std::memcpy(dst, x, static_cast<std::size_t>(n) * sizeof(float));
    else add_into(dst, x, n);
  }
  b.folded = b.posted;
  if (b.folded == A_ - 1) post_gathers();
}

void GradExchange::post_gathers() {
  // In bucket order on every rank: messages between two ranks match in the order posted.
  while (next_gather_ < buckets_.size() && buckets_[next_gather_].folded == A_ - 1) {
    Bucket& b = buckets_[next_gather_++];
    if (N_ == 1) continue;
    float* r = result_.data<float>();
    for (i64 s = 0; s < N_; ++s) {
      if (s == me_) continue;
      b.gather.push_back(comm_->isend(r + b.cut[me_], static_cast<std::size_t>(b.cut[me_ + 1] - b.cut[me_]) * 4,
                                      static_cast<int>(s), Tag::Gather));
      b.gather.push_back(comm_->irecv(r + b.cut[s], static_cast<std::size_t>(b.cut[s + 1] - b.cut[s]) * 4,
                                      static_cast<int>(s), Tag::Gather));
    }
  }
}

void GradExchange::progress() {
  if (!comm_) return;
  for (Bucket& b : buckets_) {
    if (b.posted < 0 || b.folded >= b.posted) continue;
    bool all = true;
    for (Request& r : b.scatter_recv) all = comm_->test(r) && all;
    if (all) fold(b);
  }
}

std::vector<double> GradExchange::finish(const std::vector<double>& my_losses) {
  if (static_cast<i64>(my_losses.size()) != A_)
    throw ValueError("train: " + std::to_string(my_losses.size()) + " losses for " + std::to_string(A_) + " rounds");
  for (Bucket& b : buckets_)
    if (b.folded < A_ - 1) {
      wait(b.scatter_recv, "the gradients");
      fold(b);
    }
  for (Bucket& b : buckets_) {
    wait(b.gather, "the summed gradients");
    wait(b.scatter_send, "sending gradients");
  }
  std::vector<double> losses(static_cast<std::size_t>(K_));
  if (N_ == 1) {
    losses = my_losses;
  } else {
    std::string mine(reinterpret_cast<const char*>(my_losses.data()), my_losses.size() * sizeof(double));
    mine.append(had_.begin(), had_.end());
    const auto t0 = clock::now();
    const std::vector<std::string> all =
        comm_->allgather(mine, "the losses of step " + std::to_string(step_ + 1));
    waited_s_ += std::chrono::duration<double>(clock::now() - t0).count();
    for (i64 r = 0; r < N_; ++r) {
      const std::string& s = all[static_cast<std::size_t>(r)];
      if (s.size() != mine.size()) throw DistributedError("train: rank " + std::to_string(r) + " sent a malformed step summary", false);
      for (i64 j = 0; j < A_; ++j)
        std::memcpy(&losses[static_cast<std::size_t>(j * N_ + r)], s.data() + j * sizeof(double), sizeof(double));
      for (std::size_t i = 0; i < had_.size(); ++i) had_[i] |= s[static_cast<std::size_t>(A_) * sizeof(double) + i];
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!had_[i]) {
      params_[i].zero_grad();
      continue;
    }
    const Tensor& p = params_[i];
    Shape strides(p.shape().size(), 1);
    for (i64 d = static_cast<i64>(strides.size()) - 2; d >= 0; --d)
      strides[static_cast<std::size_t>(d)] = strides[static_cast<std::size_t>(d) + 1] * p.shape()[static_cast<std::size_t>(d) + 1];
    p.set_grad(make_view(result_, p.shape(), strides, off_[i]));
  }
  return losses;
}

}  // namespace qkv::train::detail
