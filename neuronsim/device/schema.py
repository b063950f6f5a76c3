"""How to wrap an ATen op, read from its schema once and cached: the op's wrapper kind.

The kind decides what the host fallback does with the op's results: fresh tensors are adopted as
device tensors, write aliases (in-place ops, ``out=``) return the caller's device tensor, and view
aliases are rebuilt as device views of the device base. Nothing here is written per op.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import torch


class WrapperKind(enum.Enum):
    FUNCTIONAL = "functional"  # returns fresh tensors (or no tensors), mutates nothing
    INPLACE = "inplace"  # mutates arguments (``add_``, ``_foreach_mul_``, ``_fused_adam_``)
    OUT = "out"  # writes ``out=`` arguments
    VIEW = "view"  # returns an alias of an input


class ReturnKind(enum.Enum):
    FRESH = "fresh"
    WRITE = "write"
    VIEW = "view"


ArgRef = tuple[int, str]  # (position, name): arguments arrive positionally or as keywords

# Data movement, not computation: exempt from the 64-bit policy (casts go through the host exactly).
_NO_64BIT_CAST = frozenset(
    {"aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize", "aten::_to_copy"}
)


@dataclass(frozen=True)
class OpPlan:
    op: torch._ops.OpOverload
    name: str
    kind: WrapperKind
    returns: tuple[tuple[ReturnKind, ArgRef | None], ...]
    written: tuple[ArgRef, ...]
    outs: tuple[ArgRef, ...]
    generator: ArgRef | None
    seeded: bool  # draws from the default generator without a generator argument
    dtype_args: tuple[ArgRef, ...]
    index_lists: tuple[ArgRef, ...]  # `Tensor?[] indices`: CPU index tensors are allowed
    casts_64bit: bool
    # Positions typed ``Tensor``: the Python dispatcher hands a wrapped number (``remainder(t, 5)``
    # reaching ``remainder.Tensor``) to a Python kernel as a plain number, which the op rejects.
    tensor_args: frozenset[int] = frozenset()

    # The short path of the host fallback: no RNG, and one fresh result ("fresh"), several
    # ("fresh_many"), an in-place update of ``self`` returning it ("self") or nothing ("none");
    # None otherwise.
    fast_path: str | None = None
    call: object = None  # the op's C++ entry point (skips OpOverload.__call__)
    host_kernel: bool = True  # ATen-CPU computes it (its own CPU kernel, or a composite one)


def _is_generator(arg) -> bool:
    return "Generator" in str(arg.type)


def _is_dtype(arg) -> bool:
    # `type` shows ScalarType as int; `real_type` keeps the schema's spelling.
    return str(arg.real_type) in ("ScalarType", "Optional[ScalarType]")


def plan_op(op: torch._ops.OpOverload) -> OpPlan:
    schema = op._schema
    alias_sets: dict[str, ArgRef] = {}
    written: list[ArgRef] = []
    outs: list[ArgRef] = []
    generator = None
    dtype_args: list[ArgRef] = []
    index_lists: list[ArgRef] = []
    for pos, arg in enumerate(schema.arguments):
        ref = (pos, arg.name)
        if arg.alias_info is not None:
            for alias_set in arg.alias_info.before_set:
                alias_sets[alias_set] = ref
            if arg.alias_info.is_write:
                (outs if arg.is_out else written).append(ref)
        if _is_generator(arg):
            generator = ref
        if _is_dtype(arg):
            dtype_args.append(ref)
        if str(arg.real_type) == "List[Optional[Tensor]]":
            index_lists.append(ref)
    returns = []
    for ret in schema.returns:
        info = ret.alias_info
        if info is None:
            returns.append((ReturnKind.FRESH, None))
        else:
            # A list return (`Tensor(a)[]`) carries its alias set on the element type, which the
            # Python schema does not show: then it aliases the one argument that has an alias set.
            sets = info.before_set or set(alias_sets)
            source = alias_sets.get(next(iter(sets))) if len(sets) == 1 else None
            returns.append((ReturnKind.WRITE if info.is_write else ReturnKind.VIEW, source))
    if any(kind is ReturnKind.VIEW for kind, _ in returns):
        kind = WrapperKind.VIEW
    elif outs:
        kind = WrapperKind.OUT
    elif written:
        kind = WrapperKind.INPLACE
    else:
        kind = WrapperKind.FUNCTIONAL
    seeded = torch.Tag.nondeterministic_seeded in op.tags and generator is None
    name = op.name()
    fast_path = None
    if not (generator or seeded):
        if returns == [(ReturnKind.FRESH, None)] and kind is WrapperKind.FUNCTIONAL:
            fast_path = "fresh"
        elif returns == [(ReturnKind.WRITE, (0, "self"))] and kind is WrapperKind.INPLACE:
            fast_path = "self"
        elif not returns and kind is WrapperKind.INPLACE and written == [(0, "self")]:
            fast_path = "none"  # writes only ``self``, returns nothing (``_foreach_add_``)
        elif len(returns) > 1 and kind is WrapperKind.FUNCTIONAL \
                and all(r is ReturnKind.FRESH for r, _ in returns):
            fast_path = "fresh_many"  # several fresh results (``native_layer_norm``)
    return OpPlan(
        op=op,
        name=name,
        kind=kind,
        returns=tuple(returns),
        written=tuple(written),
        outs=tuple(outs),
        generator=generator,
        seeded=seeded,
        dtype_args=tuple(dtype_args),
        index_lists=tuple(index_lists),
        casts_64bit=name.split(".")[0] not in _NO_64BIT_CAST and kind is not WrapperKind.VIEW,
        fast_path=fast_path,
        call=op._op,
        host_kernel=torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU"),
        tensor_args=frozenset(pos for pos, arg in enumerate(schema.arguments)
                              if str(arg.real_type) == "Tensor"),
    )


def get_arg(args, kwargs, ref: ArgRef):
    pos, name = ref
    return args[pos] if pos < len(args) else kwargs.get(name)


_plans: dict = {}


def plan_for(op: torch._ops.OpOverload) -> OpPlan:
    plan = _plans.get(op)
    if plan is None:
        plan = _plans[op] = plan_op(op)
    return plan
