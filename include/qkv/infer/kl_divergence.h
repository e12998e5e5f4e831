// How far a model's predictions are from a reference's on the same tokens (a quantized copy
// against the float model, say): the statistics llama-perplexity's --kl-divergence prints, from
// each scored position's full distribution of both (the reference's saved by
// infer/logprob_file.h).
//
// Per scored position, with the reference's log-probabilities r (renormalised in float64, so a
// float32 file gives a distribution) and the model's m = log_softmax(logits) in float64:
//   KL      sum over the whole vocabulary of p_r(v) (r(v) - m(v)), in nats (KL(reference || model),
//           llama.cpp's direction; llama.cpp skips the tokens with r(v) <= -16, qkv sums them all)
//   delta-p p_model(correct) - p_ref(correct), the probability of the text's token
//   same top whether both give the largest probability to the same token (the first on ties)
//   nll     -m(correct) and -r(correct)
//
// Summaries (as llama.cpp computes them): means with their uncertainty sqrt(var / (n - 1)); the
// percentiles of KL and delta-p, linearly interpolated at fraction (n - 1) (the median is the
// 0.5 one); RMS delta-p = sqrt(mean delta-p^2) with 0.5 / RMS times the uncertainty of the mean
// square; the share of same top tokens with sqrt(f (1 - f) / (n - 1)); both perplexities, the log
// of their ratio with its uncertainty, and the Pearson correlation of the per-token nll of the
// two models (llama.cpp's "Cor(ln(PPL(Q)), ln(PPL(base)))").
//
// Thread safety: an accumulator is used by one thread; kl_position is pure.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace qkv::infer {

// One scored position compared.
struct KLPosition {
  double kl = 0;
  double nll = 0, nll_ref = 0;
  double p = 0, p_ref = 0;  // of the correct token
  bool same_top = false;
};

// logits [V] (the model's, float32), ref_logprobs [V] (float32), the text's token at this position.
// NaN logits count as -inf, as in token_logprob (infer/sampling.h).
KLPosition kl_position(const float* logits, const float* ref_logprobs, std::int64_t V, std::int64_t token);

// The fractions the percentiles are reported at, largest first: 1 (the maximum), 0.999, 0.99,
// 0.95, 0.90, 0.75, 0.5 (the median), 0.25, 0.10, 0.05, 0.01, 0.001, 0 (the minimum).
const std::vector<double>& kl_percentile_fractions();

struct KLStats {
  std::int64_t count = 0;
  double kl_mean = 0, kl_mean_err = 0;
  std::vector<std::pair<double, double>> kl_percentiles;  // (fraction, value), kl_percentile_fractions()
  double dp_mean = 0, dp_mean_err = 0;                    // delta-p (a probability, not a percentage)
  std::vector<std::pair<double, double>> dp_percentiles;
  double dp_rms = 0, dp_rms_err = 0;
  double same_top = 0, same_top_err = 0;                  // a fraction in [0, 1]
  double ppl = 0, ppl_ref = 0;                            // exp(mean nll) of the model and the reference
  double ln_ppl_ratio = 0, ln_ppl_ratio_err = 0;          // ln(ppl / ppl_ref)
  double nll_correlation = 0;                             // Pearson, of the per-token nll (0 when undefined)
};

class KLAccumulator {
 public:
  void add(const KLPosition& k);
  std::int64_t count() const { return static_cast<std::int64_t>(kl_.size()); }
  // The summaries; ValueError when nothing was added.
  KLStats stats() const;

 private:
  std::vector<double> kl_, dp_;
  double sum_kl_ = 0, sum_kl2_ = 0, sum_dp_ = 0, sum_dp2_ = 0, sum_dp4_ = 0;
  double sum_nll_ = 0, sum_nll2_ = 0, sum_ref_ = 0, sum_ref2_ = 0, sum_nll_ref_ = 0;
  std::int64_t same_top_ = 0;
};

}  // namespace qkv::infer
