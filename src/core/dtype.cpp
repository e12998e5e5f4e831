#include "qkv/core/dtype.h"

#include <limits>

#include "qkv/core/shape.h"

namespace qkv {

std::size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

const char* dtype_name(DType dt) {
  switch (dt) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I64: return "int64";
    case DType::Bool: return "bool";
  }
  return "?";
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::int64_t checked_numel(const Shape& s, const char* op) {
  std::int64_t n = 1;
  for (std::int64_t d : s) {
    if (d < 0) throw ShapeError(std::string(op) + ": negative dimension in shape " + shape_str(s));
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d)
      throw AllocError(std::string(op) + ": shape " + shape_str(s) + " has more elements than fit in int64");
    n *= d;
  }
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  std::int64_t acc = 1;
  for (std::size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<std::int64_t>(s[i], 1);
  }
  return st;
}

int wrap_dim(std::int64_t dim, std::int64_t rank, const char* op) {
  const std::int64_t r = std::max<std::int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    throw IndexError(std::string(op) + ": dim " + std::to_string(dim) + " is out of range for a tensor of rank " +
                     std::to_string(rank) + " (expected in [" + std::to_string(-r) + ", " + std::to_string(r - 1) + "])");
  return static_cast<int>(dim < 0 ? dim + r : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const std::int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                       " do not broadcast (dim " + std::to_string(static_cast<std::int64_t>(i) - static_cast<std::int64_t>(n)) +
                       ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

bool broadcastable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const std::size_t off = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[i + off]) return false;
  return true;
}

}  // namespace qkv
