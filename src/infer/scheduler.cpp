// Continuous batching (see scheduler.h): the scheduler thread's loop of steps over the slots of
// one KV cache.
#include "qkv/infer/scheduler.h"

#include <algorithm>
#include <optional>

#include "qkv/core/parallel.h"
#include "qkv/core/thread_signals.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/infer/score.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;
using Clock = std::chrono::steady_clock;

}  // namespace

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::None: return "none";
    case FinishReason::Length: return "length";
    case FinishReason::Stop: return "stop";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Failed: return "failed";
  }
  return "?";
}

// ---- Sequence ----

Sequence::Sequence(SequenceRequest r) : request_(std::move(r)), submitted_(Clock::now()) {}

bool Sequence::wait(std::vector<GeneratedToken>& out, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !pending_.empty() || ended_; });
  if (out.empty()) {
    out.swap(pending_);  // the caller's cleared buffer becomes ours: no allocation once warm
  } else {
    std::move(pending_.begin(), pending_.end(), std::back_inserter(out));
  }
  pending_.clear();
  return ended_;
}

FinishReason Sequence::finish_reason() const {
  std::lock_guard lk(mu_);
  return reason_;
}

std::string Sequence::error() const {
  std::lock_guard lk(mu_);
  return error_;
}

void Sequence::push(GeneratedToken t) {
  {
    std::lock_guard lk(mu_);
    pending_.push_back(std::move(t));
  }
  cv_.notify_all();
}

std::vector<TokenLogprob> Sequence::prompt_logprobs() const {
  std::lock_guard lk(mu_);
  return prompt_logprobs_;
}

void Sequence::set_prompt_logprobs(std::vector<TokenLogprob> v) {
  std::lock_guard lk(mu_);
  prompt_logprobs_ = std::move(v);
}

void Sequence::finish(FinishReason r, std::string error) {
  {
    std::lock_guard lk(mu_);
    if (ended_) return;
    reason_ = r;
    error_ = std::move(error);
    ended_ = true;
  }
  cv_.notify_all();
}

// ---- the scheduler thread's state ----

struct Scheduler::Active {
  std::shared_ptr<Sequence> seq;
  Sampler sampler;
  i64 slot = 0;
  i64 prefilled = 0;   // prompt tokens in the cache
  i64 generated = 0;
  i64 next = 0;        // the last sampled token, fed by the next decode pass
  bool decoding = false;
  std::vector<TokenLogprob> prompt_scores;  // with prompt_logprobs: the prompt's tokens scored so far
};

struct Scheduler::State {
  KVCache cache;
  std::vector<std::optional<Active>> slot;  // [S]: the sequence in each slot
  std::deque<i64> prefilling;               // slots whose prompt is not all in the cache, admission order
  Tensor decode_ids;                        // I64 [S, 1], reused every step
  std::vector<i64> n_new;                   // [S], reused
  explicit State(const KVCacheOptions& o) : cache(o) {}
};

