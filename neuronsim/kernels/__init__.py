"""ATen ops as NKI kernels: the device's native ops (one module per op family).

A family module registers a *planner* per ATen op with :func:`neuronsim.kernels.registry.native`.
On the first call of a signature (op, shapes, strides, dtypes, scalar args) the planner decides
whether its kernel covers it and how; the device's native-op runtime (``neuronsim/device/native``)
traces the kernel into a Program (``launch.py``), schedules it and caches it with everything a
later call needs. Later calls run the cached Program on the device tensors in place (they are the
simulated HBM) and charge its schedule to the device clock.

:data:`FAMILIES` names each family's ops, so the device can register them without importing the
families (which load NKI, the simulator and Numba). ``tests/kernels/test_registry.py`` checks that
the manifest and the modules agree.
"""

from __future__ import annotations

from neuronsim.kernels.registry import op_overload

__all__ = ["FAMILIES", "op_overload"]

# family module -> the ATen ops it registers
FAMILIES: dict[str, tuple[str, ...]] = {
    "neuronsim.kernels.attention": (
        "aten::_fused_sdp_choice.default", "aten::_scaled_dot_product_fused_attention_overrideable.default",
        "aten::_scaled_dot_product_fused_attention_overrideable_backward.default",
    ),
    "neuronsim.kernels.dropout": ("aten::native_dropout.default", "aten::native_dropout_backward.default"),
    "neuronsim.kernels.elementwise": (
        "aten::clamp.Tensor", "aten::clamp.default", "aten::clamp_.Tensor", "aten::clamp_.default",
        "aten::clamp_max.Tensor", "aten::clamp_max.default", "aten::clamp_max_.Tensor",
        "aten::clamp_max_.default", "aten::clamp_min.Tensor", "aten::clamp_min.default",
        "aten::clamp_min_.Tensor", "aten::clamp_min_.default", "aten::cos.default",
        "aten::cos_.default", "aten::elu.default", "aten::elu_.default", "aten::erf.default",
        "aten::erf_.default", "aten::exp.default", "aten::exp2.default", "aten::exp2_.default",
        "aten::exp_.default", "aten::gelu.default", "aten::gelu_.default",
        "aten::gelu_backward.default", "aten::hardsigmoid.default", "aten::hardsigmoid_.default",
        "aten::hardswish.default", "aten::hardswish_.default", "aten::hardtanh.default",
        "aten::hardtanh_.default", "aten::leaky_relu.default", "aten::leaky_relu_.default",
        "aten::log.default", "aten::log10.default", "aten::log10_.default", "aten::log2.default",
        "aten::log2_.default", "aten::log_.default", "aten::mish.default", "aten::mish_.default",
        "aten::reciprocal.default", "aten::reciprocal_.default", "aten::relu.default",
        "aten::relu_.default", "aten::rsqrt.default", "aten::rsqrt_.default", "aten::sgn.default",
        "aten::sgn_.default", "aten::sigmoid.default", "aten::sigmoid_.default",
        "aten::sigmoid_backward.default", "aten::sign.default", "aten::sign_.default",
        "aten::silu.default", "aten::silu_.default", "aten::silu_backward.default", "aten::sin.default",
        "aten::sin_.default", "aten::softplus.default", "aten::sqrt.default", "aten::sqrt_.default",
        "aten::tanh.default", "aten::tanh_.default", "aten::tanh_backward.default",
        "aten::threshold.default", "aten::threshold_.default", "aten::threshold_backward.default",
    ),
    "neuronsim.kernels.factory": ("aten::arange.start_out",),
    "neuronsim.kernels.foreach": (
        "aten::_foreach_abs.default", "aten::_foreach_abs_.default", "aten::_foreach_add.List",
        "aten::_foreach_add.Scalar", "aten::_foreach_add.ScalarList", "aten::_foreach_add_.List",
        "aten::_foreach_add_.Scalar", "aten::_foreach_add_.ScalarList",
        "aten::_foreach_addcdiv.Scalar", "aten::_foreach_addcdiv.ScalarList",
        "aten::_foreach_addcdiv_.Scalar", "aten::_foreach_addcdiv_.ScalarList",
        "aten::_foreach_addcmul.Scalar", "aten::_foreach_addcmul.ScalarList",
        "aten::_foreach_addcmul_.Scalar", "aten::_foreach_addcmul_.ScalarList",
        "aten::_foreach_div.List", "aten::_foreach_div.Scalar", "aten::_foreach_div.ScalarList",
        "aten::_foreach_div.Tensor", "aten::_foreach_div_.List", "aten::_foreach_div_.Scalar",
        "aten::_foreach_div_.ScalarList", "aten::_foreach_div_.Tensor", "aten::_foreach_exp.default",
        "aten::_foreach_exp_.default", "aten::_foreach_lerp.Scalar", "aten::_foreach_lerp_.Scalar",
        "aten::_foreach_mul.List", "aten::_foreach_mul.Scalar", "aten::_foreach_mul.ScalarList",
        "aten::_foreach_mul.Tensor", "aten::_foreach_mul_.List", "aten::_foreach_mul_.Scalar",
        "aten::_foreach_mul_.ScalarList", "aten::_foreach_mul_.Tensor", "aten::_foreach_norm.Scalar",
        "aten::_foreach_sqrt.default", "aten::_foreach_sqrt_.default", "aten::_foreach_sub.List",
        "aten::_foreach_sub.Scalar", "aten::_foreach_sub.ScalarList", "aten::_foreach_sub_.List",
        "aten::_foreach_sub_.Scalar", "aten::_foreach_sub_.ScalarList", "aten::_foreach_zero_.default",
    ),
    "neuronsim.kernels.arith": (
        "aten::abs.default", "aten::abs_.default", "aten::add.Scalar", "aten::add.Tensor",
        "aten::add_.Scalar", "aten::add_.Tensor", "aten::bitwise_and.Scalar",
        "aten::bitwise_and.Tensor", "aten::bitwise_and_.Scalar", "aten::bitwise_and_.Tensor",
        "aten::bitwise_not.default", "aten::bitwise_not_.default", "aten::bitwise_or.Scalar",
        "aten::bitwise_or.Tensor", "aten::bitwise_or_.Scalar", "aten::bitwise_or_.Tensor",
        "aten::bitwise_xor.Scalar", "aten::bitwise_xor.Tensor", "aten::bitwise_xor_.Scalar",
        "aten::bitwise_xor_.Tensor", "aten::div.Scalar", "aten::div.Tensor", "aten::div_.Scalar",
        "aten::div_.Tensor", "aten::eq.Scalar", "aten::eq.Tensor", "aten::eq_.Scalar",
        "aten::eq_.Tensor", "aten::fill_.Scalar", "aten::fmod.Scalar", "aten::fmod.Tensor",
        "aten::fmod_.Scalar", "aten::fmod_.Tensor", "aten::ge.Scalar", "aten::ge.Tensor",
        "aten::ge_.Scalar", "aten::ge_.Tensor", "aten::gt.Scalar", "aten::gt.Tensor",
        "aten::gt_.Scalar", "aten::gt_.Tensor", "aten::le.Scalar", "aten::le.Tensor",
        "aten::le_.Scalar", "aten::le_.Tensor", "aten::logical_and.default",
        "aten::logical_and_.default", "aten::logical_not.default", "aten::logical_not_.default",
        "aten::logical_or.default", "aten::logical_or_.default", "aten::logical_xor.default",
        "aten::logical_xor_.default", "aten::lt.Scalar", "aten::lt.Tensor", "aten::lt_.Scalar",
        "aten::lt_.Tensor", "aten::maximum.default", "aten::minimum.default", "aten::mul.Scalar",
        "aten::mul.Tensor", "aten::mul_.Scalar", "aten::mul_.Tensor", "aten::ne.Scalar",
        "aten::ne.Tensor", "aten::ne_.Scalar", "aten::ne_.Tensor", "aten::neg.default",
        "aten::neg_.default", "aten::pow.Tensor_Scalar", "aten::pow.Tensor_Tensor", "aten::pow_.Scalar",
        "aten::pow_.Tensor", "aten::rsub.Scalar", "aten::rsub.Tensor", "aten::sub.Scalar",
        "aten::sub.Tensor", "aten::sub_.Scalar", "aten::sub_.Tensor", "aten::zero_.default",
    ),
    "neuronsim.kernels.argreduce": (
        "aten::argmax.default", "aten::argmin.default", "aten::max.dim", "aten::min.dim",
    ),
    "neuronsim.kernels.copy": (
        "aten::cat.default", "aten::copy_.default",
    ),
    "neuronsim.kernels.indexing": (
        "aten::embedding_dense_backward.default", "aten::gather.default", "aten::index_select.default",
        "aten::masked_fill_.Scalar", "aten::masked_fill_.Tensor", "aten::where.self",
    ),
    "neuronsim.kernels.int_reduction": (
        "aten::all.default", "aten::all.dim", "aten::all.dims", "aten::any.default", "aten::any.dim",
        "aten::any.dims", "aten::cumsum.default", "aten::isin.Tensor_Tensor",
    ),
    "neuronsim.kernels.loss": (
        "aten::nll_loss_backward.default", "aten::nll_loss_forward.default",
    ),
    "neuronsim.kernels.matmul": (
        "aten::addmm.default", "aten::baddbmm.default", "aten::bmm.default", "aten::mm.default",
    ),
    "neuronsim.kernels.norm": (
        "aten::_fused_rms_norm.default", "aten::_fused_rms_norm_backward.default",
        "aten::native_layer_norm.default", "aten::native_layer_norm_backward.default",
    ),
    "neuronsim.kernels.optim": (
        "aten::_fused_adam_.default", "aten::_fused_adam_.tensor_lr", "aten::_fused_adamw_.default",
        "aten::_fused_adamw_.tensor_lr",
    ),
    "neuronsim.kernels.reduction": (
        "aten::amax.default", "aten::amin.default", "aten::linalg_vector_norm.default",
        "aten::max.default", "aten::mean.dim", "aten::min.default", "aten::prod.default",
        "aten::prod.dim_int", "aten::std.correction", "aten::sum.dim_IntList", "aten::var.correction",
        "aten::var_mean.correction",
    ),
    "neuronsim.kernels.softmax": (
        "aten::_log_softmax.default", "aten::_log_softmax_backward_data.default",
        "aten::_softmax.default", "aten::_softmax_backward_data.default",
    ),
}
