"""Registration: PrivateUse1 renamed `neuron`, torch.neuron, generated methods, device management."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import neuronsim
from neuronsim.device import registration
from neuronsim.sim.chips import get_chip


def test_privateuse1_is_renamed_neuron():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    t = torch.ones(2, device="neuron")
    assert t.device == torch.device("neuron", 0)
    assert t.device.type == "neuron"
    assert torch.device("privateuseone:0").type == "neuron"


def test_device_module_is_torch_neuron():
    assert torch.neuron is torch.get_device_module("neuron")
    assert torch.neuron.__neuronsim__


def test_generated_tensor_module_and_storage_methods():
    t = torch.ones(3)
    assert not t.is_neuron
    moved = t.neuron()
    assert moved.is_neuron and moved.device.type == "neuron"
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.is_neuron
    assert torch.UntypedStorage(4).neuron().device.type == "neuron"


def test_enable_is_idempotent():
    neuronsim.enable()
    neuronsim.enable()
    assert registration.is_registered()
    assert registration.owner_of_privateuse1() == "neuronsim"


def test_enable_before_import_torch_with_neuron_sim_set():
    """enable() imports torch, whose autoload (NEURON_SIM=1) registers the device: no re-entry."""
    code = "import neuronsim; neuronsim.enable(); import torch; print(torch.ones(2, device='neuron').device)"
    env = dict(os.environ, NEURON_SIM="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "neuron:0"


def test_import_neuronsim_does_not_import_torch():
    code = "import sys, neuronsim; assert 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_device_count_is_the_logical_core_count_of_an_instance():
    trn2 = get_chip("trn2")
    assert torch.neuron.device_count() == trn2.logical_cores_per_chip * 16  # trn2.48xlarge: 64
    with neuronsim.options(chip="trn3"):
        assert torch.neuron.device_count() == get_chip("trn3").logical_cores_per_chip * 16


def test_set_device_accepts_valid_indices_and_rejects_others():
    last = torch.neuron.device_count() - 1
    torch.neuron.set_device(last)
    assert torch.neuron.current_device() == last
    assert torch.ones(1, device="neuron").device == torch.device("neuron", last)
    torch.neuron.set_device("neuron:0")
    assert torch.neuron.current_device() == 0
    for bad in (-1, last + 1, 2**40, "neuron:99"):
        with pytest.raises(ValueError, match="Invalid device id"):
            torch.neuron.set_device(bad)
    with pytest.raises(ValueError):
        torch.neuron.set_device("cpu")


def test_device_context_manager():
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device.index == 1
    assert torch.neuron.current_device() == 0
    with pytest.raises(ValueError):
        torch.neuron.device(torch.neuron.device_count())


def test_ops_stay_on_their_device_index():
    a = torch.ones(2, device="neuron:2")
    assert (a + 1).device == torch.device("neuron", 2)
    assert torch.neuron.current_device() == 0


def test_availability_and_init():
    assert torch.neuron.is_available()
    torch.ones(1, device="neuron")
    assert torch.neuron.is_initialized()
    assert not torch.neuron._is_in_bad_fork()
    torch.neuron.synchronize()
    torch.neuron.synchronize(0)


def test_device_name_and_properties():
    trn2 = get_chip("trn2")
    assert torch.neuron.get_device_name() == "neuron:0"
    assert torch.neuron.get_device_name("neuron:1") == "neuron:1"
    props = torch.neuron.get_device_properties(0)
    assert props.total_memory == trn2.hbm_bytes_per_logical_core
    assert "trn2" in props.name
    assert torch.neuron.get_device_properties("neuron:1").index == 1
    with neuronsim.options(chip="trn3"):
        trn3 = get_chip("trn3")
        assert torch.neuron.get_device_properties().total_memory == trn3.hbm_bytes_per_logical_core
    with neuronsim.options(hbm_bytes=1 << 20):
        assert torch.neuron.get_device_properties().total_memory == 1 << 20
    with pytest.raises(ValueError):
        torch.neuron.get_device_properties(torch.neuron.device_count())


def test_amp_dtypes():
    assert torch.neuron.is_bf16_supported()
    assert torch.neuron.get_amp_supported_dtype() == [torch.float32, torch.float16, torch.bfloat16]
    assert torch.amp.is_autocast_available("neuron")


def test_autoload_stays_out_of_the_way_without_neuron_sim():
    code = (
        "import torch\n"
        "assert not hasattr(torch, 'neuron'), 'registered without NEURON_SIM'\n"
        "assert torch._C._get_privateuse1_backend_name() == 'privateuseone'\n"
        "print('ok')"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "NEURON_SIM"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "ok"


def test_autoload_leaves_another_backend_alone():
    code = (
        "import os, warnings\n"
        "os.environ['NEURON_SIM'] = '1'\n"
        "import torch\n"
        "torch.utils.rename_privateuse1_backend('otherdev')\n"
        "from neuronsim.device import _autoload\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    _autoload()\n"
        "assert any('otherdev' in str(x.message) for x in w)\n"
        "assert not hasattr(torch, 'neuron')\n"
        "import neuronsim\n"
        "try:\n"
        "    neuronsim.enable()\n"
        "except RuntimeError as e:\n"
        "    assert 'otherdev' in str(e)\n"
        "    print('ok')\n"
    )
    env = dict(__import__("os").environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "ok", out.stderr
