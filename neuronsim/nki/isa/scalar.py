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
from neuronsim.nki.isa.vector import memset, tensor_copy
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
