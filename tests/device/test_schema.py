"""Wrapper kinds come from the ATen schema, not from per-op code."""

from __future__ import annotations

import pytest
import torch

from neuronsim.device.schema import ReturnKind, WrapperKind, plan_op

aten = torch.ops.aten


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        (aten.add.Tensor, WrapperKind.FUNCTIONAL),
        (aten.add_.Tensor, WrapperKind.INPLACE),
        (aten.add.out, WrapperKind.OUT),
        (aten.diagonal.default, WrapperKind.VIEW),
        (aten.split.Tensor, WrapperKind.VIEW),
        (aten._foreach_add_.List, WrapperKind.INPLACE),
        (aten._fused_adam_.default, WrapperKind.INPLACE),
        (aten.max.dim, WrapperKind.FUNCTIONAL),
    ],
)
def test_wrapper_kind(op, kind):
    assert plan_op(op).kind is kind


def test_returns_and_arguments():
    assert plan_op(aten.add_.Tensor).returns == ((ReturnKind.WRITE, (0, "self")),)
    out = plan_op(aten.add.out)
    assert out.outs == ((3, "out"),) and out.returns == ((ReturnKind.WRITE, (3, "out")),)
    assert plan_op(aten._foreach_add_.List).returns == ()
    assert plan_op(aten.max.dim).returns == ((ReturnKind.FRESH, None), (ReturnKind.FRESH, None))
    assert plan_op(aten.normal_.default).generator == (3, "generator")
    assert plan_op(aten.native_dropout.default).seeded
    assert plan_op(aten.sum.default).dtype_args == ((1, "dtype"),)


def test_copies_and_views_are_exempt_from_the_64bit_policy():
    assert not plan_op(aten.copy_.default).casts_64bit
    assert not plan_op(aten.diagonal.default).casts_64bit
    assert plan_op(aten.add.Tensor).casts_64bit
