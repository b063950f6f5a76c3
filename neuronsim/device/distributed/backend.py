"""The ``neuron`` c10d process group: gloo moves the bytes, the topology model charges the time.

Neuron memory is host memory, so a collective runs on an inner ``ProcessGroupGloo`` over zero-copy
CPU views of the neuron tensors and gloo writes the results in place (views that are not contiguous
go through a contiguous copy, written back when the work completes). It is a Python
``dist.ProcessGroup`` subclass: c10d backends cannot be written in Python, process groups can
(shared/reference/pytorch-device/ §5).

Timing: each rank sends its device clock's time with the collective (one small gloo op issued
just before the data op, so all ranks match them in the same order); the collective starts when
the last rank of the group was ready, lasts :func:`topology.collective_ns`, and is charged on each
rank's clock as a ``collective`` event when the work completes (``wait()`` or its future). A
recv starts when both the receiver and the sender were ready.

Failures: a peer that dies or hangs makes gloo fail or time out after the group's timeout (60 s
unless ``init_process_group(timeout=...)`` or ``NEURON_SIM_COLLECTIVE_TIMEOUT`` says otherwise);
the error becomes a :class:`neuronsim.errors.CollectiveError` naming the rank, the collective and
the group: from ``wait()``, from the work's future (DDP's gradient all-reduce, comm hooks), and from
``backward()`` when DDP's reducer met it there.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from neuronsim import env
from neuronsim.device import autograd_hooks, clock, memory, settings, state
from neuronsim.device.distributed import topology
from neuronsim.errors import CollectiveError, OptionError
from neuronsim.options import current

DEFAULT_TIMEOUT_S = 60.0
_MAX = dist.ReduceOp.MAX


def collective_timeout(requested: datetime.timedelta | None) -> datetime.timedelta:
    """The group's timeout: one the user gave to ``init_process_group``, else the environment's,
    else 60 s (torch's own default of 30 minutes is far too long to notice a dead rank)."""
    if requested is not None and requested != dist.default_pg_timeout:
        return requested
    raw = os.environ.get(env.NEURON_SIM_COLLECTIVE_TIMEOUT, "").strip()
    if not raw:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise OptionError(
            f"{env.NEURON_SIM_COLLECTIVE_TIMEOUT} must be a positive number of seconds, got {raw!r}"
        )
    return datetime.timedelta(seconds=seconds)


def _is_neuron(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == state.DEVICE_TYPE


def _nbytes(tensors) -> int:
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_nbytes(t) for t in tensors)


def _flat(tensors) -> list[torch.Tensor]:
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    return [t for item in tensors for t in _flat(item)]


class _Staging:
    """Host tensors for gloo: zero-copy views of neuron tensors, or contiguous copies written back
    (for outputs) once the work is done."""

    def __init__(self):
        self._write_back: list[tuple[torch.Tensor, torch.Tensor]] = []

    def host(self, t: torch.Tensor, output: bool = False) -> torch.Tensor:
        h = memory.host_view(t) if _is_neuron(t) else t
        if h.is_contiguous():
            return h
        dense = h.contiguous()
        if output:
            self._write_back.append((h, dense))
        return dense

    def hosts(self, tensors, output: bool = False):
        if isinstance(tensors, torch.Tensor):
            return self.host(tensors, output)
        return [self.hosts(t, output) for t in tensors]

    def later(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        """Copy ``src`` (a host buffer) into ``dst`` (a host view) when the work is done."""
        self._write_back.append((dst, src))

    def finish(self) -> None:
        for dst, src in self._write_back:
            dst.copy_(src.view_as(dst) if src.shape != dst.shape else src)
        self._write_back.clear()


class NeuronWork(dist.Work):
    """A collective in flight: its gloo works, what to write back, and its clock charge."""

    def __init__(
        self,
        works: Sequence[dist.Work],
        outputs: list,
        finish: Callable[[], None],
        fail: Callable[[BaseException], CollectiveError],
    ):
        super().__init__()
        self._works, self._outputs, self._finish, self._fail = list(works), outputs, finish, fail
        self._done, self._error = False, None
        self._lock = threading.Lock()

    def _complete(self, all_done=None) -> None:
        """Wait for the gloo works (or read ``all_done``, their futures collected and complete: a
        future's callback must not wait on the thread that completes it), then write back and charge."""
        with self._lock:
            if self._error is not None:
                raise self._error
            if self._done:
                return
            try:
                if all_done is None:
                    for w in self._works:
                        w.wait()
                else:
                    for f in all_done.value():  # raises the first failed work's error
                        f.value()
            except RuntimeError as exc:  # gloo: a peer closed the connection or the wait timed out
                self._error = self._fail(exc)
                self._release()
                if all_done is not None:
                    # A future's error reaches C++ waiters (DDP's reducer, inside backward) as text;
                    # the backward entry point raises this one instead.
                    autograd_hooks.keep_for_backward(self._error)
                raise self._error from exc
            self._finish()
            self._done = True
            self._release()

    def _release(self) -> None:
        # Drop what reaches the process group: a future's callback ends on gloo's thread, and if the
        # last reference to the group went with it, its destructor would join that very thread.
        self._works, self._finish, self._fail = [], None, None

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._complete()
        return True

    def is_completed(self) -> bool:
        return self._done or self._error is not None or all(w.is_completed() for w in self._works)

    def is_success(self) -> bool:
        return self._done

    def exception(self):
        return self._error

    def result(self) -> list:
        return self._outputs

    def synchronize(self) -> None:
        self._complete()

    def get_future(self) -> torch.futures.Future:
        def done(all_done):
            self._complete(all_done)
            return self._outputs

        return torch.futures.collect_all([w.get_future() for w in self._works]).then(done)


class NeuronProcessGroup(dist.ProcessGroup):
    """``dist.init_process_group("neuron")``'s group (and every ``new_group`` of it)."""

    def __init__(self, store, rank: int, size: int, timeout: datetime.timedelta, global_ranks: Sequence[int]):
        super().__init__(rank, size)
        self._timeout = timeout
        self._global_ranks = tuple(global_ranks)
        self._name = self._desc = ""
        started = time.monotonic()
        try:  # connects to every peer: fails when one does not come within the timeout
            self._gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        except RuntimeError as exc:
            raise self._fail("init_process_group", started)(exc) from exc

    # ---- what c10d asks of a Python process group -----------------------------------------------
    def getBackendName(self) -> str:
        return "neuron"

    def setGroupName(self, name: str) -> None:  # functional collectives look groups up by name
        self._name = name

    def getGroupName(self) -> str:
        return self._name

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def getGroupDesc(self) -> str:
        return self._desc

    def _get_backend(self, device):
        """What c10d's Python side asks about capabilities (batch_isend_irecv: coalescing; FSDP2:
        tensor allocation): the inner gloo backend, which answers "no" to both. A Python process
        group has no C++ backend registered for ``neuron``, so torch's own method raises."""
        return self._gloo

    @property
    def global_ranks(self) -> tuple[int, ...]:
        return self._global_ranks

    # ---- timing and failure ---------------------------------------------------------------------
    def _device(self, tensors) -> int:
        for t in _flat(tensors):
            if _is_neuron(t):
                return t.get_device()
        return state.current_device()

    def _fail(
        self, collective: str, issued: float | None = None
    ) -> Callable[[BaseException], CollectiveError]:
        """Turns gloo's error into one that says who, what, and whether a peer died or went silent."""
        issued = time.monotonic() if issued is None else issued

        def make(exc: BaseException) -> CollectiveError:
            waited = time.monotonic() - issued
            limit = self._timeout.total_seconds()
            why = (
                f"no answer from a peer within the {limit:g} s timeout (a rank hung, or never came)"
                if waited >= 0.9 * limit
                else f"a peer rank died (its connection closed after {waited:.2f} s)"
            )
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return CollectiveError(
                f"rank {self._global_ranks[self.rank()]}: {collective} over ranks {list(self._global_ranks)} "
                f"failed: {why}; gloo: {cause}"
            )

        return make

    def _run(
        self,
        collective: str,
        tensors,
        nbytes: int,
        issue: Callable[[], list],
        outputs,
        staging: _Staging,
        peer: tuple[str, int, int] | None = None,
    ) -> NeuronWork:
        """Issue the clock exchange, then the data op(s); charge the clock when both are done.
        ``peer`` = ("send" | "recv", group rank of the other end, tag) for point-to-point."""
        issued = time.monotonic()
        device = self._device(tensors)
        clk = clock.clock(device)
        ready = torch.tensor([clk.now_ns], dtype=torch.float64)
        try:
            if peer is None:
                exchange = self._gloo.allreduce([ready], _max_opts())
            elif peer[0] == "send":
                exchange = self._gloo.send([ready], peer[1], peer[2])
            else:
                exchange = self._gloo.recv([ready], peer[1], peer[2])
            works = [exchange, *issue()]
        except RuntimeError as exc:  # c10d's DistBackendError: a peer is gone
            raise self._fail(collective, issued)(exc) from exc
        ranks = (
            self._global_ranks
            if peer is None
            else (self._global_ranks[self.rank()], self._global_ranks[peer[1]])
        )
        own_ready = float(clk.now_ns)
        signature = tuple((str(t.dtype).removeprefix("torch."), tuple(t.shape)) for t in _flat(tensors)[:4])

        def finish() -> None:
            staging.finish()
            start = max(own_ready, float(ready[0])) if peer is None or peer[0] == "recv" else own_ready
            start = max(start, _track_free.get(device, 0.0))
            duration = topology.collective_ns(collective, nbytes, ranks, _interconnect())
            _track_free[device] = start + duration
            clk.charge_collective(f"neuron::{collective}", signature, start, duration, nbytes)

        return NeuronWork(works, outputs, finish, self._fail(collective, issued))

    # ---- collectives ----------------------------------------------------------------------------
    def _in_place(self, collective: str, tensors, call):
        """A collective gloo runs on the tensors' own host views (written back when it finishes)."""
        s = _Staging()
        hosts = s.hosts(tensors, output=True)
        return self._run(collective, tensors, _nbytes(tensors), lambda: [call(hosts)], list(tensors), s)

    def _single(self, collective: str, output, input, nbytes: int, call):
        """A collective from one input tensor into one output tensor."""
        s = _Staging()
        out, inp = s.host(output, output=True), s.host(input)
        return self._run(collective, [input], nbytes, lambda: [call(out, inp)], [output], s)

    def _coalesced(self, collective: str, outputs, inputs, nbytes: int, call):
        """``_single`` over pairs of outputs and inputs, as one collective."""
        s = _Staging()
        outs, ins = s.hosts(outputs, output=True), s.hosts(inputs)
        return self._run(collective, inputs, nbytes,
                         lambda: [call(o, i) for o, i in zip(outs, ins, strict=True)], list(outputs), s)

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        return self._in_place("all_reduce", tensors, lambda hosts: self._gloo.allreduce(hosts, opts))

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._in_place("all_reduce", tensors,
                              lambda hosts: self._gloo.allreduce_coalesced(hosts, opts))

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        return self._in_place("broadcast", tensors, lambda hosts: self._gloo.broadcast(hosts, opts))

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        return self._in_place("reduce", tensors, lambda hosts: self._gloo.reduce(hosts, opts))

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        s = _Staging()
        outs, ins = s.hosts(output_lists, output=True), s.hosts(inputs)
        return self._run(
            "all_gather",
            inputs,
            _nbytes(output_lists),
            lambda: [self._gloo.allgather(outs, ins, opts)],
            list(output_lists),
            s,
        )

    def _allgather_base(self, output, input, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._single("all_gather", output, input, _nbytes(output),
                            lambda o, i: self._gloo._allgather_base(o, i, opts))

    all_gather_single = _allgather_base  # torch 2.13 sends all_gather_into_tensor here

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._coalesced("all_gather", outputs, inputs, _nbytes(outputs),
                               lambda o, i: self._gloo._allgather_base(o, i, opts))

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._single("reduce_scatter", output, input, _nbytes(input),
                            lambda o, i: self._gloo._reduce_scatter_base(o, i, opts))

    reduce_scatter_single = _reduce_scatter_base  # torch 2.13 sends reduce_scatter_tensor here

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._coalesced("reduce_scatter", outputs, inputs, _nbytes(inputs),
                               lambda o, i: self._gloo._reduce_scatter_base(o, i, opts))

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None):
        """The list form: each rank's inputs stacked into one buffer for gloo's tensor form."""
        opts = opts or dist.ReduceScatterOptions()
        s = _Staging()
        out = outputs[0]
        chunks = [s.host(t) for t in input_lists[0]]
        if any(c.shape != chunks[0].shape for c in chunks):
            raise ValueError("reduce_scatter on the neuron backend needs equal-sized inputs")
        stacked = torch.cat([c.reshape(-1) for c in chunks])
        result = torch.empty(chunks[0].numel(), dtype=out.dtype)
        s.later(memory.host_view(out) if _is_neuron(out) else out, result)
        return self._run(
            "reduce_scatter",
            input_lists[0],
            _nbytes(input_lists[0]),
            lambda: [self._gloo._reduce_scatter_base(result, stacked, opts)],
            list(outputs),
            s,
        )

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts or dist.AllToAllOptions()
        splits = (output_split_sizes, input_split_sizes)
        return self._single("all_to_all", output, input, _nbytes(input),
                            lambda o, i: self._gloo.alltoall_base(o, i, *splits, opts))

    def alltoall(self, outputs, inputs, opts=None):
        """The list form, equal splits: stacked into one buffer for gloo's single-tensor form."""
        opts = opts or dist.AllToAllOptions()
        s = _Staging()
        ins = [s.host(t) for t in inputs]
        if any(t.numel() != ins[0].numel() for t in [*ins, *outputs]):
            raise ValueError("all_to_all on the neuron backend supports equal splits only")
        stacked = torch.cat([t.reshape(-1) for t in ins])
        result = torch.empty_like(stacked)
        for i, out in enumerate(outputs):
            s.later(
                memory.host_view(out) if _is_neuron(out) else out,
                result[i * ins[0].numel() : (i + 1) * ins[0].numel()],
            )
        return self._run(
            "all_to_all",
            inputs,
            _nbytes(inputs),
            lambda: [self._gloo.alltoall_base(result, stacked, [], [], opts)],
            list(outputs),
            s,
        )

    def gather(self, output_lists, inputs, opts=None):
        opts = opts or dist.GatherOptions()
        s = _Staging()
        outs, ins = s.hosts(output_lists, output=True), s.hosts(inputs)
        return self._run(
            "gather",
            inputs,
            _nbytes(inputs) * self.size(),
            lambda: [self._gloo.gather(outs, ins, opts)],
            list(output_lists),
            s,
        )

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ScatterOptions()
        s = _Staging()
        outs, ins = s.hosts(outputs, output=True), s.hosts(input_lists)
        return self._run(
            "scatter",
            outputs,
            _nbytes(outputs) * self.size(),
            lambda: [self._gloo.scatter(outs, ins, opts)],
            list(outputs),
            s,
        )

    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        return self._run("barrier", [], 0, lambda: [self._gloo.barrier(opts)], [], _Staging())

    def send(self, tensors, dst: int, tag: int = 0):
        return self._point_to_point("send", self._gloo.send, tensors, dst, tag)

    def recv(self, tensors, src: int, tag: int = 0):
        return self._point_to_point("recv", self._gloo.recv, tensors, src, tag)

    def _point_to_point(self, kind: str, gloo_call, tensors, peer: int, tag: int):
        s = _Staging()
        hosts = s.hosts(tensors, output=kind == "recv")
        return self._run(kind, tensors, _nbytes(tensors), lambda: [gloo_call(hosts, peer, tag)],
                         list(tensors), s, peer=(kind, peer, tag))


_track_free: dict[int, float] = {}  # device index -> end of its last collective (one collectives track)


def _max_opts() -> dist.AllreduceOptions:
    opts = dist.AllreduceOptions()
    opts.reduceOp = _MAX
    return opts


def _interconnect() -> topology.Interconnect:
    return topology.interconnect_for_option(current().chip, settings.chip())


def create(dist_backend_opts, backend_options) -> NeuronProcessGroup:
    """The creator registered with ``dist.Backend.register_backend`` (extended API: it needs the
    group's global ranks for the topology)."""
    from neuronsim.device.distributed import fsdp

    fsdp.install()  # FSDP2 is only ever used with a process group
    ranks = list(dist_backend_opts.global_ranks_in_group) or list(range(dist_backend_opts.group_size))
    return NeuronProcessGroup(
        dist_backend_opts.store,
        dist_backend_opts.group_rank,
        dist_backend_opts.group_size,
        collective_timeout(dist_backend_opts.timeout),
        ranks,
    )
