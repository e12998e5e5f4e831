// The drafters and the checks of speculative decoding (see speculative.h); the verification
// step is part of the generation loop (generate.cpp).
#include "qkv/infer/speculative.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "qkv/core/error.h"
#include "qkv/infer/session.h"
#include "qkv/tokenize/tokenizer.h"

namespace qkv::infer {

using i64 = std::int64_t;

NgramDrafter::NgramDrafter(i64 ngram) : ngram_(ngram) {
  if (ngram < 1 || ngram > kMaxDraftNgram)
    throw ValueError(fmt::format("prompt lookup: the n-gram length must be in [1, {}], got {}", kMaxDraftNgram, ngram));
}

void NgramDrafter::draft(i64, const std::vector<i64>& tokens, i64 k, Draft& out) {
  out.ids.clear();
  out.q.clear();
  const i64 T = static_cast<i64>(tokens.size());
  for (i64 n = std::min(ngram_, T - 1); n >= 1; --n) {
    // The last n tokens [T - n, T) against every earlier window [s, s + n), latest first; a match
    // must leave at least one token after it.
    const i64* tail = tokens.data() + (T - n);
    for (i64 s = T - n - 1; s >= 0; --s) {
      if (!std::equal(tail, tail + n, tokens.data() + s)) continue;
      const i64 from = s + n, to = std::min(T, from + k);
      out.ids.assign(tokens.begin() + from, tokens.begin() + to);
      return;
    }
  }
}

// One sequence's draft model state: its cache and tokens (a Session), and its sampler.
struct ModelDrafter::Slot {
  Session session;
  Sampler sampler;
};

ModelDrafter::ModelDrafter(std::shared_ptr<const CausalLM> model, i64 batch, i64 max_len, const SamplingOptions& sampling)
    : model_(std::move(model)), max_len_(max_len) {
  if (!model_) throw ValueError("draft model: none given");
  // The draft's own guesses: temperature and filters as the target samples, without the penalties
  // (a distribution q of its own; the rejection rule makes any q exact).
  sampling_.temperature = sampling.temperature;
  sampling_.top_k = sampling.top_k;
  sampling_.top_p = sampling.top_p;
  sampling_.min_p = sampling.min_p;
  sampling_.seed = sampling.seed + kDraftSeedOffset;
  slots_.resize(static_cast<std::size_t>(batch));
}

ModelDrafter::~ModelDrafter() = default;

void ModelDrafter::draft(i64 seq, const std::vector<i64>& tokens, i64 k, Draft& out) {
  out.ids.clear();
  out.q.clear();
  if (seq < 0 || seq >= static_cast<i64>(slots_.size()))
    throw IndexError(fmt::format("draft model: sequence {} of {}", seq, slots_.size()));
  auto& slot = slots_[static_cast<std::size_t>(seq)];
  if (!slot) slot = std::make_unique<Slot>(Slot{Session(model_, max_len_), Sampler(sampling_)});
  // Room for the guesses: the last one is never fed back.
  k = std::min(k, max_len_ - static_cast<i64>(tokens.size()) + 1);
  if (k < 1) return;
  Session& s = slot->session;
  s.sync(tokens);  // keeps the prefix still shared (a rejection's rollback), computes the rest
  const i64 V = model_->vocab_size();
  const bool greedy = sampling_.temperature == 0.0;
  for (i64 i = 0; i < k; ++i) {
    i64 id;
    if (greedy) {
      id = argmax(s.logits().data(), V);
    } else {
      const std::vector<double>& q = slot->sampler.distribution(s.logits().data(), V);
      id = sample_index(q, slot->sampler.uniform());
      out.q.push_back(q);
    }
    out.ids.push_back(id);
    if (i + 1 < k) s.push(id);
  }
}

void check_draft(const CausalLM& target, const DraftOptions& d, i64 positions) {
  if (!d.on()) return;
  const int given = (d.model != nullptr) + (d.ngram != 0) + static_cast<bool>(d.custom);
  if (given > 1) throw ValueError("draft: give one drafter (a draft model, prompt lookup or a custom drafter), not " +
                                  std::to_string(given));
  if (d.max < 1 || d.max > kMaxDraftTokens)
    throw ValueError(fmt::format("draft: the most tokens per draft must be in [1, {}], got {}", kMaxDraftTokens, d.max));
  if (d.ngram < 0 || d.ngram > kMaxDraftNgram)
    throw ValueError(fmt::format("draft: the prompt lookup n-gram length must be in [1, {}], got {}", kMaxDraftNgram, d.ngram));
  if (d.model) {
    if (d.model->vocab_size() != target.vocab_size())
      throw ValueError(fmt::format("draft: the draft model's vocabulary has {} tokens, the target's {}; a draft "
                                   "model must share the target's vocabulary",
                                   d.model->vocab_size(), target.vocab_size()));
    if (d.model->max_positions() < positions)
      throw ValueError(fmt::format("draft: the draft model holds {} positions, fewer than the {} this generation "
                                   "needs (the longest prompt and max_new_tokens)",
                                   d.model->max_positions(), positions));
  }
}

std::unique_ptr<Drafter> make_drafter(const DraftOptions& d, i64 batch, i64 max_len, const SamplingOptions& sampling) {
  if (d.custom) return d.custom(batch);
  if (d.model) return std::make_unique<ModelDrafter>(d.model, batch, max_len, sampling);
  if (d.ngram) return std::make_unique<NgramDrafter>(d.ngram);
  throw ValueError("draft: no drafter given");
}

void check_same_vocabulary(const tokenize::Tokenizer& target, const std::string& target_name,
                           const tokenize::Tokenizer& draft, const std::string& draft_name) {
  const i64 n = target.vocab_size();
  if (draft.vocab_size() != n)
    throw FormatError(fmt::format("draft '{}' has a vocabulary of {} tokens, the target '{}' one of {}; a draft must "
                                  "share the target's vocabulary",
                                  draft_name, draft.vocab_size(), target_name, n));
  for (i64 id = 0; id < n; ++id) {
    const std::string a = target.token_string(id), b = draft.token_string(id);
    if (a != b)
      throw FormatError(fmt::format("draft '{}' does not share the vocabulary of the target '{}': token {} is {:?} "
                                    "in the target, {:?} in the draft",
                                    draft_name, target_name, id, a, b));
  }
}

}  // namespace qkv::infer
