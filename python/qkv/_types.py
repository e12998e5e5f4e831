"""Types shared by the package's annotations."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, Union

import numpy as np
import numpy.typing as npt


class SupportsDLPack(Protocol):
    """An array exchanged through DLPack: numpy.ndarray, torch.Tensor, qkv.Tensor."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...

    def __dlpack_device__(self) -> Any: ...


#: The array type of a call's first argument, which is also the type of its results.
ArrayT = TypeVar("ArrayT", bound=SupportsDLPack)

#: What qkv.asarray takes: arrays of any framework, Python sequences and scalars.
ArrayLike = Union[SupportsDLPack, npt.ArrayLike]

#: A float32 NumPy array (the embeddings of qkv.Embedder).
Float32Array = npt.NDArray[np.float32]
