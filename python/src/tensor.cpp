// qkv.Tensor: a library Tensor seen from Python through the buffer protocol (NumPy's
// np.asarray, memoryview) and DLPack (torch.from_dlpack, np.from_dlpack), never copied.
#include <string>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "qkv/core/error.h"

namespace qkv::python {
namespace {

const char* buffer_format(DType dt) {
  switch (dt) {
    case DType::F32: return "f";
    case DType::F64: return "d";
    case DType::I64: return "q";
    case DType::Bool: return "?";
  }
  return "B";
}

int tensor_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;
  const PyTensor* p = nb::inst_ptr<PyTensor>(self);
  const Tensor& t = p->t;
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && p->readonly) {
    PyErr_SetString(PyExc_BufferError, "qkv.Tensor: this tensor views read-only memory");
    return -1;
  }
  const bool contiguous = t.is_contiguous();
  const bool wants_c = (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||
                       (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS ||
                       (flags & PyBUF_STRIDES) != PyBUF_STRIDES;
  if (wants_c && !contiguous) {
    PyErr_SetString(PyExc_BufferError,
                    ("qkv.Tensor: a contiguous buffer was requested but this tensor " + t.shape_str() +
                     " is strided; take a strided view (np.asarray) or copy it").c_str());
    return -1;
  }
  if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && t.dim() > 1 && t.numel() > 1) {
    PyErr_SetString(PyExc_BufferError, "qkv.Tensor: tensors are not Fortran-ordered");
    return -1;
  }
  const int nd = static_cast<int>(t.dim());
  const Py_ssize_t itemsize = static_cast<Py_ssize_t>(dtype_size(t.dtype()));
  auto* dims = static_cast<Py_ssize_t*>(PyMem_Malloc(sizeof(Py_ssize_t) * (2 * static_cast<std::size_t>(nd) + 1)));
  if (!dims) {
    PyErr_NoMemory();
    return -1;
  }
  for (int i = 0; i < nd; ++i) {
    dims[i] = static_cast<Py_ssize_t>(t.shape()[i]);
    dims[nd + i] = static_cast<Py_ssize_t>(t.strides()[i]) * itemsize;
  }
  static char empty_buffer = 0;  // a valid address for tensors with no elements
  view->buf = t.numel() ? t.raw_data() : &empty_buffer;
  view->obj = Py_NewRef(self);
  view->len = static_cast<Py_ssize_t>(t.numel()) * itemsize;
  view->itemsize = itemsize;
  view->readonly = p->readonly ? 1 : 0;
  view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? const_cast<char*>(buffer_format(t.dtype())) : nullptr;
  view->ndim = nd;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? dims : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims + nd : nullptr;
  view->suboffsets = nullptr;
  view->internal = dims;
  return 0;
}

void tensor_releasebuffer(PyObject*, Py_buffer* view) { PyMem_Free(view->internal); }

PyType_Slot tensor_slots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(tensor_getbuffer)},
                              {Py_bf_releasebuffer, reinterpret_cast<void*>(tensor_releasebuffer)},
                              {0, nullptr}};

std::vector<std::int64_t> shape_of(const PyTensor& p) { return {p.t.shape().begin(), p.t.shape().end()}; }

// An ndarray of nanobind's array-API framework viewing p (owned by `self`): it implements
// __dlpack__ for every DLPack version a consumer may ask for.
nb::object dlpack_view(nb::handle self, const PyTensor& p) {
  const Tensor& t = p.t;
  const std::size_t nd = static_cast<std::size_t>(t.dim());
  std::vector<std::size_t> shape(nd);
  for (std::size_t i = 0; i < nd; ++i) shape[i] = static_cast<std::size_t>(t.shape()[i]);
  void* data = t.numel() ? t.raw_data() : nullptr;
  nb::dlpack::dtype dt;
  switch (t.dtype()) {
    case DType::F32: dt = nb::dtype<float>(); break;
    case DType::F64: dt = nb::dtype<double>(); break;
    case DType::I64: dt = nb::dtype<std::int64_t>(); break;
    case DType::Bool: dt = nb::dtype<bool>(); break;
  }
  if (p.readonly)
    return nb::ndarray<nb::array_api, nb::ro>(data, nd, shape.data(), self, t.strides().data(), dt).cast();
  return nb::ndarray<nb::array_api>(data, nd, shape.data(), self, t.strides().data(), dt).cast();
}

DType dtype_from_name(const std::string& name, const char* op) {
  if (name == "float32") return DType::F32;
  if (name == "float64") return DType::F64;
  if (name == "int64") return DType::I64;
  if (name == "bool") return DType::Bool;
  throw TypeError(std::string(op) + ": dtype must be float32, float64, int64 or bool, got " + name);
}

}  // namespace

