"""The legacy API's index grids (``nl.arange``, ``nl.mgrid``), the indexing they drive, and ``mask=``.

In NKI 0.1 (``neuronxcc.nki``) a kernel indexes tensors with affine expressions of index variables:
``t[i * 128 + nl.arange(128)[:, None], nl.arange(512)[None, :]]`` is a [128, 512] tile, each
variable's position in the broadcast shape being the result dimension it walks. Here an
:class:`IndexExpr` is ``const + sum(coef * var)`` with a shape; indexing a tensor with them makes a
:class:`GridTensor`, an ordinary view (offset and ``[step, num]`` pairs) that remembers which
variable each of its dimensions walks.

``mask=`` (comparisons of index expressions, joined with ``&``) restricts those variables: NKI 0.1
"modifies the indexing so that the equations are true" (AWS's migration guide). A mask that bounds
each variable to an interval is applied by re-indexing every grid operand on the narrowed ranges;
the tile an operation makes is allocated at its full size and the operation writes the masked
part of it. Masks coupling two variables (``i_q >= i_k``) are not rectangles and are not simulated.
Indexing out of bounds is an error only where the access is used without a mask that fixes it.
"""

from __future__ import annotations

import operator

from neuronsim.errors import OutOfBoundsError, UnsupportedError
from neuronsim.nki.language.tensor import NkiTensor
from neuronsim.nki.language.tensor import assign as _assign
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.nki.types import DynSlice
from neuronsim.sim.ir import ON_CHIP


class IndexVar:
    """One index variable: it takes the values ``0 .. size-1``."""

    __slots__ = ("size",)

    def __init__(self, size: int):
        self.size = int(size)

    def __repr__(self) -> str:
        return f"i{id(self) % 10000}[{self.size}]"


class SliceVar(IndexVar):
    """The variable of a slice past the end of its tensor (:func:`slice_grid_view`): a mask
    bounds it by the axis it walks."""

    __slots__ = ()


def _broadcast(a: tuple, b: tuple) -> tuple:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise UnsupportedError(
                f"index grids of shapes {a} and {b} do not broadcast", location=caller_location()
            )
        out.append(max(x, y))
    return tuple(out)


