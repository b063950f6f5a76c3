"""The kernel IR: a Program is tensors plus an ordered list of Instructions.

An Instruction names its opcode and engine, a destination and source access patterns, its
immediates (ALU op, activation function, scale, accumulate flags...) and the source location
that produced it. Semantics and costs live in the engine modules (``sim/engines/``); the rules a
valid Program obeys live in ``sim/validate.py``.

Access patterns follow NKI's ``.ap()`` form: an element ``offset`` and ``[step, num]`` pairs in
elements, outermost first, the first pair being the partition dimension. For SBUF/PSUM tensors
of shape ``[P, d1, ...]`` element ``(p, f)`` has flat index ``p * F + f`` with ``F = d1 * ...``,
so the partition pair's step is ``F``; HBM tensors are flat row-major buffers.
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from neuronsim.sim.dtypes import DType, dtype_of

MAX_FREE_DIMS = 4  # hardware access patterns have up to 4 free dims (S9, S17)


class Engine(enum.IntEnum):
    TENSOR = 0
    VECTOR = 1
    SCALAR = 2
    GPSIMD = 3
    SYNC = 4
    DMA = 5

    @property
    def clock_name(self) -> str:
        """The ChipSpec clock key prefix (``tensor`` -> ``tensor_engine_clock_hz``)."""
        return self.name.lower()


COMPUTE_ENGINES = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


class Memory(enum.IntEnum):
    HBM = 0
    SBUF = 1
    PSUM = 2


ON_CHIP = frozenset({Memory.SBUF, Memory.PSUM})


class Opcode(enum.IntEnum):
    # TensorE
    NC_MATMUL = 0
    NC_TRANSPOSE = 1  # TensorE (<=128x128, SBUF->PSUM) or VectorE (<=32x32)
    NC_MATMUL_MX = 2  # MXFP8/MXFP4 matmul with dequantization (NeuronCore-v4)
    # ScalarE
    ACTIVATION = 10
    # VectorE (several also run on ScalarE / GpSimd, see OPCODE_ENGINES)
    TENSOR_TENSOR = 20
    TENSOR_SCALAR = 21
    SCALAR_TENSOR_TENSOR = 22
    TENSOR_REDUCE = 23
    TENSOR_COPY = 24
    TENSOR_TENSOR_SCAN = 25
    MEMSET = 26
    TENSOR_COPY_PREDICATED = 27
    SELECT = 28
    BN_STATS = 29
    BN_AGGR = 30
    MAX8 = 31
    NC_FIND_INDEX8 = 32
    RNG = 33  # VectorE or GpSimd
    DROPOUT = 34
    QUANTIZE_MX = 35  # bf16/fp16 -> MXFP8 data + E8M0 scales (NeuronCore-v4)
    NC_STREAM_SHUFFLE = 36  # cross-partition move within each 32-partition quadrant
    NC_MATCH_REPLACE8 = 37  # replace the first match of each of 8 values (top-k folding)
    RANGE_SELECT = 38  # keep elements whose free index is within per-partition bounds, fused max
    EXPONENTIAL = 39  # exp(src - max_value) with an optional running sum (NeuronCore-v4)
    TENSOR_SCALAR_CUMULATIVE = 47  # a tensor-scalar op, then a running fold of its results
    # GpSimd
    IOTA = 40
    AFFINE_SELECT = 41
    TENSOR_PARTITION_REDUCE = 42
    NC_N_GATHER = 43  # gather within each partition by uint32 indices
    NONZERO_WITH_COUNT = 44  # indices of a partition's nonzero elements, padded, then their count
    LOCAL_GATHER = 45  # gather within partitions by indices shared across each GpSimd core's 16
    TOPK = 46  # the K largest of each 16-partition snake, ascending, with their positions
    SEQUENCE_BOUNDS = 48  # start and end of each element's run of equal segment ids
    RAND2 = 49  # uniform values in [min, max] from VectorE's XORWOW state (NeuronCore-v4)
    # DMA
    DMA_COPY = 50
    DMA_TRANSPOSE = 51
    DMA_COPY_INDIRECT = 52  # dma_copy with a runtime offset (scalar_offset / vector_offset)
    DMA_COMPUTE = 53  # dst = sum of up to 4 sources, in fp32 inside the DMA engine
    # Sequencer control: 32-bit registers and branches (sim/engines/control.py)
    REGISTER_MOVE = 60
    REGISTER_LOAD = 61
    REGISTER_STORE = 62
    BRANCH = 63
    CORE_BARRIER = 64  # the cores of an LNC=2 launch meet; the run pauses here until they all have


# Which engines may issue each opcode; the first is the default (NKI's engine=unknown).
OPCODE_ENGINES: dict[Opcode, tuple[Engine, ...]] = {
    Opcode.NC_MATMUL: (Engine.TENSOR,),
    Opcode.NC_TRANSPOSE: (Engine.TENSOR, Engine.VECTOR),
    Opcode.NC_MATMUL_MX: (Engine.TENSOR,),
    Opcode.ACTIVATION: (Engine.SCALAR,),
    Opcode.TENSOR_TENSOR: (Engine.VECTOR, Engine.GPSIMD),
    Opcode.TENSOR_SCALAR: (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD),
    Opcode.SCALAR_TENSOR_TENSOR: (Engine.VECTOR,),
    Opcode.TENSOR_REDUCE: (Engine.VECTOR,),
    Opcode.TENSOR_COPY: (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD),
    Opcode.TENSOR_TENSOR_SCAN: (Engine.VECTOR,),
    Opcode.MEMSET: (Engine.VECTOR, Engine.GPSIMD),
    Opcode.TENSOR_COPY_PREDICATED: (Engine.VECTOR,),
    Opcode.SELECT: (Engine.VECTOR,),
    Opcode.BN_STATS: (Engine.VECTOR,),
    Opcode.BN_AGGR: (Engine.VECTOR,),
    Opcode.MAX8: (Engine.VECTOR,),
    Opcode.NC_FIND_INDEX8: (Engine.VECTOR,),
    Opcode.RNG: (Engine.VECTOR, Engine.GPSIMD),
    Opcode.DROPOUT: (Engine.VECTOR,),
    Opcode.QUANTIZE_MX: (Engine.VECTOR,),
    Opcode.NC_STREAM_SHUFFLE: (Engine.VECTOR,),
    Opcode.NC_MATCH_REPLACE8: (Engine.VECTOR,),
    Opcode.RANGE_SELECT: (Engine.VECTOR,),
    Opcode.EXPONENTIAL: (Engine.VECTOR,),
    Opcode.TENSOR_SCALAR_CUMULATIVE: (Engine.VECTOR,),
    Opcode.IOTA: (Engine.GPSIMD,),
    Opcode.AFFINE_SELECT: (Engine.GPSIMD,),
    Opcode.TENSOR_PARTITION_REDUCE: (Engine.GPSIMD,),
    Opcode.NC_N_GATHER: (Engine.GPSIMD,),
    Opcode.NONZERO_WITH_COUNT: (Engine.GPSIMD,),
    Opcode.LOCAL_GATHER: (Engine.GPSIMD,),
    Opcode.TOPK: (Engine.GPSIMD,),
    Opcode.SEQUENCE_BOUNDS: (Engine.GPSIMD,),
    Opcode.RAND2: (Engine.VECTOR,),
    Opcode.DMA_COPY: (Engine.DMA,),
    Opcode.DMA_TRANSPOSE: (Engine.DMA,),
    Opcode.DMA_COPY_INDIRECT: (Engine.DMA,),
    Opcode.DMA_COMPUTE: (Engine.DMA,),
    Opcode.REGISTER_MOVE: (Engine.SYNC,),
    Opcode.REGISTER_LOAD: (Engine.SYNC,),
    Opcode.REGISTER_STORE: (Engine.SYNC,),
    Opcode.BRANCH: (Engine.SYNC,),
    Opcode.CORE_BARRIER: (Engine.SYNC,),
}

# Instructions whose result merges with the destination's old contents.
READS_DST = frozenset({Opcode.TENSOR_COPY_PREDICATED, Opcode.TOPK})
DMA_OPS = frozenset({Opcode.DMA_COPY, Opcode.DMA_TRANSPOSE, Opcode.DMA_COPY_INDIRECT, Opcode.DMA_COMPUTE})
# Instructions whose addresses depend on values read at run time (an indirect side's bytes are
# known only when it runs: the scheduler orders it against its whole tensor).
INDIRECT_OPS = frozenset({Opcode.DMA_COPY_INDIRECT})
# Sequencer control instructions (registers, branches, barriers): a Program with a BRANCH has a
# data-dependent path and one with a CORE_BARRIER runs in pieces, so its schedule is made per run
# (sim/api.py).
CONTROL_OPS = frozenset({Opcode.REGISTER_MOVE, Opcode.REGISTER_LOAD, Opcode.REGISTER_STORE, Opcode.BRANCH,
                         Opcode.CORE_BARRIER})
MATMUL_OPS = frozenset({Opcode.NC_MATMUL, Opcode.NC_MATMUL_MX})
QUADRANT = 32  # partitions per VectorE reshape bank (S9): nc_stream_shuffle's mask length
SHUFFLE_KEEP = 255  # an nc_stream_shuffle mask entry leaving its output partition unmodified (S16)
# Same free size in and out, element by element (the validator checks shapes agree).
ELEMENTWISE = frozenset({
    Opcode.ACTIVATION, Opcode.TENSOR_TENSOR, Opcode.TENSOR_SCALAR, Opcode.SCALAR_TENSOR_TENSOR,
    Opcode.TENSOR_COPY, Opcode.TENSOR_COPY_PREDICATED, Opcode.SELECT, Opcode.AFFINE_SELECT,
})


class AluOp(enum.IntEnum):
    """nki.language ALU operators for tensor_tensor / tensor_scalar / reductions (S16-shared)."""

    bypass = 0
    add = 1
    subtract = 2
    multiply = 3
    divide = 4
    maximum = 5
    minimum = 6
    power = 7
    equal = 8
    not_equal = 9
    greater = 10
    greater_equal = 11
    less = 12
    less_equal = 13
    logical_and = 14
    logical_or = 15
    logical_xor = 16
    abs_max = 17
    abs_min = 18
    bitwise_and = 19
    bitwise_or = 20
    bitwise_xor = 21
    left_shift = 22
    right_shift = 23
    # unary forms (operand ignored)
    abs = 24
    square = 25
    relu = 26
    rsqrt = 27
    reciprocal = 28
    invert = 29
    mod = 30


BITVEC_ALU_OPS = frozenset({
    AluOp.bitwise_and, AluOp.bitwise_or, AluOp.bitwise_xor, AluOp.left_shift, AluOp.right_shift,
    AluOp.invert,
})
# Operators that take one input (a second operand is ignored).
UNARY_ALU_OPS = frozenset({AluOp.abs, AluOp.square, AluOp.relu, AluOp.rsqrt, AluOp.reciprocal, AluOp.invert})
REDUCE_ALU_OPS = frozenset({AluOp.add, AluOp.multiply, AluOp.maximum, AluOp.minimum, AluOp.abs_max,
                            AluOp.abs_min, AluOp.bitwise_and, AluOp.bitwise_or, AluOp.bitwise_xor,
                            AluOp.logical_and, AluOp.logical_or})


class ActFunc(enum.IntEnum):
    """ScalarE activation functions (S16-shared)."""

    copy = 0
    exp = 1
    log = 2
    tanh = 3
    sigmoid = 4
    relu = 5
    gelu = 6
    gelu_apprx_tanh = 7
    silu = 8
    softplus = 9
    sqrt = 10
    rsqrt = 11
    reciprocal = 12
    square = 13
    erf = 14
    sin = 15
    abs = 16
    sign = 17
    identity = 18  # same as copy, named as in nl
    gelu_dx = 19  # gelu's derivative (nl.gelu_dx)
    gelu_apprx_sigmoid = 20  # x * sigmoid(1.702 x)


@dataclass(frozen=True, eq=False)
class TensorDecl:
    """A tensor of a Program: where it lives, its shape and storage dtype.

    SBUF/PSUM tensors have an ``address`` ``(start_partition, byte_offset)`` once allocated;
    ``None`` leaves the placement to the simulator's bump allocator. HBM tensors have a ``kind``:
    ``input``, ``output``, ``inout`` (read and written in place) or ``scratch``. An HBM tensor with
    ``alias_of`` (an earlier HBM tensor's id) is that tensor's bytes, from its first, read as this
    one's dtype and shape (NKI's dtype reinterpretation of an HBM tensor).
    """

    id: int
    name: str
    memory: Memory
    shape: tuple[int, ...]
    dtype: DType
    kind: str = "scratch"
    address: tuple[int, int] | None = None
    location: str | None = None
    alias_of: int | None = None

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def free_size(self) -> int:
        """Elements per partition (SBUF/PSUM); for HBM, elements after the first dim."""
        return math.prod(self.shape[1:])

    @property
    def num_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.dtype.itemsize

    @property
    def bytes_per_partition(self) -> int:
        return self.free_size * self.dtype.itemsize

    def ap(self, pattern: Sequence[Sequence[int]] | None = None, offset: int = 0) -> AccessPattern:
        """An access pattern over this tensor; with no pattern, the whole tensor."""
        if pattern is None:
            pattern = full_pattern(self.shape)
        return AccessPattern(self, int(offset), tuple((int(s), int(n)) for s, n in pattern))

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{self.memory.name} tensor '{self.name}' [{dims}] {self.dtype.name}"


def full_pattern(shape: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """Row-major [step, num] pairs covering ``shape`` (partition dim first)."""
    pairs = []
    step = 1
    for n in reversed(shape):
        pairs.append((step, n))
        step *= n
    pairs.reverse()
    return tuple(pairs) if pairs else ((1, 1),)


@dataclass(frozen=True, eq=False)
class AccessPattern:
    tensor: TensorDecl
    offset: int
    pattern: tuple[tuple[int, int], ...]  # (step, num) in elements; pattern[0] is the partition dim

    @property
    def partitions(self) -> int:
        return self.pattern[0][1]

    @property
    def free_dims(self) -> tuple[tuple[int, int], ...]:
        return self.pattern[1:]

    @property
    def free_size(self) -> int:
        return math.prod(n for _, n in self.pattern[1:])

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.pattern)

    @property
    def num_elements(self) -> int:
        return self.partitions * self.free_size

    @property
    def dtype(self) -> DType:
        return self.tensor.dtype

    @property
    def memory(self) -> Memory:
        return self.tensor.memory

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.tensor.dtype.itemsize

    @property
    def start_partition(self) -> int:
        """First physical partition touched (SBUF/PSUM), relative to the tensor's own start."""
        return self.offset // self.tensor.free_size if self.tensor.memory in ON_CHIP else 0

    def innermost_stride_bytes(self) -> int:
        for step, num in reversed(self.pattern[1:]):
            if num > 1:
                return abs(step) * self.tensor.dtype.itemsize
        return self.tensor.dtype.itemsize

    def is_contiguous_free(self) -> bool:
        """True when the free dims walk consecutive elements (step 1 innermost, dense outer)."""
        expect = 1
        for step, num in reversed(self.pattern[1:]):
            if num == 1:
                continue
            if step != expect:
                return False
            expect *= num
        return True

    def describe(self) -> str:
        pat = ",".join(f"[{s},{n}]" for s, n in self.pattern)
        return f"{self.tensor.memory.name} '{self.tensor.name}'+{self.offset} [{pat}] {self.dtype.name}"


