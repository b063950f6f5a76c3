"""ScalarE: ``activation`` / ``activation_reduce`` (with the reduce registers emulated)."""

from __future__ import annotations

from neuronsim.errors import UnsupportedError
from neuronsim.nki.isa.common import (
    _describe,
    _fail,
    _is_tile,
    _same_shape,
    _scalar_or_vector,
    _scratch_tile,
    _tile,
    act_func,
    alu_op,
    emit,
)
from neuronsim.nki.isa.enums import (
    _RC,
    engine,
    reduce_cmd,
)
from neuronsim.nki.isa.vector import memset, tensor_copy, tensor_scalar
from neuronsim.nki.tensor import TensorView
from neuronsim.nki.trace import current_trace
from neuronsim.sim.dtypes import DType
from neuronsim.sim.ir import ActFunc, AluOp, Engine, Opcode


def activation(
    dst,
    op,
    data,
    bias=None,
    scale=1.0,
    reduce_op=None,
    reduce_res=None,
    reduce_cmd=reduce_cmd.idle,
    name=None,
):
    """``dst = op(data * scale + bias)`` on ScalarE, optionally summing the result into ``reduce_res``."""
    fn = "activation"
    dst, data = _tile(dst, "dst", fn), _tile(data, "data", fn)
    func = act_func(op)
    _same_shape(fn, dst, data, "dst", "data")
    bias_imm, bias_tile = _scalar_or_vector(fn, bias, data, "bias")
    if _is_tile(scale):
        scale_imm, scale_tile = _scalar_or_vector(fn, scale, data, "scale")
        scale_imm = 1.0
    else:
        scale_imm, scale_tile = float(scale), None
    srcs, roles = [data], ["data"]
    if bias_tile is not None:
        srcs.append(bias_tile)
        roles.append("bias")
    if scale_tile is not None:
        srcs.append(scale_tile)
        roles.append("scale")
    cmd = _reduce_cmd(reduce_cmd)
    if reduce_res is not None:
        reduce_res = _tile(reduce_res, "reduce_res", fn)
        if reduce_res.partitions != data.partitions or reduce_res.free_size != 1:
            raise _fail(fn, f"reduce_res must be a [{data.partitions}, 1] tile; got {_describe(reduce_res)}")
        if cmd is _RC.idle:  # a result asked for with no command: the row sum (as activation_reduce)
            cmd = _RC.reset_reduce
    if reduce_op is not None and alu_op(reduce_op, "reduce_op") is not AluOp.add:
        raise _fail(fn, f"reduce_op={reduce_op} is not supported; ScalarE reduces with nl.add")
    if cmd is _RC.load_reduce:
        raise _fail(fn, "reduce_cmd=load_reduce is not a ScalarE activation command", UnsupportedError)
    trace = current_trace()
    # The 128 reduce registers are emulated: `reset_reduce` writes the row sum through the
    # instruction's second result; `reduce` writes it to a scratch tile and adds the running value
    # with one more ScalarE instruction (the register read-out costs an instruction on hardware too).
    dst2 = None
    if cmd in (_RC.reset_reduce, _RC.reduce):
        fresh = cmd is _RC.reset_reduce or trace.scalar_regs is None
        direct = fresh and reduce_res is not None and reduce_res.buf.dtype is DType.float32
        dst2 = reduce_res if direct else _scalar_regs_tile(data.partitions)
    imm = {
        "func": func,
        "scale": scale_imm,
        "bias": bias_imm,
        "bias_is_tile": bias_tile is not None,
        "scale_is_tile": scale_tile is not None,
        "reduce": dst2 is not None,
    }
    emit(fn, Opcode.ACTIVATION, Engine.SCALAR, dst, srcs, imm, name=name, dst2=dst2, roles=roles)
    if cmd is _RC.reset:
        trace.scalar_regs = None
    elif dst2 is not None:
        if cmd is _RC.reduce and trace.scalar_regs is not None:
            total = reduce_res if reduce_res is not None and reduce_res.buf.dtype is DType.float32 else dst2
            _scalar_add(total, dst2, trace.scalar_regs, name)
            dst2 = total
        trace.scalar_regs = dst2
    if reduce_res is not None and dst2 is not reduce_res:
        if trace.scalar_regs is None:
            memset(reduce_res, 0.0)
        else:
            tensor_copy(reduce_res, trace.scalar_regs, engine=engine.scalar)


def _reduce_cmd(value):
    if isinstance(value, str):
        return reduce_cmd(value)
    return _RC.idle if value is None else value