class IndexExpr:
    """``const + sum(coef * var)``, each variable at an axis of ``shape`` (``nl.arange``/``nl.mgrid``)."""

    __slots__ = ("terms", "const", "shape")
    __array_priority__ = 2000  # numpy ints defer to our operators

    def __init__(self, terms: dict, const: int, shape: tuple):
        self.terms = terms  # var -> (coef, axis counted from the right: -1 is the last axis)
        self.const = const
        self.shape = shape

    @classmethod
    def of(cls, x) -> IndexExpr:
        if isinstance(x, IndexExpr):
            return x
        index = getattr(x, "__index__", None)
        if index is None:
            raise UnsupportedError(f"{x!r} in an index expression: use ints and nl.arange/nl.mgrid")
        return cls({}, index(), ())

    # --- reshaping: t[:, None] / t[None, :] place the variables on axes
    def __getitem__(self, key) -> IndexExpr:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is not None and k != slice(None) for k in key):
            raise UnsupportedError(f"index grid[{key}]: only ':' and None reshape an index grid")
        old = [k for k in key if k is not None]
        if len(old) != len(self.shape):
            raise UnsupportedError(f"index grid of shape {self.shape} indexed with {key}")
        shape, where, j = [], {}, 0
        for pos, k in enumerate(key):
            if k is None:
                shape.append(1)
            else:
                where[j - len(self.shape)] = pos - len(key)
                shape.append(self.shape[j])
                j += 1
        terms = {v: (c, where[a]) for v, (c, a) in self.terms.items()}
        return IndexExpr(terms, self.const, tuple(shape))

    # --- affine arithmetic
    def _combine(self, other, sign: int) -> IndexExpr:
        o = IndexExpr.of(other)
        terms = dict(self.terms)
        for v, (c, a) in o.terms.items():
            if v in terms:
                c0, a0 = terms[v]
                if a0 != a:
                    raise UnsupportedError("one index variable on two axes of an index expression")
                terms[v] = (c0 + sign * c, a)
            else:
                terms[v] = (sign * c, a)
        return IndexExpr(terms, self.const + sign * o.const, _broadcast(self.shape, o.shape))

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return IndexExpr.of(other)._combine(self, -1)

    def __mul__(self, k):
        if isinstance(k, IndexExpr):
            if k.terms and self.terms:
                raise UnsupportedError("the product of two index variables is not an affine index")
            if not k.terms:
                k = k.const
            else:
                return k * self.const
        k = operator.index(k)
        return IndexExpr({v: (c * k, a) for v, (c, a) in self.terms.items()}, self.const * k, self.shape)

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1

    def __pos__(self):
        return self

    # --- comparisons make mask predicates
    def _cmp(self, other, op: str) -> Mask:
        return Mask([(self - other, op)])

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __eq__(self, other):
        if not isinstance(other, IndexExpr) and not hasattr(other, "__index__"):
            return NotImplemented
        return self._cmp(other, "==")

    def __ne__(self, other):
        if not isinstance(other, IndexExpr) and not hasattr(other, "__index__"):
            return NotImplemented
        return self._cmp(other, "!=")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        parts = [f"{c}*{v!r}" for v, (c, _) in self.terms.items()]
        return f"IndexExpr({' + '.join(parts + [str(self.const)])}, shape={self.shape})"

    def nki_index_grid(self, t, key):
        """The hook ``TensorView`` indexing calls for a key holding index grids."""
        return grid_view(t, key)

    def bounds(self, ranges: dict) -> tuple[int, int]:
        """(min, max) of the expression over the (restricted) variable ranges."""
        lo = hi = self.const
        for v, (c, _) in self.terms.items():
            a, b = ranges.get(v, (0, v.size))
            if b <= a:
                return (0, -1)
            lo += min(c * a, c * (b - 1))
            hi += max(c * a, c * (b - 1))
        return lo, hi


class Mask:
    """A conjunction of ``expr OP 0`` atoms (``(i_p < n) & (i_f < m)``)."""

    __slots__ = ("atoms",)

    def __init__(self, atoms):
        self.atoms = list(atoms)

    def __and__(self, other):
        if other is True or other is False:  # a compile-time condition joined to the mask
            return self if other else Mask(self.atoms + [(IndexExpr({}, 1, ()), "<")])
        if not isinstance(other, Mask):
            raise UnsupportedError("a mask joins comparisons of index expressions with '&'")
        return Mask(self.atoms + other.atoms)

    __rand__ = __and__

    def __bool__(self):
        raise TypeError("an NKI mask is not a Python condition; pass it as mask=")

    def ranges(self) -> dict | None:
        """``{var: (lo, hi)}``: the interval of each variable the mask keeps (None: nothing)."""
        out: dict = {}
        for expr, op in self.atoms:
            vs = [(v, c) for v, (c, _) in expr.terms.items() if c != 0]
            if not vs:
                if not _holds(expr.const, op):
                    return None  # false everywhere: the operation does nothing
                continue
            if len(vs) > 1 or op in ("==", "!="):
                raise UnsupportedError(
                    "a mask coupling index variables (e.g. a causal i_q >= i_k) is not a rectangle and "
                    "is not simulated; use nisa.affine_select",
                    location=caller_location(),
                )
            (v, c), k = vs[0], expr.const
            keep = [x for x in (0, v.size - 1) if _holds(k + c * x, op)]
            lo, hi = out.get(v, (0, v.size))
            # the kept values of a monotone predicate form one interval: find its ends
            a, b = _interval(lambda x, k=k, c=c, op=op: _holds(k + c * x, op), v.size, keep)
            out[v] = (max(lo, a), min(hi, b))
        return out


def _holds(x: int, op: str) -> bool:
    return {"<": x < 0, "<=": x <= 0, ">": x > 0, ">=": x >= 0, "==": x == 0, "!=": x != 0}[op]


