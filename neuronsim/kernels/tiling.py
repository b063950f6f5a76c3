"""Walking same-shape HBM views in [partitions, free] tiles (the element-wise kernels' loop).

The views (an output and its inputs broadcast to its shape, stride 0 where broadcast) are first
coalesced like ATen's TensorIterator: size-1 dims dropped, neighbouring dims merged where every
view walks them as one. One dim left (the usual case: contiguous operands) is cut into
``[128, F]`` tiles plus at most two tail tiles; with more dims, the last two are the partition and
free dims of a tile and the outer ones are looped over.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import neuronsim.nki.language as nl
from neuronsim.kernels.registry import Declined

# The chip's partitions (chips/*.toml), read when the kernels are imported: every chip file has 128.
# Kernels that tile by other chip limits read them per trace (norm.py, matmul.py).
PARTITIONS = nl.tile_size.pmax
FREE_MAX = 2048  # elements per partition of an element-wise tile: 8 KiB of fp32, DMA-efficient
MAX_TILES = 1024  # more tiles than this (tiny awkward dims): the op falls back instead
MAX_FOLDED_DIMS = 2  # outer dims a tile's access pattern may take on (4-dim DMA patterns at most)


@dataclass(frozen=True)
class Tile:
    partitions: int
    free: int
    aps: tuple[tuple[int, tuple[tuple[int, int], ...]], ...]  # per view: (offset, ((step, num), ...))

    def of(self, k: int, view):
        """View ``k``'s part of this tile, as an HBM access pattern ``[partitions, free]``."""
        offset, pattern = self.aps[k]
        return view.ap([list(p) for p in pattern], offset=view.offset + offset)


def coalesce(dims_per_view: list[tuple[tuple[int, int], ...]]) -> tuple[tuple[int, ...], list[list[int]]]:
    """(sizes, steps per view) after dropping size-1 dims and merging dims walked as one."""
    sizes = [n for _, n in dims_per_view[0]]
    steps = [[s for s, _ in dims] for dims in dims_per_view]
    keep = [i for i, n in enumerate(sizes) if n != 1]
    sizes = [sizes[i] for i in keep]
    steps = [[st[i] for i in keep] for st in steps]
    i = len(sizes) - 1
    while i > 0:
        if all(st[i - 1] == st[i] * sizes[i] for st in steps):
            sizes[i - 1 : i + 1] = [sizes[i - 1] * sizes[i]]
            for st in steps:
                st[i - 1 : i + 1] = [st[i]]
        i -= 1
    return tuple(sizes), steps


def elementwise_tiles(views) -> list[Tile]:
    """The tiles covering same-shape views; declines (the op falls back) past MAX_TILES."""
    tiles = _tiles(views)
    if tiles is None:
        raise Declined(f"more than {MAX_TILES} tiles for shape {views[0].shape}")
    return tiles


def _tiles(views) -> list[Tile] | None:
    sizes, steps = coalesce([v.dims for v in views])
    if not sizes:
        return [Tile(1, 1, tuple((0, ((1, 1), (1, 1))) for _ in views))]
    if len(sizes) == 1:
        return _flat_tiles(sizes[0], [st[0] for st in steps])
    outer = sizes[:-2]
    n_p, n_f = sizes[-2], sizes[-1]
    # Fold the innermost outer dims into a tile's free side (a multi-dim DMA access pattern) while
    # it stays within FREE_MAX: a permuted copy is then a few large DMAs, not one per row block.
    folded = 0
    free = n_f
    foldable = min(MAX_FOLDED_DIMS, len(outer)) if n_f <= FREE_MAX else 0
    while folded < foldable and free * outer[-1 - folded] <= FREE_MAX:
        free *= outer[-1 - folded]
        folded += 1
    looped = outer[: len(outer) - folded]
    count = math.prod(looped) * math.ceil(n_p / PARTITIONS) * math.ceil(n_f / FREE_MAX)
    if count > MAX_TILES:
        return None
    tiles = []
    for idx in itertools.product(*(range(n) for n in looped)):
        base = [sum(i * s for i, s in zip(idx, st[: len(looped)], strict=True)) for st in steps]
        for p0 in range(0, n_p, PARTITIONS):
            p = min(PARTITIONS, n_p - p0)
            for f0 in range(0, n_f, FREE_MAX):
                f = min(FREE_MAX, n_f - f0)
                tiles.append(Tile(p, f * (free // n_f), tuple(
                    (b + p0 * st[-2] + f0 * st[-1],
                     ((st[-2], p), *zip(st[len(looped):-2], outer[len(looped):], strict=True), (st[-1], f)))
                    for b, st in zip(base, steps, strict=True))))
    return tiles


def _flat_tiles(n: int, steps: list[int]) -> list[Tile] | None:
    free = max(1, min(FREE_MAX, n // PARTITIONS))
    full = n // (PARTITIONS * free)
    if full + 2 > MAX_TILES:
        return None

    def tile(start: int, p: int, f: int) -> Tile:
        return Tile(p, f, tuple((start * s, ((s * f, p), (s, f))) for s in steps))

    tiles = [tile(t * PARTITIONS * free, PARTITIONS, free) for t in range(full)]
    start = full * PARTITIONS * free
    rows = (n - start) // free
    if rows:
        tiles.append(tile(start, rows, free))
        start += rows * free
    if n - start:
        tiles.append(tile(start, 1, n - start))
    return tiles
