// What the binding files of qkv's Python module (_qkv) share: the Python-side Tensor, moving
// arrays in and out without copies, and the registration functions of each file.
// Bindings only: every computation is a call into the library (DESIGN.md: front ends are thin).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>

#include "qkv/core/tensor.h"

namespace qkv::python {

namespace nb = nanobind;

// qkv.Tensor: a library Tensor, readonly when it views memory the source marked read-only.
struct PyTensor {
  Tensor t;
  bool readonly = false;
};

// The kind of array an argument was, so that a result goes back as the same kind.
enum class Kind { Numpy, Torch, Tensor };

struct Imported {
  Tensor t;
  Kind kind = Kind::Numpy;
  bool copied = false;  // the data was converted or copied (not a view of the argument)
  bool readonly = false;
};

// An array-like argument `arg` of `op` as a library Tensor. A qkv.Tensor, NumPy array or CPU torch
// tensor of float32/float64/int64/bool with non-negative strides and aligned data is viewed in
// place (no copy; the Tensor keeps the source alive). Anything else goes through
// qkv._arrays.convert (other float types -> float32, other integer types -> int64, Python
// sequences -> numpy.asarray; a copy), or raises TypeError/ValueError naming `op` and `arg`
// (complex or object dtypes, tensors off the CPU or requiring grad). With allow_copy false, a
// needed copy raises ValueError instead.
Imported import_array(nb::handle obj, const char* op, const char* arg, bool allow_copy = true);
// The same for an optional argument: None gives an undefined Tensor.
Imported import_optional(nb::handle obj, const char* op, const char* arg);

// A library Tensor as `kind`: a NumPy array or torch tensor viewing its memory (kept alive by
// the array), or a qkv.Tensor. Functions return results of the kind of their first array argument.
nb::object export_array(const Tensor& t, Kind kind, bool readonly = false);

// Registration of each binding file's part of the module.
void register_errors(nb::module_& m);
void register_tensor(nb::module_& m);
void register_functional(nb::module_& m);
void register_embedder(nb::module_& m);
void register_language_model(nb::module_& m);
void register_bench(nb::module_& m);

}  // namespace qkv::python
