"""Fused optimizer steps (``_fused_adam_`` / ``_fused_adamw_``): ``torch.optim.Adam(fused=True)``.

One Program per call updates every parameter of the lists, like ATen's multi-tensor kernel: each
list position's param, grad and states are streamed together in tiles — loaded by DMA, updated in
fp32, stored back — so each element is read and written once per step. ATen-CPU walks each
tensor's memory, not its indices, and so does the kernel (flat tiles over one dense layout shared
by the tensors at a position, as autograd and ``zeros_like`` give them).

The step counts are device tensors, incremented on the device just before the call: the bias
corrections are computed on the chip (a host read would synchronize; a value in the signature would
trace a Program per step). Each step is loaded into one partition, TensorE broadcasts them to every
partition, and ``1 - beta^step`` is taken as ``-expm1(step ln beta) = -2t / (1 - t)``, ``t =
tanh(step ln(beta) / 2)`` on ScalarE: a few ulps at any step, where ``1 - exp(...)`` would lose
``log2(1 / (1 - beta2))`` (~10) bits at step 1. ``lr`` is a runtime scalar (schedulers change it
every step); the betas, eps and weight decay are in the signature (constant in practice), so their
derived coefficients (``1 - beta2``, ``ln beta``) come from float64 as in ATen — an fp32 runtime
``beta2`` would put ``1 - beta2`` 1.3e-5 off.

Per element, in ATen-CPU's order (``FusedAdamKernel.cpp``; 16-bit params compute in fp32 and round
each stored tensor once): ``g = ±grad (+ wd * param)``, AdamW's ``param *= 1 - lr * wd``,
``m = lerp(m, g, 1 - beta1)``, ``v = beta2 * v + ((1 - beta2) * g) * g``, amsgrad's
``vmax = max(vmax, v)``, ``param += (-step_size * m) / (sqrt(v) / sqrt(bc2) + eps)``. VectorE (the
lerp, ``v``, the denominator), GpSimd (the other two-input ops) and ScalarE (products by a scalar,
the square root) share the arithmetic; the DMAs round 16-bit states on the store. Large fp32 steps
are DMA-bound, bf16 ones VectorE-bound. The next tile's loads are issued before this tile's stores.
Small tensors (up to 16 Ki elements), whose transfers cost the DMA's fixed cost, are ``[<= 32, F]``
tiles at partitions 0, 32, 64, 96 in turn, so their transfers use different DMA engines.

Other layouts, ``grad_scale`` / ``found_inf`` (AMP) and a device ``lr`` tensor fall back to the host.
"""

from __future__ import annotations

import math

import torch

import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.kernels.bridge import FLOAT_DTYPES
from neuronsim.kernels.foreach import broadcast_scalars, lerp
from neuronsim.kernels.registry import IN, RUNTIME, Call, Launch, native
from neuronsim.kernels.tiling import PARTITIONS, Tile, elementwise_tiles
from neuronsim.sim.ir import ActFunc, AluOp

A = AluOp
F32 = nl.float32
ENG = nisa.engine
SMALL_PARTITIONS = 32  # a small tensor's tile: the compute engines' partition quantum below 33
SMALL_SLOTS = PARTITIONS // SMALL_PARTITIONS
SMALL_ELEMENTS = SMALL_PARTITIONS * 512  # 2 KiB of fp32 a partition: the DMA fixed cost still dominates


def _f32(shape):
    return nl.ndarray(shape, dtype=F32, buffer=nl.sbuf)


# ---------------------------------------------------------------- per-parameter scalars


def step_column(i: int) -> int:
    """The column of parameter ``i``'s scalars: step ``i`` is loaded into partition
    ``(i % 16) * 8 + (i // 16) % 8`` of its block of 128, so consecutive steps land on different DMA
    engines (8 partitions each) and their tiny transfers run side by side."""
    j = i % PARTITIONS
    return i - j + (j % 16) * 8 + j // 16


