// Matrix products.
#pragma once
#include "qkv/core/tensor.h"

namespace qkv {

// a [..., M, K] @ b [..., K, N] -> [broadcast(...), M, N]; 1-D operands as in
// torch.matmul (a [K] is a row vector, b [K] a column vector; the added dim is removed).
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T + bias[out] -> [..., out]. bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace qkv
