// Batched sentence embeddings (see embed_batcher.h): a queue of tokenized calls and one worker.
#include "qkv/infer/embed_batcher.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/core/thread_signals.h"

namespace qkv::infer {

using i64 = std::int64_t;

EmbedBatcher::EmbedBatcher(std::shared_ptr<const SentenceEmbedder> embedder, const EmbedBatcherOptions& options)
    : embedder_(std::move(embedder)), opt_(options) {
  if (!embedder_) throw ValueError("EmbedBatcher: no embedder");
  if (opt_.max_batch_texts < 1)
    throw ValueError("EmbedBatcher: max_batch_texts must be >= 1, got " + std::to_string(opt_.max_batch_texts));
  if (opt_.max_queue < 0) throw ValueError("EmbedBatcher: max_queue must be >= 0, got " + std::to_string(opt_.max_queue));
  if (opt_.batch_size < 1) throw ValueError("EmbedBatcher: batch_size must be >= 1, got " + std::to_string(opt_.batch_size));
  const StopSignalsBlocked quiet;  // the batcher's thread leaves SIGINT / SIGTERM to the program
  thread_ = std::thread([this] { run(); });
}

EmbedBatcher::~EmbedBatcher() { shutdown(); }

EmbedResult EmbedBatcher::embed(const std::vector<std::string>& texts) {
  Job job;
  i64 tokens = 0;
  job.rows.reserve(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    try {
      job.rows.push_back(embedder_->tokenizer().encode_with_specials(texts[i]));
    } catch (const ValueError& e) {
      throw ValueError("text " + std::to_string(i) + ": " + e.what());
    }
    tokens += static_cast<i64>(job.rows.back().size());
  }
  return submit(std::move(job), tokens);
}

EmbedResult EmbedBatcher::embed_ids(const std::vector<std::vector<i64>>& ids) {
  const tokenize::Tokenizer& tok = embedder_->tokenizer();
  const i64 V = tok.vocab_size();
  // The specials a text gets ([CLS] and [SEP] for BERT), -1 when none.
  const i64 bos = tok.add_bos() ? tok.bos_id().value_or(-1) : -1, eos = tok.add_eos() ? tok.eos_id().value_or(-1) : -1;
  const i64 room = tok.max_length().value_or(std::numeric_limits<i64>::max()) - (bos >= 0 ? 1 : 0) - (eos >= 0 ? 1 : 0);
  Job job;
  i64 tokens = 0;
  job.rows.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::vector<i64> row;
    if (bos >= 0) row.push_back(bos);
    for (std::size_t k = 0; k < ids[i].size(); ++k) {
      const i64 id = ids[i][k];
      if (id < 0 || id >= V)
        throw IndexError("input " + std::to_string(i) + ": token id " + std::to_string(id) + " (position " + std::to_string(k) +
                         ") is out of range [0, " + std::to_string(V) + ")");
      if (static_cast<i64>(k) < room) row.push_back(id);
    }
    if (eos >= 0) row.push_back(eos);
    tokens += static_cast<i64>(row.size());
    job.rows.push_back(std::move(row));
  }
  return submit(std::move(job), tokens);
}

EmbedResult EmbedBatcher::submit(Job job, i64 tokens) {
  EmbedResult r;
  r.tokens = tokens;
  if (job.rows.empty()) {
    r.embeddings = Tensor::zeros({0, embedder_->dimension()});
    return r;
  }
  std::future<Tensor> done = job.result.get_future();
  {
    std::lock_guard lk(mu_);
    if (closing_) throw ShutdownError("EmbedBatcher: shutting down, not accepting requests");
    if (static_cast<i64>(jobs_.size()) >= opt_.max_queue + 1)
      throw QueueFullError("EmbedBatcher: the queue is full (" + std::to_string(jobs_.size()) + " calls wait)");
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
  r.embeddings = done.get();
  return r;
}

void EmbedBatcher::shutdown() {
  {
    std::lock_guard lk(mu_);
    closing_ = true;
  }
  cv_.notify_all();
  std::lock_guard jl(join_mu_);
  if (thread_.joinable()) thread_.join();
}

i64 EmbedBatcher::queued() const {
  std::lock_guard lk(mu_);
  return static_cast<i64>(jobs_.size());
}

i64 EmbedBatcher::passes() const {
  std::lock_guard lk(mu_);
  return passes_;
}

void EmbedBatcher::run() {
  std::vector<Job> batch;
  std::vector<std::vector<i64>> rows;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !jobs_.empty() || closing_; });
      if (jobs_.empty()) return;  // closing, nothing left
      // Whole calls, oldest first, while they fit in max_batch_texts (the first always goes).
      i64 texts = 0;
      while (!jobs_.empty()) {
        const i64 n = static_cast<i64>(jobs_.front().rows.size());
        if (!batch.empty() && texts + n > opt_.max_batch_texts) break;
        texts += n;
        batch.push_back(std::move(jobs_.front()));
        jobs_.pop_front();
      }
      ++passes_;
    }
    rows.clear();
    for (auto& j : batch)
      for (auto& r : j.rows) rows.push_back(std::move(r));
    try {
      const Tensor all = embedder_->embed_ids(rows, {.batch_size = opt_.batch_size});
      const i64 C = all.shape()[1];
      const float* src = all.data<float>();
      for (auto& j : batch) {
        const i64 n = static_cast<i64>(j.rows.size());
        Tensor mine = Tensor::empty({n, C});
        std::memcpy(mine.data<float>(), src, static_cast<std::size_t>(n * C) * sizeof(float));
        src += n * C;
        j.result.set_value(std::move(mine));
      }
    } catch (...) {
      for (auto& j : batch) j.result.set_exception(std::current_exception());
    }
    batch.clear();
  }
}

}  // namespace qkv::infer
