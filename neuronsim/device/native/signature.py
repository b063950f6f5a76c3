"""A native op's cache key: the signature of one call (its tensors' layouts and its scalars).

Each op has its own cache (``op.py``), keyed by (chip, op name, :func:`signature_key`). A call no
kernel can take at all (a CPU tensor operand, a written tensor overlapping another argument
partially) raises :class:`Decline` while its key is made, and runs on the host.
"""

from __future__ import annotations

import torch

from neuronsim.device.native.operands import aliasing, overlaps

Tensor = torch.Tensor


def _scalar_key(x):
    if type(x) is float:
        return ("f", x.hex())  # tells -0.0 from 0.0 and keeps NaN equal to itself
    return (type(x).__name__, x)


def arg_key(a):
    if isinstance(a, Tensor):
        if a.is_cpu:
            if a.dim() or a.numel() != 1:
                raise Decline
            return ("cpu", a.dtype, _scalar_key(a.item()))
        return a.dtype, a.shape, a.stride()
    if isinstance(a, list | tuple):
        if a and all(isinstance(x, Tensor) and not x.is_cpu for x in a):  # _foreach_ lists, in one pass
            return tuple([(x.dtype, x.shape, x.stride()) for x in a])
        return tuple(map(arg_key, a))
    if isinstance(a, float | int | bool):
        return _scalar_key(a)
    return a


class Decline(Exception):
    """The call is not something a native kernel takes (a CPU tensor operand, an odd aliasing)."""


def _runtime_key(a):
    """A runtime argument's part of the key: its kind, length and Python types, not its values
    (a planner that takes floats must not run a later call's bool)."""
    if isinstance(a, list | tuple):
        return ("rt", len(a), tuple(sorted({type(x).__name__ for x in a})))
    return ("rt", type(a).__name__)


def signature_key(args: tuple, kwargs: dict, runtime: frozenset = frozenset(),
                  inplace: bool = False) -> tuple:
    """(per-argument keys, keyword keys, the aliasing of a written ``self``): the key of one op's
    cache (each op has its own, so the op is not part of it).

    Arguments whose position (or, passed by keyword, name) is in ``runtime`` enter by kind only
    (their values reach the kernel per call). Raises :class:`Decline` for calls no kernel takes.
    Each written operand of an in-place op (``inplace``) is either the same view as an input (that
    input is the output) or disjoint from it; anything else declines, as a kernel reading and
    writing overlapping different views would be order-dependent. A written list (``_foreach_*_``)
    is checked element by element against the same element of the other lists, as ATen's
    multi-tensor kernels pair them.
    """
    if not (runtime or kwargs or inplace):
        return (tuple(map(arg_key, args)),)  # most calls: the general path below gives the same
    if runtime:
        key = [tuple(_runtime_key(a) if i in runtime else arg_key(a) for i, a in enumerate(args))]
    else:
        key = [tuple(map(arg_key, args))]
    if kwargs:
        key.append(tuple((k, _runtime_key(v) if k in runtime else arg_key(v)) for k, v in kwargs.items()))
    if inplace and args:
        written = args[0]
        others = (*args[1:], *kwargs.values())
        aliases = []
        if isinstance(written, Tensor):
            for a in others:
                if isinstance(a, Tensor) and not a.is_cpu:
                    aliases.append(_alias(a, written))
        elif isinstance(written, list | tuple):
            for a in others:
                if isinstance(a, list | tuple) and len(a) == len(written):
                    for x, w in zip(a, written, strict=True):
                        if isinstance(x, Tensor) and not x.is_cpu:
                            aliases.append(_alias(x, w))
                elif isinstance(a, Tensor) and not a.is_cpu:
                    for w in written:
                        if overlaps(a, w):  # e.g. a scale factor that is one of the written tensors
                            raise Decline
        key.append(tuple(aliases))
    return tuple(key)


def inplace_key(args: tuple) -> tuple:
    """``signature_key(args, {}, inplace=True)`` for an op writing one tensor, no runtime arguments
    (``add_``, ``mul_``: the common in-place call), in fewer steps."""
    written = args[0] if args else None
    if not isinstance(written, Tensor):
        return signature_key(args, {}, frozenset(), True)
    aliases = []
    for a in args[1:]:
        if isinstance(a, Tensor) and not a.is_cpu:
            aliases.append(True if a is written else _alias(a, written))
    return tuple(map(arg_key, args)), tuple(aliases)


def _alias(read: Tensor, written: Tensor) -> bool:
    same = aliasing(read, written)
    if same is None:
        raise Decline
    return same
