"""Host fallback: compute an op with ATen-CPU on zero-copy host aliases of its device tensors.

What happens to each argument and result follows from the op's :class:`~.schema.OpPlan`: device
tensors become host views (narrowed to 32 bits under the 64-bit policy), fresh results are adopted
as device tensors, write aliases return the caller's tensor and view aliases are rebuilt as device
views of the device base. The call is charged to the device clock as a host fallback.
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

from neuronsim.device import clock, dtype_policy, random, settings, state, tracking
from neuronsim.device.memory import adopt, host_view
from neuronsim.device.schema import OpPlan, ReturnKind, WrapperKind, get_arg

Tensor = torch.Tensor
_CPU = torch.device("cpu")
CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
_as_strided = torch.ops.aten.as_strided.default
_NARROW = dtype_policy.NARROW


_NUMBERS = (bool, int, float, complex)


def number_as_tensor(value) -> Tensor:
    """A 0-dim CPU tensor for a Python number in a ``Tensor`` argument, of the dtype a wrapped
    number takes (default float/complex dtypes), so type promotion is what ATen gives the number."""
    if type(value) is float:
        return torch.tensor(value, dtype=torch.get_default_dtype())
    if type(value) is complex:
        return torch.tensor(value, dtype=torch.complex64 if torch.get_default_dtype() != torch.float64
                            else torch.complex128)
    return torch.tensor(value)


class _Conversion:
    """Turns device arguments into host arguments, noting what the call reads."""

    __slots__ = ("index", "bytes_in", "signature", "cast", "keep", "narrowed", "host_tensors")

    def __init__(self, cast: bool, keep: frozenset):
        self.index = None
        self.bytes_in = 0
        self.signature: list = []
        self.cast = cast
        self.keep = keep  # 64-bit dtypes left as they are (the op's host kernels need them)
        self.narrowed: set = set()
        self.host_tensors = False

    def __call__(self, a):
        if isinstance(a, Tensor):
            if a.is_cpu or a.is_meta:
                if a.is_cpu and a.dim():
                    self.host_tensors = True
                return a
            if self.index is None:
                self.index = a.get_device()
            self.bytes_in += a.nbytes
            self.signature.append((a.dtype, a.shape))
            h = host_view(a)
            if self.cast and a.dtype in _NARROW and a.dtype not in self.keep:
                self.narrowed.add(a.dtype)
                return h.to(_NARROW[a.dtype])
            return h
        if isinstance(a, list | tuple):
            return type(a)(self(x) for x in a)
        if isinstance(a, torch.device):
            return _CPU if a.type != "cpu" else a
        if self.cast and isinstance(a, torch.dtype) and a in _NARROW and a not in self.keep:
            self.narrowed.add(a)
            return _NARROW[a]
        return a


def run_on_host(plan: OpPlan, args: tuple, kwargs: dict, charge: bool = True):
    """Compute the op with ATen-CPU; ``charge=False`` (a native kernel's ``fast`` numerics, which
    charges its own Program's time) neither charges the clock nor counts a fallback."""
    fast = plan.fast_path
    if fast is not None:
        result = _run_fast(plan, fast, args, kwargs, charge)
        if result is not _SLOW:
            return result
    cast = plan.casts_64bit and settings.cast_64bit()
    return _run(plan, args, kwargs, cast, dtype_policy.kept_64bit(plan.name), charge)


_SLOW = object()


def _run_fast(plan: OpPlan, fast: str, args: tuple, kwargs: dict, charge: bool = True):
    """The common case, kept short: device tensors (alone or in lists) and scalars, no 64-bit
    tensors to narrow, no CPU tensors but 0-dim scalars; one fresh result, or an in-place update
    of ``self``. Returns ``_SLOW`` for anything else."""
    index = None
    bytes_in = 0
    signature = []
    hargs = []
    narrow = plan.casts_64bit
    for pos, a in enumerate(args):
        if type(a) in _NUMBERS and pos in plan.tensor_args:
            a = number_as_tensor(a)
        if isinstance(a, Tensor):
            if a.is_cpu:
                if a.dim():
                    return _SLOW  # a CPU tensor that is not a scalar: the slow path checks it
            else:
                if narrow and a.dtype in _NARROW:
                    return _SLOW
                if index is None:
                    index = a.get_device()
                if charge:  # what the clock records; a native kernel charges its own
                    bytes_in += a.nbytes
                    signature.append((a.dtype, a.shape))
                a = host_view(a)
        elif isinstance(a, list | tuple):
            if a and isinstance(a[0], Tensor):
                converted = []
                for x in a:
                    # Device tensors only (``_foreach_*``): CPU ones and index lists take the slow path.
                    if not isinstance(x, Tensor) or x.is_cpu or (narrow and x.dtype in _NARROW):
                        return _SLOW
                    if charge:
                        bytes_in += x.nbytes
                        signature.append((x.dtype, x.shape))
                    converted.append(host_view(x))
                if index is None:
                    index = a[0].get_device()
                a = type(a)(converted)
            else:
                for x in a:
                    if isinstance(x, Tensor):
                        return _SLOW
        elif isinstance(a, torch.device) or (narrow and isinstance(a, torch.dtype) and a in _NARROW):
            return _SLOW  # (a dtype that is not narrowed passes as it is, as in the slow path)
        hargs.append(a)
    if kwargs:
        for v in kwargs.values():
            if isinstance(v, Tensor | list | tuple | torch.device | torch.dtype):
                return _SLOW
    if index is None:
        return _SLOW
    result = plan.call(*hargs, **kwargs)
    if fast == "fresh":
        if not isinstance(result, Tensor):
            return _finish_other_result(plan, result, signature, bytes_in, index, charge)
        out = adopt(result, index) if result.is_cpu else result
    elif fast == "fresh_many":
        return _finish_other_result(plan, tuple(result), signature, bytes_in, index, charge)
    else:
        out = args[0] if fast == "self" else None
    if charge:
        bytes_out = _nbytes(args[0] if out is None else out)
        clock.clock(index).charge_fallback(plan.name, tuple(signature), bytes_in, bytes_out)
        tracking.record_fallback(plan.name)
    return out


def host_runner(plan: OpPlan, args: tuple, kwargs: dict, varying: frozenset = frozenset()):
    """The short path (uncharged: a native kernel's ``fast`` numerics) specialised to calls laid
    out like this one, or None where the short path does not take it. A native kernel's signature
    fixes the layout: which positions hold device tensors, lists of them, numbers or 0-dim CPU
    scalars, and their dtypes; ``varying`` names positions whose kind it does not fix (runtime
    arguments), which must hold no tensors. ``runner(args, kwargs, index)`` computes a call."""
    fast = plan.fast_path
    if fast is None:
        return None
    for v in kwargs.values():
        if isinstance(v, Tensor | list | tuple | torch.device | torch.dtype):
            return None
    narrow = plan.casts_64bit
    tensors, lists, numbers = [], [], []
    for pos, a in enumerate(args):
        if type(a) in _NUMBERS and pos in plan.tensor_args:
            numbers.append(pos)
        elif isinstance(a, Tensor):
            if pos in varying or (a.is_cpu and a.dim()) or (narrow and a.dtype in _NARROW):
                return None
            if not a.is_cpu:
                tensors.append(pos)  # (a 0-dim CPU scalar passes as it is)
        elif isinstance(a, list | tuple):
            if any(isinstance(x, Tensor) for x in a):
                if pos in varying or not all(isinstance(x, Tensor) and not x.is_cpu
                                             and not (narrow and x.dtype in _NARROW) for x in a):
                    return None
                lists.append(pos)
        elif isinstance(a, torch.device) or (narrow and isinstance(a, torch.dtype) and a in _NARROW):
            return None
    if not tensors and not lists:
        return None
    call = plan.call
    if not lists and not numbers and len(tensors) == len(args):
        # Every positional argument a device tensor (``add(a, b)``, ``mm``, ``add_``): the common
        # case of a training step, with no per-position loop.
        if fast == "fresh":
            def runner(args: tuple, kwargs: dict, index: int):
                return _fresh_result(call(*map(host_view, args), **kwargs), index)
            return runner
        if fast == "self" or fast == "none":
            def runner(args: tuple, kwargs: dict, index: int):
                call(*map(host_view, args), **kwargs)
                return args[0] if fast == "self" else None
            return runner

    def runner(args: tuple, kwargs: dict, index: int):
        hargs = list(args)
        for p in tensors:
            hargs[p] = host_view(args[p])
        for p in lists:
            a = args[p]
            hargs[p] = type(a)(map(host_view, a))
        for p in numbers:
            hargs[p] = number_as_tensor(args[p])
        result = call(*hargs, **kwargs)
        if fast == "fresh":
            return _fresh_result(result, index)
        if fast == "fresh_many":
            return _adopt_all(tuple(result), index, ())
        return args[0] if fast == "self" else None

    return runner


def _fresh_result(result, index: int):
    if isinstance(result, Tensor):
        return adopt(result, index) if result.is_cpu else result
    return _adopt_all(result, index, ())


def _finish_other_result(plan, result, signature, bytes_in, index, charge: bool):
    # A non-tensor (or tensor-list) result of a fresh-returning op: adopt what needs adopting.
    out = _adopt_all(result, index, ())
    if charge:
        clock.clock(index).charge_fallback(plan.name, tuple(signature), bytes_in, _nbytes(out))
        tracking.record_fallback(plan.name)
    return out


def _run(plan: OpPlan, args: tuple, kwargs: dict, cast: bool, keep: frozenset, charge: bool = True):
    conv = _Conversion(cast, keep)
    hargs = [conv(number_as_tensor(a) if type(a) in _NUMBERS and pos in plan.tensor_args else a)
             for pos, a in enumerate(args)]
    hkwargs = {k: conv(v) for k, v in kwargs.items()} if kwargs else {}
    if conv.host_tensors and conv.index is not None:
        _check_same_device(plan, args, kwargs, conv.index)
    try:
        return _call(plan, args, kwargs, conv, hargs, hkwargs, charge)
    except (RuntimeError, TypeError, IndexError) as exc:
        # ATen-CPU has no kernel for a dtype the policy narrowed to (avg_pool2d, conv_transpose on
        # int32): keep that dtype in 64 bits. Or it insists on int64 indices (gather, nll_loss
        # targets; index values are the same in 32 bits): keep int64. Rerun, and remember it for the
        # op. If the rerun fails too, its error is the one the user's dtypes give (an out-of-range
        # target, not "expected Long").
        kept = dtype_policy.narrowed_without_kernel(exc, conv.narrowed)
        if kept is None and torch.int64 in conv.narrowed:
            kept = torch.int64
        if kept is None or kept in keep:
            raise
        result = _run(plan, args, kwargs, cast, keep | {kept}, charge)
        dtype_policy.learn_kept_64bit(plan.name, kept)
        return result


_META = torch.device("meta")


def _widen_targets(plan: OpPlan, args: tuple, kwargs: dict, conv: _Conversion) -> set:
    """The 32-bit result dtypes to widen back after a narrowed computation: those whose result
    ATen's meta kernel gives as 64-bit for the original dtypes (``scatter(int32, int64 index)`` stays
    int32; ``int64 + int32`` is int64; a 0-dim float64 leaves a float32 result float32). Without a
    meta kernel, every narrowed dtype."""
    try:
        key = (plan.name, frozenset(conv.narrowed), torch.get_default_dtype(),  # types Python numbers
               _layout_key(args), _layout_key(tuple(kwargs.items())))
        hash(key)
    except (TypeError, _Unkeyed):
        key = None
    found = _widen_cache.get(key) if key is not None else None
    if found is not None:
        return found

    def meta(a):
        if isinstance(a, Tensor) and not a.is_cpu:
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=_META)
        if isinstance(a, list | tuple):
            return type(a)(meta(x) for x in a)
        return _META if isinstance(a, torch.device) else a

    try:
        result = plan.op(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
    except Exception:  # no meta kernel (or it rejects meta inputs): every narrowed dtype
        return dtype_policy.cast_back_targets(conv.narrowed, plan, args, kwargs)
    results = result if isinstance(result, list | tuple) else (result,)
    found = {_NARROW[r.dtype] for r in results if isinstance(r, Tensor) and r.dtype in _NARROW}
    if key is not None:
        if len(_widen_cache) >= _WIDEN_CACHE_SIZE:
            _widen_cache.clear()
        _widen_cache[key] = found
    return found


# The meta answer depends only on what the meta tensors carry (dtype, shape, strides), on the other
# arguments and on the default dtype, so a training loop's repeated calls ask the meta kernel once.
_widen_cache: dict = {}
_WIDEN_CACHE_SIZE = 4096


class _Unkeyed(Exception):
    """An argument whose value the meta kernel may read: no cache key."""


def _layout_key(a):
    if isinstance(a, Tensor):
        if a.is_cpu:
            if a.dim() or a.numel() != 1:
                raise _Unkeyed
            return ("cpu", a.dtype, a.item())  # a scalar's value can decide a result's dtype
        return (a.dtype, a.shape, a.stride())
    if isinstance(a, list | tuple):
        return (type(a), *map(_layout_key, a))
    if type(a) is float:
        return ("f", a.hex())  # -0.0 and NaN keep distinct, stable keys
    return (type(a), a)


def _check_same_device(plan: OpPlan, args: tuple, kwargs: dict, index: int) -> None:
    """CPU tensors other than 0-dim scalars (and CPU index lists) cannot mix with device tensors,
    as on any accelerator; the host computation would not notice."""
    for ref in _refs(plan, args, kwargs):
        if ref in plan.index_lists or ref[1] == "scalars":  # (a _foreach_ op's CPU scalars)
            continue
        value = get_arg(args, kwargs, ref)
        for t in value if isinstance(value, list | tuple) else (value,):
            if isinstance(t, Tensor) and t.is_cpu and t.dim() > 0:
                raise RuntimeError(
                    "Expected all tensors to be on the same device, but found at least two devices, "
                    f"neuron:{index} and cpu! (when checking arguments for {plan.name})"
                )


def _refs(plan: OpPlan, args: tuple, kwargs: dict):
    names = [a.name for a in plan.op._schema.arguments]
    for pos in range(len(args)):
        yield (pos, names[pos])
    for name in kwargs:
        if name in names:
            yield (names.index(name), name)


def _call(plan: OpPlan, args, kwargs, conv: _Conversion, hargs, hkwargs, charge: bool = True):
    index = state.current_device() if conv.index is None else conv.index
    if plan.generator is not None and get_arg(args, kwargs, plan.generator) is None:
        _set_arg(hargs, hkwargs, plan.generator, random.generator(index))
    if plan.kind is WrapperKind.OUT:
        result = _call_with_outs(plan, args, kwargs, hargs, hkwargs, index)
    elif plan.seeded:
        with random.as_host_default(index):
            result = plan.call(*hargs, **hkwargs)
    else:
        result = plan.call(*hargs, **hkwargs)
    bytes_out = 0
    if conv.narrowed:
        bytes_out += _write_back_narrowed(plan.written, args, kwargs, hargs, hkwargs)
    else:
        bytes_out += sum(_nbytes(get_arg(args, kwargs, ref)) for ref in plan.written)
    bytes_out += sum(_nbytes(get_arg(args, kwargs, ref)) for ref in plan.outs)
    widen = _widen_targets(plan, args, kwargs, conv) if conv.narrowed else ()
    out, fresh_bytes = _results(plan, result, args, kwargs, hargs, hkwargs, index, widen)
    if charge:
        clock.clock(index).charge_fallback(
            plan.name, tuple(conv.signature), conv.bytes_in, bytes_out + fresh_bytes
        )
        tracking.record_fallback(plan.name)
    return out


def _set_arg(hargs: list, hkwargs: dict, ref, value) -> None:
    pos, name = ref
    if pos < len(hargs):
        hargs[pos] = value
    else:
        hkwargs[name] = value


def _nbytes(x) -> int:
    if isinstance(x, Tensor):
        return x.nbytes
    if isinstance(x, list | tuple):
        return sum(_nbytes(t) for t in x)
    return 0


def _pairs(orig, host):
    """(device tensor, host tensor) pairs of one argument (a tensor or a list of them)."""
    if isinstance(orig, Tensor):
        if not orig.is_cpu:
            yield orig, host
    elif isinstance(orig, list | tuple):
        for o, h in zip(orig, host, strict=True):
            yield from _pairs(o, h)


def write_back(device_t: Tensor, host: Tensor) -> None:
    """Copy a host result into a device tensor, resizing the device tensor if the op resized it."""
    if device_t.shape != host.shape:
        device_t.resize_(host.shape)
    host_view(device_t).copy_(host)


def _write_back_narrowed(refs, args, kwargs, hargs, hkwargs) -> int:
    nbytes = 0
    for ref in refs:
        for device_t, host in _pairs(get_arg(args, kwargs, ref), get_arg(hargs, hkwargs, ref)):
            if host.dtype != device_t.dtype:
                write_back(device_t, host)
            nbytes += device_t.nbytes
    return nbytes


def _call_with_outs(plan: OpPlan, args, kwargs, hargs, hkwargs, index):
    """Run an ``out=`` op. Host views of device outs cannot grow (DLPack storages are fixed), and
    narrowed 64-bit outs are copies: those get fresh host outs that are copied back afterwards."""
    replaced = []
    for ref in plan.outs:
        device_out = get_arg(args, kwargs, ref)
        host_out = get_arg(hargs, hkwargs, ref)
        if (
            isinstance(device_out, Tensor)
            and not device_out.is_cpu
            and (host_out.dtype != device_out.dtype or not _fits(device_out))
        ):
            fresh = torch.empty(0, dtype=host_out.dtype)
            _set_arg(hargs, hkwargs, ref, fresh)
            replaced.append((device_out, fresh))
    if plan.seeded:
        with random.as_host_default(index):
            result = plan.call(*hargs, **hkwargs)
    else:
        result = plan.call(*hargs, **hkwargs)
    for device_out, fresh in replaced:
        write_back(device_out, fresh)
    done = {id(d) for d, _ in replaced}
    for ref in plan.outs:
        for device_out, host_out in _pairs(get_arg(args, kwargs, ref), get_arg(hargs, hkwargs, ref)):
            if id(device_out) not in done and (
                host_out.shape != device_out.shape or host_out.stride() != device_out.stride()
            ):
                # The host kernel restrided the out within its storage; mirror that on the device.
                torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
                    CPU_KEYS,
                    device_out,
                    device_out.untyped_storage(),
                    device_out.storage_offset(),
                    host_out.shape,
                    host_out.stride(),
                )
    return result


