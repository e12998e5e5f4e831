// Element types. F32 is the working type; F64 exists for references and
// gradient checks; I64 holds token ids; Bool holds masks (one byte each).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "qkv/core/error.h"

namespace qkv {

enum class DType : std::uint8_t { F32, F64, I64, Bool };

std::size_t dtype_size(DType dt);
const char* dtype_name(DType dt);  // "float32", "float64", "int64", "bool"
inline bool is_floating(DType dt) { return dt == DType::F32 || dt == DType::F64; }

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::I64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }

// Calls f.template operator()<T>() with T = float or double for dt, or throws
// TypeError naming `op`. Usage: dispatch_float(x.dtype(), "softmax", [&]<class T>() {...});
template <class F>
decltype(auto) dispatch_float(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::F32: return f.template operator()<float>();
    case DType::F64: return f.template operator()<double>();
    default:
      throw TypeError(std::string(op) + ": expected a float32 or float64 tensor, got " + dtype_name(dt));
  }
}

}  // namespace qkv
