"""The op table: which kernel torch's dispatcher calls for each ATen op on a neuron tensor.

* Metadata ops (views, ``set_``, shrinking ``resize_``, ``_local_scalar_dense``) run torch's own CPU
  kernel on the neuron tensor: they only touch TensorImpl metadata or read host bytes, so the
  result stays a neuron tensor over the same storage. No device work, nothing charged.
* Allocation and host<->device copies have named kernels (memory and the host link).
* ``rms_norm`` and ``scaled_dot_product_attention`` run ``kernels/composites.py``, which routes the
  calls the fused kernels cover to the fused ops.
* Every other op goes to the chokepoint, :func:`~neuronsim.device.dispatch.execute`: as the
  PrivateUse1 backend fallback, and registered directly for structured and ``_foreach_`` ops so
  they reach it in one call instead of decomposing into ``empty`` + ``op.out`` per tensor.
"""

from __future__ import annotations

import functools
import warnings

import torch
from torch._C import DispatchKey, DispatchKeySet

from neuronsim.device import autocast, clock, decompositions, memory, state, unsupported
from neuronsim.device.dispatch import at_torch_boundary, execute
from neuronsim.device.dynamo_guard import outside_dynamo
from neuronsim.device.memory import host_view
from neuronsim.device.native import fast
from neuronsim.kernels import composites

aten = torch.ops.aten
CPU_KEYS = DispatchKeySet(DispatchKey.CPU)
KEY = "PrivateUse1"

_METADATA_OPS = (
    "as_strided",
    "as_strided_",  # squeeze_, unsqueeze_, t_, transpose_ reach it: it must change the device tensor
    "view",
    "_reshape_alias",
    "unfold",
    "view_as_real",
    "view_as_complex",
    "set_",
    "is_set_to",
)
_libraries: list[torch.library.Library] = []  # registrations live as long as their Library


def _overloads(name: str):
    packet = getattr(aten, name)
    return [getattr(packet, overload) for overload in packet.overloads()]


def _on_cpu_kernel(op):
    redispatch = op._handle.redispatch_boxed  # OpOverload.redispatch without its Python frame

    def kernel(*args, **kwargs):
        return redispatch(CPU_KEYS, *args, **kwargs)

    return kernel


def _local_scalar_dense(t):
    # `.item()`: the value crosses the host link.
    clock.clock(t.get_device()).charge_transfer(
        "aten::_local_scalar_dense", ((t.dtype, t.shape),), t.element_size(), to_device=False
    )
    return aten._local_scalar_dense.default.redispatch(CPU_KEYS, t)


@at_torch_boundary
def _resize_(self, size, memory_format=None):
    unsupported.check_memory_format(memory_format)
    numel = 1
    for s in size:
        numel *= s
    needed = (self.storage_offset() + numel) * self.element_size()
    old = self.untyped_storage()
    if needed > old.nbytes():
        # Device storages cannot grow in place: move to a bigger one, keeping the old bytes.
        grown = memory.empty_strided((self.storage_offset() + numel,), (1,), self.dtype, self.get_device())
        if old.nbytes():
            host_view(grown).view(torch.uint8)[: old.nbytes()].copy_(_host_bytes(self))
        aten.set_.source_Storage_storage_offset.redispatch(
            CPU_KEYS,
            self,
            grown.untyped_storage(),
            self.storage_offset(),
            list(size),
            torch._prims_common.make_contiguous_strides_for(size) if len(size) else [],
        )
    return aten.resize_.default.redispatch(CPU_KEYS, self, size, memory_format=memory_format)


def _host_bytes(t):
    storage = t.untyped_storage()
    whole = aten.set_.source_Storage.redispatch(CPU_KEYS, t.new_empty((0,), dtype=torch.uint8), storage)
    return host_view(whole)


def _device_for(device) -> int:
    if not state.is_initialized():
        state.lazy_init()
    if device is not None and device.index is not None and device.index == state.current_device():
        return device.index
    return state.device_index(device)


@at_torch_boundary
def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    unsupported.check_layout(layout)
    unsupported.check_memory_format(memory_format)
    return memory.empty(size, dtype or torch.get_default_dtype(), _device_for(device))


@at_torch_boundary
def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    unsupported.check_layout(layout)
    return memory.empty_strided(size, stride, dtype or torch.get_default_dtype(), _device_for(device))


def _copy_from(src, dst, non_blocking=False):
    src_on_device, dst_on_device = not src.is_cpu, not dst.is_cpu
    if src_on_device and dst_on_device:
        if src.get_device() != dst.get_device():
            return _copy_between_cores(src, dst)
        return execute(aten.copy_.default, dst, src, non_blocking)
    if dst.numel():
        if dst_on_device:
            host_view(dst).copy_(src)
            clock.clock(dst.get_device()).charge_transfer(
                "aten::_copy_from", ((dst.dtype, dst.shape),), dst.nbytes, to_device=True
            )
        else:
            dst.copy_(host_view(src))
            clock.clock(src.get_device()).charge_transfer(
                "aten::_copy_from", ((src.dtype, src.shape),), src.nbytes, to_device=False
            )
    return dst


