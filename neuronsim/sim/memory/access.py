"""Reading and writing access patterns: the encoded form both executors share.

An access pattern is encoded in ``AP_WIDTH`` int64 fields of an instruction row:
``tensor id, dtype code, byte_start, pitch_bytes, partitions, (stride, size) x 4``. The byte
address of element ``(p, i1, i2, i3, i4)`` is

    base[tensor] + byte_start + p * pitch_bytes + (i1*s1 + i2*s2 + i3*s3 + i4*s4) * itemsize

where ``base`` is the tensor's first byte (HBM: its host array; SBUF/PSUM: its partition and byte
placement in the core's memory) and ``pitch_bytes`` is the partition stride (HBM: the first
pair's step in bytes; SBUF/PSUM: the memory's bytes per partition). The validator has proved every
address in bounds before a Program reaches an executor, so the Numba functions here do no checks.

Values travel as ``float32[P, N]`` arrays (``N`` = free elements, row-major over the free dims),
or ``int64[P, N]`` for integer bit operations. Bit-exact copies and transposes between access
patterns are in ``copy.py``; the reference executor's numpy memory in ``reference.py``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import MAX_FREE_DIMS, AccessPattern, Memory
from neuronsim.sim.memory.numerics import (
    CANONICAL_NAN_BITS,
    _encode_bf16,  # the bf16 rounding rule, reused by the vectorized row store
    bits_from_f32,
    f32_from_bits,
    load_f32,
    load_i64,
    load_raw_f32,
    store_f32,
    store_i64,
)

AP_WIDTH = 5 + 2 * MAX_FREE_DIMS
F_TENSOR, F_DTYPE, F_START, F_PITCH, F_PARTS, F_DIMS = 0, 1, 2, 3, 4, 5

ITEMSIZE = np.array([DType(c).itemsize for c in range(len(DType))], dtype=np.int64)
_RAW_CODE_OF_SIZE = np.array([0, int(DType.uint8), int(DType.uint16), 0, int(DType.uint32)], dtype=np.int64)


def encode_ap(ap: AccessPattern, pitch_of_memory: dict[Memory, int]) -> list[int]:
    """The AP_WIDTH fields of ``ap`` (see the module docstring)."""
    t = ap.tensor
    item = t.dtype.itemsize
    if t.memory is Memory.HBM:
        start = ap.offset * item
        pitch = ap.pattern[0][0] * item
    else:
        free = t.free_size
        row0, col0 = divmod(ap.offset, free)
        pitch = pitch_of_memory[t.memory]
        start = row0 * pitch + col0 * item
    fields = [t.id, int(t.dtype), start, pitch, ap.partitions]
    dims = list(ap.pattern[1:])
    dims += [(0, 1)] * (MAX_FREE_DIMS - len(dims))
    for step, num in dims:
        fields += [step, num]
    return fields


def empty_ap_fields() -> list[int]:
    return [0, 0, 0, 0, 0] + [0, 1] * MAX_FREE_DIMS


# ---------------------------------------------------------------- Numba side (trusted inputs)
#
# Reads and writes go by blocks of partitions ("rows"): all partitions of an access pattern share
# its free pattern, so the byte offsets of a row's elements are computed once per instruction (not
# at all when the row is contiguous), and a kernel can stream a big tile through cache-sized blocks.
# ``*_rows_*(row, at, bases, p0, offsets, buf)`` moves partitions p0 .. p0 + len(buf) / N - 1 to or
# from a flat buffer. Contiguous, aligned fp32 and bf16 rows go through typed array views that LLVM
# vectorizes; every other case goes element by element through numerics.load_f32 / store_f32 (the
# one definition of each format).


def _typed_pointer(name: str, nbtype, llvm_type):
    def pointer(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            address = context.cast(builder, args[0], signature.args[0], types.int64)
            return builder.inttoptr(address, llvm_type.as_pointer())

        return types.CPointer(nbtype)(addr), codegen

    pointer.__name__ = pointer.__qualname__ = name
    return intrinsic(pointer)


f32_ptr = _typed_pointer("f32_ptr", types.float32, ir.FloatType())
u32_ptr = _typed_pointer("u32_ptr", types.uint32, ir.IntType(32))
u16_ptr = _typed_pointer("u16_ptr", types.uint16, ir.IntType(16))
u8_ptr = _typed_pointer("u8_ptr", types.uint8, ir.IntType(8))

_F32, _TF32, _BF16 = int(DType.float32), int(DType.tfloat32), int(DType.bfloat16)
_I8, _I16, _I32, _BOOL = int(DType.int8), int(DType.int16), int(DType.int32), int(DType.bool_)
_NAN32 = CANONICAL_NAN_BITS[DType.float32]


@njit(cache=True, inline="always")
def ap_parts(row, at):
    return row[at + F_PARTS]


@njit(cache=True, inline="always")
def ap_free(row, at):
    n = 1
    for d in range(MAX_FREE_DIMS):
        n *= row[at + F_DIMS + 2 * d + 1]
    return n


@njit(cache=True, inline="always")
def row_address(row, at, bases, p):
    """Byte address of the first element of partition ``p`` of an encoded AP."""
    return bases[row[at + F_TENSOR]] + row[at + F_START] + p * row[at + F_PITCH]


# Kernels that stream a tile through buffers take this many elements per block of partitions
# (128 KiB of fp32: a few such buffers stay in a core's L2 cache).
BLOCK_ELEMENTS = 32768


@njit(cache=True, inline="always")
def block_rows(parts, n):
    """Partitions per block for rows of ``n`` elements (at least 1, at most ``parts``)."""
    return max(1, min(parts, BLOCK_ELEMENTS // max(n, 1)))


@njit(cache=True)
def row_offsets(row, at):
    """Byte offsets [N] of a row's elements from its first, in row-major free order; an empty
    array when they are simply ``k * itemsize`` (a contiguous row)."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    expect = 1
    contiguous = True
    for d in range(MAX_FREE_DIMS - 1, -1, -1):
        step, num = row[at + F_DIMS + 2 * d], row[at + F_DIMS + 2 * d + 1]
        if num == 1:
            continue
        if step != expect:
            contiguous = False
        expect *= num
    if contiguous:
        return np.empty(0, dtype=np.int64)
    s1, n1 = row[at + 5] * item, row[at + 6]
    s2, n2 = row[at + 7] * item, row[at + 8]
    s3, n3 = row[at + 9] * item, row[at + 10]
    s4, n4 = row[at + 11] * item, row[at + 12]
    out = np.empty(n1 * n2 * n3 * n4, dtype=np.int64)
    j = 0
    for i1 in range(n1):
        for i2 in range(n2):
            for i3 in range(n3):
                a3 = i1 * s1 + i2 * s2 + i3 * s3
                for i4 in range(n4):
                    out[j] = a3 + i4 * s4
                    j += 1
    return out


