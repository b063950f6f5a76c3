"""Running an operation the legacy way: grid operands resolved, ``mask=`` applied, results placed.

Every legacy ``nl``/``nisa`` call goes through :func:`run`: its grid views (``legacy/grid.py``) are
bounds-checked, or with ``mask=`` narrowed to the mask's ranges; plain tiles of the full size are
cut to the same region; the tiles the operation makes are allocated at their full size and the
operation writes the masked part (so later unmasked indexing of them stays in bounds).
"""

from __future__ import annotations

from neuronsim.errors import UnsupportedError
from neuronsim.nki.kernel import Kernel
from neuronsim.nki.language import tensor as _lt
from neuronsim.nki.legacy import hints
from neuronsim.nki.legacy.grid import (
    GridTensor,
    Mask,
    Placement,
    by_axis,
    masks_of_results,
    positions_of,
    resolve,
    slice_grid_view,
)
from neuronsim.nki.tensor import index_rules
from neuronsim.nki.trace import caller_location
from neuronsim.nki.types import DynSlice


def materialize(x):
    """A deferred ``nisa`` result as a tile; grid views checked; anything else unchanged."""
    m = getattr(type(x), "nki_materialize", None)
    if m is not None:
        return x.nki_materialize()
    return x


def _map(args, kwargs, fn):
    return [fn(a) for a in args], {k: fn(v) for k, v in kwargs.items()}


def _ranges(mask) -> dict | None:
    if mask is None or mask is True:
        return {}
    if mask is False:
        return None
    if isinstance(mask, Mask):
        return mask.ranges()
    raise UnsupportedError(
        f"mask={mask!r}: a mask is a comparison of index expressions (nl.arange/nl.mgrid), e.g. "
        "mask=(i * 128 + i_p < n)",
        location=caller_location(),
    )


def run(fn, args, kwargs, mask=None):
    """``fn(*args, **kwargs)`` with legacy operands, under ``mask``."""
    args, kwargs = _map(args, kwargs, materialize)
    if mask is None or mask is True:
        args, kwargs = _map(args, kwargs, lambda a: resolve(a, {}))
        previous = _lt.result_hook.hook
        _lt.result_hook.hook = _columns
        try:
            return fn(*args, **kwargs)
        finally:
            _lt.result_hook.hook = previous
    hints.hint("mask=")
    ranges = _ranges(mask)
    if ranges is None:
        return Skipped()
    grids = [a for a in list(args) + list(kwargs.values()) if isinstance(a, GridTensor)]
    ranges, extra = by_axis(grids, mask, ranges)
    placement = Placement(_with_results({**extra, **positions_of(grids, ranges)},
                                        list(args) + list(kwargs.values())))
    args, kwargs = _map(args, kwargs, lambda a: placement.narrow(resolve(a, ranges)))
    if any(p[2] == 0 for p in placement.positions.values()):
        return _empty_result(fn, args, kwargs, placement)
    previous = _lt.result_hook.hook
    _lt.result_hook.hook = lambda shape, dtype, tag, buffer: _carve(placement, shape, dtype, tag, buffer)
    try:
        out = fn(*args, **kwargs)
    finally:
        _lt.result_hook.hook = previous
    return _full(out, placement, ranges)


def _columns(shape, dtype, tag, buffer):
    """An operation's result tile; a 1-D one (NKI 0.1 tiles may be [P]) is a [P, 1] column."""
    shape = tuple(int(n) for n in shape)
    return _lt.alloc(shape + (1,) if len(shape) == 1 else shape, dtype, buffer, tag=tag)


def _carve(placement: Placement, shape, dtype, tag, buffer):
    shape = tuple(int(n) for n in shape)
    if len(shape) == 1:
        shape = shape + (1,)
    expanded = placement.expand(shape)
    if expanded is None:
        return _lt.alloc(shape, dtype, buffer, tag=tag)
    full_shape, key = expanded
    whole = _lt.alloc(full_shape, dtype, buffer, tag=tag)
    view = whole[key]
    placement.made[id(view)] = (view, whole)
    return view


def _full(out, placement: Placement, ranges: dict):
    made = placement.made.get(id(out))
    if made is None:
        return out
    view, whole = made
    masks_of_results()[id(whole)] = (whole, ranges, view, placement.positions)
    return whole


class Skipped:
    """The result of an operation whose mask keeps nothing: no instruction; assigning or
    accumulating it writes nothing; used as a tile it is an unwritten one."""

    def __init__(self, shape=None, dtype=None, buffer=None):
        self.shape, self.dtype, self.buffer = shape, dtype, buffer

    def nki_assign_into(self, dst) -> None:
        pass

    def nki_accumulate_into(self, dst) -> None:
        pass

    def nki_materialize(self):
        if self.shape is None:
            raise UnsupportedError("the result of an operation masked out entirely is used",
                                   location=caller_location())
        return _lt.alloc(self.shape, self.dtype, self.buffer, tag="masked_out")


def _empty_result(fn, args, kwargs, placement):
    return Skipped()


