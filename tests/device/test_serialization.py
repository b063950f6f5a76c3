"""torch.save / torch.load of neuron tensors and modules, with and without map_location."""

from __future__ import annotations

import copy
import io
import pickle

import torch
from torch import nn


def _roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def test_tensor_roundtrip_keeps_the_device_and_values():
    t = torch.arange(6.0, device="neuron").view(2, 3)
    loaded = _roundtrip(t)
    assert loaded.device == torch.device("neuron", 0)
    assert torch.equal(loaded.cpu(), t.cpu())


def test_map_location_variants():
    t = torch.arange(4, device="neuron")
    assert _roundtrip(t, map_location="cpu").device.type == "cpu"
    assert _roundtrip(t, map_location=torch.device("cpu")).device.type == "cpu"
    assert _roundtrip(torch.arange(4), map_location="neuron").device == torch.device("neuron", 0)
    assert _roundtrip(t, map_location="neuron:1").device == torch.device("neuron", 1)
    assert _roundtrip(t, map_location={"neuron:0": "cpu"}).device.type == "cpu"


def test_views_share_storage_after_load():
    base = torch.zeros(4, device="neuron")
    loaded_base, loaded_view = _roundtrip([base, base[1:3]])
    loaded_view.fill_(7)
    assert loaded_base.cpu().tolist() == [0, 7, 7, 0]


def test_state_dict_roundtrip_between_devices():
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to("neuron")
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3, device="neuron")).sum().backward()
    optimizer.step()
    saved = _roundtrip({"model": model.state_dict(), "optim": optimizer.state_dict()}, map_location="cpu")
    cpu_model = nn.Linear(3, 2)
    cpu_model.load_state_dict(saved["model"])
    assert torch.equal(cpu_model.weight, model.weight.cpu())
    restored = nn.Linear(3, 2).to("neuron")
    restored.load_state_dict(_roundtrip(model.state_dict(), map_location="neuron"))
    assert restored.weight.device.type == "neuron" and torch.equal(restored.weight.cpu(), model.weight.cpu())
    new_optimizer = torch.optim.Adam(restored.parameters())
    new_optimizer.load_state_dict(_roundtrip(optimizer.state_dict()))
    assert new_optimizer.state_dict()["state"][0]["exp_avg"].device.type == "neuron"


def test_storage_constructors_and_moves():
    storage = torch.UntypedStorage(16, device="neuron")
    assert storage.device.type == "neuron" and storage.nbytes() == 16
    assert torch.UntypedStorage(device="neuron").nbytes() == 0
    moved = torch.UntypedStorage(8).to(device="neuron")
    assert moved.device.type == "neuron"
    assert moved.cpu().device.type == "cpu"


def test_deepcopy_and_pickle():
    model = nn.Linear(2, 2).to("neuron")
    clone = copy.deepcopy(model)
    assert clone.weight.device.type == "neuron" and clone.weight.data_ptr() != model.weight.data_ptr()
    t = pickle.loads(pickle.dumps(torch.ones(3, device="neuron")))
    assert t.device.type == "neuron" and t.cpu().tolist() == [1, 1, 1]
