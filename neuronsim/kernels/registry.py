"""What a kernel family declares: its ATen ops, their planners, and the launches they answer with.

A family module registers a planner per ATen op::

    @native("aten::add.Tensor", "aten::add_.Tensor")
    def plan_add(call: Call) -> Launch | None: ...

``native`` only fills :data:`TABLE`. The device's native-op runtime (``neuronsim/device/native/``)
reads it: on the first call of a signature it hands the planner a :class:`Call` (the signature's
inputs and the outputs on meta tensors), traces the :class:`Launch` it answers into a Program and
caches it; later calls of the signature run the cached Program without coming back here (except
through a Launch's own ``admit`` and ``result`` callbacks). ``None`` from a planner, or
:class:`Declined` raised while tracing, runs the signature on the host.

This module imports torch and nothing of neuronsim: the device reads it when it registers (before
any family, NKI or the simulator is loaded).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class Ref:
    """An operand of a launch: input tensor ``index`` (``"in"``), output ``index`` (``"out"``), or
    the op's runtime scalars (``"rt"``: an fp32 vector of the values of the arguments registered as
    runtime, in argument order, lists flattened; filled per call, so they are not in the key)."""

    role: str
    index: int


def IN(i: int) -> Ref:  # noqa: N802 (reads like the role it names)
    return Ref("in", i)


def OUT(i: int) -> Ref:  # noqa: N802
    return Ref("out", i)


RUNTIME = Ref("rt", 0)


@dataclass(frozen=True)
class Launch:
    """A planner's answer: ``body(*views, **statics)`` is NKI code on HBM views of ``operands``
    (each view has its tensor's shape and strides); it writes the outputs and returns nothing."""

    body: Callable
    operands: tuple[Ref, ...]
    statics: dict = field(default_factory=dict)
    flops: float = 0.0  # model FLOPs of the op (TensorE FLOPs are counted from the trace if 0)
    # A per-call check of input *values* that a signature cannot decide (index bounds, ...):
    # ``admit(inputs)`` False runs that call on the host, where ATen raises its own error (or computes
    # what the kernel does not cover). It runs before the Program, which never sees such values.
    # ``inputs[i]`` is a CPU tensor over input ``i``'s bytes (made when asked for).
    admit: Callable[[list[Tensor]], bool] | None = None
    # Ops writing several tensors: the call runs on the host unless no two written tensors share
    # memory (the signature pairs each written tensor with the other arguments only).
    disjoint_writes: bool = False
    # Ops whose results are not all fresh tensors (SymInts, undefined tensors: the fused attention
    # ops): ``result(outputs)`` builds the op's return value from the fresh outputs the kernel wrote
    # (the tensors among the meta results, in order). Such ops have no ATen-CPU kernel, so the
    # Program computes them under ``NEURON_SIM_NUMERICS=fast`` too.
    result: Callable[[list[Tensor]], object] | None = None
    # Fresh outputs of another dtype than ATen's meta kernel gives (same sizes and strides):
    # ``native_layer_norm``'s 16-bit mean/rstd, which ATen-CPU returns in the input's dtype.
    output_dtypes: tuple[torch.dtype, ...] | None = None
    # The kernel computes int64 values in 32 bits, as the device's 64-bit policy says
    # (``device/dtype_policy.py``); with the policy off (``cast_64bit=False``) the call runs on the
    # host in 64 bits. Exact int64 kernels (copies, casts of values that fit, cat) leave it False.
    int64_in_32_bits: bool = False


@dataclass
class Call:
    """The first call of a signature, as a planner sees it (decisions may use only the signature)."""

    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict
    inputs: list[Tensor]  # the device tensors among the arguments, in argument order (lists flattened;
    #                       ``out=`` ops: without the ``out`` tensors, which are the outputs)
    outputs: list[Tensor]  # meta tensors with the outputs' shapes, strides and dtypes (``out=``: resized)
    input_args: tuple[int, ...] = ()  # per input: the position of the argument it came from
    runtime: tuple[float, ...] = ()  # this call's runtime scalars (the body sees them as RUNTIME)

    def inputs_of(self, pos: int) -> list[Tensor]:
        """The inputs that came from argument ``pos`` (one tensor, or a list's elements)."""
        return [t for t, p in zip(self.inputs, self.input_args, strict=True) if p == pos]

    def arg(self, pos: int, name: str, default=None):
        if pos < len(self.args):
            return self.args[pos]
        return self.kwargs.get(name, default)


Planner = Callable[[Call], "Launch | None"]


class Declined(Exception):
    """Raised by a kernel body while tracing: this signature is not covered (the op falls back)."""


@dataclass(frozen=True)
class Native:
    """One ATen op's entry in :data:`TABLE` (see :func:`native` for the options)."""

    name: str
    planner: Planner
    runtime: tuple[str, ...] = ()
    seeded: bool = False
    answers: bool = False
    redirect: Callable | None = None
    family: str | None = None  # the module that registered it; None: an op defined at run time


TABLE: dict[str, Native] = {}


def native(*names: str, runtime: tuple[str, ...] = (), seeded: bool = False, answers: bool = False,
           redirect: Callable | None = None):
    """Register the decorated planner for the ATen ops ``names`` (``"aten::add.Tensor"``).

    ``runtime`` names scalar arguments (or scalar lists) whose values change from call to call,
    like an optimizer's step sizes: they are left out of the signature key and reach the kernel as
    the :data:`RUNTIME` operand, so a new value does not trace a new Program.

    ``seeded``: every call draws a fresh seed from the device's generator (``torch.manual_seed``
    repeats it); the kernel reads it as the RUNTIME operand, two fp32 halves ``(seed >> 16,
    seed & 0xFFFF)`` (fp32 holds 24 bits exactly, not 32).

    ``answers``: the op computes no tensor (``_fused_sdp_choice``): the planner's return value is
    the op's result, decided on the host from the call's arguments; no Program, nothing charged.

    ``redirect(op, args, kwargs)``: per call, the ``(op, args, kwargs)`` of another native op that
    computes this call (``_fused_adam_.tensor_lr`` with a host ``lr`` tensor: the float overload on
    its value), or None to run it on the host. The planner is then not asked.
    """

    def register(planner: Planner) -> Planner:
        for name in names:
            TABLE[name] = Native(name, planner, tuple(runtime), seeded, answers, redirect,
                                 family=planner.__module__)
        return planner

    return register


def define(name: str, planner: Planner) -> None:
    """Register an op defined at run time (a fused region): not a family's, so not in the manifest."""
    TABLE[name] = Native(name, planner)


def op_overload(name: str) -> torch._ops.OpOverload:
    """``torch.ops.aten.add.Tensor`` from ``"aten::add.Tensor"``."""
    namespace, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), base), overload or "default")


# ---------------------------------------------------------------- the manifest


def derive_manifest() -> dict[str, tuple[str, ...]]:
    """{family module: its op names}, from the decorators: imports every module of the package
    (loading NKI and the simulator), then reads :data:`TABLE`."""
    import importlib
    import pkgutil

    import neuronsim.kernels as package

    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    families: dict[str, list[str]] = {}
    for spec in TABLE.values():
        if spec.family is not None:
            families.setdefault(spec.family, []).append(spec.name)
    return {module: tuple(sorted(names)) for module, names in sorted(families.items())}


def render_manifest(families: dict[str, tuple[str, ...]]) -> str:
    """The text of ``manifest.py`` for ``families``."""
    lines = [
        '"""Each kernel family\'s ATen ops, so the device registers them without importing the families.',
        "",
        "Generated from the ``@native`` decorators by ``python -m neuronsim.kernels``: do not edit.",
        '"""',
        "",
        "FAMILIES: dict[str, tuple[str, ...]] = {",
    ]
    for module, names in families.items():
        lines.append(f'    "{module}": (')
        lines.extend(f'        "{name}",' for name in names)
        lines.append("    ),")
    lines.append("}")
    return "\n".join(lines) + "\n"
