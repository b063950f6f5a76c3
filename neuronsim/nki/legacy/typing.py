"""``neuronxcc.nki.typing``: the tensor annotations of NKI 0.1 kernels (``tensor[128, 512]``)."""

from __future__ import annotations


class _TensorType:
    """``nt.tensor`` / ``nt.tensor[shape]`` / ``nt.tensor[shape, dtype]``: annotations only."""

    def __init__(self, spec=()):
        self.spec = spec

    def __getitem__(self, spec):
        return _TensorType(spec)

    def __repr__(self) -> str:
        return f"tensor[{self.spec}]" if self.spec else "tensor"


tensor = _TensorType()
scalar = _TensorType()
