"""A collective launch: one kernel on ``ranks`` logical NeuronCores that talk through ``nki.collectives``.

``simulate_ranks(kernel, ranks)(inputs)`` traces the kernel once per rank (``rank_id()`` is the
rank; each rank has its own arguments), then runs the ranks' ``core_barrier`` / collective phases
in step: phase ``k`` of every rank runs before phase ``k + 1`` of any, so what a rank copies into a
collective's staging tensor is there when the others read it. Each rank's HBM tensors are its own;
the staging tensors are one array all ranks see. In time, ranks run on their own physical cores
in parallel, and each phase starts when the slowest rank has finished the one before, plus the
link time of a collective whose ranks are on different chips (:func:`rendezvous_ns`).
"""

from __future__ import annotations

import time

from neuronsim.errors import ConstraintError, InputError, UnsupportedError
from neuronsim.nki import launch
from neuronsim.nki.kernel import as_kernel
from neuronsim.nki.profile import build_profile
from neuronsim.nki.trace import launch_rank
from neuronsim.sim.interconnect import INSTANCE_NETWORK, NEURONLINK, interconnect
from neuronsim.sim.ir import Opcode


def simulate_ranks(kernel, ranks: int, *, profile: bool = False, chip=None):
    """A callable: ``simulate_ranks(k, ranks=4)(inputs) -> [outputs of rank 0, ...]``.

    ``inputs`` is a dict of keyword arguments for every rank, a list of one dict per rank, or a
    callable ``rank -> dict``. ``kernel`` may be a grid launch (``k[2]``: each rank LNC=2). With
    ``profile=True`` it returns ``(outputs, profiles)``, one Profile per rank on a common clock.
    """
    k = as_kernel(kernel)
    if not isinstance(ranks, int) or ranks < 1:
        raise InputError(f"simulate_ranks: ranks={ranks!r} must be a positive integer")

    def run(inputs):
        issued = time.time_ns()
        per_rank = [_rank_inputs(inputs, r, ranks) for r in range(ranks)]
        traced = []
        for r, kwargs in enumerate(per_rank):
            saved, launch_rank.value = launch_rank.value, (r, ranks)
            try:
                traced.append(k.specialize((), kwargs, chip=chip))
            finally:
                launch_rank.value = saved
        _check_agree(k.__name__, traced)
        if any(t.info.get("loop_barriers") for t in traced):
            # its pauses would add phases the ranks' collectives are not numbered by
            raise UnsupportedError(f"kernel {k.__name__}: a core_barrier/sendrecv inside a loop on a "
                                   f"register is not simulated in a launch over several ranks "
                                   f"(simulate_ranks); it is in a single-rank launch",
                                   location=_first_loop_barrier(traced))
        world: dict = {}
        phases = [launch.execute_phases(t, k.arrays((), kw), new_shared=_world_arrays(t, world))
                  for t, kw in zip(traced, per_rank, strict=True)]
        runs = [[] for _ in range(ranks)]
        for _ in range(len(traced[0].instances[0].programs)):
            for r, steps in enumerate(phases):
                runs[r].append(next(steps))
        outputs = [_finish(steps) for steps in phases]
        launch.record_launch(traced[0], runs[0], issued)  # the profiler records rank 0, as AWS's does
        if not profile:
            return outputs
        # every phase starts when the slowest rank has finished the one before
        spec = traced[0].chip
        per_chip = spec.physical_cores_per_chip // max(1, min(len(traced[0].instances), spec.default_lnc))
        links = rendezvous_ns(traced[0].info["collectives"], interconnect(spec), per_chip)
        phase_ns = [max(_phase_ns(runs[r][p], spec) for r in range(ranks)) + links.get(p, 0.0)
                    for p in range(len(runs[0]))]
        return outputs, [build_profile(t, rs, phase_ns=phase_ns) for t, rs in zip(traced, runs, strict=True)]

    run.__name__ = f"simulate_ranks({getattr(k, '__name__', 'kernel')}, {ranks})"
    return run


