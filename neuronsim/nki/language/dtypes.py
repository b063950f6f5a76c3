"""``nl`` dtypes and memory buffers: ``nl.float32``, ``nl.bfloat16``..., ``nl.sbuf``, ``nl.psum``,
``nl.shared_hbm``..., ``nl.fp32`` limits, ``nl.ds`` (see ``nki/types.py`` for the value types)."""

from __future__ import annotations

import numpy as np

from neuronsim.nki import types as _types
from neuronsim.nki.types import DynSlice, MemoryRegion
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Memory

_D = _types.DTYPES
bool_ = _D[DType.bool_]
int8, int16, int32 = _D[DType.int8], _D[DType.int16], _D[DType.int32]
uint8, uint16, uint32 = _D[DType.uint8], _D[DType.uint16], _D[DType.uint32]
float16, float32 = _D[DType.float16], _D[DType.float32]
bfloat16, tfloat32 = _D[DType.bfloat16], _D[DType.tfloat32]
float8_e4m3, float8_e5m2 = _D[DType.float8_e4m3], _D[DType.float8_e5m2]
float8_e4m3fn = _D[DType.float8_e4m3fn]
DTYPE_MEMO = {nd: d for d, nd in _D.items()}  # keyed by the canonical objects: identity hits
# The x4-packed MX data types and the E8M0 scale type (NeuronCore-v4; see types.MX_STORAGE).
float8_e5m2_x4, float8_e4m3fn_x4 = _types.MX_DTYPES["float8_e5m2_x4"], _types.MX_DTYPES["float8_e4m3fn_x4"]
float4_e2m1fn_x4, float8_e8m0fnu = _types.MX_DTYPES["float4_e2m1fn_x4"], _types.MX_DTYPES["float8_e8m0fnu"]


class fp32:
    """float32 limits (``nl.fp32.min`` is the most negative finite float32)."""

    min = float(np.finfo(np.float32).min)
    max = float(np.finfo(np.float32).max)
    eps = float(np.finfo(np.float32).eps)


sbuf, psum, hbm, private_hbm, shared_hbm = (
    _types.sbuf,
    _types.psum,
    _types.hbm,
    _types.private_hbm,
    _types.shared_hbm,
)
MemoryRegion = MemoryRegion
ds = DynSlice


class NKIObject:
    """Base class of kernel classes and configuration objects. As NKI's compiler treats every such class
    like a data class (with or without ``@dataclass``), a subclass that provides no ``__init__`` gets
    NKI's initializer: one parameter per class attribute, annotated or not, in declaration order,
    defaulting to the class value or None, then ``__post_init__`` (the language guide, "Class
    Support"). So ``SectionParams(section_idx=0)`` works for plain ``section_idx = None`` attributes,
    and an omitted dataclass field is None. Keywords that name no attribute are set as attributes."""

    def __init__(self, **kwargs) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        inherited = next(k for k in cls.__mro__[1:] if "__init__" in k.__dict__)
        if "__init__" not in cls.__dict__ and (inherited is NKIObject or _is_generated(inherited.__init__)):
            cls.__init__ = _nki_init  # set before @dataclass runs, which then keeps it


def _is_generated(init) -> bool:
    return init is _nki_init


def _nki_init(self, *args, **kwargs) -> None:
    cls = type(self)
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = _class_fields(cls)
    if len(args) > len(fields):
        raise TypeError(f"{cls.__name__}() takes {len(fields)} positional arguments ({', '.join(fields)}) "
                        f"but {len(args)} were given")
    values = dict(zip(fields, args, strict=False))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"{cls.__name__}() got multiple values for argument '{name}'")
        values[name] = value
    for name, default in fields.items():
        if name not in values:
            values[name] = default()
    for name, value in values.items():
        object.__setattr__(self, name, value)  # frozen dataclasses construct too, as in NKI
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


_FIELDS: dict = {}


def _class_fields(cls) -> dict:
    """{name: default factory} for every attribute of ``cls`` and its NKIObject bases, bases first."""
    import dataclasses

    fields: dict = {}
    for klass in reversed(cls.__mro__[: cls.__mro__.index(NKIObject)]):
        declared = klass.__dict__.get("__dataclass_fields__", {})
        names = list(klass.__dict__.get("__annotations__", {})) + list(klass.__dict__)
        for name in names:
            if name in fields or name.startswith("__"):
                continue
            field = declared.get(name)
            if field is not None:
                if field.default_factory is not dataclasses.MISSING:
                    fields[name] = field.default_factory
                else:
                    value = None if field.default is dataclasses.MISSING else field.default
                    fields[name] = lambda v=value: v
                continue
            value = klass.__dict__.get(name)
            if isinstance(value, (staticmethod, classmethod, property, type)) or callable(value):
                continue
            fields[name] = lambda v=value: v
    return fields


def is_hbm(buffer) -> bool:
    """True for ``nl.hbm``, ``nl.private_hbm`` and ``nl.shared_hbm``."""
    return _types.region_of(buffer).memory is Memory.HBM


def is_on_chip(buffer) -> bool:
    """True for ``nl.sbuf`` and ``nl.psum``."""
    return _types.region_of(buffer).memory is not Memory.HBM


def is_psum(buffer) -> bool:
    return _types.region_of(buffer).memory is Memory.PSUM


def is_sbuf(buffer) -> bool:
    return _types.region_of(buffer).memory is Memory.SBUF
