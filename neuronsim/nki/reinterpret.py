"""Dtype reinterpretation of a tensor's bytes (``.view(dtype)``, ``.ap(pattern, dtype=...)``): an alias
buffer over the same bytes. On SBUF/PSUM the alias shares the allocation; on HBM it is an HBM tensor
with ``alias_of`` (docs/ir.md) bound to the same host bytes."""

from __future__ import annotations

from neuronsim.errors import ConstraintError
from neuronsim.nki.buffer import Buffer
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.nki.types import DTYPES, mx_name, to_sim_dtype
from neuronsim.sim.ir import ON_CHIP


def reinterpret(buf: Buffer, dtype) -> Buffer:
    """An alias of ``buf`` (same bytes) with another dtype."""
    d = to_sim_dtype(dtype)
    root = buf.root()
    if d is root.dtype:
        root.mx = mx_name(dtype)  # viewing the words as MX data (or back) names their format
        return root
    if root.memory not in ON_CHIP:
        return _reinterpret_hbm(root, d, dtype)
    nbytes = root.bytes_per_partition
    if nbytes % d.itemsize:
        raise ConstraintError(
            f"{root.describe()} has {nbytes} bytes per partition, not a multiple of "
            f"{DTYPES[d]}'s {d.itemsize}",
            location=caller_location(),
        )
    trace = current_trace()
    for b in trace.aliases.get(root.id, ()):
        if b.dtype is d:
            b.mx = mx_name(dtype)
            return b
    alias = trace.new_buffer(
        f"{root.name}_as_{DTYPES[d]}",
        root.memory,
        (root.shape[0], nbytes // d.itemsize),
        d,
        root.location,
        register=False,
    )
    alias.alias_of = root
    alias.mx = mx_name(dtype)
    trace.aliases.setdefault(root.id, []).append(alias)
    return alias


def _reinterpret_hbm(root: Buffer, d, dtype) -> Buffer:
    """An HBM tensor's bytes as ``d``: the last dim rescaled (``[M, K]`` bf16 as float32 is
    ``[M, K / 2]``); an HBM alias (``TensorDecl.alias_of``) bound to the same host bytes."""
    last = root.shape[-1] * root.dtype.itemsize
    if last % d.itemsize:
        raise ConstraintError(
            f"{root.describe()} has {last} bytes in its last dim, not a multiple of {DTYPES[d]}'s "
            f"{d.itemsize}", location=caller_location())
    trace = current_trace()
    for b in trace.aliases.get(root.id, ()):
        if b.dtype is d:
            b.mx = mx_name(dtype)
            return b
    shape = root.shape[:-1] + (last // d.itemsize,)
    alias = trace.new_buffer(f"{root.name}_as_{DTYPES[d]}", root.memory, shape, d, root.location,
                             kind=root.kind, register=False)
    alias.alias_of, alias.shared, alias.mx = root, root.shared, mx_name(dtype)
    trace.aliases.setdefault(root.id, []).append(alias)
    return alias