@dataclass(frozen=True, eq=False)
class Instruction:
    opcode: Opcode
    engine: Engine
    dst: AccessPattern | None
    srcs: tuple[AccessPattern, ...] = ()
    imm: dict[str, Any] = field(default_factory=dict)
    location: str | None = None  # the kernel's file:line
    name: str | None = None
    queue: int = 0  # DMA queue id
    dst2: AccessPattern | None = None  # a second result (activation's reduce_res)

    def describe(self) -> str:
        label = f"{self.opcode.name.lower()}"
        if self.name:
            label += f" '{self.name}'"
        return f"{label} on {self.engine.name.lower()}"

    def reads_dst(self) -> bool:
        """True when part of dst's old contents survive the write (merged, accumulated onto, or
        partitions a shuffle mask leaves unmodified), so dst is read too."""
        if self.opcode in READS_DST or self.imm.get("accumulate"):
            return True
        if self.opcode is Opcode.NC_STREAM_SHUFFLE and self.dst is not None:
            mask = self.imm.get("mask")
            return isinstance(mask, (tuple, list)) and SHUFFLE_KEEP in mask[:self.dst.partitions]
        if self.opcode is Opcode.NONZERO_WITH_COUNT and self.dst is not None:
            return self.dst.partitions > 1  # only each GpSimd core's first partition is written
        return False

    def accesses(self) -> Iterable[tuple[AccessPattern, bool]]:
        """(access pattern, is_write) for every memory access, reads first."""
        for src in self.srcs:
            yield src, False
        if self.dst is not None:
            if self.reads_dst():
                yield self.dst, False
            yield self.dst, True
        if self.dst2 is not None:
            yield self.dst2, True


