// Shape helpers: printing, checked products, broadcasting, dim wrapping.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qkv {

using Shape = std::vector<std::int64_t>;

// "[2,5,512]"
std::string shape_str(const Shape& s);
// Product of the dims; throws AllocError on overflow or a negative dim.
std::int64_t checked_numel(const Shape& s, const char* op = "tensor");
// Row-major strides of a contiguous tensor of this shape.
Shape contiguous_strides(const Shape& s);
// Wraps a possibly negative dim into [0, rank); throws IndexError naming op.
int wrap_dim(std::int64_t dim, std::int64_t rank, const char* op);
// NumPy broadcasting of two shapes; throws ShapeError naming op, a and b.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// True when `from` broadcasts to `to` (right-aligned, sizes equal or 1).
bool broadcastable_to(const Shape& from, const Shape& to);

}  // namespace qkv