def _copy_between_cores(src, dst):
    """A copy from one logical core's HBM to another's, staged through the host as a device-to-host
    copy on the source core's clock and a host-to-device copy on the destination's."""
    if dst.numel():
        host_view(dst).copy_(host_view(src))
        name = "aten::_copy_from"
        clock.clock(src.get_device()).charge_transfer(name, ((src.dtype, src.shape),), src.nbytes,
                                                      to_device=False)
        clock.clock(dst.get_device()).charge_transfer(name, ((dst.dtype, dst.shape),), dst.nbytes,
                                                      to_device=True)
    return dst


def _copy_from_math_bits(src, dst, non_blocking=False):
    """``_copy_from`` when ``src`` or ``dst`` carries a lazy conj/neg bit (registered on the
    Conjugate and Negative keys). ATen's math-bit fallback would resolve ``src`` with ``clone``,
    whose ``copy_`` calls ``_copy_from`` again, endlessly: resolve the bits on the host instead."""
    conj, neg = src.is_conj() != dst.is_conj(), src.is_neg() != dst.is_neg()
    src, dst = _plain(src), _plain(dst)
    staged = src if src.is_cpu else src.cpu()
    if conj:
        staged = staged.conj_physical()
    if neg:
        staged = staged.neg()
    if dst.is_cpu:
        dst.copy_(staged)
    else:
        _copy_from(staged, dst, non_blocking)
    return dst


def _plain(t):
    """``t``'s bytes as a view without the lazy conj/neg bits."""
    if t.is_conj():
        t = t.conj()
    if t.is_neg():
        t = torch._neg_view(t)
    return t


def _copy_from_and_resize(src, dst):
    if dst.shape != src.shape:
        dst.resize_(src.shape)
    return _copy_from(src, dst)


def _convolution_overrideable(
    input, weight, bias, stride, padding, dilation, transposed, output_padding, groups
):
    return execute(
        aten.convolution.default,
        input,
        weight,
        bias,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
    )


