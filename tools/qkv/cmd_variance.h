// qkv variance: why attention scores are scaled by 1/sqrt(d_k), measured.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <vector>

namespace qkv::tool {

struct VarianceOptions {
  std::int64_t trials = 10;
  std::vector<std::int64_t> dims = {2, 8, 32, 64, 128, 512};
  std::uint64_t seed = 0;
  std::int64_t rows = 128;  // softmax rows per trial
  std::int64_t len = 16;    // keys per row (L); pairs per trial = rows * len
  bool json = false;        // one JSON object per d_k, one per line
  bool progress = true;     // progress bar on stderr
};

// Per d_k and trial: rows x len scores q.k with q, k ~ N(0, I_{d_k}) (one q
// per row, len keys), their variance unscaled and scaled by 1/sqrt(d_k), and
// the mean max weight and entropy of the row softmax either way.
int run_variance(const VarianceOptions& opt, std::ostream& out);

}  // namespace qkv::tool
