"""neuronsim/nki/spill.py: kernels whose tiles exceed SBUF fit by reloading and spilling, as the
Neuron compiler does (its spill/reload DMAs: nki_perf_guide), with the kernel's values unchanged."""

import numpy as np

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl

TILES = 120  # x 2 KiB per partition: 240 KiB, more than trn2's 212,984-byte partitions


@nki.jit
def _reuse_inputs(x):
    """Loads every tile, then reads them all twice: some must be loaded again from x."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    tiles = []
    for i in range(TILES):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[:, i * 512:(i + 1) * 512])
        tiles.append(t)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for t in tiles + tiles[::-1]:
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit
def _many_accumulators(x):
    """Keeps TILES partial sums (written, so not copies of HBM) live across two passes over x."""
    out = nl.ndarray((128, 512 * TILES), dtype=nl.float32, buffer=nl.shared_hbm)
    sums = []
    for i in range(TILES):
        s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=s, value=float(i))
        sums.append(s)
    for _ in range(2):
        for i in range(TILES):
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[:, i * 512:(i + 1) * 512])
            nisa.tensor_tensor(dst=sums[i], data1=sums[i], data2=t, op=nl.add)
    for i in range(TILES):
        nisa.dma_copy(dst=out[:, i * 512:(i + 1) * 512], src=sums[i])
    return out


def _dma_names(profile):
    return [e.name or "" for e in profile.timeline if e.engine == "dma"]


def test_tiles_copied_from_hbm_are_loaded_again_not_spilled():
    x = np.random.default_rng(0).random((128, 512 * TILES), dtype=np.float32)
    out, profile = nki.simulate(_reuse_inputs, profile=True, chip="trn2")(x)
    tiles = x.reshape(128, TILES, 512).transpose(1, 0, 2)
    expected = np.zeros((128, 512), np.float32)
    for t in list(tiles) + list(tiles[::-1]):
        expected = expected + t
    np.testing.assert_array_equal(out, expected)
    names = _dma_names(profile)
    assert any(n.startswith("reload ") for n in names)
    assert not any(n.startswith("spill ") for n in names)


def test_written_tiles_are_spilled_and_reloaded():
    x = np.random.default_rng(1).random((128, 512 * TILES), dtype=np.float32)
    out, profile = nki.simulate(_many_accumulators, profile=True, chip="trn2")(x)
    tiles = x.reshape(128, TILES, 512)
    expected = (np.arange(TILES, dtype=np.float32)[None, :, None] + tiles) + tiles
    np.testing.assert_array_equal(out, expected.reshape(128, -1))
    names = _dma_names(profile)
    assert any(n.startswith("spill ") for n in names) and any(n.startswith("reload ") for n in names)


def test_kernels_that_fit_are_not_rewritten():
    @nki.jit
    def small(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.dma_copy(dst=out, src=t)
        return out

    traced = small.specialize((np.zeros((128, 512), np.float32),), chip="trn2")
    assert "sbuf_reloads" not in traced.instances[0].rotation
    assert len(traced.instances[0].programs[0].instructions) == 2
