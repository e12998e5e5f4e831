// Iteration over strided tensors in C order.
#pragma once
#include <cstdint>
#include <vector>

#include "qkv/core/shape.h"

namespace qkv {

// Calls fn(offset) for every element of a tensor with this shape/strides, in
// C order; offset is in elements relative to the tensor's first element.
template <class F>
void for_each_offset(const Shape& shape, const Shape& strides, F&& fn) {
  const std::size_t r = shape.size();
  for (auto s : shape)
    if (s == 0) return;
  if (r == 0) {
    fn(std::int64_t{0});
    return;
  }
  std::vector<std::int64_t> idx(r, 0);
  std::int64_t off = 0;
  const std::int64_t inner = shape[r - 1], inner_stride = strides[r - 1];
  while (true) {
    for (std::int64_t i = 0; i < inner; ++i) fn(off + i * inner_stride);
    // advance the outer index
    std::size_t d = r - 1;
    while (true) {
      if (d == 0) return;
      --d;
      ++idx[d];
      off += strides[d];
      if (idx[d] < shape[d]) break;
      off -= strides[d] * shape[d];
      idx[d] = 0;
    }
  }
}

// Calls fn(offset_a, offset_b) jointly over two stride sets of one shape.
template <class F>
void for_each_offset2(const Shape& shape, const Shape& sa, const Shape& sb, F&& fn) {
  const std::size_t r = shape.size();
  for (auto s : shape)
    if (s == 0) return;
  if (r == 0) {
    fn(std::int64_t{0}, std::int64_t{0});
    return;
  }
  std::vector<std::int64_t> idx(r, 0);
  std::int64_t oa = 0, ob = 0;
  const std::int64_t inner = shape[r - 1];
  while (true) {
    for (std::int64_t i = 0; i < inner; ++i) fn(oa + i * sa[r - 1], ob + i * sb[r - 1]);
    std::size_t d = r - 1;
    while (true) {
      if (d == 0) return;
      --d;
      ++idx[d];
      oa += sa[d];
      ob += sb[d];
      if (idx[d] < shape[d]) break;
      oa -= sa[d] * shape[d];
      ob -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
}

// Strides of a tensor (shape, strides) broadcast to `to` (0 on broadcast dims).
inline Shape broadcast_strides(const Shape& shape, const Shape& strides, const Shape& to) {
  Shape out(to.size(), 0);
  const std::size_t off = to.size() - shape.size();
  for (std::size_t i = 0; i < shape.size(); ++i) out[off + i] = shape[i] == 1 ? 0 : strides[i];
  return out;
}

}  // namespace qkv
