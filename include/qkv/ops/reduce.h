// Reductions. Summation order is fixed, so results are reproducible.
#pragma once
#include "qkv/core/tensor.h"

namespace qkv {

Tensor sum(const Tensor& a);                                            // rank-0 result
Tensor sum(const Tensor& a, const Shape& dims, bool keepdim = false);
Tensor mean(const Tensor& a);
Tensor mean(const Tensor& a, const Shape& dims, bool keepdim = false);
// Maximum along dim (values; gradient flows to the first maximal element).
Tensor amax(const Tensor& a, std::int64_t dim, bool keepdim = false);
// Index of the maximum along dim (I64, no gradient; first on ties).
Tensor argmax(const Tensor& a, std::int64_t dim, bool keepdim = false);

}  // namespace qkv