def _interval(pred, n: int, ends: list) -> tuple[int, int]:
    if not ends:  # neither end holds: nothing or a middle range (impossible for a monotone test)
        return (0, 0)
    if pred(0) and pred(n - 1):
        return (0, n)
    lo_true = pred(0)
    a, b = 0, n - 1  # binary search for the switch point
    while a < b:
        m = (a + b) // 2
        if pred(m) == lo_true:
            a = m + 1
        else:
            b = m
    return (0, a) if lo_true else (a, n)


# ------------------------------------------------------------------ arange / mgrid


def arange(start, stop=None, step=1) -> IndexExpr:
    """``nl.arange``: a 1-D index grid (reshape with ``[:, None]`` / ``[None, :]``)."""
    if stop is None:
        start, stop = 0, start
    n = len(range(int(start), int(stop), int(step)))
    return IndexExpr({IndexVar(n): (int(step), -1)}, int(start), (n,))


class _MGrid:
    """``nl.mgrid[0:128, 0:512]``: one index grid per slice, each on its own axis."""

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        out = []
        for j, k in enumerate(key):
            if not isinstance(k, slice) or k.stop is None:
                raise UnsupportedError("nl.mgrid takes slices with bounds: nl.mgrid[0:128, 0:512]")
            start, step = k.start or 0, k.step or 1
            n = len(range(start, k.stop, step))
            shape = tuple(n if i == j else 1 for i in range(len(key)))
            out.append(IndexExpr({IndexVar(n): (step, j - len(key))}, start, shape))
        return Grid(out) if len(out) > 1 else out[0]


class Grid(tuple):
    """What ``nl.mgrid[...]`` returns: the index grids, also as ``.p`` (the first, the partition
    dimension) and ``.x``, ``.y``, ``.z`` (the free dimensions, in order)."""

    p = property(lambda self: self[0])
    x = property(lambda self: self[1])
    y = property(lambda self: self[2])
    z = property(lambda self: self[3])


mgrid = _MGrid()


# ------------------------------------------------------------------ indexing with grids


class GridTensor(NkiTensor):
    """A view made by indexing with index grids: which variable each dimension walks, the indexing
    to redo on narrowed ranges (``mask=``), and where an out-of-bounds access was written."""

    # no __slots__: views core methods derive from a grid view (reshape, slicing...) are plain
    # views, with these class defaults
    axis_vars: tuple = ()
    source = None
    ranges: dict = {}
    oob = None

    def check(self) -> GridTensor:
        if self.oob is not None:
            raise OutOfBoundsError(self.oob[0], location=self.oob[1])
        return self

    def restrict(self, ranges: dict) -> GridTensor:
        if self.source is None or not any(v in ranges for v in self.axis_vars if v is not None):
            return self.check()
        t, exprs = self.source
        merged = dict(self.ranges)
        for v, (a, b) in ranges.items():
            lo, hi = merged.get(v, (0, v.size))
            merged[v] = (max(a, lo), min(b, hi))
        return _grid_index(t, exprs, merged, self.oob[1] if self.oob else caller_location()).check()

    def plain(self) -> NkiTensor:
        return NkiTensor(self.buf, self.offset, self.dims, self.ppair)

    def nki_assign(self, value) -> None:
        """``t[grid] = value``: narrowed by the mask ``value`` was computed under, if any."""
        entry = masks_of_results().get(id(value))
        ranges: dict = {}
        if entry is not None and entry[0] is value:
            value, ranges = entry[2], entry[1]
        dst = self.restrict(ranges) if ranges else self.check()
        if isinstance(value, GridTensor):
            value = value.restrict(ranges) if ranges else value.check()
        _assign(dst.plain(), value)


def _checked(name: str):
    base = getattr(NkiTensor, name)

    def method(self, *args):
        return base(self.check(), *args)

    method.__name__ = name
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__pow__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__",
              "__xor__", "__neg__", "__iadd__"):
    setattr(GridTensor, _name, _checked(_name))


