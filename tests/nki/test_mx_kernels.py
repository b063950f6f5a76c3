"""MX kernels (NeuronCore-v4, ``chip="trn3"``): ``nisa.quantize_mx`` and ``nisa.nc_matmul_mx`` with
the x4 dtypes, written as AWS's MXFP matmul guide writes them (offline-quantized data viewed as
``_x4``, scales spread over the partition quadrants, on-device quantization of the moving tile)."""

import ml_dtypes
import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, DtypeError


def spread_scales(data_sb, scale_hbm):
    """Scales packed [P // 8, F] in HBM -> the quadrant layout (4 rows at the top of each 32)."""
    p, f = data_sb.shape[0], scale_hbm.shape[1]
    scale_sb = nl.ndarray((p, f), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=scale_sb, value=0)
    for q in range(p // 32):
        nisa.dma_copy(src=scale_hbm.ap(pattern=[[f, 4], [1, f]], offset=4 * q * f),
                      dst=scale_sb.ap(pattern=[[f, 4], [1, f]], offset=32 * q * f))
    return scale_sb


@nki.jit
def quantize_then_matmul(stationary_words, stationary_scale, moving_bf16):
    """Offline-quantized stationary (uint32 words viewed as float8_e4m3fn_x4) times a moving tile
    quantized on device."""
    k, m = stationary_words.shape
    n = moving_bf16.shape[1] // 4
    st_hbm = stationary_words.ap(dtype=nl.float8_e4m3fn_x4, pattern=[[m, k], [1, m]], offset=0)
    st = nl.ndarray((k, m), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=st_hbm)
    st_scale = spread_scales(st, stationary_scale)
    mv_bf16 = nl.ndarray(moving_bf16.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=mv_bf16, src=moving_bf16)
    mv = nl.ndarray((k, n), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    mv_scale = nl.ndarray((k, n), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.quantize_mx(dst=mv, src=mv_bf16, dst_scale=mv_scale)
    acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=acc, stationary=st, moving=mv, stationary_scale=st_scale, moving_scale=mv_scale)
    res = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=res)
    return out


def _dequantize(words, scales_packed):
    """[4P, F] fp64 values of uint32 fp8 words and contiguous [P // 8, F] scales (k = 4p + j)."""
    p, f = words.shape
    vals = words.view(np.uint8).reshape(p, f, 4).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    scale = np.ldexp(1.0, scales_packed.astype(int) - 127)[np.arange(p) // 8]
    return (vals * scale[:, :, None]).transpose(0, 2, 1).reshape(4 * p, f)


def test_offline_stationary_times_on_device_quantized_moving():
    rng = np.random.default_rng(0)
    k, m, n = 128, 64, 128
    byte = rng.integers(0, 256, (k, m, 4), dtype=np.uint8)
    values = byte.view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    byte[~np.isfinite(values)] = 0
    words = byte.view(np.uint32).reshape(k, m)
    scales = rng.integers(120, 130, (k // 8, m), dtype=np.uint8)
    moving = rng.standard_normal((k, 4 * n)).astype(ml_dtypes.bfloat16)
    out, prof = nki.simulate(quantize_then_matmul, profile=True, chip="trn3")(words, scales, moving)
    # The moving operand as quantize_mx makes it: X = 2^(floor(log2 amax) - 7) per 8x4 group (S16).
    groups = moving.astype(np.float32).reshape(k // 8, 8, n, 4)
    x = np.ldexp(1.0, np.floor(np.log2(np.abs(groups).max(axis=(1, 3)))).astype(int) - 7)
    q = (groups / x[:, None, :, None]).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    mv = (q * x[:, None, :, None]).reshape(k, n, 4).transpose(0, 2, 1).reshape(4 * k, n)
    st = _dequantize(words, scales)
    expect = st.T @ mv
    bound = 4 * k * 2.0**-24 * (np.abs(st).T @ np.abs(mv))
    assert np.all(np.abs(out - expect) <= bound)
    np.testing.assert_allclose(out, st.T @ moving.astype(np.float64).reshape(k, n, 4).transpose(0, 2, 1)
                               .reshape(4 * k, n), rtol=0.1, atol=0.1 * np.abs(expect).max())
    assert {"NC_MATMUL_MX", "QUANTIZE_MX"} <= {e.opcode for e in prof.timeline}
    assert prof.summary["model_flops"] == 2 * (4 * k) * m * n


def test_mx_needs_neuroncore_v4_and_mx_operands():
    rng = np.random.default_rng(1)
    args = (np.zeros((128, 64), np.uint32), np.zeros((16, 64), np.uint8),
            rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16))
    with pytest.raises(ConstraintError, match=r"test_mx_kernels.py:\d+.*NeuronCore-v4"):
        nki.simulate(quantize_then_matmul, chip="trn2")(*args)

    @nki.jit
    def plain_words(a):
        t = nl.ndarray((32, 4), dtype=nl.uint32, buffer=nl.sbuf)
        s = nl.ndarray((4, 4), dtype=nl.uint8, buffer=nl.sbuf)
        acc = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul_mx(dst=acc, stationary=t, moving=t, stationary_scale=s, moving_scale=s)
        return a

    with pytest.raises(DtypeError, match=r"test_mx_kernels.py:\d+.*is not MX data"):
        nki.simulate(plain_words, chip="trn3")(np.zeros((1, 1), np.float32))


@nki.jit
def copy_x4_argument(words):
    """An x4 host array arrives with its format (as AWS's neuron_dtypes arrays do) and a copy of it
    returns in the same format."""
    assert words.dtype == nl.float4_e2m1fn_x4, words.dtype
    out = nl.ndarray(words.shape, dtype=words.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(words.shape, dtype=words.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=words)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_x4_host_arrays_keep_their_format_through_a_kernel():
    """nki-library's MX tests pass neuron_dtypes x4 arrays: [P, F] floats packed to [P, F / 4] words
    (the compat runner's stand-in, value j in nibble j as the simulator's MX words)."""
    from neuronsim.nki.compat.neuron_dtypes import static_cast
    from neuronsim.nki.types import host_mx_name

    values = np.array([[0.5, 1, -2, 6, 0, 0.25, 3, -6]] * 4, np.float32)
    words = static_cast(values, nl.float4_e2m1fn_x4)
    assert words.shape == (4, 2) and host_mx_name(words.dtype) == "float4_e2m1fn_x4"
    assert "float4_e2m1fn_x4" in str(words.dtype)  # how the library's torch references tell x4 arrays
    raw = words.view(np.uint16)
    assert int(raw[0, 0]) == 0x7C21  # codes 1 (0.5), 2 (1.0), 0xC (-2), 7 (6), low nibble first
    np.testing.assert_array_equal(static_cast(words, np.float32)[0], [0.5, 1, -2, 6, 0, 0, 3, -6])
    out = nki.simulate(copy_x4_argument, chip="trn3")(words)
    assert host_mx_name(out.dtype) == "float4_e2m1fn_x4"
    np.testing.assert_array_equal(out, raw)


def quantize_into_placeholder(src_hbm, out_data_hbm, out_scale_hbm):
    """nki-library's quantize_mx_kernel (test_quantize_to_mx.py): the MX format of ``dst`` comes from
    the output placeholder the test made with ``np.zeros(shape, dtype=nl.float8_e4m3fn_x4)``."""
    p, f = src_hbm.shape
    src_sb = nl.ndarray((p, f), dtype=src_hbm.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=src_sb, src=src_hbm)
    data_sb = nl.ndarray((p, f // 4), dtype=out_data_hbm.dtype, buffer=nl.sbuf)
    scale_sb = nl.ndarray((p, f // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.quantize_mx(src=src_sb, dst=data_sb, dst_scale=scale_sb)
    nisa.dma_copy(dst=out_data_hbm, src=data_sb)
    nisa.dma_copy(dst=out_scale_hbm, src=scale_sb)
    return out_data_hbm, out_scale_hbm


def test_x4_placeholders_made_by_name_carry_their_format():
    """The compat runner lets numpy read the x4 names (as AWS's neuron_dtypes does); the arrays show
    the format in ``str(dtype)`` and a kernel writes MX words into them; the harness's comparison
    unpacks them."""
    from neuronsim.nki.compat.harness import _as_float32
    from neuronsim.nki.compat.neuron_dtypes import register_x4_names
    from neuronsim.nki.types import host_mx_name

    register_x4_names()
    placeholder = np.zeros((32, 4), dtype=nl.float8_e4m3fn_x4)
    # str(dtype) is the name, as AWS's neuron_dtypes shows it (mx_torch_common.quantize_to_mx selects by it)
    assert str(placeholder.dtype) == "float8_e4m3fn_x4"
    assert host_mx_name(placeholder.dtype) == "float8_e4m3fn_x4"
    assert str(np.dtype([("a", np.uint32)])) == "[('a', '<u4')]"  # other records print as before
    # the library's is_mx_quantize(arr.dtype): `dtype in [nl.float8_e5m2_x4, ...]` (each nl dtype's ==)
    assert placeholder.dtype in [nl.float8_e5m2_x4, nl.float8_e4m3fn_x4]
    assert nl.float8_e5m2_x4 != placeholder.dtype and placeholder.dtype not in [nl.float4_e2m1fn_x4]
    x = np.random.default_rng(3).standard_normal((32, 16)).astype(ml_dtypes.bfloat16)
    data, scale = nki.simulate(quantize_into_placeholder, chip="trn3")(x, placeholder,
                                                                       np.zeros((32, 4), np.uint8))
    assert host_mx_name(data.dtype) == "float8_e4m3fn_x4"
    rows = [(p // 32) * 32 + (p % 32) // 8 for p in range(32)]  # each group's scale row
    values = _as_float32(data) * np.repeat(2.0 ** (scale[rows].astype(np.float32) - 127), 4, axis=1)
    np.testing.assert_allclose(values, x.astype(np.float32), rtol=2**-3)


def test_nki_version_selects_the_release_block_scale():
    """nki.simulate(kernel, nki_version=...): quantize_mx's block scale is the OCP sample scale in
    NKI 0.3/0.4 and twice it from 0.5 (its release notes); an unknown release is an OptionError."""
    from neuronsim.errors import OptionError
    from neuronsim.nki.compat.neuron_dtypes import register_x4_names

    register_x4_names()
    x = np.full((32, 16), 3.0, ml_dtypes.bfloat16)  # amax 3: floor(log2) = 1, Emax 8
    args = (x, np.zeros((32, 4), dtype=nl.float8_e4m3fn_x4), np.zeros((32, 4), np.uint8))
    scales = {v: nki.simulate(quantize_into_placeholder, chip="trn3", nki_version=v)(*args)[1][0, 0]
              for v in ("0.4", "0.6")}
    assert scales == {"0.4": 127 + 1 - 8, "0.6": 127 + 1 - 7}
    assert nki.simulate(quantize_into_placeholder, chip="trn3")(*args)[1][0, 0] == scales["0.6"]  # default
    with pytest.raises(OptionError, match=r"NKI release '0\.9'.*known: 0\.3, 0\.4, 0\.5, 0\.6"):
        nki.simulate(quantize_into_placeholder, nki_version="0.9")
