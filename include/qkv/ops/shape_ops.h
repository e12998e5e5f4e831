// Shape ops: views (share storage) and copies. Tensor's view methods call these.
#pragma once
#include <vector>

#include "qkv/core/tensor.h"

namespace qkv {

Tensor view(const Tensor& x, const Shape& shape);     // one dim may be -1
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, std::int64_t d0, std::int64_t d1);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor unsqueeze(const Tensor& x, std::int64_t d);
Tensor squeeze(const Tensor& x, std::int64_t d);
Tensor narrow(const Tensor& x, std::int64_t d, std::int64_t start, std::int64_t length);
Tensor select(const Tensor& x, std::int64_t d, std::int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor contiguous(const Tensor& x);
// Joins along dim; all other dims must match.
Tensor concat(const std::vector<Tensor>& xs, std::int64_t dim);
Tensor stack(const std::vector<Tensor>& xs, std::int64_t dim);
// Chunks of split_size along dim (the last may be smaller); views.
std::vector<Tensor> split(const Tensor& x, std::int64_t split_size, std::int64_t dim);

}  // namespace qkv
