"""nki.dtype / nki.typing annotations, nki.isa.constants enums, an NKIObject built with keywords."""
import nki
import nki.isa as nisa
import nki.language as nl
import nki.typing as nt
import numpy as np
from nki.isa.constants import dge_mode, oob_mode


class ScaleParams(nl.NKIObject):
    scale = None
    bias = None


@nki.jit
def scaled_copy(x: nt.tensor[128, 256], params: ScaleParams, dtype: nki.dtype = nl.float32):
    out = nl.ndarray(x.shape, dtype=dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown)
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=params.scale,
                       op1=nl.add, operand1=params.bias)
    nisa.dma_copy(dst=out, src=t)
    return out


if __name__ == "__main__":
    x = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    out = nki.simulate(scaled_copy)(x, ScaleParams(scale=2.0, bias=1.0))
    assert np.allclose(out, 2.0 * x + 1.0, rtol=1e-6)
    print("NKI and NumPy match")
