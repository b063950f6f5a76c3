"""The chokepoint's native kernel for one ATen op: signature -> cached entry -> run.

:func:`native_op` makes one from the op's entry in the kernels' table (``kernels/registry.py``):
a :class:`NativeOp` runs Programs; the table's options pick a variant that draws a seed per call
(``seeded``), answers on the host (``answers``) or hands the call to another native op
(``redirect``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from neuronsim.device import dispatch, random
from neuronsim.device.native import fast
from neuronsim.device.native.build import build_entry, fewer_young_collections
from neuronsim.device.native.entry import DECLINED
from neuronsim.device.native.signature import Decline, arg_key, inplace_key, signature_key
from neuronsim.device.schema import WrapperKind, plan_for
from neuronsim.kernels.registry import Call, Native, Planner
from neuronsim.options import current as current_options

Tensor = torch.Tensor


class EntryCache(dict):
    """An op's entries by signature. Clearing it also forgets the C++ kernels' published records
    (they replay what these entries planned), so the next call of every signature plans afresh."""

    def clear(self) -> None:
        super().clear()
        fast.clear()


class NativeOp:
    """Program-running kernel of one op: a cache of entries keyed by the calls' signatures."""

    draws_seed = False  # SeededOp: the values are the device PRNG's, so the Program runs in every numerics

    def __init__(self, op: torch._ops.OpOverload, planner: Planner, runtime: tuple[str, ...] = ()):
        self.op = op
        self.planner = planner
        self.plan = plan_for(op)
        names = [a.name for a in op._schema.arguments]
        unknown = set(runtime) - set(names)
        if unknown:
            raise ValueError(f"{op}: runtime arguments {sorted(unknown)} are not in its schema")
        self.runtime = tuple((pos, a.name, a.default_value) for pos, a in enumerate(op._schema.arguments)
                             if a.name in runtime)
        # positions and keyword names: the key leaves their values out
        self._runtime_positions = frozenset((*(pos for pos, _, _ in self.runtime), *runtime))
        self._inplace = self.plan.kind is WrapperKind.INPLACE
        self._plain = not (self._runtime_positions or self._inplace)  # the key is the arguments' keys
        self._plain_inplace = self._inplace and not self._runtime_positions
        self._name = self.plan.name
        self.entries: EntryCache = EntryCache()  # signature key -> Entry, or DECLINED
        self._lock = threading.Lock()

    def __call__(self, op, args: tuple, kwargs: dict):
        opts = current_options()
        try:
            # (chip, op name, per-argument keys, ..., 64-bit policy): the name (a str, whose hash is
            # cached) where the OpOverload was, whose __hash__ is Python code run on every call.
            if self._plain and not kwargs:  # most calls: what signature_key gives, one tuple less
                key = (opts.chip, self._name, tuple(map(arg_key, args)), opts.cast_64bit)
            elif self._plain_inplace and not kwargs:
                key = (opts.chip, self._name, *inplace_key(args), opts.cast_64bit)
            else:
                key = (opts.chip, self._name,
                       *signature_key(args, kwargs, self._runtime_positions, self._inplace), opts.cast_64bit)
        except Decline:
            return NotImplemented
        entry = self.entries.get(key)
        if entry is None:
            return self._first_call(key, args, kwargs, opts)
        if entry is DECLINED:
            return NotImplemented
        return entry.run(args, kwargs, opts)

    def _first_call(self, key, args: tuple, kwargs: dict, opts):
        """A signature's first call: build its entry (once, whichever thread is first) and run it."""
        with fewer_young_collections():
            with self._lock:
                entry = self.entries.get(key)
                if entry is None:
                    entry = self.entries[key] = self._build(args, kwargs)
            if entry is DECLINED:
                return NotImplemented
            return entry.run(args, kwargs, opts)

    def _build(self, args: tuple, kwargs: dict):
        return build_entry(self, args, kwargs)


_SEED_ARG = "_neuron_rng_seed"  # the per-call seed's slot among the runtime arguments (never reaches ATen)
_NO_POSITION = 1 << 20  # the seed is no positional argument


class SeededOp(NativeOp):
    """A native op whose Program takes a fresh 32-bit seed per call as its runtime scalars, drawn
    from the generator of the device of the op's first argument."""

    draws_seed = True

    def __init__(self, op, planner, runtime=()):
        super().__init__(op, planner, runtime)
        self.runtime = ((_NO_POSITION, _SEED_ARG, (0.0, 0.0)),)
        self._runtime_positions = frozenset({_SEED_ARG})
        self._plain = self._plain_inplace = False
        self._first = op._schema.arguments[0].name

    def __call__(self, op, args, kwargs):
        x = args[0] if args else kwargs.get(self._first)
        if not isinstance(x, Tensor):  # a factory's size (``randperm(n, out=...)``): its ``out``'s device
            x = kwargs.get("out")
        if not isinstance(x, Tensor) or x.is_cpu:
            return NotImplemented
        seed = random.draw_seed(x.get_device())
        halves = (float(seed >> 16), float(seed & 0xFFFF))
        return super().__call__(op, args, {**kwargs, _SEED_ARG: halves})

    def _build(self, args, kwargs):  # the meta kernel and the planner see the op's own arguments
        return super()._build(args, {k: v for k, v in kwargs.items() if k != _SEED_ARG})


class AnswerOp(NativeOp):
    """An op whose result the planner decides on the host from the call's arguments (no Program,
    nothing charged): ``_fused_sdp_choice``'s backend number."""

    def __call__(self, op, args, kwargs):
        inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        return self.planner(Call(op, args, kwargs, inputs, []))


class RedirectOp(NativeOp):
    """An op whose calls another native op computes (``redirect`` rewrites each call; None: host)."""

    def __init__(self, op, planner, runtime, redirect: Callable):
        super().__init__(op, planner, runtime)
        self.redirect = redirect

    def __call__(self, op, args, kwargs):
        target = self.redirect(op, args, kwargs)
        if target is None:
            return NotImplemented
        other, args, kwargs = target
        kernel = dispatch.NATIVE_KERNELS.get(other)
        if kernel is None:
            return NotImplemented
        return kernel(other, args, kwargs)


def native_op(op: torch._ops.OpOverload, spec: Native) -> NativeOp:
    """The chokepoint's kernel for ``op`` as its table entry ``spec`` declares it."""
    if spec.answers:
        return AnswerOp(op, spec.planner, spec.runtime)
    if spec.redirect is not None:
        return RedirectOp(op, spec.planner, spec.runtime, spec.redirect)
    if spec.seeded:
        return SeededOp(op, spec.planner, spec.runtime)
    return NativeOp(op, spec.planner, spec.runtime)
