// A causal LM behind a gate the test controls, for scheduler and server tests that must decide
// exactly how many forward passes run (no timing in the assertions): each pass waits for a
// permit (allow) or for the gate to open (open), then runs the wrapped model.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "qkv/infer/causal_lm.h"

namespace qkv::testing {

class GatedModel : public infer::CausalLM {
 public:
  explicit GatedModel(std::shared_ptr<const infer::CausalLM> inner) : inner_(std::move(inner)) {}
  std::int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::int64_t max_positions() const override { return inner_->max_positions(); }
  infer::KVCacheOptions cache_options(std::int64_t b, std::int64_t t) const override {
    return inner_->cache_options(b, t);
  }
  Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                        bool all_logits) const override {
    {
      std::unique_lock lk(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(lk, [&] { return open_ || permits_ > 0; });
      if (!open_) --permits_;
      ++passes_;
    }
    cv_.notify_all();
    return inner_->forward_cached(ids, n_new, cache, all_logits);
  }
  // n more passes may run.
  void allow(int n) {
    {
      std::lock_guard lk(mu_);
      permits_ += n;
    }
    cv_.notify_all();
  }
  // Every pass from now on runs.
  void open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Waits until every permit given so far was used.
  void wait_used() const {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return open_ || permits_ == 0; });
  }
  // Waits until a pass has reached the gate.
  void wait_entered() const {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return entered_ > 0; });
  }
  // Waits until a pass is held at the gate (it entered and has no permit yet).
  void wait_blocked() const {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return open_ || entered_ > passes_; });
  }
  // Passes that went through the gate.
  int passes() const {
    std::lock_guard lk(mu_);
    return passes_;
  }

 private:
  std::shared_ptr<const infer::CausalLM> inner_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable int permits_ = 0, passes_ = 0, entered_ = 0;
  bool open_ = false;
};

}  // namespace qkv::testing
