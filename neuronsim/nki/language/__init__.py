"""``nki.language``: tensors, buffers, loops, dtypes, tile sizes and the convenience operations.

Creation (``ndarray``, ``zeros``, ``full``...) makes a tracer tensor; ``load``/``store`` are DMA
copies; the math operations make a new SBUF tile and record the ``nisa`` instruction(s) that
compute it, on the engine the NKI compiler uses for them (activation functions on ScalarE,
arithmetic on VectorE, ``matmul``/``transpose`` on TensorE). Operations with no instruction in
the simulated ISA raise :class:`~neuronsim.errors.UnsupportedError` naming the kernel line.

One module per section of the API: ``dtypes`` (dtypes and memory buffers), ``sizes``
(``tile_size``), ``control`` (SPMD and loops), ``tensor`` (:class:`NkiTensor`, the tensors kernels
hold, with Python's operators), ``creation``, ``movement``, ``elementwise``, ``prng`` (random
numbers), ``reductions`` (with the fused ``softmax`` and ``rms_norm``) and ``debug``.
"""

from neuronsim.nki.language.control import (
    affine_range,
    dynamic_range,
    fori_loop,
    no_reorder,
    num_programs,
    plain_range,
    program_id,
    program_ndim,
    sequential_range,
    static_range,
    while_loop,
)
from neuronsim.nki.language.creation import (
    empty_like,
    full,
    ndarray,
    ones,
    ones_like,
    shared_constant,
    shared_identity_matrix,
    zeros,
    zeros_like,
)
from neuronsim.nki.language.debug import (
    device_print,
)
from neuronsim.nki.language.dtypes import (
    MemoryRegion,
    NKIObject,
    bfloat16,
    bool_,
    ds,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    fp32,
    hbm,
    int8,
    int16,
    int32,
    is_hbm,
    is_on_chip,
    is_psum,
    is_sbuf,
    private_hbm,
    psum,
    sbuf,
    shared_hbm,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from neuronsim.nki.language.elementwise import (
    abs,
    abs_max,
    abs_min,
    add,
    all_reduce,
    arctan,
    atomic_rmw,
    average,
    bitwise_and,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    bypass,
    ceil,
    cos,
    divide,
    equal,
    erf,
    erf_dx,
    exp,
    floor,
    fmod,
    gather_flattened,
    gelu,
    gelu_apprx_sigmoid,
    gelu_apprx_sigmoid_dx,
    gelu_apprx_tanh,
    gelu_dx,
    greater,
    greater_equal,
    identity,
    invert,
    left_shift,
    less,
    less_equal,
    log,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    mish,
    mod,
    multiply,
    negative,
    not_equal,
    power,
    prelu,
    reciprocal,
    relu,
    right_shift,
    rsqrt,
    sigmoid,
    sign,
    silu,
    silu_dx,
    sin,
    softplus,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
    where,
)
from neuronsim.nki.language.movement import (
    broadcast_to,
    copy,
    expand_dims,
    load,
    load_transpose2d,
    matmul,
    store,
    transpose,
)
from neuronsim.nki.language.prng import (
    dropout,
    rand,
    random_seed,
)
from neuronsim.nki.language.reductions import (
    all,
    any,
    max,
    mean,
    min,
    prod,
    rms_norm,
    softmax,
    sum,
    var,
)
from neuronsim.nki.language.sizes import (
    tile_size,
)
from neuronsim.nki.language.tensor import (
    NkiTensor,
    assign,
)

ndarray_type = NkiTensor

range = plain_range  # noqa: A001 (NKI's name; this module calls no builtin range)

__all__ = [
    "abs", "abs_max", "abs_min", "add", "affine_range", "all", "all_reduce", "any", "arctan", "assign",
    "atomic_rmw", "average", "bfloat16", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor",
    "bool_", "broadcast_to", "bypass", "ceil", "copy", "cos", "device_print", "divide", "dropout", "ds",
    "dynamic_range", "empty_like", "equal", "erf", "erf_dx", "exp", "expand_dims", "float16", "float32",
    "float4_e2m1fn_x4", "float8_e4m3", "float8_e4m3fn", "float8_e4m3fn_x4", "float8_e5m2",
    "float8_e5m2_x4", "float8_e8m0fnu",
    "floor", "fmod", "fori_loop", "fp32", "full", "gather_flattened", "gelu",
    "gelu_apprx_sigmoid", "gelu_apprx_sigmoid_dx", "gelu_apprx_tanh", "gelu_dx", "greater",
    "greater_equal", "hbm", "identity", "int16", "int32", "int8", "invert", "is_hbm", "is_on_chip",
    "is_psum", "is_sbuf", "left_shift", "less", "less_equal", "load", "load_transpose2d", "log",
    "logical_and", "logical_not", "logical_or", "logical_xor", "matmul", "max", "maximum", "mean",
    "MemoryRegion", "min", "minimum", "mish", "mod", "multiply", "ndarray", "ndarray_type", "negative",
    "NKIObject", "NkiTensor", "no_reorder", "not_equal", "num_programs", "ones", "ones_like", "power",
    "prelu", "private_hbm", "prod", "program_id", "program_ndim", "psum", "rand", "random_seed", "range",
    "reciprocal", "relu", "right_shift", "rms_norm", "rsqrt", "sbuf", "sequential_range",
    "shared_constant", "shared_hbm", "shared_identity_matrix", "sigmoid", "sign", "silu", "silu_dx",
    "sin", "softmax", "softplus", "sqrt", "square", "static_range", "store", "subtract", "sum", "tan",
    "tanh", "tfloat32", "tile_size", "transpose", "trunc", "uint16", "uint32", "uint8", "var", "where",
    "while_loop", "zeros", "zeros_like",
]
