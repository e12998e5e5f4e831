// Greedy and sampled next tokens (see sampling.h). The filters follow
// transformers' TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper and MinPLogitsWarper;
// the penalties its RepetitionPenaltyLogitsProcessor and OpenAI's documented formula.
#include "qkv/infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "qkv/core/error.h"

namespace qkv::infer {

void check_sampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0) || std::isinf(o.temperature))
    throw ValueError("sampling: temperature must be a finite number >= 0 (0 = greedy), got " +
                     std::to_string(o.temperature));
  if (o.top_k < 0) throw ValueError("sampling: top_k must be >= 0 (0 = off), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0))
    throw ValueError("sampling: top_p must be in (0, 1], got " + std::to_string(o.top_p));
  if (!(o.min_p >= 0.0 && o.min_p <= 1.0))
    throw ValueError("sampling: min_p must be in [0, 1] (0 = off), got " + std::to_string(o.min_p));
  if (!(o.repeat_penalty > 0.0) || std::isinf(o.repeat_penalty))
    throw ValueError("sampling: repeat_penalty must be a finite number > 0 (1 = off), got " + std::to_string(o.repeat_penalty));
  if (o.repeat_last_n < -1)
    throw ValueError("sampling: repeat_last_n must be >= -1 (-1 = the whole sequence, 0 = off), got " +
                     std::to_string(o.repeat_last_n));
  for (const auto& [name, v] : {std::pair{"frequency_penalty", o.frequency_penalty}, {"presence_penalty", o.presence_penalty}})
    if (!(v >= -2.0 && v <= 2.0)) throw ValueError(std::string("sampling: ") + name + " must be in [-2, 2], got " + std::to_string(v));
  for (const auto& [id, b] : o.logit_bias) {
    if (id < 0) throw ValueError("sampling: logit_bias names token " + std::to_string(id) + ", not a token id");
    if (!std::isfinite(b))
      throw ValueError("sampling: logit_bias of token " + std::to_string(id) + " must be finite, got " + std::to_string(b));
  }
}

std::int64_t argmax(const float* logits, std::int64_t V) {
  std::int64_t best = 0;
  float bv = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (std::int64_t i = 0; i < V; ++i)
    if (logits[i] > bv || (!any && logits[i] == bv)) {
      bv = logits[i];
      best = i;
      any = true;
    }
  return best;
}

Sampler::Sampler(const SamplingOptions& o) : opt_(o), gen_(o.seed) { check_sampling(o); }

void Sampler::remember(std::int64_t id, bool generated) {
  if (generated && (opt_.frequency_penalty != 0.0 || opt_.presence_penalty != 0.0)) ++generated_[id];
  if (opt_.repeat_penalty == 1.0 || opt_.repeat_last_n == 0) return;
  recent_.push_back(id);
  ++recent_count_[id];
  if (opt_.repeat_last_n > 0 && static_cast<std::int64_t>(recent_.size()) > opt_.repeat_last_n) {
    const std::int64_t old = recent_.front();
    recent_.pop_front();
    if (--recent_count_[old] == 0) recent_count_.erase(old);
  }
}

void Sampler::add_prompt(const std::int64_t* ids, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) remember(ids[i], false);
}

// The logits after the bias and the penalties (llama.cpp's order: bias, then the repetition
// penalty, then frequency and presence), in logits_; ids outside [0, V) are ignored.
const float* Sampler::adjusted(const float* logits, std::int64_t V) {
  if (!opt_.adjusts_logits()) return logits;
  logits_.assign(logits, logits + V);
  for (const auto& [id, b] : opt_.logit_bias)
    if (id < V) logits_[static_cast<std::size_t>(id)] = static_cast<float>(logits_[static_cast<std::size_t>(id)] + b);
  if (opt_.repeat_penalty != 1.0)
    for (const auto& [id, count] : recent_count_) {
      if (id < 0 || id >= V) continue;
      float& l = logits_[static_cast<std::size_t>(id)];
      l = static_cast<float>(l > 0 ? l / opt_.repeat_penalty : l * opt_.repeat_penalty);
    }
  for (const auto& [id, count] : generated_) {
    if (id < 0 || id >= V) continue;
    float& l = logits_[static_cast<std::size_t>(id)];
    l = static_cast<float>(l - static_cast<double>(count) * opt_.frequency_penalty - opt_.presence_penalty);
  }
  return logits_.data();
}

std::int64_t Sampler::next(const float* logits, std::int64_t V) {
  const std::int64_t id = choose(adjusted(logits, V), V);
  remember(id, true);
  return id;
}

