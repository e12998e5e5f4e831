// Batched sentence embeddings for a server: many small embed() calls from many threads become
// few forward passes. Calls tokenize their texts on their own thread and queue them; one worker
// thread takes everything queued (up to max_batch_texts texts) and runs it through
// SentenceEmbedder::embed_ids in one go, then hands each call its rows. A text's embedding is
// bitwise the one it gets alone (SentenceEmbedder computes no padding).
//
//   infer::EmbedBatcher batcher(std::make_shared<infer::SentenceEmbedder>(
//       infer::SentenceEmbedder::from_folder("models/all-MiniLM-L6-v2")));
//   auto r = batcher.embed({"a sentence", "another"});   // r.embeddings [2, C], r.tokens
//
// Thread safety: embed(), queued() and shutdown() may be called from any threads at once.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/scheduler.h"  // QueueFullError, ShutdownError

namespace qkv::infer {

struct EmbedBatcherOptions {
  std::int64_t max_batch_texts = 256;  // texts per worker pass (a larger single call runs alone)
  std::int64_t max_queue = 64;         // calls waiting before embed() refuses (QueueFullError)
  std::int64_t batch_size = 32;        // SentenceEmbedder's batches inside a pass
};

struct EmbedResult {
  Tensor embeddings;       // F32 [N, C], in the order of the texts
  std::int64_t tokens = 0; // over all texts, [CLS] and [SEP] included
};

class EmbedBatcher {
 public:
  EmbedBatcher(std::shared_ptr<const SentenceEmbedder> embedder, const EmbedBatcherOptions& options = {});
  ~EmbedBatcher();  // shutdown()
  EmbedBatcher(const EmbedBatcher&) = delete;
  EmbedBatcher& operator=(const EmbedBatcher&) = delete;

  // Blocks until the texts are embedded. ValueError naming the text ("text 2: ...") that is not
  // UTF-8; QueueFullError when max_queue calls already wait; ShutdownError after shutdown().
  EmbedResult embed(const std::vector<std::string>& texts);
  // The same for texts given as token ids of the model's vocabulary (what tokenize().encode gives:
  // no [CLS] / [SEP]), which are added and the row truncated as for a text. IndexError naming
  // the input and the id outside the vocabulary.
  EmbedResult embed_ids(const std::vector<std::vector<std::int64_t>>& ids);

  // Stops accepting calls, finishes the queued ones and stops the worker. Idempotent.
  void shutdown();

  std::int64_t queued() const;
  std::int64_t passes() const;  // worker passes so far (each one call or several)
  const SentenceEmbedder& embedder() const { return *embedder_; }

 private:
  struct Job {
    std::vector<std::vector<std::int64_t>> rows;
    std::promise<Tensor> result;
  };
  void run();
  EmbedResult submit(Job job, std::int64_t tokens);

  std::shared_ptr<const SentenceEmbedder> embedder_;
  EmbedBatcherOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool closing_ = false;
  std::int64_t passes_ = 0;
  std::mutex join_mu_;
  std::thread thread_;
};

}  // namespace qkv::infer
