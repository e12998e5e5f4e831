"""qkv.Tensor, asarray and from_dlpack: zero-copy round trips, conversions, dtype and layout errors."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import qkv


def addr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_asarray_views_numpy_memory_and_back(dtype: type) -> None:
    x = np.arange(24).reshape(2, 3, 4).astype(dtype)
    t = qkv.asarray(x)
    assert t.data_ptr() == addr(x)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.size == 24 and len(t) == 2
    assert t.dtype == np.dtype(dtype).name
    # buffer protocol, np.from_dlpack, .numpy(), memoryview: all the same memory
    for view in (np.asarray(t), np.from_dlpack(t), t.numpy()):
        assert addr(view) == addr(x)
        assert view.dtype == x.dtype and view.shape == x.shape
        np.testing.assert_array_equal(view, x)
    m = memoryview(t)
    assert m.shape == (2, 3, 4) and m.nbytes == x.nbytes
    # writes through one view are seen by the other (it is one buffer)
    np.asarray(t)[0, 0, 0] = 1
    assert x[0, 0, 0] == 1


def test_tensor_keeps_its_source_alive() -> None:
    x = np.arange(6, dtype=np.float32)
    t = qkv.asarray(x)
    p = addr(x)
    del x
    gc.collect()
    a = np.asarray(t)
    assert addr(a) == p
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32))


def test_results_outlive_their_inputs_and_tensors() -> None:
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    y = qkv.softmax(x, -1)
    ref = np.exp(x) / np.exp(x).sum(-1, keepdims=True)
    del x
    gc.collect()
    np.testing.assert_allclose(y, ref, rtol=1e-6)
    t = qkv.softmax(qkv.asarray(ref), -1)
    a = np.asarray(t)
    del t
    gc.collect()
    assert a.shape == (3, 4) and np.isfinite(a).all()


def test_strided_views_are_not_copied() -> None:
    x = np.random.default_rng(0).standard_normal((4, 6, 8)).astype(np.float32)
    v = x[:, ::2, 1:7].transpose(2, 0, 1)  # non-contiguous, positive strides
    t = qkv.asarray(v)
    assert t.data_ptr() == addr(v) and not t.is_contiguous()
    np.testing.assert_array_equal(np.asarray(t), v)
    # a strided tensor does not pretend to be contiguous
    with pytest.raises(BufferError):
        np.frombuffer(t, np.float32)
    # ops read strided inputs as they are
    np.testing.assert_allclose(qkv.softmax(v, -1), qkv.softmax(np.ascontiguousarray(v), -1), rtol=0, atol=0)


def test_read_only_sources_stay_read_only() -> None:
    x = np.frombuffer(np.arange(8, dtype=np.float32).tobytes(), dtype=np.float32)
    assert not x.flags.writeable
    t = qkv.asarray(x)
    assert t.readonly and t.data_ptr() == addr(x)
    assert not np.asarray(t).flags.writeable
    with pytest.raises(TypeError, match="not writable"):
        (ctypes.c_char * 32).from_buffer(t)
    assert not qkv.asarray(x, copy=True).readonly


def test_conversions_copy_and_say_so() -> None:
    h = np.arange(6, dtype=np.float16).reshape(2, 3)
    t = qkv.asarray(h)
    assert t.dtype == "float32" and t.data_ptr() != addr(h)
    np.testing.assert_array_equal(np.asarray(t), h.astype(np.float32))
    assert qkv.asarray(np.arange(3, dtype=np.int32)).dtype == "int64"
    assert qkv.asarray([[1.5, 2.5]]).shape == (1, 2)
    assert qkv.asarray(2.0).shape == ()
    # negative strides are copied (qkv views only non-negative strides)
    x = np.arange(5, dtype=np.float32)[::-1]
    r = qkv.asarray(x)
    np.testing.assert_array_equal(np.asarray(r), x)
    # dtype= converts, copy=True copies
    x32 = np.ones(4, np.float32)
    assert qkv.asarray(x32, dtype="float64").dtype == "float64"
    assert qkv.asarray(x32, dtype=np.float32).data_ptr() == addr(x32)
    assert qkv.asarray(x32, copy=True).data_ptr() != addr(x32)


def test_empty_and_zero_dim() -> None:
    e = np.zeros((0, 3), np.float32)
    t = qkv.asarray(e)
    assert t.shape == (0, 3) and np.asarray(t).shape == (0, 3)
    assert qkv.softmax(e, -1).shape == (0, 3)
    with pytest.raises(TypeError, match="0-d"):
        len(qkv.asarray(np.float32(1)))


def test_dtype_and_layout_errors() -> None:
    with pytest.raises(TypeError, match="complex"):
        qkv.asarray(np.ones(3, np.complex64))
    with pytest.raises(TypeError, match="dtype <U1"):
        qkv.asarray(np.array(["a", "b"]))
    with pytest.raises(TypeError, match="cannot be read as an array"):
        qkv.asarray([[1.0], [2.0, 3.0]])
    with pytest.raises(ValueError, match="copy=False"):
        qkv.asarray(np.ones(3, np.float16), copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        qkv.asarray(np.arange(4.0)[::-1], copy=False)
    with pytest.raises(ValueError, match="float32 to float64 needs a copy"):
        qkv.asarray(np.ones(3, np.float32), dtype="float64", copy=False)
    with pytest.raises(TypeError, match="dtype must be float32, float64, int64 or bool"):
        qkv.asarray(np.ones(3), dtype="int8")
    with pytest.raises(TypeError, match="does not implement __dlpack__"):
        qkv.from_dlpack([1.0, 2.0])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be used without a copy"):
        qkv.from_dlpack(np.ones(3, np.float16))
    # ops name themselves and the argument
    with pytest.raises(TypeError, match="scaled_dot_product_attention: query is complex128"):
        qkv.scaled_dot_product_attention(np.ones((2, 2), complex), np.ones((2, 2)), np.ones((2, 2)))


def test_from_dlpack_views() -> None:
    x = np.ones((3, 2), np.float64)
    t = qkv.from_dlpack(x)
    assert t.data_ptr() == addr(x) and t.dtype == "float64"
    assert t.__dlpack_device__() == (1, 0)
    # a qkv.Tensor is itself a DLPack producer
    assert qkv.from_dlpack(t).data_ptr() == addr(x)


def test_tensor_repr_and_tolist() -> None:
    t = qkv.asarray(np.array([[1, 2], [3, 4]], np.int64))
    assert repr(t).startswith("qkv.Tensor([[1, 2],")
    assert t.tolist() == [[1, 2], [3, 4]]


def test_ops_return_the_kind_they_are_given() -> None:
    x = np.random.default_rng(1).standard_normal((2, 5)).astype(np.float32)
    assert isinstance(qkv.softmax(x), np.ndarray)
    t = qkv.softmax(qkv.asarray(x))
    assert isinstance(t, qkv.Tensor)
    np.testing.assert_array_equal(np.asarray(t), qkv.softmax(x))
    assert isinstance(qkv.softmax(x.tolist()), np.ndarray)  # sequences come back as NumPy