def _key_exprs(t, key) -> list[IndexExpr]:
    if any(k is Ellipsis or isinstance(k, (slice, DynSlice)) for k in key):
        raise UnsupportedError(
            "mixing index grids (nl.arange/nl.mgrid) with slices in one index is not simulated; "
            "index every dimension with a grid or an int",
            location=caller_location(),
        )
    if len(key) != len(t.dims):
        raise UnsupportedError(
            f"{len(key)} index grids for {t!r} with {len(t.dims)} dims: index every dimension",
            location=caller_location(),
        )
    return [IndexExpr.of(k) for k in key]


def grid_view(t, key) -> GridTensor:
    if not isinstance(key, tuple):
        key = (key,)
    return _grid_index(t, _key_exprs(t, key), {}, caller_location())


def slice_grid_view(t, key) -> GridTensor:
    """``t[256:384, ...]`` past the end of ``t`` (NKI 0.1 checks an access under the mask of the
    instruction using it): the slices as index grids, one per result axis, so that ``mask=`` narrows
    them by axis (:func:`axis_ranges`); used without a mask that fixes it, the access is an error."""
    key = key if isinstance(key, tuple) else (key,)
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(t.dims) - len(key) + 1) + key[at + 1:]
    key = key + (slice(None),) * (len(t.dims) - len(key))
    n_axes = sum(1 for k in key if isinstance(k, (slice, DynSlice)))
    exprs, axis = [], 0
    for k, (_, num) in zip(key, t.dims, strict=True):
        if isinstance(k, DynSlice):
            k = slice(k.start, k.start + k.size)
        if isinstance(k, slice):
            start = 0 if k.start is None else (k.start + num if k.start < 0 else k.start)
            stop = num if k.stop is None else (k.stop + num if k.stop < 0 else k.stop)
            step = k.step or 1
            shape = tuple(len(range(start, stop, step)) if j == axis else 1 for j in range(n_axes))
            exprs.append(IndexExpr({SliceVar(shape[axis]): (step, axis - n_axes)}, start, shape))
            axis += 1
        else:
            exprs.append(IndexExpr.of(k))
    return _grid_index(t, exprs, {}, caller_location())


def axis_ranges(mask, ranges: dict) -> dict:
    """``{axis: (size, lo, hi)}``: the interval the mask keeps on each axis of the instruction's
    index space (a variable of ``nl.arange(n)[None, :, None]`` walks axis 1 of 3)."""
    out = {}
    for expr, _ in getattr(mask, "atoms", ()):
        for v, (c, a) in expr.terms.items():
            if c != 0 and v in ranges:
                out[len(expr.shape) + a] = (v.size, *ranges[v])
    return out


def by_axis(grids, mask, ranges: dict) -> tuple[dict, dict]:
    """(ranges with the slice variables of ``grids`` bounded by the mask's axes, the positions the
    mask narrows on axes no grid operand walks: ``{axis: (full size, start, size)}``)."""
    axes = axis_ranges(mask, ranges)
    out = dict(ranges)
    for g in grids:
        for j, v in enumerate(g.axis_vars):
            if isinstance(v, SliceVar) and v not in out and j in axes and axes[j][0] == v.size:
                out[v] = axes[j][1:]
    walked = {j for g in grids for j, v in enumerate(g.axis_vars) if v is not None and v in out}
    extra = {j: (n, lo, max(0, hi - lo)) for j, (n, lo, hi) in axes.items() if j not in walked}
    return out, extra


def _count(r) -> int:
    return max(0, r[1] - r[0])