def _fits(device_out: Tensor) -> bool:
    # An empty out is the usual "please allocate" case; it cannot grow in place.
    return device_out.numel() > 0


def _results(plan: OpPlan, result, args, kwargs, hargs, hkwargs, index, widen):
    if not plan.returns:
        return None, 0
    single = len(plan.returns) == 1
    values = (result,) if single else result
    out = []
    fresh_bytes = 0
    for value, (kind, ref) in zip(values, plan.returns, strict=True):
        if kind is ReturnKind.FRESH:
            adopted = _adopt_all(value, index, widen)
            fresh_bytes += _nbytes(adopted)
            out.append(adopted)
        elif kind is ReturnKind.WRITE:
            out.append(get_arg(args, kwargs, ref))
        else:
            out.append(_device_views(get_arg(args, kwargs, ref), get_arg(hargs, hkwargs, ref), value))
    return (out[0] if single else tuple(out)), fresh_bytes


def _adopt_all(value, index, widen):
    if isinstance(value, Tensor):
        if not value.is_cpu:
            return value
        if widen and value.dtype in widen:
            value = value.to(dtype_policy.WIDE[value.dtype])
        return adopt(value, index)
    if isinstance(value, list | tuple):
        return type(value)(_adopt_all(v, index, widen) for v in value)
    return value


def _device_views(base: Tensor, host_base: Tensor, value):
    if isinstance(value, list | tuple):
        return type(value)(_device_views(base, host_base, v) for v in value)
    if value.dtype != base.dtype:
        raise NotImplementedError(
            f"a dtype-changing view reached the host fallback ({base.dtype} -> {value.dtype})"
        )
    offset = (value.data_ptr() - host_base.data_ptr()) // base.element_size()
    return _as_strided.redispatch(CPU_KEYS, base, value.shape, value.stride(), base.storage_offset() + offset)
