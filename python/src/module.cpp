// _qkv: the compiled part of the qkv Python package (python/qkv/ wraps it with signatures,
// docstrings and type annotations). Library errors become Python's built-in exceptions.
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"

namespace qkv::python {
namespace {

// qkv.ShapeError (python/qkv/_errors.py, a ValueError), looked up when first raised; ValueError
// if the package is not importable (the module used on its own).
PyObject* shape_error_type() {
  static PyObject* type = nullptr;  // kept for the life of the process
  if (!type) {
    PyObject* mod = PyImport_ImportModule("qkv._errors");
    if (mod) type = PyObject_GetAttrString(mod, "ShapeError");
    Py_XDECREF(mod);
    if (!type) {
      PyErr_Clear();
      return PyExc_ValueError;
    }
  }
  return type;
}

kernels::Isa isa_from_name(const std::string& name) {
  if (name == "scalar") return kernels::Isa::Scalar;
  if (name == "avx2") return kernels::Isa::Avx2;
  if (name == "avx512") return kernels::Isa::Avx512;
  throw ValueError("set_isa: isa must be 'scalar', 'avx2' or 'avx512', got '" + name + "'");
}

}  // namespace

// qkv::Error subclasses -> ValueError (ShapeError, a ValueError subclass, for shapes), TypeError,
// IndexError, MemoryError, OSError (files; a corrupt file is a ValueError). The message is the
// library's own.
void register_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(shape_error_type(), e.what());
    } catch (const TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what());
    } catch (const AllocError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (const FormatError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const IOError& e) {
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace qkv::python

NB_MODULE(_qkv, m) {
  namespace py = qkv::python;
  namespace nb = nanobind;
  m.doc() = "qkv's compiled core; use the qkv package.";
  py::register_errors(m);
  py::register_tensor(m);
  py::register_functional(m);
  py::register_embedder(m);
  py::register_language_model(m);
  py::register_bench(m);
  m.def("get_num_threads", [] { return qkv::num_threads(); },
        "Threads qkv's kernels use (the caller and its pool's workers), as torch.get_num_threads.");
  m.def("set_num_threads", [](int n) { qkv::set_num_threads(n); }, nb::arg("n"),
        "Sets the threads of qkv's kernels for the whole process (n >= 1), as torch.set_num_threads.");
  m.def("get_isa", [] { return std::string(qkv::kernels::isa_name(qkv::kernels::active_isa())); },
        "The instruction set qkv's fast kernels use: 'scalar', 'avx2' or 'avx512'.");
  m.def("set_isa", [](const std::string& isa) { qkv::kernels::set_isa(py::isa_from_name(isa)); }, nb::arg("isa"),
        "Caps the instruction set of qkv's kernels ('scalar', 'avx2', 'avx512'; clamped to what the CPU has), as "
        "$QKV_ISA does. Not while kernels run in other threads.");
}