def run_into(emit, shape, dtype, buffer, operands, mask, result_axes=None):
    """A legacy ``nisa`` result computed now under ``mask``: a full-size tile of which the masked
    region is written. ``result_axes[j] = (operand index, operand axis)`` says which operand axis
    result axis ``j`` follows (default: the same axis of the grid operands)."""
    hints.hint("mask=")
    ranges = _ranges(mask)
    if ranges is None:
        return Skipped(shape, dtype, buffer)
    operands = [materialize(o) for o in operands]
    grids = [o for o in operands if isinstance(o, GridTensor)]
    ranges, extra = by_axis(grids, mask, ranges)
    if result_axes is None:
        positions = {**extra, **positions_of(grids, ranges)}
    else:
        positions = {}
        for j, (i, a) in enumerate(result_axes):
            o = operands[i]
            if isinstance(o, GridTensor):
                p = positions_of([o], ranges).get(a)
                if p is not None:
                    positions[j] = p
    if result_axes is None:
        positions = _with_results(positions, operands)
    placement = Placement(positions)
    if any(p[2] == 0 for p in positions.values()):
        return Skipped(shape, dtype, buffer)
    ops = [resolve(o, ranges) for o in operands]
    if result_axes is None:
        ops = [placement.narrow(o) for o in ops]
    whole = _lt.alloc(shape, dtype, buffer, tag="masked")
    view = placement.narrow(whole)
    emit(view, False, *ops)
    masks_of_results()[id(whole)] = (whole, ranges, view, placement.positions)
    return whole


def _with_results(positions: dict, operands) -> dict:
    """``positions`` completed with those of operands that are results of masked operations."""
    table = masks_of_results()
    out = dict(positions)
    for o in operands:
        entry = table.get(id(o))
        if entry is not None and entry[0] is o:
            for j, p in entry[3].items():
                out.setdefault(j, p)
    return out


def assigned_region(value):
    """``(value view, ranges)`` for ``t[grid] = value``: a masked result's written region and mask."""
    entry = masks_of_results().get(id(value))
    if entry is not None and entry[0] is value:
        return entry[2], entry[1]
    return value, {}


class _LegacyBody:
    """A legacy kernel's function, traced with [P] result tiles made [P, 1] columns (NKI 0.1 tiles
    may be 1-D: ``t[:, 0] * 2``); it keeps the function's code, so errors name the kernel's file."""

    def __init__(self, fn):
        self.fn = fn
        self.__wrapped__ = fn
        self.__code__ = getattr(fn, "__code__", None)
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__module__ = getattr(fn, "__module__", None)

    def __call__(self, *args, **kwargs):
        previous, rules = _lt.result_hook.hook, index_rules.legacy
        if previous is None:
            _lt.result_hook.hook = _columns
        index_rules.legacy = _IndexRules
        try:
            return self.fn(*args, **kwargs)
        finally:
            _lt.result_hook.hook, index_rules.legacy = previous, rules


    @staticmethod
    def nki_launch_grid(grid):
        """``kernel[0]``: one instance. nki-samples' pipelined_attention launches ``flash_fwd[0]``
        (batch 1, ``batch_id = nl.program_id(0)``) and checks the output against its CPU reference,
        so NKI 0.1 ran it once; a grid size of 0 is read as 1."""
        dims = grid if isinstance(grid, (tuple, list)) else (grid,)
        if any(isinstance(n, int) and n == 0 for n in dims):
            hints.hint("kernel[0]")
            return type(dims)(1 if isinstance(n, int) and n == 0 else n for n in dims)
        return grid


class _IndexRules:
    """NKI 0.1's indexing rules, used by ``TensorView`` while a legacy kernel is traced."""

    @staticmethod
    def past_end(t, key):
        """``t[key]`` when a slice of ``key`` runs past the end of ``t``: NKI 0.1 checks such an
        access under the ``mask=`` of the instruction using it (``slice_grid_view``); else None."""
        key = key if isinstance(key, tuple) else (key,)
        if Ellipsis in key or any(hasattr(type(k), "nki_index_grid") for k in key):
            return None
        for k, (_, num) in zip(key, t.dims, strict=False):
            if isinstance(k, DynSlice):
                k = slice(k.start, k.start + k.size)
            bounds = (k.start, k.stop) if isinstance(k, slice) else ()
            if any(type(b) is int and not -num <= b <= num for b in bounds):
                return slice_grid_view(t, key)
        return None

    @staticmethod
    def partition_broadcast_to(tile, shape):
        """``tile.broadcast_to((P, F))`` of a 1-partition tile: NKI 0.1 copies its row onto ``P``
        partitions through TensorE ("NKI invokes such matmul under the hood when
        ``broadcast_input.broadcast_to((M, broadcast_input.shape[1]))`` is called", the Trainium
        architecture guide), which is what ``nl.broadcast_to`` does."""
        from neuronsim.nki.language.movement import broadcast_to

        hints.hint("tile.broadcast_to")
        return broadcast_to(tile, shape)


def legacy_kernel(fn, options=None) -> Kernel:
    """``fn`` as a kernel with NKI 0.1's tracing rules (an existing kernel keeps its cache)."""
    if isinstance(fn, Kernel):
        if not isinstance(fn.fn, _LegacyBody):
            fn.fn = _LegacyBody(fn.fn)
        return fn
    return Kernel(_LegacyBody(fn), options=options)

