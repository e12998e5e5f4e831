// Continuous batching: one scheduler owns a causal LM and `slots` KV-cache slots (one KVCache of
// batch = slots), and serves any number of requests from any threads. Its thread runs steps; a
// step
//   1. retires cancelled sequences (their slots are free again at once),
//   2. admits waiting requests into free slots (first come, first served),
//   3. prefills admitted prompts: chunks of at most `prefill_chunk` tokens, one forward pass per
//      chunk, at most `prefill_chunk` prompt tokens per step in all (but always one chunk), so a
//      long prompt never holds up the running streams for more than one chunk,
//   4. decodes one token for every running sequence in one batched forward pass (sequence b in
//      slot b with n_new 1, idle slots with n_new 0), samples each with its own Sampler, and
//   5. retires the sequences that stopped (a stop token, max_new_tokens, or cancel()).
//
//   infer::Scheduler sched(model, {.slots = 8, .context = 2048});
//   auto seq = sched.submit({.prompt = ids, .max_new_tokens = 64, .stop_ids = {eos}});
//   std::vector<infer::GeneratedToken> got;
//   while (!seq->wait(got, std::chrono::milliseconds(100))) { /* stream got, got.clear() */ }
//
// A request's tokens are those it gets alone (greedy or sampled with its seed), whatever runs
// beside it: a prompt's chunks are cut at fixed offsets of its own and each runs in a forward
// pass of its own, decode passes give each sequence its own rows, and every sequence has its own
// Sampler. (This needs the model to give a sequence the same bits whatever the other rows are:
// GPT-2 computes every slot's rows, padding included, so its products always have the same
// rows; the Llama family packs the rows of the sequences that step, and a decode step takes the
// products' decode path for any row count (qgemm's rows_alone) and splits a sequence's attention
// by its own length only. Tests: Scheduler.SixteenClientsEachGetTheirTokensAlone,
// LlamaModel.DecodeStepGivesEachSequenceItsLogitsAlone, ServeGguf.ConcurrentClients*.)
//
// Letters (docs/shapes.md): S slots (the cache's batch), V vocabulary.
//
// Thread safety: submit(), stats() and every Sequence method may be called from any threads at
// once. The model is used by the scheduler's thread only (with the kernels' thread pool).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/infer/causal_lm.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/sampling.h"

namespace qkv::infer {

// submit() when the queue is full: try again later (HTTP 429).
class QueueFullError : public Error { using Error::Error; };
// submit() after shutdown() began (HTTP 503).
class ShutdownError : public Error { using Error::Error; };

struct SchedulerOptions {
  std::int64_t slots = 4;            // S: sequences decoded together (KV-cache slots), >= 1
  std::int64_t context = 0;          // positions per slot (prompt + new tokens); 0: the model's max_positions()
  std::int64_t max_queue = 64;       // requests waiting for a slot (beyond the free ones) before submit() refuses
  std::int64_t prefill_chunk = 256;  // prompt tokens per prefill forward pass, and per step in all (>= 1)
};

struct SequenceRequest {
  std::vector<std::int64_t> prompt;    // token ids, at least one
  // >= 1; prompt + max_new_tokens <= the slots' context. 0 with prompt_logprobs: the prompt is
  // scored and nothing generated (the sequence ends with FinishReason::Length).
  std::int64_t max_new_tokens = 16;
  SamplingOptions sampling;            // greedy by default; seeded draws
  std::vector<std::int64_t> stop_ids;  // tokens that end the sequence (kept in its output)
  std::int64_t logprobs = -1;          // >= 0: each token's log-probability and this many alternatives (<= 20)
  // >= 0: the prompt is scored too: every prompt token after the first gets its log-probability
  // and this many alternatives (<= 20), from the logits of the prefill (the same numbers as
  // infer/score.h gives for a window holding the whole prompt), in Sequence::prompt_logprobs().
  // Its prefill passes keep every row's logits: slots x prefill_chunk x V floats per pass; the
  // first generated token is then chosen from that head over every row, whose numbers may round
  // apart from the last row's alone by ~1e-7.
  std::int64_t prompt_logprobs = -1;
};

// One new token as the scheduler made it.
struct GeneratedToken {
  std::int64_t id = 0;
  double logprob = 0;                                  // when the request asked for logprobs
  std::vector<std::pair<std::int64_t, double>> top;    // the most likely tokens, best first
  std::chrono::steady_clock::time_point time;          // when its step ended
};

enum class FinishReason : std::uint8_t {
  None,       // still running
  Length,     // max_new_tokens generated
  Stop,       // a stop token (eos) was generated
  Cancelled,  // cancel(), or shutdown() ran out of time
  Failed,     // the forward pass threw; error() says why
};
const char* finish_reason_name(FinishReason r);  // "none" | "length" | "stop" | "cancelled" | "failed"

class Scheduler;

// A submitted request: its tokens as they come, and its end. Shared by the client (any thread)
// and the scheduler.
class Sequence {
 public:
  // Waits up to `timeout` for new tokens or the end; appends the new tokens to `out`. Returns
  // true once the sequence has ended and `out` has received its last token.
  bool wait(std::vector<GeneratedToken>& out, std::chrono::milliseconds timeout);
  // Ends the sequence at the start of the next step (FinishReason::Cancelled), freeing its slot;
  // a queued request leaves the queue. No effect once it has ended.
  void cancel() { cancel_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancel_.load(std::memory_order_relaxed); }