void register_tensor(nb::module_& m) {
  nb::class_<PyTensor>(m, "Tensor", nb::type_slots(tensor_slots),
                      "An n-dimensional array of qkv (float32, float64, int64 or bool), made by qkv.asarray,\n"
                      "qkv.from_dlpack or the ops given qkv.Tensor arguments. NumPy (np.asarray, np.from_dlpack),\n"
                      "torch (torch.from_dlpack) and memoryview view its memory without a copy: it implements the\n"
                      "buffer protocol and __dlpack__ / __dlpack_device__.")
      .def_prop_ro("shape", [](const PyTensor& p) { return nb::tuple(nb::cast(shape_of(p))); },
                   nb::sig("def shape(self) -> tuple[int, ...]"), "The sizes of the dims.")
      .def_prop_ro("dtype", [](const PyTensor& p) { return std::string(dtype_name(p.t.dtype())); },
                   "'float32', 'float64', 'int64' or 'bool'.")
      .def_prop_ro("ndim", [](const PyTensor& p) { return p.t.dim(); }, "The number of dims.")
      .def_prop_ro("size", [](const PyTensor& p) { return p.t.numel(); }, "The number of elements.")
      .def_prop_ro("readonly", [](const PyTensor& p) { return p.readonly; },
                   "True when the tensor views memory its source marked read-only.")
      .def("is_contiguous", [](const PyTensor& p) { return p.t.is_contiguous(); }, "True for C order without gaps.")
      .def("data_ptr", [](const PyTensor& p) {
        return reinterpret_cast<std::uintptr_t>(p.t.numel() ? p.t.raw_data() : nullptr);
      }, "The address of the first element (as torch.Tensor.data_ptr); 0 when empty.")
      .def("numpy", [](const PyTensor& p) { return export_array(p.t, Kind::Numpy, p.readonly); },
           nb::sig("def numpy(self) -> numpy.typing.NDArray[typing.Any]"), "A NumPy array viewing the same memory.")
      .def("tolist", [](const PyTensor& p) { return export_array(p.t, Kind::Numpy, p.readonly).attr("tolist")(); },
           nb::sig("def tolist(self) -> typing.Any"), "The elements as nested Python lists.")
      .def("__len__", [](const PyTensor& p) {
        if (p.t.dim() == 0) throw TypeError("len() of a 0-d qkv.Tensor");
        return p.t.shape()[0];
      })
      .def("__repr__", [](const PyTensor& p) {
        // NumPy's repr of the same memory, "array(...)" -> "qkv.Tensor(...)"
        const std::string r = nb::repr(export_array(p.t, Kind::Numpy, p.readonly)).c_str();
        return "qkv.Tensor" + r.substr(r.find('('));
      })
      .def("__dlpack__",
           [](nb::handle self, nb::kwargs kwargs) {
             return dlpack_view(self, nb::cast<const PyTensor&>(self)).attr("__dlpack__")(**kwargs);
           },
           nb::sig("def __dlpack__(self, **kwargs: typing.Any) -> typing.Any"),
           "A DLPack capsule viewing this tensor (the array API's stream, max_version, dl_device, copy).")
      .def("__dlpack_device__", [](const PyTensor&) { return nb::make_tuple(1, 0); },
           nb::sig("def __dlpack_device__(self) -> tuple[int, int]"), "(1, 0): the CPU.");

  m.def("_asarray", [](nb::handle x, nb::handle dtype, nb::handle copy) {
    const char* op = "asarray";
    const bool must_copy = !copy.is_none() && nb::cast<bool>(copy);
    const bool may_copy = copy.is_none() || must_copy;
    Imported in = import_array(x, op, "x", may_copy);
    Tensor t = in.t;
    bool copied = in.copied;
    if (!dtype.is_none()) {
      const DType want = dtype_from_name(nb::cast<std::string>(dtype), op);
      if (want != t.dtype()) {
        if (!may_copy)
          throw ValueError(std::string(op) + ": converting " + dtype_name(t.dtype()) + " to " + dtype_name(want) +
                           " needs a copy, and copy=False was given");
        nb::gil_scoped_release release;
        t = t.to(want);
        copied = true;
      }
    }
    if (must_copy && !copied) {
      nb::gil_scoped_release release;
      t = t.clone();
      copied = true;
    }
    return PyTensor{t, in.readonly && !copied};
  }, nb::arg("x"), nb::arg("dtype").none(), nb::arg("copy").none());
  m.def("_from_dlpack", [](nb::handle x) {
    if (!nb::hasattr(x, "__dlpack__"))
      throw TypeError(std::string("from_dlpack: ") + nb::cast<std::string>(nb::str(x.type().attr("__name__"))) +
                      " does not implement __dlpack__; use qkv.asarray");
    const Imported in = import_array(x, "from_dlpack", "x", false);
    return PyTensor{in.t, in.readonly};
  }, nb::arg("x"));
}

}  // namespace qkv::python