def _convolution_backward_overrideable(
    grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    out_channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return execute(
        aten.convolution_backward.default,
        grad_output,
        input,
        weight,
        [out_channels],
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        output_mask,
    )


# rms_norm's fused ops run through the chokepoint: through the dispatcher, ``_fused_rms_norm``
# (CompositeImplicitAutograd) would decompose again.
_rms_norm = functools.partial(composites.rms_norm, execute)
_COMPOSITE_EXPLICIT = DispatchKeySet(DispatchKey.CompositeExplicitAutograd)


def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    """ATen's ``_to_copy``, with a copy to the host made blocking: a non-blocking one stages through
    pinned host memory, whose allocator a Python backend cannot register (and device memory is
    host memory here, so there is nothing to overlap)."""
    if non_blocking and device is not None and torch.device(device).type == "cpu":
        non_blocking = False
    return aten._to_copy.default.redispatch(
        _COMPOSITE_EXPLICIT, self, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory,
        non_blocking=non_blocking, memory_format=memory_format)


def _pin_memory(self, device=None):
    # Device memory is host memory, so "pinned" host memory for neuron is a plain host copy.
    if device is not None and torch.device(device).type not in (state.DEVICE_TYPE, "privateuseone"):
        return aten._pin_memory.default.redispatch(
            DispatchKeySet(DispatchKey.CompositeExplicitAutograd), self, device
        )
    return self.clone()


def _has_compatible_shallow_copy_type(self, from_):
    """Whether ``self.data = from_`` may swap the data in place (``nn.Module._apply`` asks before
    each parameter move): c10's dense rule with neuron among the dense backends, the rule the
    device's ``set_data`` applies (cpp/neuron_device.cpp), so modules move their parameters."""
    from neuronsim.device import cpp

    keys = torch._C._dispatch_keys
    return bool(cpp.library().neuronsim_shallow_copy_compatible(keys(self).raw_repr(),
                                                                   keys(from_).raw_repr()))


_NAMED = {
    "resize_": _resize_,
    "_has_compatible_shallow_copy_type": _has_compatible_shallow_copy_type,
    "histc": decompositions.histc,  # integer inputs, as on CUDA
    "empty.memory_format": _empty,
    "empty_strided": _empty_strided,
    "_copy_from": _copy_from,
    "_copy_from_and_resize": _copy_from_and_resize,
    "convolution_overrideable": _convolution_overrideable,
    "convolution_backward_overrideable": _convolution_backward_overrideable,
    "_local_scalar_dense": _local_scalar_dense,
    "_to_copy": _to_copy,
    # CompositeExplicitAutograd "not implemented" stubs would win over the fallback: route them here.
    "_scaled_dot_product_fused_attention_overrideable": functools.partial(
        execute, aten._scaled_dot_product_fused_attention_overrideable.default),
    "_scaled_dot_product_fused_attention_overrideable_backward": functools.partial(
        execute, aten._scaled_dot_product_fused_attention_overrideable_backward.default),
    "scaled_dot_product_attention": composites.scaled_dot_product_attention,
    "rms_norm": _rms_norm,  # under inference_mode (no autograd key) too
    "record_stream": lambda self, stream: None,  # one in-order timeline: nothing to track
}


def _direct_ops(skip: set[str]):
    """Structured (CompositeExplicitAutogradNonFunctional) and ``_foreach_`` ops, ops with both
    a CPU kernel and a CompositeExplicitAutograd one (``native_layer_norm``), and ops with a native
    kernel and a CompositeExplicitAutograd one (``abs``, ``mul.Scalar``, ``logical_and``): those
    decompose on other devices (into ``.out`` calls the kernels do not take), so registering them
    keeps the CPU's single kernel and its numerics, or the native kernel."""
    from neuronsim.kernels.manifest import FAMILIES

    native = {n.removesuffix(".default") for names in FAMILIES.values() for n in names} - {"aten::copy_"}
    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or name in skip or has_kernel(name, KEY):
            continue
        if (
            name.startswith("aten::_foreach_")
            or has_kernel(name, "CompositeExplicitAutogradNonFunctional")
            or (has_kernel(name, "CompositeExplicitAutograd") and (has_kernel(name, "CPU") or name in native))
        ):
            base, _, overload = name[len("aten::") :].partition(".")
            yield getattr(getattr(aten, base), overload or "default")


def _op_named(name: str):
    base, _, overload = name[len("aten::"):].partition(".")
    return getattr(getattr(aten, base), overload or "default")


def _cpp_ops(skip: set[str]):
    """(name for the C++ library, op name, writes its first argument) of each native op that reaches
    the device's kernel (not decomposed above it: no CompositeImplicitAutograd kernel) and has no
    kernel of its own here. ``copy_`` is left out: ``_copy_from`` calls the chokepoint itself."""
    from neuronsim.device.schema import WrapperKind, plan_for
    from neuronsim.kernels.manifest import FAMILIES

    has_kernel = torch._C._dispatch_has_kernel_for_dispatch_key
    for names in FAMILIES.values():
        for full in names:
            name = full.removesuffix(".default")
            if name in skip or name == "aten::copy_" or has_kernel(name, KEY) \
                    or has_kernel(name, "CompositeImplicitAutograd"):
                continue
            op = _op_named(name)
            first = op._schema.arguments[0] if op._schema.arguments else None
            writes = (first is not None and first.alias_info is not None and first.alias_info.is_write) \
                or plan_for(op).kind is WrapperKind.INPLACE
            yield name[len("aten::"):], op.name(), writes


class _OutsideDynamo:
    """A Library whose Python kernels run outside Dynamo (``dispatch.outside_dynamo``)."""

    def __init__(self, library: torch.library.Library):
        self.library = library

    def impl(self, op, kernel, key):
        if kernel is not torch.library.fallthrough_kernel:
            kernel = outside_dynamo(kernel)
        self.library.impl(op, kernel, key)

    def fallback(self, kernel, key):
        if kernel is not torch.library.fallthrough_kernel:
            kernel = outside_dynamo(kernel)
        self.library.fallback(kernel, key)


def install() -> int:
    """Register every kernel; returns how many ops were registered directly to the chokepoint."""
    lib = _OutsideDynamo(torch.library.Library("aten", "IMPL"))
    fallbacks = _OutsideDynamo(torch.library.Library("_", "IMPL"))
    _libraries.extend((lib.library, fallbacks.library))
    registered: set[str] = set()
    for name in _METADATA_OPS:
        for op in _overloads(name):
            lib.impl(op, _on_cpu_kernel(op), KEY)
            registered.add(op.name())
    for name, kernel in _NAMED.items():
        lib.impl(name, kernel, KEY)
        registered.add("aten::" + name)
    # The native ops' cached calls run in C++ (native/fast.py): its kernel on PrivateUse1 hands
    # every other call to the chokepoint's kernel, on PrivateUse2.
    in_cpp = fast.install(list(_cpp_ops(registered)))
    for name in sorted(in_cpp):
        op = _op_named(name)
        lib.impl(op, fast.python_kernel(op, execute), "PrivateUse2")
        registered.add(name)
    direct = len(in_cpp)
    for op in _direct_ops(registered):
        lib.impl(op, functools.partial(execute, op), KEY)
        direct += 1
    fallbacks.fallback(execute, KEY)
    for key in ("Conjugate", "Negative"):
        lib.impl("_copy_from", _copy_from_math_bits, key)
    autocast.install(lib, fallbacks)
    fallbacks.fallback(unsupported.sparse_kernel, "SparsePrivateUse1")
    fallbacks.fallback(unsupported.nested_kernel, "NestedTensorPrivateUse1")
    lib.impl("_make_dual", unsupported.forward_ad_kernel, "AutogradPrivateUse1")
    # Above autograd too: the composite would otherwise decompose before the PrivateUse1 kernel.
    lib.impl("scaled_dot_product_attention", composites.scaled_dot_product_attention, "AutogradPrivateUse1")
    lib.impl("rms_norm", _rms_norm, "AutogradPrivateUse1")
    unsupported.guard_nested_tensors()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel" is intended
        lib.impl("_pin_memory", _pin_memory, "CPU")
    return direct
