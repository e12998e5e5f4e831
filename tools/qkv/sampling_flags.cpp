#include "sampling_flags.h"

#include <cmath>
#include <string>

#include "command.h"
#include "qkv/core/error.h"

namespace qkv::tool {

infer::SamplingOptions SamplingFlags::options() const {
  if (!std::isfinite(temperature) || temperature < 0)
    throw ValueError("--temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (top_k && *top_k <= 0) throw ValueError("--top-k must be >= 1, got " + std::to_string(*top_k));
  if (temperature == 0)  // greedy: the sampling options change nothing
    for (const auto& [opt, flag] : {std::pair{top_k_opt, "--top-k"}, {top_p_opt, "--top-p"}, {seed_opt, "--seed"}})
      if (opt && opt->count() > 0)
        warn(std::string(flag) + " has no effect with greedy decoding (--temperature 0); add --temperature T > 0 to sample");
  infer::SamplingOptions o{.temperature = temperature, .top_k = top_k.value_or(0), .top_p = top_p, .seed = seed};
  infer::check_sampling(o);
  return o;
}

void add_sampling_flags(CLI::App& sub, SamplingFlags& f) {
  sub.add_option("--temperature", f.temperature, "0 = greedy; > 0 samples")->check(real_at_least(0))->capture_default_str();
  f.top_k_opt = sub.add_option("--top-k", f.top_k, "Sample among the K most likely tokens (K >= 1)");
  f.top_p_opt = sub.add_option("--top-p", f.top_p, "Sample from the smallest set of tokens with probability >= P, in (0, 1]")
                    ->check(real_range(0, 1))
                    ->capture_default_str();
  f.seed_opt = add_seed_option(sub, f.seed, "Seed of the sampling stream (same seed, same text)");
}

}  // namespace qkv::tool