// The sampled (temperature > 0) case's candidates after every filter: scratch_[i] (logit, id)
// with probability probs_[i] for i < the returned count (they sum to 1); 0 when no logit is
// finite or above -inf.
std::size_t Sampler::keep(const float* logits, std::int64_t V) {
  // Candidates sorted by logit, largest first (ties by id); NaN and -inf dropped.
  scratch_.clear();
  for (std::int64_t i = 0; i < V; ++i)
    if (logits[i] > -std::numeric_limits<float>::infinity()) scratch_.emplace_back(logits[i], i);
  if (scratch_.empty()) return 0;
  std::size_t keep = scratch_.size();
  if (opt_.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(opt_.top_k));
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  if (keep < scratch_.size()) {
    // top-k keeps every token tied with the k-th (transformers filters logits < the k-th value).
    std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(keep - 1), scratch_.end(), by_logit);
    const float kth = scratch_[keep - 1].first;
    auto end = std::partition(scratch_.begin(), scratch_.end(), [kth](const auto& a) { return a.first >= kth; });
    scratch_.erase(end, scratch_.end());
  }
  // Sorted (most likely first) only when top-p needs the cumulative order: a full sort of a
  // 50k vocabulary would cost milliseconds per token.
  if (opt_.top_p < 1.0) std::sort(scratch_.begin(), scratch_.end(), by_logit);
  // Softmax of logit / temperature in double.
  const double t = opt_.temperature;
  float top = scratch_[0].first;
  for (const auto& c : scratch_) top = std::max(top, c.first);
  std::vector<double>& p = probs_;
  p.resize(scratch_.size());
  double sum = 0;
  for (std::size_t i = 0; i < scratch_.size(); ++i) sum += (p[i] = std::exp((scratch_[i].first - top) / t));
  for (double& x : p) x /= sum;
  std::size_t n = p.size();
  if (opt_.top_p < 1.0) {
    // transformers' TopPLogitsWarper removes the tokens whose ascending cumulative probability
    // (the mass of that token and every less likely one) is <= 1 - top_p, keeping at least one.
    double tail = 0;  // mass of tokens i.. (least likely last)
    n = p.size();
    for (std::size_t i = p.size(); i-- > 1;) {
      tail += p[i];
      if (tail > 1.0 - opt_.top_p) break;
      n = i;
    }
    double kept = 0;
    for (std::size_t i = 0; i < n; ++i) kept += p[i];
    for (std::size_t i = 0; i < n; ++i) p[i] /= kept;
  }
  if (opt_.min_p > 0.0) {
    // transformers' MinPLogitsWarper: drop the tokens less likely than min_p x the most likely
    // (the ratio does not depend on the renormalisation above), keeping the order.
    double pmax = 0;
    for (std::size_t i = 0; i < n; ++i) pmax = std::max(pmax, p[i]);
    const double floor = opt_.min_p * pmax;
    std::size_t m = 0;
    double kept = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (!(p[i] < floor)) {
        p[m] = p[i];
        scratch_[m] = scratch_[i];
        kept += p[m++];
      }
    n = m;
    for (std::size_t i = 0; i < n; ++i) p[i] /= kept;
  }
  return n;
}

std::int64_t Sampler::choose(const float* logits, std::int64_t V) {
  if (opt_.temperature == 0.0 || V <= 1) return argmax(logits, V);
  const std::size_t n = keep(logits, V);
  if (n == 0) return 0;
  const std::vector<double>& p = probs_;
  const double u = gen_.uniform();
  double acc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    acc += p[i];
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[n - 1].second;
}

const std::vector<double>& Sampler::distribution(const float* logits, std::int64_t V) {
  const float* l = adjusted(logits, V);
  dense_.assign(static_cast<std::size_t>(V), 0.0);
  if (opt_.temperature == 0.0 || V <= 1) {
    dense_[static_cast<std::size_t>(argmax(l, V))] = 1.0;
    return dense_;
  }
  const std::size_t n = keep(l, V);
  if (n == 0) dense_[0] = 1.0;  // choose()'s answer when nothing is finite
  for (std::size_t i = 0; i < n; ++i) dense_[static_cast<std::size_t>(scratch_[i].second)] = probs_[i];
  return dense_;
}

std::int64_t sample_index(const std::vector<double>& p, double u) {
  double sum = 0;
  std::int64_t last = -1;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) {
      sum += p[i];
      last = static_cast<std::int64_t>(i);
    }
  if (last < 0) return -1;
  const double target = u * sum;
  double acc = 0;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0) {
      acc += p[i];
      if (target < acc) return static_cast<std::int64_t>(i);
    }
  return last;
}

double token_logprob(const float* logits, std::int64_t V, std::int64_t id,
                     std::vector<std::pair<std::int64_t, double>>* top, std::int64_t n_top) {
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < V; ++i)
    if (!std::isnan(logits[i])) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  if (std::isfinite(mx))
    for (std::int64_t i = 0; i < V; ++i)
      if (!std::isnan(logits[i])) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = std::isfinite(mx) ? mx + std::log(sum) : mx;
  auto lp = [&](std::int64_t i) {
    const double x = std::isnan(logits[i]) ? -std::numeric_limits<double>::infinity() : static_cast<double>(logits[i]);
    return std::isfinite(lse) ? x - lse : (x == lse ? 0.0 : -std::numeric_limits<double>::infinity());
  };
  if (top) {
    top->clear();
    const std::int64_t k = std::min(n_top, V);
    std::vector<std::int64_t> idx(static_cast<std::size_t>(V));
    for (std::int64_t i = 0; i < V; ++i) idx[static_cast<std::size_t>(i)] = i;
    auto better = [&](std::int64_t a, std::int64_t b) {
      const double la = lp(a), lb = lp(b);
      return la > lb || (la == lb && a < b);
    };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
    for (std::int64_t i = 0; i < k; ++i) top->emplace_back(idx[static_cast<std::size_t>(i)], lp(idx[static_cast<std::size_t>(i)]));
  }
  return lp(id);
}

}  // namespace qkv::infer
