"""A stand-in for AWS's ``neuron_dtypes`` (the dtype helpers nki-library's torch references use),
for the compat runner when the package is not installed.

``static_cast(a, dtype)`` rounds to nearest even through ml_dtypes, as numpy casts do. The MX x4
dtypes (``float8_e4m3fn_x4``, ``float8_e5m2_x4``, ``float4_e2m1fn_x4``) pack four values along the
last dimension into one element, as the library's tests expect (``static_cast`` of a ``[P, F]`` float
array to an x4 dtype is ``[P, F // 4]``, and back is ``[P, F]``). The words are laid out as the
simulator's MX data (value ``j`` of a word in its byte ``j``, or nibble ``j`` for fp4; docs/ir.md).
Their numpy dtype is named by the format (``types.named_mx_dtype``, shown as that name by
``str()``): ``'x4' in str(a.dtype)`` is how the library's torch references and validator tell
packed arrays, and a kernel receiving one sees ``nl.float4_e2m1fn_x4`` etc.
``np.zeros(shape, dtype=nl.float8_e4m3fn_x4)`` makes one (``register_x4_names``).
"""

from __future__ import annotations

import types

import ml_dtypes
import numpy as np

from neuronsim.nki.types import MX_STORAGE, host_mx_name, host_words, named_mx_dtype

# format -> (element dtype, bits per element)
X4_ELEMENTS = {
    "float8_e4m3fn_x4": (ml_dtypes.float8_e4m3fn, 8),
    "float8_e5m2_x4": (ml_dtypes.float8_e5m2, 8),
    "float4_e2m1fn_x4": (ml_dtypes.float4_e2m1fn, 4),
}


def _x4_name(dtype) -> str | None:
    name = host_mx_name(dtype) if isinstance(dtype, np.dtype) else None
    if name is None:
        name = str(dtype) if isinstance(dtype, str) else getattr(dtype, "__name__", None)
    return name if name in X4_ELEMENTS else None


def pack_x4(values: np.ndarray, name: str) -> np.ndarray:
    """Float values [..., 4F] rounded to the element format and packed into [..., F] words."""
    element, bits = X4_ELEMENTS[name]
    values = np.asarray(values, dtype=np.float32)
    if values.shape[-1] % 4:
        raise ValueError(f"static_cast to {name}: the last dim {values.shape[-1]} is not a multiple of 4")
    codes = values.astype(element).view(np.uint8).astype(np.uint32) & ((1 << bits) - 1)
    codes = codes.reshape(*values.shape[:-1], values.shape[-1] // 4, 4)
    words = np.zeros(codes.shape[:-1], np.uint32)
    for j in range(4):
        words |= codes[..., j] << (bits * j)
    return words.astype(MX_STORAGE[name].numpy).view(named_mx_dtype(name))


def unpack_x4(words: np.ndarray, name: str) -> np.ndarray:
    """Packed [..., F] words as float32 [..., 4F]."""
    element, bits = X4_ELEMENTS[name]
    w = host_words(np.asarray(words)).astype(np.uint32)
    codes = np.stack([(w >> (bits * j)) & ((1 << bits) - 1) for j in range(4)], axis=-1)
    values = codes.astype(np.uint8).view(element).astype(np.float32)
    return values.reshape(*w.shape[:-1], w.shape[-1] * 4)


def static_cast(a, dtype):
    src = _x4_name(getattr(a, "dtype", None))
    if src is not None:
        a = unpack_x4(a, src)
    dst = _x4_name(dtype)
    if dst is not None:
        return pack_x4(a, dst)
    return np.asarray(a).astype(np.dtype(getattr(ml_dtypes, str(dtype), None) or dtype))


def is_float_type(dtype) -> bool:
    return _x4_name(dtype) is not None or np.issubdtype(np.dtype(dtype), np.floating) or "float" in str(dtype)


def _numpy(dtype) -> np.dtype:
    name = _x4_name(dtype)
    if name is not None:
        return named_mx_dtype(name)
    return np.dtype(getattr(ml_dtypes, str(dtype), None) or dtype)


def finfo(dtype):
    """Float facts of ``dtype`` (``.dtype``: its numpy dtype), through ml_dtypes for narrow floats."""
    d = _numpy(dtype)
    if d.kind == "V" or d not in (np.float16, np.float32, np.float64):
        return ml_dtypes.finfo(d)
    return np.finfo(d)


def sizeinbytes(dtype) -> int:
    return _numpy(dtype).itemsize


def register_x4_names() -> None:
    """Let numpy read the x4 names as their dtypes (``np.zeros(shape, dtype=nl.float4_e2m1fn_x4)``, as
    the library's tests make output placeholders and inputs), and show them by name: the compat
    runner's process only."""
    for name in X4_ELEMENTS:
        np.sctypeDict[name] = named_mx_dtype(name)
    _show_x4_names()


def _show_x4_names() -> None:
    """``str(a.dtype)`` of an x4 array is the format's name, as with AWS's ``neuron_dtypes`` (whose
    dtypes are numpy extension types): the library's references select the format by it
    (``mx_torch_common.quantize_to_mx``: ``str(out_x4_dtype)`` looked up among the x4 names). A
    record dtype prints its fields; numpy formats dtypes through ``numpy._core._dtype.__str__``, so
    the x4 records (and only they) are named there."""
    try:
        from numpy._core import _dtype
    except ImportError:  # numpy 1.x
        from numpy.core import _dtype
    shown = _dtype.__str__
    if getattr(shown, "x4_names", False):
        return

    def dtype_str(dtype):
        name = host_mx_name(dtype) if dtype.names is not None else None
        return name if name in X4_ELEMENTS else shown(dtype)

    dtype_str.x4_names = True
    _dtype.__str__ = dtype_str


def module(stand_in) -> types.ModuleType:
    """The stand-in module (``stand_in(name, **attrs)`` makes it, see harness.py)."""
    x4 = {name: named_mx_dtype(name) for name in X4_ELEMENTS}
    return stand_in("neuron_dtypes", static_cast=static_cast, is_float_type=is_float_type, finfo=finfo,
                    sizeinbytes=sizeinbytes,
                    bfloat=ml_dtypes.bfloat16, bfloat16=ml_dtypes.bfloat16,
                    float8_e8m0fnu=ml_dtypes.float8_e8m0fnu, **x4)