Scheduler::Scheduler(std::shared_ptr<const CausalLM> model, const SchedulerOptions& options)
    : model_(std::move(model)), opt_(options) {
  if (!model_) throw ValueError("Scheduler: no model");
  const i64 P = model_->max_positions();
  if (opt_.slots < 1) throw ValueError("Scheduler: slots must be >= 1, got " + std::to_string(opt_.slots));
  if (opt_.max_queue < 0) throw ValueError("Scheduler: max_queue must be >= 0, got " + std::to_string(opt_.max_queue));
  if (opt_.prefill_chunk < 1)
    throw ValueError("Scheduler: prefill_chunk must be >= 1, got " + std::to_string(opt_.prefill_chunk));
  if (opt_.context < 0 || opt_.context > P)
    throw ValueError("Scheduler: context must be in [1, " + std::to_string(P) + "] (the model's positions), got " +
                     std::to_string(opt_.context));
  if (opt_.context == 0) opt_.context = P;
  // The slots' caches written once now: no page faults while serving (see KVCacheOptions).
  KVCacheOptions co = model_->cache_options(opt_.slots, opt_.context);
  co.populate = true;
  st_ = std::make_unique<State>(co);
  cache_bytes_ = st_->cache.bytes();
  st_->slot.resize(static_cast<std::size_t>(opt_.slots));
  st_->decode_ids = Tensor::zeros({opt_.slots, 1}, DType::I64);
  st_->n_new.assign(static_cast<std::size_t>(opt_.slots), 0);
  stats_.slots = opt_.slots;
  const StopSignalsBlocked quiet;  // the scheduler's thread leaves SIGINT / SIGTERM to the program
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { shutdown(std::chrono::milliseconds(0)); }

std::shared_ptr<Sequence> Scheduler::submit(SequenceRequest r) {
  const i64 n = static_cast<i64>(r.prompt.size());
  if (r.prompt_logprobs < -1 || r.prompt_logprobs > kMaxTopLogprobs)
    throw ValueError("Scheduler: prompt_logprobs must be in [0, " + std::to_string(kMaxTopLogprobs) +
                     "] (or -1 for none), got " + std::to_string(r.prompt_logprobs));
  if (r.max_new_tokens == 0 && r.prompt_logprobs < 0)
    throw ValueError("Scheduler: max_new_tokens 0 generates nothing; it goes with prompt_logprobs (the prompt scored)");
  if (r.max_new_tokens >= 0 && n >= 1 && n + r.max_new_tokens > opt_.context)
    throw ValueError("Scheduler: the prompt has " + std::to_string(n) + " tokens; with max_new_tokens " +
                     std::to_string(r.max_new_tokens) + " that is " + std::to_string(n + r.max_new_tokens) +
                     " positions, more than the context of " + std::to_string(opt_.context));
  if (r.max_new_tokens == 0)
    check_token_ids(*model_, r.prompt, "the prompt");  // a prompt scored alone: its length is checked above
  else
    check_generation(*model_, {r.prompt},
                     GenerationOptions{.max_new_tokens = r.max_new_tokens, .sampling = r.sampling,
                                       .stop_ids = r.stop_ids, .logprobs = r.logprobs});
  auto seq = std::make_shared<Sequence>(std::move(r));
  {
    std::lock_guard lk(mu_);
    if (closing_) throw ShutdownError("Scheduler: shutting down, not accepting requests");
    const i64 free = stats_.slots - stats_.busy;
    if (static_cast<i64>(waiting_.size()) >= opt_.max_queue + std::max<i64>(free, 0))
      throw QueueFullError("Scheduler: the queue is full (" + std::to_string(waiting_.size()) + " requests wait for " +
                           std::to_string(opt_.slots) + " slots)");
    waiting_.push_back(seq);
    stats_.queued = static_cast<i64>(waiting_.size());
  }
  cv_.notify_all();
  return seq;
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lk(mu_);
    if (!closing_) {
      closing_ = true;
      deadline_ = Clock::now() + grace;
    } else {
      deadline_ = std::min(deadline_, Clock::now() + grace);
    }
  }
  cv_.notify_all();
  std::lock_guard jl(join_mu_);
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void Scheduler::run() {
  std::vector<std::shared_ptr<Sequence>> admitted;
  admitted.reserve(static_cast<std::size_t>(opt_.slots));
  for (;;) {
    // 1. Cancelled sequences leave first: their slots go to this step's admissions.
    for (auto& a : st_->slot)
      if (a && a->seq->cancelled()) retire(*a, FinishReason::Cancelled);
    bool expired = false;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !waiting_.empty() || stats_.busy > 0 || closing_; });
      expired = closing_ && Clock::now() >= deadline_;
      // Queued requests that were cancelled (or that shutdown's grace left behind) end here.
      for (auto it = waiting_.begin(); it != waiting_.end();) {
        if (expired || (*it)->cancelled()) {
          (*it)->finish(FinishReason::Cancelled);
          it = waiting_.erase(it);
        } else {
          ++it;
        }
      }
      // 2. Admissions (first come, first served) into the free slots.
      while (stats_.busy + static_cast<i64>(admitted.size()) < opt_.slots && !waiting_.empty()) {
        admitted.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      stats_.busy += static_cast<i64>(admitted.size());
      stats_.queued = static_cast<i64>(waiting_.size());
      if (closing_ && stats_.busy == 0 && waiting_.empty()) return;
    }
    if (expired) {
      for (auto& a : st_->slot)
        if (a) retire(*a, FinishReason::Cancelled);
      continue;
    }
    step(admitted);
    admitted.clear();
  }
}

void Scheduler::retire(Active& a, FinishReason r, std::string error) {
  const i64 s = a.slot;
  std::shared_ptr<Sequence> seq = std::move(a.seq);
  st_->cache.reset(s);
  auto& pf = st_->prefilling;
  pf.erase(std::remove(pf.begin(), pf.end(), s), pf.end());
  st_->slot[static_cast<std::size_t>(s)].reset();  // `a` is gone from here on
  {
    std::lock_guard lk(mu_);
    --stats_.busy;  // before the client can see the end
  }
  seq->finish(r, std::move(error));
}

bool Scheduler::emit(Active& a, const float* logits) {
  const SequenceRequest& rq = a.seq->request();
  const i64 V = model_->vocab_size();
  GeneratedToken t;
  t.id = a.sampler.next(logits, V);
  if (rq.logprobs >= 0) t.logprob = token_logprob(logits, V, t.id, &t.top, rq.logprobs);
  t.time = Clock::now();
  a.next = t.id;
  ++a.generated;
  const bool stop = std::find(rq.stop_ids.begin(), rq.stop_ids.end(), t.id) != rq.stop_ids.end();
  {
    std::lock_guard lk(mu_);
    ++stats_.generated_tokens;
  }
  a.seq->push(std::move(t));
  if (stop) {
    retire(a, FinishReason::Stop);
    return true;
  }
  if (a.generated >= rq.max_new_tokens) {
    retire(a, FinishReason::Length);
    return true;
  }
  return false;
}

