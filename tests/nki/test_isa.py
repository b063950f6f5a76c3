"""Every IR instruction through its nki.isa call: documented argument names, defaults, semantics."""

import math
import types

import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.sim.ir import Engine, Opcode

RNG = np.random.default_rng(42)


def run(body, *arrays, out_shape=None, out_dtype=np.float32):
    """Simulate a kernel that loads ``arrays`` into SBUF, calls ``body(*tiles) -> tile`` and stores it."""

    @nki.jit
    def k(*hbm):
        tiles = [nl.load(h) for h in hbm]
        res = body(*tiles)
        out = nl.ndarray(res.shape, dtype=res.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=res)
        return out

    return nki.simulate(k)(*arrays), k.specialize(arrays).instances[0].programs[0]


def opcodes(prog, engine=None):
    return [(i.opcode, i.engine) for i in prog.instructions if i.opcode not in (Opcode.DMA_COPY,)]


def sbuf(shape, dtype=nl.float32):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def test_isa_exports_the_nki_api_only():
    """Everything public in nki.isa is listed in __all__; the recorder and the operator lookups
    it is built on are not NKI API (AWS's nki/api/nki.isa.rst lists neither)."""
    public = {n for n, v in vars(nisa).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public == set(nisa.__all__)
    assert not {"emit", "act_func", "alu_op"} & public


def test_nc_matmul_infers_overwrite_then_accumulate():
    a, b = (
        RNG.standard_normal((2, 128, 64), dtype=np.float32),
        RNG.standard_normal((2, 128, 256), dtype=np.float32),
    )

    def body(a0, a1, b0, b1):
        acc = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, a0, b0)  # first write: overwrite (PSUM starts as NaN)
        nisa.nc_matmul(acc, a1, b1)  # accumulate
        res = sbuf((64, 256))
        nisa.tensor_copy(res, acc)  # eviction ends the accumulation group
        nisa.nc_matmul(acc, a0, b0)  # so this one overwrites again
        nisa.tensor_tensor(res, res, acc, op=nl.add)
        return res

    out, prog = run(body, a[0], a[1], b[0], b[1])
    flags = [i.imm["accumulate"] for i in prog.instructions if i.opcode is Opcode.NC_MATMUL]
    assert flags == [False, True, False]
    np.testing.assert_allclose(out, 2 * a[0].T @ b[0] + a[1].T @ b[1], rtol=1e-4, atol=1e-3)


