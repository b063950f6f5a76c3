"""Tiles at the kernel's own SBUF addresses, live across a `sendrecv`, whose bytes a later tile
reuses once they are dead: the pattern of nki-library's MLP/MoE token-generation kernels (their
stack allocator gives the output staging tile the bytes of the gate/up tiles exchanged between the
two cores)."""
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

P_MAX, F = 128, 512
ROW_BYTES = F * 4


@nki.jit
def exchange_and_scale(x, scale):
    """Each core loads its half of ``x``, adds its peer's half (LNC=2 sendrecv), and stores
    ``scale * (mine + peer)`` through a staging tile placed over the two exchanged tiles."""
    out = nl.ndarray((2 * P_MAX, F), dtype=x.dtype, buffer=nl.shared_hbm)
    shard = nl.program_id(0)
    mine = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
    received = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf, address=(0, ROW_BYTES))
    total = nl.ndarray((P_MAX, F), dtype=nl.float32, buffer=nl.sbuf, address=(0, 2 * ROW_BYTES))
    nisa.dma_copy(dst=mine, src=x[nl.ds(shard * P_MAX, P_MAX), :])
    nisa.sendrecv(src=mine, dst=received, send_to_rank=1 - shard, recv_from_rank=1 - shard, pipe_id=0)
    nisa.tensor_tensor(dst=total, data1=mine, data2=received, op=nl.add)
    # mine and received are dead: the staging tile takes their bytes
    staged = nl.ndarray((P_MAX, 2 * F), dtype=nl.float32, buffer=nl.sbuf, address=(0, 0))
    nisa.tensor_scalar(dst=staged[:, 0:F], data=total, op0=nl.multiply, operand0=scale)
    nisa.dma_copy(dst=out[nl.ds(shard * P_MAX, P_MAX), :], src=staged[:, 0:F])
    return out


if __name__ == "__main__":
    x = np.random.default_rng(0).standard_normal((2 * P_MAX, F)).astype(np.float32)
    out = nki.simulate(exchange_and_scale[2])(x, 0.5)
    half = 0.5 * (x[:P_MAX] + x[P_MAX:])
    assert np.allclose(out, np.concatenate([half, half]), rtol=1e-6, atol=1e-6), np.abs(out).max()
    print("NKI and NumPy match")