  // Once wait() returned true (before: None).
  FinishReason finish_reason() const;
  std::string error() const;  // the failure's message, for FinishReason::Failed
  std::int64_t prompt_tokens() const { return static_cast<std::int64_t>(request_.prompt.size()); }
  // With SequenceRequest::prompt_logprobs >= 0: prompt tokens 1 .. P - 1, scored; set once the
  // prompt is prefilled, before the first token arrives and before the end (empty for a sequence
  // that failed or was cancelled before that).
  std::vector<TokenLogprob> prompt_logprobs() const;
  const SequenceRequest& request() const { return request_; }
  std::chrono::steady_clock::time_point submitted() const { return submitted_; }

  explicit Sequence(SequenceRequest r);  // made by Scheduler::submit

 private:
  friend class Scheduler;
  void push(GeneratedToken t);                          // scheduler: a new token
  void set_prompt_logprobs(std::vector<TokenLogprob> v);  // scheduler: the prompt's scores
  void finish(FinishReason r, std::string error = {});  // scheduler: the end

  const SequenceRequest request_;
  const std::chrono::steady_clock::time_point submitted_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GeneratedToken> pending_;  // made, not yet taken by wait()
  std::vector<TokenLogprob> prompt_logprobs_;
  FinishReason reason_ = FinishReason::None;
  bool ended_ = false;
  std::string error_;
};

struct SchedulerStats {
  std::int64_t slots = 0;
  std::int64_t busy = 0;     // slots holding a sequence (prefilling or decoding)
  std::int64_t queued = 0;   // requests waiting for a slot
  std::int64_t steps = 0;    // decode forward passes so far
  std::int64_t prefill_passes = 0;
  std::int64_t prompt_tokens = 0;     // prefilled so far
  std::int64_t generated_tokens = 0;  // sampled so far
};

class Scheduler {
 public:
  // Allocates the KV cache (slots x context positions) and starts the thread. ValueError for
  // options out of range (naming them); AllocError if the cache cannot be allocated.
  Scheduler(std::shared_ptr<const CausalLM> model, const SchedulerOptions& options);
  ~Scheduler();  // shutdown(0): cancels whatever runs
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Checks the request (as check_generation: ValueError / IndexError naming the value, and
  // prompt + max_new_tokens within the slots' context) and queues it. QueueFullError when
  // max_queue requests already wait; ShutdownError after shutdown().
  std::shared_ptr<Sequence> submit(SequenceRequest request);

  // Stops accepting requests; the running and queued ones go on for up to `grace`, then the rest
  // are cancelled. Returns when the thread has stopped (every sequence has ended). Idempotent.
  void shutdown(std::chrono::milliseconds grace);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return opt_; }  // context resolved
  const CausalLM& model() const { return *model_; }
  std::int64_t cache_bytes() const { return cache_bytes_; }

 private:
  struct Active;
  void run();
  void step(std::vector<std::shared_ptr<Sequence>>& admitted);
  bool emit(Active& a, const float* logits);  // samples, pushes; true when the sequence ended
  void retire(Active& a, FinishReason r, std::string error = {});

  std::shared_ptr<const CausalLM> model_;
  SchedulerOptions opt_;
  std::int64_t cache_bytes_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  bool closing_ = false;
  std::chrono::steady_clock::time_point deadline_;  // of shutdown's grace
  SchedulerStats stats_;

  struct State;  // the scheduler thread's own: cache, slots, buffers
  std::unique_ptr<State> st_;
  std::mutex join_mu_;  // two shutdown() calls must not both join
  std::thread thread_;
};

}  // namespace qkv::infer