def _scalar_regs_tile(partitions: int) -> TensorView:
    return _scratch_tile((partitions, 1), DType.float32, "activation.reduce_regs")


def _scalar_add(dst: TensorView, part: TensorView, running: TensorView, name) -> None:
    """``dst = part + running`` on ScalarE (an identity activation with a bias tile)."""
    imm = {
        "func": ActFunc.copy,
        "scale": 1.0,
        "bias": 0.0,
        "bias_is_tile": True,
        "scale_is_tile": False,
        "reduce": False,
    }
    emit(
        "activation",
        Opcode.ACTIVATION,
        Engine.SCALAR,
        dst,
        (part, running),
        imm,
        name=name,
        roles=("data", "bias"),
    )


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    """``activation`` with ``reduce_cmd=reset_reduce``: the result and its sum along the free dims."""
    activation(
        dst,
        op,
        data,
        bias=bias,
        scale=scale,
        reduce_op=reduce_op,
        reduce_res=reduce_res,
        reduce_cmd=reduce_cmd.reset_reduce,
        name=name,
    )


# S16's six tensor-scalar stages of activate2: (op0, op1) -> how data * scale + bias expresses them
_ACTIVATE2_STAGES = {
    (AluOp.multiply, AluOp.add), (AluOp.multiply, AluOp.subtract), (AluOp.multiply, AluOp.bypass),
    (AluOp.add, AluOp.bypass), (AluOp.subtract, AluOp.bypass), (AluOp.bypass, AluOp.bypass),
}


def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
              reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle, name=None):
    """``dst = op((data op0 imm0) op1 imm1)`` on ScalarE (NeuronCore-v4 on, S16), with the optional
    reduction of ``activation``. Each of the six documented stages is exactly ScalarE's
    ``data * scale + bias`` (x - y is x + (-y) in IEEE arithmetic, and -(x * y) is x * (-y)), so it
    records one ACTIVATION; an ``imm`` tile that must be negated is negated first (VectorE, exact).
    ``relu_param`` feeds parameterized functions, which the simulator's function set does not have."""
    fn = "activate2"
    if current_trace().chip.nki_target != "gen4":
        raise _fail(fn, f"activate2 exists on NeuronCore-v4 (trn3) and newer; this trace is for "
                    f"{current_trace().chip.name}")
    data = _tile(data, "data", fn)
    o0, o1 = alu_op(op0, "op0"), alu_op(op1, "op1")
    if (o0, o1) not in _ACTIVATE2_STAGES:
        raise _fail(fn, f"(op0, op1) = ({o0.name}, {o1.name}) is not one of the six tensor-scalar stages "
                    f"(multiply/add, multiply/subtract, multiply/bypass, add/bypass, subtract/bypass, "
                    f"bypass/bypass)")
    if reverse0 and o0 is AluOp.bypass or reverse1 and o1 is AluOp.bypass:
        raise _fail(fn, "reverse0 requires op0 and reverse1 requires op1 to be set (not bypass)")
    if _is_tile(imm0) and _is_tile(imm1) and _tile(imm0, "imm0", fn).dtype != _tile(imm1, "imm1", fn).dtype:
        raise _fail(fn, "imm0 and imm1 tiles must have the same dtype")
    if reduce_op is not None and alu_op(reduce_op, "reduce_op") is not AluOp.add:
        raise _fail(fn, f"reduce_op={reduce_op}: only nl.add's reduction (ScalarE's row sum) is simulated",
                    UnsupportedError)
    scale, bias = 1.0, None
    if o0 is AluOp.multiply:
        scale = imm0
        if o1 is not AluOp.bypass:
            bias = imm1 if o1 is AluOp.add or reverse1 else _negated(imm1, data, fn)
            if o1 is AluOp.subtract and reverse1:  # imm1 - data * imm0
                scale = _negated(imm0, data, fn)
    elif o0 is AluOp.add:
        bias = imm0
    elif o0 is AluOp.subtract:
        bias = imm0 if reverse0 else _negated(imm0, data, fn)
        scale = -1.0 if reverse0 else 1.0
    activation(dst, op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
               reduce_cmd=reduce_cmd, name=name)


def _negated(x, data, fn: str):
    """``-x``: a float, or a [P, 1] tile negated into an fp32 scratch tile on VectorE (exact)."""
    if not _is_tile(x):
        return -float(x)
    _, tile = _scalar_or_vector(fn, x, data, "imm")
    out = _scratch_tile((tile.partitions, 1), DType.float32, "activate2.negated")
    tensor_scalar(out, tile, AluOp.multiply, -1.0)
    return out
