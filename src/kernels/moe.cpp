// The router of a mixture of experts (see moe.h).
#include "qkv/kernels/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "qkv/core/error.h"

namespace qkv::kernels {

void moe_route(const float* logits, std::int64_t R, std::int64_t E, std::int64_t k, const MoeRouting& routing,
               std::int32_t* experts, float* weights) {
  if (E < 1 || k < 1 || k > E || R < 0) throw ValueError("moe_route: needs 1 <= k <= E and R >= 0");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> s(static_cast<std::size_t>(E)), p(static_cast<std::size_t>(E));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (std::int64_t r = 0; r < R; ++r) {
    const float* in = logits + r * E;
    std::int32_t* ex = experts + r * k;
    float* w = weights + r * k;
    float mx = kNegInf;
    for (std::int64_t e = 0; e < E; ++e) {
      s[static_cast<std::size_t>(e)] = std::isnan(in[e]) ? kNegInf : in[e];
      mx = std::max(mx, s[static_cast<std::size_t>(e)]);
    }
    if (mx == kNegInf) {  // nothing to choose by: the first k experts, equally
      for (std::int64_t j = 0; j < k; ++j) ex[j] = static_cast<std::int32_t>(j), w[j] = routing.scale / static_cast<float>(k);
      continue;
    }
    // The values ranked: the softmax's probabilities (SoftmaxTopK) or the logits (TopKSoftmax).
    if (routing.gating == MoeGating::SoftmaxTopK) {
      float sum = 0.f;
      for (std::int64_t e = 0; e < E; ++e) sum += p[static_cast<std::size_t>(e)] = std::exp(s[static_cast<std::size_t>(e)] - mx);
      for (std::int64_t e = 0; e < E; ++e) p[static_cast<std::size_t>(e)] = p[static_cast<std::size_t>(e)] / sum;
    } else {
      p = s;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
      const float pa = p[static_cast<std::size_t>(a)], pb = p[static_cast<std::size_t>(b)];
      return pa > pb || (pa == pb && a < b);
    });
    for (std::int64_t j = 0; j < k; ++j) ex[j] = order[static_cast<std::size_t>(j)];
    if (routing.gating == MoeGating::SoftmaxTopK) {
      for (std::int64_t j = 0; j < k; ++j) w[j] = p[static_cast<std::size_t>(ex[j])];
      if (routing.renormalize) {
        float sum = 0.f;
        for (std::int64_t j = 0; j < k; ++j) sum += w[j];
        for (std::int64_t j = 0; j < k; ++j) w[j] = w[j] / sum;
      }
    } else {  // the softmax over the k chosen logits (the first is their largest)
      const float top = s[static_cast<std::size_t>(ex[0])];
      float sum = 0.f;
      for (std::int64_t j = 0; j < k; ++j) sum += w[j] = std::exp(s[static_cast<std::size_t>(ex[j])] - top);
      for (std::int64_t j = 0; j < k; ++j) w[j] = w[j] / sum;
    }
    if (routing.scale != 1.f)
      for (std::int64_t j = 0; j < k; ++j) w[j] = w[j] * routing.scale;
  }
}

}  // namespace qkv::kernels
