// Arrays in and out of the library without copies: NumPy arrays and torch tensors are imported
// through DLPack (or the buffer protocol) and viewed in place; results are exported the same way.
#include <memory>
#include <optional>
#include <string>

#include <nanobind/stl/string.h>

#include "bindings.h"
#include "qkv/core/error.h"

namespace qkv::python {
namespace {

using RwArray = nb::ndarray<nb::device::cpu>;
using RoArray = nb::ndarray<nb::ro, nb::device::cpu>;

std::optional<DType> dtype_of_dlpack(nb::dlpack::dtype d) {
  if (d.lanes != 1) return std::nullopt;
  using C = nb::dlpack::dtype_code;
  if (d.code == static_cast<std::uint8_t>(C::Float) && d.bits == 32) return DType::F32;
  if (d.code == static_cast<std::uint8_t>(C::Float) && d.bits == 64) return DType::F64;
  if (d.code == static_cast<std::uint8_t>(C::Int) && d.bits == 64) return DType::I64;
  if (d.code == static_cast<std::uint8_t>(C::Bool) && d.bits == 8) return DType::Bool;
  return std::nullopt;
}

nb::dlpack::dtype dlpack_of(DType dt) {
  switch (dt) {
    case DType::F32: return nb::dtype<float>();
    case DType::F64: return nb::dtype<double>();
    case DType::I64: return nb::dtype<std::int64_t>();
    case DType::Bool: return nb::dtype<bool>();
  }
  return nb::dtype<float>();
}

// True if obj is a torch.Tensor (or a subclass, e.g. nn.Parameter). torch is never imported here:
// an object can only be a torch tensor once the user has imported torch.
bool is_torch_tensor(nb::handle obj) {
  static PyTypeObject* torch_tensor = nullptr;  // a reference kept for the life of the process
  if (!torch_tensor) {
    PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
    if (!torch) return false;
    PyObject* t = PyObject_GetAttrString(torch, "Tensor");
    if (!t || !PyType_Check(t)) {
      Py_XDECREF(t);
      PyErr_Clear();
      return false;
    }
    torch_tensor = reinterpret_cast<PyTypeObject*>(t);
  }
  return PyObject_TypeCheck(obj.ptr(), torch_tensor);
}

// Keeps an imported array (and so its source object) alive while a library Tensor views it. The
// last Tensor handle may go away on any thread, with or without the GIL: the deleter takes it.
template <class A>
std::shared_ptr<const void> hold(A arr) {
  return std::shared_ptr<const void>(new A(std::move(arr)), [](const void* p) {
    nb::gil_scoped_acquire gil;
    delete static_cast<const A*>(p);
  });
}

// A library Tensor viewing arr, or nullopt when the library cannot view it as it is (a dtype it
// does not have, a negative stride, data not aligned for its dtype).
template <class A>
std::optional<Tensor> view_of(const A& arr) {
  const std::optional<DType> dt = dtype_of_dlpack(arr.dtype());
  if (!dt) return std::nullopt;
  Shape shape(arr.ndim()), strides(arr.ndim());
  for (std::size_t i = 0; i < arr.ndim(); ++i) {
    shape[i] = static_cast<std::int64_t>(arr.shape(i));
    strides[i] = arr.stride(i);
    if (strides[i] < 0) return std::nullopt;
  }
  void* data = const_cast<void*>(static_cast<const void*>(arr.data()));
  if (reinterpret_cast<std::uintptr_t>(data) % dtype_size(*dt)) return std::nullopt;
  return Tensor::from_external(data, shape, *dt, hold(arr), strides);
}

// qkv._arrays.convert(obj, op, arg): the slow path, in Python (qkv/_arrays.py).
nb::object convert(nb::handle obj, const char* op, const char* arg) {
  static PyObject* fn = nullptr;  // kept for the life of the process
  if (!fn) fn = nb::object(nb::module_::import_("qkv._arrays").attr("convert")).release().ptr();
  return nb::borrow(fn)(obj, op, arg);
}

}  // namespace

Imported import_array(nb::handle obj, const char* op, const char* arg, bool allow_copy) {
  if (nb::isinstance<PyTensor>(obj)) {
    const PyTensor& p = nb::cast<const PyTensor&>(obj);
    return {p.t, Kind::Tensor, false, p.readonly};
  }
  const Kind kind = is_torch_tensor(obj) ? Kind::Torch : Kind::Numpy;
  // Writable first (asks the source for a versioned DLPack capsule, which says read-only); then
  // read-only sources (np.frombuffer of bytes, a broadcast_to view).
  // torch exports tensors that require grad through to_dlpack; qkv would drop their graph.
  if (kind == Kind::Torch && nb::cast<bool>(obj.attr("requires_grad"))) convert(obj, op, arg);  // raises TypeError
  RwArray rw;
  if (nb::try_cast(obj, rw, false))
    if (std::optional<Tensor> t = view_of(rw)) return {*t, kind, false, false};
  RoArray ro;
  if (!rw.is_valid() && nb::try_cast(obj, ro, false))
    if (std::optional<Tensor> t = view_of(ro)) return {*t, kind, false, true};
  nb::object converted = convert(obj, op, arg);  // raises TypeError / ValueError for what cannot be converted
  if (!allow_copy)
    throw ValueError(std::string(op) + ": " + arg + " cannot be used without a copy (" +
                     nb::cast<std::string>(nb::str(obj.type().attr("__name__"))) +
                     " of a dtype, layout or device qkv cannot view), and copy=False was given");
  if (nb::try_cast(converted, rw, false))
    if (std::optional<Tensor> t = view_of(rw)) return {*t, kind, true, false};
  throw TypeError(std::string(op) + ": " + arg + ": could not convert " +
                  nb::cast<std::string>(nb::str(obj.type().attr("__name__"))) + " to an array");
}

Imported import_optional(nb::handle obj, const char* op, const char* arg) {
  if (obj.is_none()) return {};
  return import_array(obj, op, arg);
}

nb::object export_array(const Tensor& t, Kind kind, bool readonly) {
  if (kind == Kind::Tensor) return nb::cast(PyTensor{t, readonly});
  const std::size_t nd = static_cast<std::size_t>(t.dim());
  std::vector<std::size_t> shape(nd);
  for (std::size_t i = 0; i < nd; ++i) shape[i] = static_cast<std::size_t>(t.shape()[i]);
  // The array keeps a handle of the Tensor (so its storage) until it is collected.
  nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  void* data = t.numel() ? t.raw_data() : nullptr;
  const nb::dlpack::dtype dt = dlpack_of(t.dtype());
  const std::int64_t* strides = t.strides().data();
  if (kind == Kind::Torch) {
    if (readonly)  // torch has no read-only tensors: give it a copy rather than let it write
      return nb::ndarray<nb::pytorch>(data, nd, shape.data(), owner, strides, dt).cast(nb::rv_policy::copy);
    return nb::ndarray<nb::pytorch>(data, nd, shape.data(), owner, strides, dt).cast();
  }
  if (readonly) return nb::ndarray<nb::numpy, nb::ro>(data, nd, shape.data(), owner, strides, dt).cast();
  return nb::ndarray<nb::numpy>(data, nd, shape.data(), owner, strides, dt).cast();
}

}  // namespace qkv::python
