// KL divergence and token-probability statistics of a model against a reference (see
// kl_divergence.h): llama-perplexity's summaries, from exact sums over the whole vocabulary.
#include "qkv/infer/kl_divergence.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/infer/sampling.h"
#include "qkv/infer/score.h"

namespace qkv::infer {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double value(float x) { return std::isnan(x) ? kNegInf : static_cast<double>(x); }

// Mean of n values from their sum and sum of squares, and its uncertainty sqrt(var / (n - 1)).
std::pair<double, double> mean_and_error(double sum, double sum2, std::int64_t n) {
  const double f = sum / static_cast<double>(n);
  const double var = sum2 / static_cast<double>(n) - f * f;
  return {f, var > 0 && n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0};
}

// Linear interpolation at fraction (n - 1) of sorted values.
double percentile(const std::vector<double>& sorted, double fraction) {
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * static_cast<double>(sorted.size() - 1);
  const auto ip = static_cast<std::size_t>(p);
  const double frac = p - static_cast<double>(ip);
  return (1 - frac) * sorted[ip] + frac * sorted[std::min(ip + 1, sorted.size() - 1)];
}

std::vector<std::pair<double, double>> percentiles(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<double, double>> out;
  for (double f : kl_percentile_fractions()) out.emplace_back(f, percentile(v, f));
  return out;
}

}  // namespace

KLPosition kl_position(const float* logits, const float* ref, std::int64_t V, std::int64_t token) {
  const double lse_m = log_sum_exp(logits, V), lse_r = log_sum_exp(ref, V);
  double sum = 0;
  for (std::int64_t v = 0; v < V; ++v) {
    const double r = value(ref[v]) - lse_r;
    if (!(r > kNegInf)) continue;  // p_ref(v) = 0 (or the reference has no finite entry)
    sum += std::exp(r) * (r - (value(logits[v]) - lse_m));
  }
  KLPosition k;
  k.kl = sum;
  k.nll = -(value(logits[token]) - lse_m);
  k.nll_ref = -(value(ref[token]) - lse_r);
  k.p = std::exp(-k.nll);
  k.p_ref = std::exp(-k.nll_ref);
  k.same_top = argmax(logits, V) == argmax(ref, V);
  return k;
}

const std::vector<double>& kl_percentile_fractions() {
  static const std::vector<double> f = {1.0, 0.999, 0.99, 0.95, 0.90, 0.75, 0.5, 0.25, 0.10, 0.05, 0.01, 0.001, 0.0};
  return f;
}

void KLAccumulator::add(const KLPosition& k) {
  kl_.push_back(k.kl);
  const double dp = k.p - k.p_ref;
  dp_.push_back(dp);
  sum_kl_ += k.kl;
  sum_kl2_ += k.kl * k.kl;
  sum_dp_ += dp;
  sum_dp2_ += dp * dp;
  sum_dp4_ += dp * dp * dp * dp;
  sum_nll_ += k.nll;
  sum_nll2_ += k.nll * k.nll;
  sum_ref_ += k.nll_ref;
  sum_ref2_ += k.nll_ref * k.nll_ref;
  sum_nll_ref_ += k.nll * k.nll_ref;
  same_top_ += k.same_top ? 1 : 0;
}

KLStats KLAccumulator::stats() const {
  const std::int64_t n = count();
  if (n == 0) throw ValueError("KL divergence: no positions were compared");
  const double dn = static_cast<double>(n);
  KLStats s;
  s.count = n;
  std::tie(s.kl_mean, s.kl_mean_err) = mean_and_error(sum_kl_, sum_kl2_, n);
  s.kl_percentiles = percentiles(kl_);
  std::tie(s.dp_mean, s.dp_mean_err) = mean_and_error(sum_dp_, sum_dp2_, n);
  s.dp_percentiles = percentiles(dp_);
  const auto [mse, mse_err] = mean_and_error(sum_dp2_, sum_dp4_, n);
  s.dp_rms = std::sqrt(mse);
  s.dp_rms_err = s.dp_rms > 0 ? 0.5 / s.dp_rms * mse_err : 0.0;
  s.same_top = static_cast<double>(same_top_) / dn;
  s.same_top_err = n > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / (dn - 1)) : 0.0;
  const auto [nll, nll_err] = mean_and_error(sum_nll_, sum_nll2_, n);
  const auto [ref, ref_err] = mean_and_error(sum_ref_, sum_ref2_, n);
  s.ppl = std::exp(nll);
  s.ppl_ref = std::exp(ref);
  s.ln_ppl_ratio = nll - ref;
  // The covariance of the two means (llama.cpp's), and the Pearson correlation of the per-token
  // values (population moments).
  const double cov_pop = sum_nll_ref_ / dn - nll * ref;
  const double cov_means = n > 1 ? cov_pop / (dn - 1) : 0.0;
  s.ln_ppl_ratio_err = std::sqrt(std::max(0.0, nll_err * nll_err + ref_err * ref_err - 2 * cov_means));
  const double var_nll = sum_nll2_ / dn - nll * nll, var_ref = sum_ref2_ / dn - ref * ref;
  s.nll_correlation = var_nll > 0 && var_ref > 0 ? cov_pop / std::sqrt(var_nll * var_ref) : 0.0;
  return s;
}

}  // namespace qkv::infer
