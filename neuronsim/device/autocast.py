"""``torch.autocast(device_type="neuron")``: CUDA's autocast op lists, as TorchNeuron follows them.

Autocast runs as the ``AutocastPrivateUse1`` dispatch key, before autograd and before
CompositeImplicit ops decompose, so the policy is registered on the user-facing ops (``linear``,
``matmul``, ``softmax.int``) as well as the ATen ops they reach. Each policy kernel casts the
eligible arguments (floating-point neuron tensors other than float64) and calls the op again with
the autocast key excluded. Every other op falls through (torch 2.13 registers no fallthrough for
this key, so without one every op would fail inside an autocast region).

The lists are ATen's ``AT_FORALL_*`` lists (aten/src/ATen/autocast_mode.h), which CUDA uses:

- lower precision: the autocast dtype (``torch.get_autocast_dtype("neuron")``);
- fp32: float32;
- fp32 with an optional dtype (``softmax``, ``sum``, ...): ``dtype=torch.float32`` is passed
  when the caller gave none and the first argument is eligible;
- promote: all eligible arguments cast to the widest floating type among them.

CUDA caches the casts of fp32 leaf weights within a region; here each call casts again (same
values, more simulated copies: the device clock charges them).
"""

from __future__ import annotations

import torch
from torch._C import DispatchKey, DispatchKeySet

KEY = "AutocastPrivateUse1"
_EXCLUDE = DispatchKeySet(DispatchKey.AutocastPrivateUse1)

LOWER_PRECISION = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu",
    "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
    "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
    "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus",
    "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm",
    "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss",
    "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist",
    "cdist", "renorm", "logsumexp", "upsample_nearest1d", "_upsample_nearest_exact1d",
    "upsample_nearest2d", "_upsample_nearest_exact2d", "upsample_nearest3d",
    "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
)
FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList",
)
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
    "tensordot", "scatter_add",
)
BANNED = {
    "binary_cross_entropy": (
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast. "
        "Combine the sigmoid with the loss: torch.nn.functional.binary_cross_entropy_with_logits "
        "or torch.nn.BCEWithLogitsLoss are safe to autocast."
    ),
}


def _eligible(x) -> bool:
    return (isinstance(x, torch.Tensor) and x.device.type == "neuron" and x.is_floating_point()
            and x.dtype is not torch.float64)


def _cast(x, dtype: torch.dtype):
    if _eligible(x):
        return x.to(dtype)
    if isinstance(x, list | tuple) and any(_eligible(t) for t in x):
        return type(x)(_cast(t, dtype) for t in x)
    return x


def _flat(args):
    for a in args:
        if isinstance(a, list | tuple):
            yield from a
        else:
            yield a


def _call(op, args, kwargs):
    with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
        return op(*args, **kwargs)


def _cast_all(op, dtype_of):
    def kernel(*args, **kwargs):
        dtype = dtype_of(args, kwargs)
        return _call(op, [_cast(a, dtype) for a in args], {k: _cast(v, dtype) for k, v in kwargs.items()})

    return kernel


def _lower(args, kwargs) -> torch.dtype:
    return torch.get_autocast_dtype("neuron")


def _fp32(args, kwargs) -> torch.dtype:
    return torch.float32


def _widest(args, kwargs) -> torch.dtype:
    dtype = torch.get_autocast_dtype("neuron")
    for t in _flat((*args, *kwargs.values())):
        if _eligible(t):
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _set_opt_dtype(op):
    position = next(i for i, a in enumerate(op._schema.arguments) if a.name == "dtype")

    def kernel(*args, **kwargs):
        given = args[position] if position < len(args) else kwargs.get("dtype")
        if given is None and args and _eligible(args[0]):
            if position < len(args):
                args = (*args[:position], torch.float32, *args[position + 1 :])
            else:
                kwargs = {**kwargs, "dtype": torch.float32}
        return _call(op, args, kwargs)

    return kernel


def _banned(message: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(message)

    return kernel


def _overload(name: str):
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def policies():
    """(op, kernel) for every op with an autocast policy that exists in this torch."""
    groups = (
        (LOWER_PRECISION, lambda op: _cast_all(op, _lower)),
        (FP32, lambda op: _cast_all(op, _fp32)),
        (FP32_SET_OPT_DTYPE, _set_opt_dtype),
        (PROMOTE, lambda op: _cast_all(op, _widest)),
    )
    for names, make in groups:
        for name in names:
            op = _overload(name)
            if op is not None:
                yield op, make(op)
    for name, message in BANNED.items():
        yield _overload(name), _banned(message)


def install(lib: torch.library.Library, fallbacks: torch.library.Library) -> None:
    fallbacks.fallback(torch.library.fallthrough_kernel, KEY)
    for op, kernel in policies():
        lib.impl(op, kernel, KEY)
