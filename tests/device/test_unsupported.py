"""What TorchNeuron does not support fails with an error naming the feature, not a crash."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_sparse_tensors():
    with pytest.raises(NotImplementedError, match="sparse"):
        torch.randn(2, 2).to_sparse().to("neuron")
    with pytest.raises(NotImplementedError, match="sparse"):
        torch.randn(2, 2, device="neuron").to_sparse()
    with pytest.raises(NotImplementedError, match="sparse"):
        torch.sparse_coo_tensor([[0], [1]], [1.0], (2, 2), device="neuron")
    with pytest.raises(NotImplementedError, match="sparse"):
        torch.empty(2, layout=torch.sparse_coo, device="neuron")


def test_sparse_gradients_and_sparse_adam():
    embedding = torch.nn.Embedding(4, 2, sparse=True).to("neuron")
    with pytest.raises(NotImplementedError, match="sparse"):
        embedding(torch.tensor([1, 2], device="neuron")).sum().backward()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_tensors():
    parts = [torch.ones(2), torch.ones(3)]
    with pytest.raises(NotImplementedError, match="NestedTensor"):
        torch.nested.nested_tensor(parts, device="neuron")
    with pytest.raises(NotImplementedError, match="NestedTensor"):
        torch.nested.nested_tensor(parts, layout=torch.jagged, device="neuron")
    with pytest.raises(NotImplementedError, match="NestedTensor"):
        torch.nested.nested_tensor(parts, layout=torch.jagged).to("neuron")
    with pytest.raises(NotImplementedError, match="NestedTensor"):
        torch.nested.nested_tensor(parts).to("neuron")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_forward_mode_ad():
    x = torch.randn(3, device="neuron")
    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="forward-mode AD"):
        fwAD.make_dual(x, torch.ones(3, device="neuron"))
    with pytest.raises(NotImplementedError, match="forward-mode AD"):
        torch.func.jvp(torch.sin, (x,), (torch.ones(3, device="neuron"),))


def test_channels_last():
    x = torch.randn(1, 2, 3, 3, device="neuron")
    with pytest.raises(NotImplementedError, match="channels_last memory format"):
        x.contiguous(memory_format=torch.channels_last)
    with pytest.raises(NotImplementedError, match="channels_last"):
        torch.randn(1, 2, 3, 3).to("neuron", memory_format=torch.channels_last)
    with pytest.raises(NotImplementedError, match="channels_last_3d"):
        torch.empty(1, 2, 2, 2, 2, device="neuron", memory_format=torch.channels_last_3d)
    with pytest.raises(NotImplementedError, match="channels_last"):
        torch.nn.Conv2d(2, 2, 1).to("neuron", memory_format=torch.channels_last)
    assert x.contiguous(memory_format=torch.contiguous_format).is_contiguous()


def test_errors_leave_the_device_usable():
    with pytest.raises(NotImplementedError):
        torch.randn(2, 2, device="neuron").to_sparse()
    assert (torch.ones(2, device="neuron") + 1).cpu().tolist() == [2, 2]