@dataclass(frozen=True, eq=False)
class Program:
    name: str
    tensors: tuple[TensorDecl, ...]
    instructions: tuple[Instruction, ...]
    location: str | None = None

    @functools.cached_property
    def has_control(self) -> bool:
        """Registers, branches or barriers: the executors keep a register file, follow jumps and pause."""
        return any(ins.opcode in CONTROL_OPS for ins in self.instructions)

    def hbm_tensors(self) -> tuple[TensorDecl, ...]:
        return tuple(t for t in self.tensors if t.memory is Memory.HBM)

    def tensor(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


class ProgramBuilder:
    """Builds a Program instruction by instruction (the NKI tracer and tests use it)."""

    def __init__(self, name: str = "program", location: str | None = None):
        self.name = name
        self.location = location
        self._tensors: list[TensorDecl] = []
        self._instructions: list[Instruction] = []

    def tensor(self, name: str, memory: Memory, shape: Sequence[int], dtype, *, kind: str = "scratch",
               address: tuple[int, int] | None = None, location: str | None = None,
               alias_of: int | None = None) -> TensorDecl:
        decl = TensorDecl(len(self._tensors), name, Memory(memory), tuple(int(s) for s in shape),
                          dtype_of(dtype), kind, address, location, alias_of)
        self._tensors.append(decl)
        return decl

    def hbm(self, name: str, shape: Sequence[int], dtype, kind: str = "input", **kw) -> TensorDecl:
        return self.tensor(name, Memory.HBM, shape, dtype, kind=kind, **kw)

    def sbuf(self, name: str, shape: Sequence[int], dtype, **kw) -> TensorDecl:
        return self.tensor(name, Memory.SBUF, shape, dtype, **kw)

    def psum(self, name: str, shape: Sequence[int], dtype="float32", **kw) -> TensorDecl:
        return self.tensor(name, Memory.PSUM, shape, dtype, **kw)

    def emit(self, opcode: Opcode, dst: AccessPattern | TensorDecl | None,
             srcs: Sequence[AccessPattern | TensorDecl] = (), *, engine: Engine | None = None,
             location: str | None = None, name: str | None = None, queue: int = 0,
             dst2: AccessPattern | TensorDecl | None = None, **imm: Any) -> Instruction:
        opcode = Opcode(opcode)
        ins = Instruction(
            opcode=opcode,
            engine=OPCODE_ENGINES[opcode][0] if engine is None else Engine(engine),
            dst=_as_ap(dst),
            srcs=tuple(_as_ap(s) for s in srcs),
            imm=imm,
            location=location,
            name=name,
            queue=queue,
            dst2=_as_ap(dst2),
        )
        self._instructions.append(ins)
        return ins

    def build(self) -> Program:
        return Program(self.name, tuple(self._tensors), tuple(self._instructions), self.location)


def _as_ap(x: AccessPattern | TensorDecl | None) -> AccessPattern | None:
    if x is None or isinstance(x, AccessPattern):
        return x
    return x.ap()