void Scheduler::step(std::vector<std::shared_ptr<Sequence>>& admitted) {
  State& st = *st_;
  const i64 S = opt_.slots, V = model_->vocab_size();

  // 2. Admissions take the lowest free slots.
  for (auto& seq : admitted) {
    i64 s = 0;
    while (st.slot[static_cast<std::size_t>(s)]) ++s;  // run() admitted no more than the free slots
    st.cache.reset(s);
    Active& a = st.slot[static_cast<std::size_t>(s)].emplace(
        Active{.seq = seq, .sampler = Sampler(seq->request().sampling), .slot = s});
    a.sampler.add_prompt(seq->request().prompt.data(), static_cast<i64>(seq->request().prompt.size()));
    st.prefilling.push_back(s);
  }

  // 3. Prefill: whole chunks at fixed offsets of each prompt, one forward pass each, within the
  // step's budget of prefill_chunk tokens (the first chunk always runs).
  i64 budget = opt_.prefill_chunk;
  bool first = true;
  while (!st.prefilling.empty()) {
    Active& a = *st.slot[static_cast<std::size_t>(st.prefilling.front())];
    const std::vector<i64>& prompt = a.seq->request().prompt;
    const i64 P = static_cast<i64>(prompt.size());
    const i64 n = std::min(opt_.prefill_chunk, P - a.prefilled);
    if (!first && n > budget) break;
    first = false;
    budget -= n;
    Tensor ids = Tensor::zeros({S, n}, DType::I64);
    std::copy(prompt.begin() + a.prefilled, prompt.begin() + a.prefilled + n, ids.data<i64>() + a.slot * n);
    std::fill(st.n_new.begin(), st.n_new.end(), 0);
    st.n_new[static_cast<std::size_t>(a.slot)] = n;
    // A prompt that is scored keeps every row's logits: row t scores prompt token prefilled + t + 1.
    const SequenceRequest& rq = a.seq->request();
    const bool score = rq.prompt_logprobs >= 0;
    Tensor logits;
    try {
      logits = model_->forward_cached(ids, st.n_new, st.cache, score).contiguous();
    } catch (const std::exception& e) {
      retire(a, FinishReason::Failed, e.what());
      continue;
    }
    const float* rows = logits.data<float>() + a.slot * (score ? n : 1) * V;
    if (score) {
      const i64 from = a.prefilled, scored = std::min(n, P - 1 - from);
      const std::size_t at = a.prompt_scores.size();
      a.prompt_scores.resize(at + static_cast<std::size_t>(std::max<i64>(scored, 0)));
      parallel_for(0, std::max<i64>(scored, 0), 1, [&](i64 t0, i64 t1) {
        for (i64 t = t0; t < t1; ++t) {
          TokenLogprob& lp = a.prompt_scores[at + static_cast<std::size_t>(t)];
          lp.id = prompt[static_cast<std::size_t>(from + t + 1)];
          lp.logprob = token_logprob(rows + t * V, V, lp.id, &lp.top, rq.prompt_logprobs);
        }
      });
    }
    a.prefilled += n;
    {
      std::lock_guard lk(mu_);
      ++stats_.prefill_passes;
      stats_.prompt_tokens += n;
    }
    if (a.prefilled < P) continue;  // the next chunk, if the budget allows
    st.prefilling.pop_front();
    if (score) a.seq->set_prompt_logprobs(std::move(a.prompt_scores));  // before the first token or the end
    if (rq.max_new_tokens == 0) {
      retire(a, FinishReason::Length);
      continue;
    }
    if (!emit(a, rows + (score ? n - 1 : 0) * V)) a.decoding = true;
  }

  // 4. Decode: one token for every running sequence, one forward pass.
  i64* ids = st.decode_ids.data<i64>();
  bool any = false;
  for (i64 s = 0; s < S; ++s) {
    const auto& a = st.slot[static_cast<std::size_t>(s)];
    const bool run = a && a->decoding;
    st.n_new[static_cast<std::size_t>(s)] = run ? 1 : 0;
    ids[s] = run ? a->next : 0;
    any = any || run;
  }
  if (!any) return;
  Tensor logits;
  try {
    logits = model_->forward_cached(st.decode_ids, st.n_new, st.cache).contiguous();
  } catch (const std::exception& e) {
    for (auto& a : st.slot)
      if (a && a->decoding) retire(*a, FinishReason::Failed, e.what());
    return;
  }
  {
    std::lock_guard lk(mu_);
    ++stats_.steps;
  }
  const float* L = logits.data<float>();
  // 5. Each running sequence samples its token; those that stop leave.
  for (i64 s = 0; s < S; ++s) {
    auto& a = st.slot[static_cast<std::size_t>(s)];
    if (a && a->decoding && st.n_new[static_cast<std::size_t>(s)] == 1) emit(*a, L + s * V);
  }
}

}  // namespace qkv::infer
