"""The slow path of qkv's array arguments: what qkv cannot view in place is converted here.

qkv computes on float32 and float64 (and reads int64 ids and bool masks). A NumPy array or CPU
torch tensor of one of those dtypes, with non-negative strides, is used where it lies (no copy);
the C++ side calls :func:`convert` only for everything else, and the result is a copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _torch_convert(x: Any, where: str) -> Any:
    import torch

    if x.device.type != "cpu":
        raise ValueError(f"{where} is on {x.device}; qkv computes on the CPU: pass x.cpu()")
    if x.requires_grad:
        raise TypeError(
            f"{where} requires grad; qkv does not record torch's autograd: pass x.detach()"
        )
    if x.is_complex():
        raise TypeError(f"{where} is {x.dtype}; qkv has no complex dtype")
    if x.is_floating_point():
        if x.dtype not in (torch.float32, torch.float64):
            x = x.to(torch.float32)
    elif x.dtype != torch.bool and x.dtype != torch.int64:
        x = x.to(torch.int64)
    return x.contiguous()


def convert(x: Any, op: str, arg: str) -> Any:
    """``x`` as an array qkv can view: float32/float64/int64/bool, non-negative strides.

    Other float dtypes (float16, bfloat16) become float32, other integer dtypes int64; Python
    sequences and scalars go through ``numpy.asarray``; other layouts are made contiguous.
    Raises TypeError for complex, string and object data, ValueError for tensors off the CPU.
    """
    where = f"{op}: {arg}"
    if type(x).__module__.startswith("torch"):
        return _torch_convert(x, where)
    try:
        a = np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise TypeError(f"{where}: cannot be read as an array ({e})") from None
    kind = a.dtype.kind
    if kind == "f":
        if a.dtype not in (np.float32, np.float64):
            a = a.astype(np.float32)
    elif kind in "iu":
        a = a.astype(np.int64)
    elif kind == "b":
        pass
    elif kind == "c":
        raise TypeError(f"{where} is {a.dtype}; qkv has no complex dtype")
    else:
        raise TypeError(
            f"{where} has dtype {a.dtype} ({type(x).__name__}); "
            "qkv takes arrays of numbers (float32, float64, int64 or bool)"
        )
    # C order, aligned and writable (a read-only source that needed a conversion anyway).
    return np.require(a, requirements=["C", "A", "W"])
