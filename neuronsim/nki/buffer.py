"""A traced kernel's allocations: :class:`Buffer`, and the check that an on-chip tile fits the chip.

Every kernel argument, ``nl.ndarray`` and tile an ``nl`` operation makes is one Buffer; tensors are
views of it (``tensor.py``). The allocator (``allocate.py``) gives on-chip buffers their addresses
once the whole trace is known.
"""

from __future__ import annotations

from neuronsim.errors import ConstraintError, PsumCapacityError, SbufCapacityError
from neuronsim.nki.types import DTYPES, to_sim_dtype
from neuronsim.sim.chips import ChipSpec
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import Memory


class Buffer:
    """One allocation: a kernel argument, an ``nl.ndarray``, or a tile an ``nl`` operation made.

    ``first`` / ``last`` are the indices of the first and last instruction that touch it (the
    allocator's live range). ``site`` groups the allocations one source line makes across loop
    iterations; ``site_index`` orders them.
    """

    __slots__ = (
        "id",
        "name",
        "memory",
        "shape",
        "dtype",
        "kind",
        "location",
        "first",
        "last",
        "site",
        "site_index",
        "rotating",
        "address",
        "pinned",
        "alias_of",
        "shared",
        "written",
        "acc_boxes",
        "free_size",
        "arg_index",
        "on_chip",
        "size",
        "mx",
    )

    def __init__(
        self,
        id: int,
        name: str,
        memory: Memory,
        shape: tuple[int, ...],
        dtype,
        kind: str,
        location: str | None,
        shared: bool = False,
    ):
        self.id = id
        self.name = name
        self.memory = memory
        self.shape = shape
        self.dtype = dtype if type(dtype) is DType else to_sim_dtype(dtype)
        self.kind = kind
        self.location = location
        self.first = -1
        self.last = -1
        self.site = None
        self.site_index = 0
        self.rotating = False
        self.address: tuple[int, int] | None = None
        self.pinned = False
        self.alias_of: Buffer | None = None
        self.shared = shared
        self.written = False
        self.acc_boxes: list | None = [] if memory is Memory.PSUM else None
        size = 1
        for n in shape:
            size *= n
        self.size = size
        self.on_chip = memory is not Memory.HBM
        self.free_size = (size // shape[0] if shape[0] else 0) if self.on_chip else size
        self.arg_index = -1
        self.mx: str | None = None  # the MX format name of an x4 / E8M0 buffer (types.MX_STORAGE)

    @property
    def bytes_per_partition(self) -> int:
        return self.free_size * self.dtype.itemsize

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{self.memory.name} tensor '{self.name}' [{dims}] {DTYPES[self.dtype]}"

    def root(self) -> Buffer:
        return self.alias_of if self.alias_of is not None else self


def check_on_chip(chip: ChipSpec, shape, dtype: DType, memory: Memory, name: str, location) -> None:
    """Raise if an SBUF/PSUM tile of ``shape`` cannot exist on ``chip``: fewer than 2 dims, more
    partitions than the chip has, or more bytes per partition than the memory holds."""
    per_partition = dtype.itemsize
    for n in shape[1:]:
        per_partition *= n
    if (
        len(shape) >= 2
        and 1 <= shape[0] <= chip.partitions
        and per_partition
        <= (chip.sbuf_bytes_per_partition if memory is Memory.SBUF else chip.psum_bytes_per_partition)
    ):
        return
    what = f"{memory.name} tile '{name}' {list(shape)} {DTYPES[dtype]}"
    where = {"instruction": f"allocation of '{name}'", "location": location}
    if len(shape) < 2:
        raise ConstraintError(f"{what} must be at least 2-D with the partition dimension first", **where)
    if shape[0] > chip.partitions or shape[0] < 1:
        raise ConstraintError(
            f"{what} has {shape[0]} partitions; the limit is {chip.partitions} (nl.tile_size.pmax)", **where
        )
    if memory is Memory.SBUF:
        raise SbufCapacityError(
            f"{what} needs {per_partition} bytes per partition; an SBUF partition has "
            f"{chip.sbuf_bytes_per_partition} usable bytes on {chip.name}",
            **where,
        )
    raise PsumCapacityError(
        f"{what} needs {per_partition} bytes per partition; PSUM has {chip.psum_banks} banks "
        f"of {chip.psum_bank_bytes_per_partition} bytes ({chip.psum_bytes_per_partition} "
        f"bytes per partition)",
        **where,
    )
