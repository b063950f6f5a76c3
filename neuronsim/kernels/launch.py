"""A planner's :class:`~neuronsim.kernels.registry.Launch` traced into a prepared Program.

The device hands over the layouts of the launch's distinct operands (``bridge.Operand``: an
in-place op's output is its written input, so several operand refs may name one tensor) and which
of them each ref names. The launch's body runs once on NKI views with those layouts (``nki.jit``
on stand-in arrays: no memory behind them) and the Program it emits is prepared by the simulator
(placement, validation, encoding, schedule). Each signature gets its own ``nki.jit`` kernel object,
so the traced kernel lives in what this returns and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import neuronsim.nki as nki
from neuronsim import sim
from neuronsim.kernels.bridge import Operand, dummy_array, hbm_view
from neuronsim.kernels.registry import Declined, Launch


@dataclass(frozen=True)
class TracedLaunch:
    traced: object  # the nki TracedKernel
    prepared: sim.Prepared
    hbm_slots: tuple[tuple[int, int], ...]  # (Program tensor id, operand index)
    fixed_arrays: dict[int, np.ndarray]  # Program tensor id -> constant or scratch array
    matmul_flops: float  # TensorE FLOPs counted from the trace


def trace_launch(launch: Launch, layouts: list[Operand], which: list[int]) -> TracedLaunch | None:
    """Trace ``launch`` on operands ``layouts`` (``which[i]``: the layout of ``launch.operands[i]``);
    None if its body declines the signature (:class:`Declined`)."""
    body, statics = launch.body, launch.statics
    view_layouts = [layouts[k] for k in which]

    def kernel(*flats):
        views = [hbm_view(flats[k], lay) for k, lay in zip(which, view_layouts, strict=True)]
        body(*views, **statics)

    kernel.__name__ = kernel.__qualname__ = f"{getattr(body, '__name__', 'kernel')}"
    jitted = nki.jit(kernel)
    try:
        traced = jitted.specialize(tuple(dummy_array(lay) for lay in layouts))
    except Declined:
        return None
    if len(traced.instances) != 1 or len(traced.instances[0].programs) != 1:
        raise AssertionError(f"kernel {kernel.__name__}: native kernels are one instance, one phase")
    program = traced.instances[0].programs[0]
    prepared = sim.prepare(program)
    arg_index = {name: k for k, name in enumerate(n for n in traced.arg_names if n is not None)}
    slots, fixed = [], {}
    for t in program.hbm_tensors():
        if t.name in arg_index:
            slots.append((t.id, arg_index[t.name]))
        elif t.name in traced.constants:
            fixed[t.id] = np.ascontiguousarray(traced.constants[t.name])
        else:  # scratch HBM the kernel allocated for itself
            fill = traced.fills.get(t.name)
            fixed[t.id] = np.full(t.shape, 0 if fill is None else fill, dtype=t.dtype.numpy)
    return TracedLaunch(traced, prepared, tuple(slots), fixed, float(traced.instances[0].matmul_flops))