def _grid_index(t, exprs: list[IndexExpr], ranges: dict, location) -> GridTensor:
    shape = ()
    for e in exprs:
        shape = _broadcast(shape, e.shape)
    ndim = len(shape)
    axis_vars: list = [None] * ndim
    for e in exprs:
        for v, (c, a) in e.terms.items():
            j = ndim + a
            if c == 0 or v.size == 1:
                continue
            if axis_vars[j] is not None and axis_vars[j] is not v:
                raise UnsupportedError(
                    "two index variables on one axis of an index grid", location=location
                )
            axis_vars[j] = v
    steps = [0] * ndim
    nums = [1 if v is None else _count(ranges.get(v, (0, v.size))) for v in axis_vars]
    offset = t.offset
    oob = None
    on_chip = t.buf.memory in ON_CHIP and t.ppair is None
    for d, (e, (step, num)) in enumerate(zip(exprs, t.dims, strict=True)):
        lo, hi = e.bounds(ranges)
        if hi >= lo and (lo < 0 or hi >= num) and oob is None:
            oob = (f"index {lo}..{hi} is out of range for dim {d} (size {num}) of {t!r}", location)
        start = e.const
        for v, (c, a) in e.terms.items():
            start += c * ranges.get(v, (0, v.size))[0]
            if v.size > 1:
                steps[ndim + a] += c * step
            if on_chip and (d == 0) != (ndim + a == 0) and c != 0 and v.size > 1:
                raise UnsupportedError(
                    "an index grid mixing the partition dimension with a free dimension is not an "
                    "on-chip access", location=location,
                )
        offset += start * step
    if on_chip and ndim and axis_vars[0] is not None and steps[0] != t.dims[0][0]:
        raise UnsupportedError(
            f"partition index stepping by {steps[0] // t.dims[0][0]}: on-chip accesses cover "
            "consecutive partitions", location=location,
        )
    dims = []
    for j in range(ndim):
        step = steps[j]
        if on_chip and j == 0 and axis_vars[0] is None:
            step = t.dims[0][0]  # one partition (a constant partition index)
        dims.append((step, nums[j]))
    if not on_chip and not dims:
        dims = [(1, 1)]
    g = GridTensor(t.buf, offset if oob is None else t.offset, tuple(dims), t.ppair)
    g.axis_vars, g.source, g.ranges, g.oob = tuple(axis_vars), (t, exprs), ranges, oob
    return g


# ------------------------------------------------------------------ masked operations


def resolve(x, ranges: dict):
    """An operand as the operation sees it: grid views narrowed by the mask and bounds-checked."""
    if isinstance(x, GridTensor):
        return x.restrict(ranges) if ranges else x.check()
    return x


class Placement:
    """While a masked operation runs: the full-size tiles its results are carved from."""

    def __init__(self, positions: dict):
        self.positions = positions  # axis -> (full size, start, restricted size)
        self.made: dict = {}  # id(restricted view) -> (view, full tile)

    def expand(self, shape: tuple) -> tuple[tuple, tuple] | None:
        full, key, changed = [], [], False
        for j, n in enumerate(shape):
            p = self.positions.get(j)
            if p is not None and n == p[2] and p[0] != n:
                full.append(p[0])
                key.append(slice(p[1], p[1] + n))
                changed = True
            else:
                full.append(n)
                key.append(slice(None))
        return (tuple(full), tuple(key)) if changed else None

    def narrow(self, x):
        """A plain on-chip operand of the full shape, cut to the masked region."""
        if not isinstance(x, NkiTensor) or isinstance(x, GridTensor):
            return x
        key, changed = [], False
        for j, n in enumerate(x.shape):
            p = self.positions.get(j)
            if p is not None and n == p[0] and p[2] != n:
                key.append(slice(p[1], p[1] + p[2]))
                changed = True
            else:
                key.append(slice(None))
        return x[tuple(key)] if changed else x


def positions_of(views, ranges: dict) -> dict:
    """axis -> (full size, start, size) for the axes the mask narrows, from the grid operands."""
    pos: dict = {}
    for g in views:
        for j, v in enumerate(g.axis_vars):
            if v is None or v not in ranges or j in pos:
                continue
            full = g.ranges.get(v, (0, v.size))
            a, b = ranges[v]
            a, b = max(a, full[0]), min(b, full[1])
            pos[j] = (full[1] - full[0], a - full[0], max(0, b - a))
    return pos


def masks_of_results() -> dict:
    """id(result tile) -> (tile, ranges): the mask each masked operation's result was made under
    (an assignment ``t[grid] = result`` narrows ``t[grid]`` the same way)."""
    trace = current_trace()
    table = getattr(trace, "legacy_masks", None)
    if table is None:
        table = trace.legacy_masks = {}
    return table