def rendezvous_ns(collectives, net, ranks_per_chip: int) -> dict[int, float]:
    """Link time each phase ends with: the slowest of its collectives whose group spans chips.

    A rank is a logical core: ``ranks_per_chip`` of them per chip (8 physical cores at LNC=1, 4 at
    LNC=2 on trn2), ranks numbered chip by chip. Within a chip the DMAs are the cost (their transfers
    and fixed latencies are on the timeline). Across chips, the bandwidth-optimal algorithms of
    ``neuronsim.sim.interconnect`` (ring, 2(n-1) steps for all_reduce) at the level's link bandwidth
    and per-step latency: ``steps * latency + bytes over the links / bandwidth``.
    """
    out: dict[int, float] = {}
    for kind, group, phase, nbytes in collectives:
        n = len(group)
        chips = {r // ranks_per_chip for r in group}
        if n <= 1 or len(chips) == 1:
            continue
        same_instance = len({c // net.chips_per_instance for c in chips}) == 1
        bandwidth, latency = net.link(NEURONLINK if same_instance else INSTANCE_NETWORK)
        steps, moved = {
            "all_reduce": (2 * (n - 1), 2 * (n - 1) / n * nbytes),
            "all_gather": (n - 1, (n - 1) * nbytes),
            "reduce_scatter": (n - 1, (n - 1) / n * nbytes),
            "all_to_all": (n - 1, (n - 1) / n * nbytes),
        }.get(kind, (1, nbytes))  # a permute: one step, the whole tensor
        out[phase] = max(out.get(phase, 0.0), steps * latency + moved / bandwidth * 1e9)
    return out


def _rank_inputs(inputs, rank: int, ranks: int) -> dict:
    if callable(inputs):
        inputs = inputs(rank)
    elif isinstance(inputs, (list, tuple)):
        if len(inputs) != ranks:
            raise InputError(f"simulate_ranks: {len(inputs)} input dicts for {ranks} ranks")
        inputs = inputs[rank]
    if not isinstance(inputs, dict):
        raise InputError(f"simulate_ranks: inputs for rank {rank} must be a dict of keyword arguments; got "
                         f"{type(inputs).__name__}")
    return inputs


def _check_agree(name: str, traced) -> None:
    """Every rank reaches the same collectives, in the same order, with the same groups."""
    first = traced[0]
    for r, t in enumerate(traced[1:], start=1):
        if len(t.instances[0].programs) != len(first.instances[0].programs):
            raise ConstraintError(f"kernel {name}: rank {r} reaches {len(t.instances[0].programs) - 1} "
                                  f"collectives / core barriers, rank 0 reaches "
                                  f"{len(first.instances[0].programs) - 1}")
        if [c[0] for c in t.info["collectives"]] != [c[0] for c in first.info["collectives"]]:
            raise ConstraintError(f"kernel {name}: rank {r} calls the collectives "
                                  f"{[c[0] for c in t.info['collectives']]}, rank 0 "
                                  f"{[c[0] for c in first.info['collectives']]}; "
                                  "every rank must make the same calls")


def _world_arrays(traced, world: dict):
    def new_shared(name, shape, dtype, fill):
        if name not in traced.info["world"]:
            return launch._new_array(shape, dtype, fill)
        a = world.get(name)
        if a is None:
            a = world[name] = launch._new_array(shape, dtype, None)
        elif a.shape != tuple(shape) or a.dtype != dtype:
            raise ConstraintError(f"kernel {traced.name}: ranks exchange different tensors at collective "
                                  f"'{name}' ({a.shape} {a.dtype} vs {tuple(shape)} {dtype})")
        return a

    return new_shared


def _first_loop_barrier(traced) -> str | None:
    return next((ins.location for t in traced for inst in t.instances for p in inst.programs
                 for ins in p.instructions if ins.opcode is Opcode.CORE_BARRIER), None)


def _finish(steps):
    try:
        next(steps)
    except StopIteration as done:
        return done.value
    raise AssertionError("a rank ran more phases than its kernel has")


def _phase_ns(row, chip) -> float:
    n_cores = max(1, min(len(row), chip.default_lnc))
    core = [0.0] * n_cores
    for i, result in enumerate(row):
        core[i % n_cores] += result.timeline.total_ns
    return max(core)
