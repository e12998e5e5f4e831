"""qkv.Tensor in and out: :func:`asarray` and :func:`from_dlpack`.

A :class:`qkv.Tensor` implements the buffer protocol and ``__dlpack__`` / ``__dlpack_device__``,
so ``np.asarray(t)``, ``np.from_dlpack(t)``, ``torch.from_dlpack(t)`` and ``memoryview(t)`` view
its memory without a copy (``t.numpy()`` too).
"""

from __future__ import annotations

from typing import Any

from . import _qkv
from ._types import ArrayLike, SupportsDLPack

from ._qkv import Tensor

_DTYPES = {"float32", "float64", "int64", "bool"}


def _dtype_name(dtype: Any) -> str:
    """'float32', np.float32, np.dtype('float32') and torch.float32 all name float32."""
    name = str(getattr(dtype, "name", None) or dtype)
    name = name.removeprefix("torch.").removeprefix("<class 'numpy.").removesuffix("'>")
    if name == "bool_":
        name = "bool"
    if name not in _DTYPES:
        raise TypeError(f"asarray: dtype must be float32, float64, int64 or bool, got {dtype!r}")
    return name


def asarray(x: ArrayLike, dtype: Any | None = None, copy: bool | None = None) -> Tensor:
    """``x`` as a :class:`qkv.Tensor`, viewing its memory when it can (as ``numpy.asarray``).

    A NumPy array, CPU torch tensor or qkv.Tensor of float32, float64, int64 or bool with
    non-negative strides is viewed in place: no copy, whatever its strides (contiguous or not),
    and the Tensor keeps ``x`` alive. Anything else is **copied** while being converted: float16
    and bfloat16 become float32, other integer types int64, Python sequences and scalars go
    through ``numpy.asarray``, negative strides are made contiguous.

    Args:
        dtype: ``"float32"``, ``"float64"``, ``"int64"`` or ``"bool"`` (or the NumPy/torch dtype);
            a different dtype than ``x``'s converts (a copy).
        copy: None copies only when needed; True always copies; False never does and raises
            ``ValueError`` when a copy would be needed.

    Raises:
        TypeError: complex, string or object data; a torch tensor that requires grad.
        ValueError: a tensor off the CPU; ``copy=False`` when a copy is needed.
    """
    return _qkv._asarray(x, None if dtype is None else _dtype_name(dtype), copy)


def from_dlpack(x: SupportsDLPack) -> Tensor:
    """The DLPack-exporting array ``x`` (NumPy, torch, ...) as a :class:`qkv.Tensor`, never copied.

    Raises ``TypeError`` if ``x`` has no ``__dlpack__``, and ``ValueError`` if qkv cannot view
    it as it is (a dtype other than float32/float64/int64/bool, negative strides, a device other
    than the CPU); :func:`asarray` converts those.
    """
    return _qkv._from_dlpack(x)