@njit(cache=True, inline="always")
def _plain_f32_rows(row, at, bases, offsets):
    """(base, pitch_elements) when the AP is float32 with contiguous, aligned, non-overlapping rows."""
    base = row_address(row, at, bases, 0)
    pitch = row[at + F_PITCH]
    n = ap_free(row, at)
    ok = (row[at + F_DTYPE] == _F32 and offsets.size == 0 and base % 4 == 0 and pitch % 4 == 0
          and (pitch >= 4 * n or row[at + F_PARTS] == 1))
    return ok, base, max(pitch // 4, n)


@njit(cache=True)
def f32_rows(row, at, bases, offsets):
    """The AP as a float32 [P, N] view of memory when it is plain float32 with contiguous, aligned,
    non-overlapping rows; a [0, 0] view otherwise. Values are raw: NaN payloads are not
    canonicalized (a kernel whose every result goes through a canonicalizing store may skip that)."""
    ok, base, pitch = _plain_f32_rows(row, at, bases, offsets)
    if not ok:
        return carray(f32_ptr(base), (0, 1))[:, :0]
    return carray(f32_ptr(base), (row[at + F_PARTS], pitch))[:, :ap_free(row, at)]


@njit(cache=True)
def u32_rows(row, at, bases, offsets):
    """As :func:`f32_rows`, viewed as uint32 bits (to store fp32 results bit-exactly)."""
    ok, base, pitch = _plain_f32_rows(row, at, bases, offsets)
    if not ok:
        return carray(u32_ptr(base), (0, 1))[:, :0]
    return carray(u32_ptr(base), (row[at + F_PARTS], pitch))[:, :ap_free(row, at)]


@njit(cache=True, inline="always")
def f32_row(rows, p):
    """Row ``p`` of an :func:`f32_rows` view as a contiguous 1-D array (which LLVM vectorizes; a
    row of the 2-D view has a stride it cannot see)."""
    return carray(f32_ptr(rows.ctypes.data + p * rows.strides[0]), (rows.shape[1],))


@njit(cache=True, inline="always")
def u32_row(rows, p):
    """Row ``p`` of a :func:`u32_rows` view as a contiguous 1-D array."""
    return carray(u32_ptr(rows.ctypes.data + p * rows.strides[0]), (rows.shape[1],))


@njit(cache=True)
def load_rows_f32(row, at, bases, p0, offsets, out):
    """Partitions ``p0 .. p0 + k - 1`` as fp32 into ``out`` (k * N values, partition-major);
    ``offsets`` from :func:`row_offsets`."""
    code = row[at + F_DTYPE]
    pitch = row[at + F_PITCH]
    n = ap_free(row, at)
    k = out.size // n if n else 0
    base = row_address(row, at, bases, p0)
    nan = f32_from_bits(_NAN32)
    item = ITEMSIZE[code]
    if offsets.size == 0 and (code == _F32 or code == _TF32) and base % 4 == 0 and pitch % 4 == 0:
        for b in range(k):
            src = carray(f32_ptr(base + b * pitch), (n,))
            o = b * n
            for j in range(n):
                x = src[j]
                out[o + j] = x if x == x else nan
    elif offsets.size == 0 and code == _BF16 and base % 2 == 0 and pitch % 2 == 0:
        for b in range(k):
            src16 = carray(u16_ptr(base + b * pitch), (n,))
            o = b * n
            for j in range(n):
                x = f32_from_bits(np.uint32(src16[j]) << np.uint32(16))
                out[o + j] = x if x == x else nan
    elif offsets.size == 0:
        for b in range(k):
            addr = base + b * pitch
            o = b * n
            for j in range(n):
                out[o + j] = load_f32(addr + j * item, code)
    elif code == _F32 or code == _TF32:
        for b in range(k):
            addr = base + b * pitch
            o = b * n
            for j in range(n):
                x = load_raw_f32(addr + offsets[j])
                out[o + j] = x if x == x else nan
    else:
        for b in range(k):
            addr = base + b * pitch
            o = b * n
            for j in range(n):
                out[o + j] = load_f32(addr + offsets[j], code)


@njit(cache=True)
def store_rows_f32(row, at, bases, p0, offsets, values):
    """Store fp32 ``values`` (k * N, partition-major) as partitions ``p0 .. p0 + k - 1``, rounded
    to the AP's dtype."""
    code = row[at + F_DTYPE]
    pitch = row[at + F_PITCH]
    n = ap_free(row, at)
    k = values.size // n if n else 0
    base = row_address(row, at, bases, p0)
    item = ITEMSIZE[code]
    if offsets.size == 0 and code == _F32 and base % 4 == 0 and pitch % 4 == 0:
        for b in range(k):
            dst = carray(u32_ptr(base + b * pitch), (n,))
            o = b * n
            for j in range(n):
                x = values[o + j]
                dst[j] = bits_from_f32(x) if x == x else np.uint32(_NAN32)
    elif offsets.size == 0 and code == _BF16 and base % 2 == 0 and pitch % 2 == 0:
        for b in range(k):
            dst16 = carray(u16_ptr(base + b * pitch), (n,))
            o = b * n
            for j in range(n):
                dst16[j] = np.uint16(_encode_bf16(values[o + j]))
    elif offsets.size == 0:
        for b in range(k):
            addr = base + b * pitch
            o = b * n
            for j in range(n):
                store_f32(addr + j * item, code, values[o + j])
    else:
        for b in range(k):
            addr = base + b * pitch
            o = b * n
            for j in range(n):
                store_f32(addr + offsets[j], code, values[o + j])


@njit(cache=True)
def load_rows_i64(row, at, bases, p0, offsets, out):
    """Partitions ``p0 ..`` as integers (``numerics.load_i64``) into ``out`` (int64, k * N).

    The zero-extended bits come from :func:`load_rows_raw`, then signed and bool dtypes are fixed
    up in one pass per dtype. Not ``load_i64`` per element: LLVM's O3 miscompiles the re-optimized
    copy of that loop (the inlined dtype switch loses its 16-bit cases in one loop version) that a
    caller's module embeds, and a caller loaded from Numba's cache runs that copy."""
    load_rows_raw(row, at, bases, p0, offsets, out)
    code = row[at + F_DTYPE]
    if code == _I8:
        for j in range(out.size):
            out[j] = (out[j] ^ 0x80) - 0x80
    elif code == _I16:
        for j in range(out.size):
            out[j] = (out[j] ^ 0x8000) - 0x8000
    elif code == _I32:
        for j in range(out.size):
            out[j] = (out[j] ^ 0x80000000) - 0x80000000
    elif code == _BOOL:
        for j in range(out.size):
            out[j] = 1 if out[j] != 0 else 0


@njit(cache=True)
def store_rows_i64(row, at, bases, p0, offsets, values):
    """Store integers (``numerics.store_i64``: saturating) as partitions ``p0 ..``."""
    code = row[at + F_DTYPE]
    pitch = row[at + F_PITCH]
    n = ap_free(row, at)
    k = values.size // n if n else 0
    base = row_address(row, at, bases, p0)
    item = ITEMSIZE[code]
    for b in range(k):
        addr = base + b * pitch
        o = b * n
        if offsets.size == 0:
            for j in range(n):
                store_i64(addr + j * item, code, values[o + j])
        else:
            for j in range(n):
                store_i64(addr + offsets[j], code, values[o + j])


@njit(cache=True)
def load_rows_raw(row, at, bases, p0, offsets, out):
    """Partitions ``p0 ..``' element bit patterns (zero-extended) into ``out`` (int64, k * N)."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    pitch = row[at + F_PITCH]
    n = ap_free(row, at)
    k = out.size // n if n else 0
    base = row_address(row, at, bases, p0)
    raw = _RAW_CODE_OF_SIZE[item]
    aligned = base % item == 0 and pitch % item == 0
    for b in range(k):
        addr = base + b * pitch
        o = b * n
        if offsets.size == 0 and aligned and item == 4:
            s32 = carray(u32_ptr(addr), (n,))
            for j in range(n):
                out[o + j] = s32[j]
        elif offsets.size == 0 and aligned and item == 2:
            s16 = carray(u16_ptr(addr), (n,))
            for j in range(n):
                out[o + j] = s16[j]
        elif offsets.size == 0 and item == 1:
            s8 = carray(u8_ptr(addr), (n,))
            for j in range(n):
                out[o + j] = s8[j]
        elif offsets.size == 0:
            for j in range(n):
                out[o + j] = load_i64(addr + j * item, raw)
        else:
            for j in range(n):
                out[o + j] = load_i64(addr + offsets[j], raw)


@njit(cache=True)
def store_rows_raw(row, at, bases, p0, offsets, values):
    """Store bit patterns (low bytes of ``values``, k * N) as partitions ``p0 ..``."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    pitch = row[at + F_PITCH]
    n = ap_free(row, at)
    k = values.size // n if n else 0
    base = row_address(row, at, bases, p0)
    raw = _RAW_CODE_OF_SIZE[item]
    aligned = base % item == 0 and pitch % item == 0
    for b in range(k):
        addr = base + b * pitch
        o = b * n
        if offsets.size == 0 and aligned and item == 4:
            d32 = carray(u32_ptr(addr), (n,))
            for j in range(n):
                d32[j] = np.uint32(values[o + j] & 0xFFFFFFFF)
        elif offsets.size == 0 and aligned and item == 2:
            d16 = carray(u16_ptr(addr), (n,))
            for j in range(n):
                d16[j] = np.uint16(values[o + j] & 0xFFFF)
        elif offsets.size == 0 and item == 1:
            d8 = carray(u8_ptr(addr), (n,))
            for j in range(n):
                d8[j] = np.uint8(values[o + j] & 0xFF)
        elif offsets.size == 0:
            for j in range(n):
                store_i64(addr + j * item, raw, values[o + j])
        else:
            for j in range(n):
                store_i64(addr + offsets[j], raw, values[o + j])


@njit(cache=True)
def gather_f32(row, at, bases):
    out = np.empty((ap_parts(row, at), ap_free(row, at)), dtype=np.float32)
    load_rows_f32(row, at, bases, 0, row_offsets(row, at), out.reshape(-1))
    return out


@njit(cache=True)
def scatter_f32(row, at, bases, values):
    store_rows_f32(row, at, bases, 0, row_offsets(row, at), np.ascontiguousarray(values).reshape(-1))


@njit(cache=True)
def gather_i64(row, at, bases):
    out = np.empty((ap_parts(row, at), ap_free(row, at)), dtype=np.int64)
    load_rows_i64(row, at, bases, 0, row_offsets(row, at), out.reshape(-1))
    return out


@njit(cache=True)
def scatter_i64(row, at, bases, values):
    store_rows_i64(row, at, bases, 0, row_offsets(row, at), np.ascontiguousarray(values).reshape(-1))


@njit(cache=True)
def gather_raw(row, at, bases):
    """Element bit patterns [P, N] (as unsigned ints), for bit-exact moves."""
    out = np.empty((ap_parts(row, at), ap_free(row, at)), dtype=np.int64)
    load_rows_raw(row, at, bases, 0, row_offsets(row, at), out.reshape(-1))
    return out


@njit(cache=True)
def scatter_raw(row, at, bases, values):
    store_rows_raw(row, at, bases, 0, row_offsets(row, at), np.ascontiguousarray(values).reshape(-1))


# ---------------------------------------------------------------- overlap

@njit(cache=True)
def ap_extent(row, at, bases):
    """[lo, hi) byte addresses spanned by an encoded AP (for overlap tests)."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    lo = hi = row_address(row, at, bases, 0)
    reach = row[at + F_PITCH] * (row[at + F_PARTS] - 1)
    lo, hi = lo + min(0, reach), hi + max(0, reach)
    for d in range(MAX_FREE_DIMS):
        reach = row[at + F_DIMS + 2 * d] * item * (row[at + F_DIMS + 2 * d + 1] - 1)
        lo, hi = lo + min(0, reach), hi + max(0, reach)
    return lo, hi + item


@njit(cache=True)
def _row_span(row, at):
    """[lo, hi) byte offsets of one partition's elements from its first element."""
    item = ITEMSIZE[row[at + F_DTYPE]]
    lo = hi = 0
    for d in range(MAX_FREE_DIMS):
        reach = row[at + F_DIMS + 2 * d] * item * (row[at + F_DIMS + 2 * d + 1] - 1)
        lo, hi = lo + min(0, reach), hi + max(0, reach)
    return lo, hi + item


@njit(cache=True)
def disjoint(row, at_a, at_b, bases):
    """Whether two encoded APs share no byte. Beyond their overall extents, APs with one
    partition pitch (two tiles side by side in SBUF) are disjoint when their columns are: every
    byte of an AP lies, modulo the pitch, in its column range."""
    lo_a, hi_a = ap_extent(row, at_a, bases)
    lo_b, hi_b = ap_extent(row, at_b, bases)
    if hi_a <= lo_b or hi_b <= lo_a:
        return True
    pitch = row[at_a + F_PITCH]
    if pitch <= 0 or pitch != row[at_b + F_PITCH]:
        return False
    ra, rb = _row_span(row, at_a), _row_span(row, at_b)
    ca = (row_address(row, at_a, bases, 0) + ra[0]) % pitch
    cb = (row_address(row, at_b, bases, 0) + rb[0]) % pitch
    wa, wb = ra[1] - ra[0], rb[1] - rb[0]
    if ca + wa > pitch or cb + wb > pitch:  # a row wraps past the pitch
        return False
    return ca + wa <= cb or cb + wb <= ca


@njit(cache=True)
def same_or_disjoint(row, at_a, at_b, bases):
    """Whether two encoded APs are the very same elements in the same order (every field equal),
    or share no byte: the cases where a kernel may stream partition blocks from one to the other
    and still give the read-everything-then-write result."""
    same = True
    for f in range(AP_WIDTH):
        if row[at_a + f] != row[at_b + f]:
            same = False
    return same or disjoint(row, at_a, at_b, bases)


@njit(cache=True)
def same_start_or_disjoint(row, at_a, at_b, bases):
    """Whether two encoded APs start at the same byte or share no byte. For two plain row views of
    one shape (:func:`f32_rows`) the same start means the very same elements."""
    if row_address(row, at_a, bases, 0) == row_address(row, at_b, bases, 0):
        return True
    return disjoint(row, at_a, at_b, bases)
