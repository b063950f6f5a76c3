"""``nki.typing``: annotations for kernel tensor parameters (``X: nt.tensor[128, 512]``).

As in NKI, the annotations document the expected shape (and ``mutable_tensor`` that the kernel
writes the argument); the kernel's behaviour does not depend on them. ``nt.tensor[shape]`` and
``nt.tensor[shape, dtype]`` give a :class:`TensorType` so annotations evaluate at import time.
"""

from __future__ import annotations


class TensorType:
    """An annotation: a tensor parameter, optionally with its shape (and dtype)."""

    __slots__ = ("mutable", "shape", "dtype")

    def __init__(self, mutable: bool, shape=None, dtype=None):
        self.mutable, self.shape, self.dtype = mutable, shape, dtype

    def __getitem__(self, item) -> TensorType:
        items = item if isinstance(item, tuple) else (item,)
        dtype = None
        if items and not isinstance(items[-1], int) and not isinstance(items[-1], tuple):
            *items, dtype = items
        if len(items) == 1 and isinstance(items[0], tuple):
            items = list(items[0])
        return TensorType(self.mutable, tuple(items), dtype)

    def __repr__(self) -> str:
        name = "mutable_tensor" if self.mutable else "tensor"
        return f"nt.{name}" + (f"[{', '.join(map(str, self.shape))}]" if self.shape is not None else "")


tensor = TensorType(False)
mutable_tensor = TensorType(True)

__all__ = ["TensorType", "mutable_tensor", "tensor"]
