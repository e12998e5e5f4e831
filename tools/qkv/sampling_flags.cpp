#include "sampling_flags.h"

#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>

#include "command.h"
#include "qkv/core/error.h"

namespace qkv::tool {

infer::SamplingOptions SamplingFlags::options(const infer::SamplingOptions* defaults) const {
  if (!std::isfinite(temperature) || temperature < 0)
    throw ValueError("--temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (top_k && *top_k <= 0) throw ValueError("--top-k must be >= 1, got " + std::to_string(*top_k));
  auto given = [](const CLI::Option* opt) { return opt && opt->count() > 0; };
  infer::SamplingOptions o{.temperature = temperature,
                           .top_k = top_k.value_or(0),
                           .top_p = top_p,
                           .seed = seed,
                           .min_p = min_p,
                           .repeat_penalty = repeat_penalty,
                           .repeat_last_n = repeat_last_n,
                           .frequency_penalty = frequency_penalty,
                           .presence_penalty = presence_penalty};
  if (defaults) {  // the model's advice where the command line says nothing
    if (!given(temperature_opt)) o.temperature = defaults->temperature;
    if (!given(top_k_opt)) o.top_k = defaults->top_k;
    if (!given(top_p_opt)) o.top_p = defaults->top_p;
    if (!given(min_p_opt)) o.min_p = defaults->min_p;
    if (!given(repeat_penalty_opt)) o.repeat_penalty = defaults->repeat_penalty;
    if (!given(repeat_last_n_opt)) o.repeat_last_n = defaults->repeat_last_n;
  }
  if (o.temperature == 0)  // greedy: the sampling options change nothing
    for (const auto& [opt, flag] :
         {std::pair{top_k_opt, "--top-k"}, {top_p_opt, "--top-p"}, {min_p_opt, "--min-p"}, {seed_opt, "--seed"}})
      if (given(opt))
        warn(std::string(flag) + " has no effect with greedy decoding (--temperature 0); add --temperature T > 0 to sample");
  for (const std::string& b : logit_bias) {
    // ID=BIAS, or llama.cpp's ID+BIAS / ID-BIAS.
    const auto at = b.find_first_of("=+-", 1);
    std::size_t used_id = 0, used_bias = 0;
    std::int64_t id = -1;
    double bias = 0;
    try {
      if (at == std::string::npos) throw std::invalid_argument(b);
      id = std::stoll(b.substr(0, at), &used_id);
      const std::string v = b.substr(b[at] == '=' ? at + 1 : at);
      bias = std::stod(v, &used_bias);
      if (used_id != at || used_bias != v.size() || v.empty()) throw std::invalid_argument(b);
    } catch (const std::exception&) {
      throw ValueError("--logit-bias wants TOKEN_ID=BIAS (for example 15043=-100), got '" + b + "'");
    }
    o.logit_bias.emplace_back(id, bias);
  }
  try {
    infer::check_sampling(o);
  } catch (const ValueError& e) {
    std::string why = e.what();  // "sampling: min_p must ..." -> "--min-p must ..."
    for (const auto& [lib, flag] : {std::pair{"min_p", "--min-p"}, {"repeat_penalty", "--repeat-penalty"},
                                    {"repeat_last_n", "--repeat-last-n"}, {"frequency_penalty", "--frequency-penalty"},
                                    {"presence_penalty", "--presence-penalty"}, {"logit_bias", "--logit-bias"},
                                    {"top_p", "--top-p"}, {"top_k", "--top-k"}, {"temperature", "--temperature"}})
      if (why.rfind(std::string("sampling: ") + lib, 0) == 0) why = flag + why.substr(10 + std::string(lib).size());
    throw ValueError(why);
  }
  return o;
}

void add_sampling_flags(CLI::App& sub, SamplingFlags& f) {
  f.temperature_opt =
      sub.add_option("--temperature", f.temperature, "0 = greedy; > 0 samples")->check(real_at_least(0))->capture_default_str();
  f.top_k_opt = sub.add_option("--top-k", f.top_k, "Sample among the K most likely tokens (K >= 1)");
  f.top_p_opt = sub.add_option("--top-p", f.top_p, "Sample from the smallest set of tokens with probability >= P, in (0, 1]")
                    ->check(real_range(0, 1))
                    ->capture_default_str();
  f.min_p_opt = sub.add_option("--min-p", f.min_p, "Drop tokens less likely than P x the most likely one, in [0, 1] (0 = off)")
                    ->check(real_range(0, 1));
  f.seed_opt = add_seed_option(sub, f.seed, "Seed of the sampling stream (same seed, same text)");
  f.repeat_penalty_opt = sub.add_option("--repeat-penalty", f.repeat_penalty,
                 "Divide (multiply if negative) the logits of the last --repeat-last-n tokens by R > 0 (1 = off; "
                 "llama.cpp's repeat_penalty)");
  f.repeat_last_n_opt = sub.add_option("--repeat-last-n", f.repeat_last_n, "Tokens --repeat-penalty looks back over, prompt included (-1 = all)")
      ->capture_default_str();
  sub.add_option("--frequency-penalty", f.frequency_penalty,
                 "Subtract F x (times generated) from each generated token's logit, in [-2, 2] (OpenAI's)");
  sub.add_option("--presence-penalty", f.presence_penalty,
                 "Subtract P from the logit of every token generated so far, in [-2, 2] (OpenAI's)");
  sub.add_option("--logit-bias", f.logit_bias, "TOKEN_ID=BIAS added to that token's logit (repeatable; -100 bans it)")
      ->type_name("ID=BIAS")
      ->expected(1, -1);
}

}  // namespace qkv::tool