def test_nc_matmul_explicit_accumulate():
    a, b = RNG.standard_normal((128, 32), dtype=np.float32), RNG.standard_normal((128, 64), dtype=np.float32)

    def body(a, b):
        acc = nl.zeros((32, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(acc, a, b, accumulate=True)  # onto the zeros
        nisa.nc_matmul(acc, a, b, accumulate=False)  # overwrite
        nisa.nc_matmul(acc, a, b, accumulate=True)
        return nl.copy(acc)

    out, _ = run(body, a, b)
    np.testing.assert_allclose(out, 2 * a.T @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape,engine", [((128, 96), Engine.TENSOR), ((32, 16), Engine.VECTOR)])
def test_nc_transpose_picks_the_engine_from_the_memories(shape, engine):
    x = RNG.standard_normal(shape, dtype=np.float32)

    def body(t):
        buf = nl.psum if engine is Engine.TENSOR else nl.sbuf
        d = nl.ndarray(shape[::-1], dtype=nl.float32, buffer=buf)
        nisa.nc_transpose(d, t)
        return d if engine is Engine.VECTOR else nl.copy(d)

    out, prog = run(body, x)
    assert (Opcode.NC_TRANSPOSE, engine) in opcodes(prog)
    np.testing.assert_array_equal(out, x.T)


def test_activation_scale_bias_tile_and_reduce():
    x = RNG.standard_normal((128, 64), dtype=np.float32)
    bias = RNG.standard_normal((128, 1), dtype=np.float32)

    def body(t, b):
        y, s = sbuf((128, 64)), sbuf((128, 1))
        nisa.activation(
            dst=y,
            op=nl.exp,
            data=t,
            bias=b,
            scale=0.5,
            reduce_op=nl.add,
            reduce_res=s,
            reduce_cmd=nisa.reduce_cmd.reset_reduce,
        )
        nisa.tensor_scalar(y, y, nl.multiply, 0.0, op1=nl.add, operand1=s)
        return y

    out, prog = run(body, x, bias)
    act = next(i for i in prog.instructions if i.opcode is Opcode.ACTIVATION)
    assert (
        act.engine is Engine.SCALAR and act.imm["bias_is_tile"] and act.imm["reduce"] and act.dst2 is not None
    )
    e = np.exp(0.5 * x + bias)
    np.testing.assert_allclose(out, np.broadcast_to(e.sum(1, keepdims=True), x.shape), rtol=1e-5)


def test_gelu_dx_is_the_derivative_of_gelu():
    """nl.gelu_dx / nisa.activation(op=nl.gelu_dx): Phi(x) + x phi(x) on ScalarE."""
    x = RNG.standard_normal((128, 64), dtype=np.float32) * 3

    def body(t):
        y = sbuf((128, 64))
        nisa.activation(dst=y, op=nl.gelu_dx, data=t)
        return nl.multiply(y, nl.gelu_dx(t))

    out, prog = run(body, x)
    acts = [i for i in prog.instructions if i.opcode is Opcode.ACTIVATION]
    assert len(acts) == 2 and all(i.engine is Engine.SCALAR for i in acts)
    v = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    d = 0.5 * (1 + erf(v / math.sqrt(2))) + v * np.exp(-v * v / 2) / math.sqrt(2 * math.pi)
    np.testing.assert_allclose(out, d * d, rtol=1e-5, atol=1e-7)


def test_tensor_tensor_scalar_and_scalar_tensor_tensor():
    x, y = RNG.standard_normal((2, 128, 64), dtype=np.float32)
    col = RNG.standard_normal((128, 1), dtype=np.float32)

    def body(x, y, c):
        a, b, d = sbuf((128, 64)), sbuf((128, 64)), sbuf((128, 64))
        nisa.tensor_tensor(dst=a, data1=x, data2=y, op=nl.subtract)
        nisa.tensor_scalar(
            dst=b, data=a, op0=nl.subtract, operand0=2.0, reverse0=True, op1=nl.multiply, operand1=c
        )
        nisa.scalar_tensor_tensor(dst=d, data=b, op0=nl.multiply, operand0=c, op1=nl.add, operand1=x)
        return d

    out, _ = run(body, x, y, col)
    b = (2.0 - (x - y)) * col
    np.testing.assert_allclose(out, b * col + x, rtol=1e-5, atol=1e-6)


def test_int32_tensor_tensor_defaults_to_gpsimd():
    a = RNG.integers(-100, 100, (128, 16), dtype=np.int32)

    def body(t):
        d = sbuf((128, 16), nl.int32)
        nisa.tensor_tensor(d, t, t, op=nl.add)
        return d

    out, prog = run(body, a)
    assert (Opcode.TENSOR_TENSOR, Engine.GPSIMD) in opcodes(prog)
    np.testing.assert_array_equal(out, 2 * a)


def test_tensor_reduce_axes_and_negate():
    x = RNG.standard_normal((128, 4, 32), dtype=np.float32)

    def body(t):
        d = sbuf((128, 4))
        nisa.tensor_reduce(dst=d, op=nl.maximum, data=t, axis=2, negate=True)
        return d

    out, prog = run(body, x)
    assert next(i for i in prog.instructions if i.opcode is Opcode.TENSOR_REDUCE).imm["num_axes"] == 1
    np.testing.assert_array_equal(out, -x.max(axis=2))


def test_copies_memset_predicated_copy_and_select():
    x = RNG.standard_normal((128, 32), dtype=np.float32)
    mask = (RNG.random((128, 32)) > 0.5).astype(np.uint8)

    def body(t, m):
        a = sbuf((128, 32))
        nisa.memset(dst=a, value=7.0, engine=nisa.engine.gpsimd)
        nisa.tensor_copy_predicated(dst=a, src=t, predicate=m)
        b = sbuf((128, 32))
        nisa.select_reduce(dst=b, predicate=m, on_true=a, on_false=-1.0, reverse_pred=True)
        c = sbuf((128, 32))
        nisa.tensor_copy(dst=c, src=b, engine=nisa.engine.scalar)
        return c

    out, prog = run(body, x, mask)
    ops = opcodes(prog)
    assert (Opcode.MEMSET, Engine.GPSIMD) in ops and (Opcode.TENSOR_COPY, Engine.SCALAR) in ops
    np.testing.assert_array_equal(out, np.where(mask == 0, 7.0, -1.0))


def test_bn_stats_and_bn_aggr():
    x = RNG.standard_normal((128, 1024), dtype=np.float32) * 3 + 1

    def body(t):
        stats = sbuf((128, 12))
        for c in range(2):
            nisa.bn_stats(dst=stats[:, c * 6 : (c + 1) * 6], data=t[:, c * 512 : (c + 1) * 512])
        mv = sbuf((128, 2))
        nisa.bn_aggr(dst=mv, data=stats)
        return mv

    out, _ = run(body, x)
    np.testing.assert_allclose(out[:, 0], x.mean(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[:, 1], x.var(1), rtol=1e-4)


def test_max8_and_find_index8():
    x = RNG.permutation(128 * 64).astype(np.float32).reshape(128, 64)

    def body(t):
        top = sbuf((128, 8))
        nisa.max8(dst=top, src=t)
        idx = sbuf((128, 8), nl.uint32)
        nisa.nc_find_index8(dst=idx, data=t, vals=top)
        return idx

    out, _ = run(body, x)
    np.testing.assert_array_equal(out, np.argsort(-x, axis=1)[:, :8])


def test_iota_affine_select_and_partition_reduce():
    def body(t):
        i = sbuf((128, 16), nl.int32)
        nisa.iota(dst=i, pattern=[[1, 16]], offset=3, channel_multiplier=16)
        f = sbuf((128, 16))
        nisa.tensor_copy(dst=f, src=i)
        lower = sbuf((128, 16))
        nisa.affine_select(
            dst=lower,
            pattern=[[-1, 16]],
            channel_multiplier=1,
            on_true_tile=f,
            on_false_value=0.0,
            cmp_op=nl.greater_equal,
        )
        col = sbuf((1, 16))
        nisa.tensor_partition_reduce(dst=col, op=nl.add, data=lower)
        return col

    out, _ = run(body, np.zeros((1, 1), np.float32))
    p, j = np.meshgrid(np.arange(128), np.arange(16), indexing="ij")
    vals = 3 + 16 * p + j
    np.testing.assert_array_equal(out[0], np.where(p - j >= 0, vals, 0).sum(0))


def test_scan_reciprocal_and_scalar_reduce():
    x = RNG.random((128, 32), dtype=np.float32) + 0.5

    def body(t):
        run_sum = sbuf((128, 32))
        ones = nl.ones((128, 32), dtype=nl.float32)
        nisa.tensor_tensor_scan(dst=run_sum, data0=ones, data1=t, initial=0.0, op0=nl.multiply, op1=nl.add)
        r = sbuf((128, 32))
        nisa.reciprocal(dst=r, data=run_sum)
        total = sbuf((128, 1))
        nisa.tensor_scalar_reduce(
            dst=r, data=r, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=total
        )
        return total

    out, _ = run(body, x)
    np.testing.assert_allclose(out[:, 0], (2.0 / np.cumsum(x, axis=1)).sum(1), rtol=1e-5)


def test_dma_copy_casts_and_dma_transpose():
    x = RNG.standard_normal((64, 128), dtype=np.float32)

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_transpose(dst=t, src=a)
        out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)  # fp32 -> bf16 through the DMA
        return out

    out = nki.simulate(k)(x)
    assert out.dtype.name == "bfloat16"
    np.testing.assert_allclose(out.astype(np.float32), x.T, rtol=2**-8)


def test_every_ir_instruction_has_its_nisa_call():
    calls = {
        Opcode.NC_MATMUL: "nc_matmul",
        Opcode.NC_TRANSPOSE: "nc_transpose",
        Opcode.ACTIVATION: "activation",
        Opcode.TENSOR_TENSOR: "tensor_tensor",
        Opcode.TENSOR_SCALAR: "tensor_scalar",
        Opcode.SCALAR_TENSOR_TENSOR: "scalar_tensor_tensor",
        Opcode.TENSOR_REDUCE: "tensor_reduce",
        Opcode.TENSOR_COPY: "tensor_copy",
        Opcode.TENSOR_TENSOR_SCAN: "tensor_tensor_scan",
        Opcode.MEMSET: "memset",
        Opcode.TENSOR_COPY_PREDICATED: "tensor_copy_predicated",
        Opcode.SELECT: "select_reduce",
        Opcode.BN_STATS: "bn_stats",
        Opcode.BN_AGGR: "bn_aggr",
        Opcode.MAX8: "max8",
        Opcode.NC_FIND_INDEX8: "nc_find_index8",
        Opcode.RNG: "rng",
        Opcode.DROPOUT: "dropout",
        Opcode.IOTA: "iota",
        Opcode.AFFINE_SELECT: "affine_select",
        Opcode.TENSOR_PARTITION_REDUCE: "tensor_partition_reduce",
        Opcode.DMA_COPY: "dma_copy",
        Opcode.DMA_TRANSPOSE: "dma_transpose",
        Opcode.DMA_COPY_INDIRECT: "dma_copy",  # with an indirect .ap() view (tests/nki/test_indirect.py)
        Opcode.NC_MATMUL_MX: "nc_matmul_mx",
        Opcode.QUANTIZE_MX: "quantize_mx",
        Opcode.NC_STREAM_SHUFFLE: "nc_stream_shuffle",
        Opcode.NC_MATCH_REPLACE8: "nc_match_replace8",
        Opcode.RANGE_SELECT: "range_select",
        Opcode.NC_N_GATHER: "nc_n_gather",
        Opcode.NONZERO_WITH_COUNT: "nonzero_with_count",
        Opcode.LOCAL_GATHER: "local_gather",
        Opcode.TOPK: "topk",
        Opcode.SEQUENCE_BOUNDS: "sequence_bounds",
        Opcode.RAND2: "rand2",
        Opcode.TENSOR_SCALAR_CUMULATIVE: "tensor_scalar_cumulative",
        Opcode.EXPONENTIAL: "exponential",
        Opcode.DMA_COMPUTE: "dma_compute",
        Opcode.REGISTER_MOVE: "register_move",
        Opcode.REGISTER_LOAD: "register_load",
        Opcode.REGISTER_STORE: "register_store",
    }
    # loops on registers (tests/nki/test_registers.py): nl.dynamic_range / fori_loop / while_loop,
    # `while reg:`; core_barrier / sendrecv inside them (tests/nki/test_spmd.py)
    loops = {Opcode.BRANCH, Opcode.CORE_BARRIER}
    assert set(calls) | loops == set(Opcode)
    for name in calls.values():
        params = list(__import__("inspect").signature(getattr(nisa, name)).parameters)
        assert params[0] == ("val_dst" if name == "topk" else "dst"), name  # the stubs' names


def test_activation_reduce_registers_accumulate_across_instructions():
    """reset_reduce then reduce: the ScalarE registers keep a running row sum (online softmax)."""
    x = RNG.standard_normal((128, 1536), dtype=np.float32)

    @nki.jit
    def running_sum(a):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        e, total = sbuf((128, 512)), sbuf((128, 1))
        for j in nl.sequential_range(3):
            cmd = nisa.reduce_cmd.reset_reduce if j == 0 else nisa.reduce_cmd.reduce
            nisa.activation(
                dst=e,
                op=nl.exp,
                data=nl.load(a[:, j * 512 : (j + 1) * 512]),
                reduce_op=nl.add,
                reduce_res=total if j == 2 else None,
                reduce_cmd=cmd,
            )
        nl.store(out, total)
        return out

    out = nki.simulate(running_sum)(x)
    np.testing.assert_allclose(out[:, 0], np.exp(x).sum(1), rtol=1e-5)
    engines = {i.engine for i in running_sum.specialize((x,)).instances[0].programs[0].instructions}
    assert engines == {Engine.SCALAR, Engine.DMA}  # the accumulation stays on ScalarE


def test_dma_trigger_engine_must_fit_the_descriptor_mode():
    """S18: only the Scalar and Sync engines trigger hardware-DGE DMAs (GpSimd runs software DGE)."""
    from neuronsim.errors import ConstraintError

    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x, dge_mode=nisa.dge_mode.hwdge, engine=nisa.engine.gpsimd)
        return x

    with pytest.raises(ConstraintError, match="engine=gpsimd cannot trigger a hwdge DMA"):
        nki.simulate(k)(np.zeros((128, 64), np.float32))
