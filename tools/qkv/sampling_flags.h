// The sampling flags shared by `qkv generate`, `qkv chat` and `qkv bench generate`: one
// spelling, one meaning, one check.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "qkv/infer/sampling.h"

namespace qkv::tool {

struct SamplingFlags {
  double temperature = 0.0;
  std::optional<std::int64_t> top_k;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  double min_p = 0.0;
  double repeat_penalty = 1.0;
  std::int64_t repeat_last_n = 64;
  double frequency_penalty = 0.0;
  double presence_penalty = 0.0;
  std::vector<std::string> logit_bias;  // "ID=BIAS" (or "ID+BIAS" / "ID-BIAS", llama.cpp's spelling)
  CLI::Option* temperature_opt = nullptr;
  CLI::Option* top_k_opt = nullptr;
  CLI::Option* min_p_opt = nullptr;
  CLI::Option* top_p_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
  CLI::Option* repeat_penalty_opt = nullptr;
  CLI::Option* repeat_last_n_opt = nullptr;
  // The options, checked (ValueError naming the flag: --top-k >= 1, --temperature >= 0 and
  // finite, --top-p in (0, 1], the library's checks of the others). --top-k / --top-p / --min-p /
  // --seed given with greedy decoding (--temperature 0) have no effect: a warning each on stderr.
  // With `defaults` (a model's advice: qkv chat), the flags given on the command line replace
  // those of `defaults` and the others keep theirs; without, the flags' own defaults (greedy).
  infer::SamplingOptions options(const infer::SamplingOptions* defaults = nullptr) const;
};

// Adds --temperature, --top-k, --top-p, --min-p, --seed, --repeat-penalty, --repeat-last-n,
// --frequency-penalty, --presence-penalty and --logit-bias to `sub`.
void add_sampling_flags(CLI::App& sub, SamplingFlags& f);

}  // namespace qkv::tool