def _load_steps(steps):
    """``[128, 128 * blocks]`` fp32: column ``step_column(i)`` is ``state_steps[i]`` on every
    partition. Each step is one 4-byte transfer into one partition; TensorE then broadcasts a block
    (``ones.T @ diag(steps)``, exact: one nonzero product per sum) instead of a 128-partition
    transfer per step occupying every DMA engine."""
    blocks = -(-len(steps) // PARTITIONS)
    out = _f32((PARTITIONS, PARTITIONS * blocks))
    eye = nl.shared_identity_matrix(PARTITIONS, dtype=F32)
    ones = nl.ones((PARTITIONS, PARTITIONS), dtype=F32, buffer=nl.sbuf)
    for b in range(blocks):
        column = _f32((PARTITIONS, 1))
        nisa.memset(dst=column, value=1.0)  # unused columns: a harmless step 1
        for i in range(b * PARTITIONS, min(len(steps), (b + 1) * PARTITIONS)):
            q = step_column(i) - b * PARTITIONS
            s = steps[i]
            nisa.dma_copy(dst=column[q:q + 1, :], src=s.ap([[1, 1], [1, 1]], offset=s.offset))
        diag = _f32((PARTITIONS, PARTITIONS))
        nisa.tensor_scalar(dst=diag, data=eye, op0=A.multiply, operand0=column)
        wide = nl.ndarray((PARTITIONS, PARTITIONS), dtype=F32, buffer=nl.psum)
        nisa.nc_matmul(dst=wide, stationary=ones, moving=diag)
        nisa.tensor_copy(dst=out[:, b * PARTITIONS:(b + 1) * PARTITIONS], src=wide, engine=ENG.scalar)
    return out


def _bias_correction(steps, beta: float):
    """``1 - beta ** steps`` = ``-2t / (1 - t)``, ``t = tanh(steps * ln(beta) / 2)`` (no cancellation)."""
    out = _f32(steps.shape)
    if beta == 0.0:  # 0 ** step = 0 for every step >= 1
        nisa.memset(dst=out, value=1.0)
        return out
    t = _f32(steps.shape)
    nisa.activation(dst=t, op=ActFunc.tanh, data=steps, scale=math.log(beta) / 2)
    one_minus_t = _f32(steps.shape)
    nisa.tensor_scalar(dst=one_minus_t, data=t, op0=A.subtract, operand0=1.0, reverse0=True)
    nisa.scalar_tensor_tensor(dst=out, data=t, op0=A.multiply, operand0=-2.0, op1=A.divide,
                              operand1=one_minus_t)
    return out


def _step_scalars(steps, rt, beta1, beta2, weight_decay, adamw):
    """(``-lr / bc1``, ``sqrt(bc2)``: like ``steps``; AdamW's ``1 - lr * wd``: ``[128, 1]`` or None)."""
    lr = broadcast_scalars(rt, 1)
    bc1 = _bias_correction(steps, beta1)
    neg_step = _f32(steps.shape)
    nisa.tensor_scalar(dst=neg_step, data=bc1, op0=A.divide, operand0=lr, reverse0=True,
                       op1=A.multiply, operand1=-1.0)
    bc2_sqrt = _bias_correction(steps, beta2)
    nisa.activation(dst=bc2_sqrt, op=ActFunc.sqrt, data=bc2_sqrt)
    decay = None
    if adamw and weight_decay != 0.0:
        decay = _f32((PARTITIONS, 1))
        nisa.tensor_scalar(dst=decay, data=lr, op0=A.multiply, operand0=weight_decay,
                           op1=A.subtract, operand1=1.0, reverse1=True)
    return neg_step, bc2_sqrt, decay


# ---------------------------------------------------------------- the kernel


def adam_kernel(*views, n, amsgrad, maximize, adamw, beta1, beta2, weight_decay, eps):
    """Views: params, grads, exp_avgs, exp_avg_sqs, (max_exp_avg_sqs,) state_steps (``n`` each),
    then the runtime scalars ``[lr]``."""
    lists = 5 if amsgrad else 4
    groups = [views[k * n:(k + 1) * n] for k in range(lists + 1)]
    steps = _load_steps(groups[-1])
    neg_step, bc2_sqrt, decay = _step_scalars(steps, views[-1], beta1, beta2, weight_decay, adamw)
    coefs = {"beta1": beta1, "beta2": beta2, "weight_decay": weight_decay, "eps": eps,
             "maximize": maximize, "adamw": adamw}
    work = []  # (list position, its flat views, a tile, the tile's first partition)
    slot = 0
    for i in range(n):
        # one layout, dense (the planner checks): walked as flat memory, as ATen-CPU walks it
        size = math.prod(groups[0][i].shape)
        tensors = [g[i].ap([[1, size]], offset=g[i].offset) for g in groups[:lists]]
        if size <= SMALL_ELEMENTS:
            base, slot = SMALL_PARTITIONS * (slot % SMALL_SLOTS), slot + 1
            work += [(i, tensors, tile, base) for tile in _small_tiles(size, len(tensors))]
        else:
            work += [(i, tensors, tile, 0) for tile in elementwise_tiles(tensors)]
    # Software pipelining: the next tile's loads are queued before this tile's stores, so the
    # DMA queues never wait behind a store that waits for compute.
    ahead = _load(*work[0][1:])
    for k in nl.affine_range(len(work)):
        loaded, ahead = ahead, (_load(*work[k + 1][1:]) if k + 1 < len(work) else None)
        i, tensors, tile, base = work[k]
        rows, c = slice(base, base + tile.partitions), step_column(i)
        cols = (neg_step[rows, c:c + 1], bc2_sqrt[rows, c:c + 1], None if decay is None else decay[rows])
        _update_tile(tile, tensors, loaded, cols, base, **coefs)


def _small_tiles(size: int, views: int) -> list[Tile]:
    """A small tensor as ``[<= 32, F]`` plus a one-row tail: a transfer of it uses 4 DMA engines
    (8 partitions each), so four small tensors at partitions 0, 32, 64, 96 move side by side; a
    ``[128, F]`` tile of it would take all 16 engines for their fixed cost."""
    rows = min(SMALL_PARTITIONS, size)
    free = size // rows
    tiles = [Tile(rows, free, ((0, ((free, rows), (1, free))),) * views)]
    if size - rows * free:
        tail = size - rows * free
        tiles.append(Tile(1, tail, ((rows * free, ((tail, 1), (1, tail))),) * views))
    return tiles


def _columns(count, tile, buf):
    """``count`` tiles of ``tile``'s shape side by side in ``buf``. One allocation per loop
    iteration (per site) is what makes the allocator's buffer rotation span iterations."""
    return [buf[:, k * tile.free:(k + 1) * tile.free] for k in range(count)]


def _load(tensors, tile, base):
    """Partitions ``[base, base + tile.partitions)``: the compute engines read a tile where it is."""
    buf = nl.ndarray((base + tile.partitions, len(tensors) * tile.free), dtype=tensors[0].dtype,
                     buffer=nl.sbuf)[base:]
    out = _columns(len(tensors), tile, buf)
    for k, (t, v) in enumerate(zip(out, tensors, strict=True)):
        nisa.dma_copy(dst=t, src=tile.of(k, v))
    return out


def _update_tile(tile, tensors, loaded, cols, base, beta1, beta2, weight_decay, eps, maximize, adamw):
    """One tile of every tensor at a list position. Each product and quotient is ATen's, in ATen's
    order; the split across engines only decides which engine rounds it (all compute fp32)."""
    extra = [weight_decay != 0.0 and not adamw, cols[2] is not None, len(loaded) == 5]
    scratch = nl.ndarray((base + tile.partitions, (4 + sum(extra)) * tile.free), dtype=F32,
                         buffer=nl.sbuf)[base:]
    fp32 = iter(_columns(4 + sum(extra), tile, scratch)).__next__

    param, grad, exp_avg, exp_avg_sq = loaded[:4]
    neg_step, bc2_sqrt, decay = cols

    g = grad
    if maximize:  # -grad is exact in any dtype: in place
        nisa.activation(dst=grad, op=ActFunc.copy, data=grad, scale=-1.0)
    if weight_decay != 0.0 and not adamw:  # g = g + param * wd
        g = fp32()
        nisa.activation(dst=g, op=ActFunc.copy, data=param, scale=weight_decay)
        nisa.tensor_tensor(dst=g, data1=g, data2=grad, op=A.add, engine=ENG.gpsimd)
    param_in = param
    if decay is not None:  # AdamW: param * (1 - lr * wd), kept in fp32
        param_in = fp32()
        nisa.activation(dst=param_in, op=ActFunc.copy, data=param, scale=decay)

    m = fp32()
    lerp(m, exp_avg, g, None, 1.0 - beta1, diff=m)  # ATen: exp_avg.lerp_(grad, 1 - beta1)
    v = fp32()  # ((1 - beta2) * g) * g, then v * beta2 + that
    nisa.activation(dst=v, op=ActFunc.copy, data=g, scale=1.0 - beta2)
    nisa.tensor_tensor(dst=v, data1=v, data2=g, op=A.multiply, engine=ENG.gpsimd)
    nisa.scalar_tensor_tensor(dst=v, data=exp_avg_sq, op0=A.multiply, operand0=beta2, op1=A.add, operand1=v)
    stored = [(m, 2), (v, 3)]
    peak = v
    if len(loaded) == 5:  # amsgrad
        peak = fp32()
        nisa.tensor_tensor(dst=peak, data1=loaded[4], data2=v, op=A.maximum, engine=ENG.gpsimd)
        stored.append((peak, 4))

    denom = fp32()  # sqrt(v) / sqrt(bc2) + eps
    nisa.activation(dst=denom, op=ActFunc.sqrt, data=peak)
    nisa.tensor_scalar(dst=denom, data=denom, op0=A.divide, operand0=bc2_sqrt, op1=A.add, operand1=eps)
    update = fp32()  # (-step_size * m) / denom
    nisa.activation(dst=update, op=ActFunc.copy, data=m, scale=neg_step)
    nisa.tensor_tensor(dst=update, data1=update, data2=denom, op=A.divide, engine=ENG.gpsimd)
    nisa.tensor_tensor(dst=param, data1=param_in, data2=update, op=A.add, engine=ENG.gpsimd)
    nisa.dma_copy(dst=tile.of(0, tensors[0]), src=param)
    for t, k in stored:  # 16-bit states round on the DMA's cast (measured: cheaper than ScalarE casts)
        nisa.dma_copy(dst=tile.of(k, tensors[k]), src=t)


# ---------------------------------------------------------------- planner


def _finite(*xs) -> bool:
    return all(isinstance(x, float | int) and not isinstance(x, bool) and math.isfinite(x) for x in xs)


def _dense(t) -> bool:
    """Its elements fill its span once (a permuted contiguous layout): its memory is its elements."""
    expected = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride(), strict=True) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def host_lr(op, args, kwargs):
    """The ``tensor_lr`` overloads with a host ``lr`` tensor (what ``Adam(lr=torch.tensor(...))``
    passes on this device): the float overload's Programs on ``lr.item()``, as ATen reads it (lr is
    a runtime value either way, and these overloads have no meta kernel to plan with). A device
    ``lr`` tensor falls back: reading it for every call would synchronize."""
    lr = kwargs.get("lr")
    if not (isinstance(lr, torch.Tensor) and lr.is_cpu and lr.numel() == 1):
        return None
    return op.overloadpacket.default, args, {**kwargs, "lr": lr.item()}


@native("aten::_fused_adam_.tensor_lr", "aten::_fused_adamw_.tensor_lr", runtime=("lr",), redirect=host_lr)
@native("aten::_fused_adam_.default", "aten::_fused_adamw_.default", runtime=("lr",))
def plan_fused_adam(call: Call) -> Launch | None:
    kw = call.kwargs
    amsgrad, maximize = bool(kw.get("amsgrad")), bool(kw.get("maximize"))
    beta1, beta2 = kw.get("beta1"), kw.get("beta2")
    weight_decay, eps = kw.get("weight_decay"), kw.get("eps")
    if kw.get("grad_scale") is not None or kw.get("found_inf") is not None:
        return None  # AMP's unscale-and-skip: on the host
    if not (_finite(beta1, beta2, weight_decay, eps) and 0 <= beta1 < 1 and 0 <= beta2 < 1):
        return None
    lists = [call.inputs_of(k) for k in range(5 if amsgrad else 4)]
    steps = call.inputs_of(5)
    n = len(lists[0])
    # ATen's own checks (the host raises its error): n of each, max_exp_avg_sqs only with amsgrad
    if any(len(lst) != n for lst in (*lists, steps)) or len(call.inputs_of(4)) != (n if amsgrad else 0):
        return None
    for i in range(n):
        group = [lst[i] for lst in lists]
        if group[0].dtype not in FLOAT_DTYPES or len({(t.dtype, t.shape, t.stride()) for t in group}) != 1:
            return None  # ATen-CPU pairs the elements in memory order: only one layout means one pairing
        if not _dense(group[0]):
            return None
        if steps[i].dtype != torch.float32 or steps[i].numel() != 1:
            return None
    # params, grads, exp_avgs, exp_avg_sqs, (max_exp_avg_sqs,) state_steps: argument positions
    picked = (*range(len(lists)), 5)
    operands = [IN(k) for pos in picked for k, p in enumerate(call.input_args) if p == pos]
    statics = {"n": n, "amsgrad": amsgrad, "maximize": maximize, "adamw": "adamw" in call.op.name(),
               "beta1": float(beta1), "beta2": float(beta2), "weight_decay": float(weight_decay),
               "eps": float(eps)}
    # disjoint_writes: no two written tensors may share memory (the key pairs params with the rest only)
    return Launch(adam_kernel, (*operands, RUNTIME), statics, disjoint_writes=True)
