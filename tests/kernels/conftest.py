"""The kernel tests run on the emulated device, each op against ATen-CPU on the same inputs."""

from __future__ import annotations

import pytest
import torch

import neuronsim

neuronsim.enable()


@pytest.fixture(autouse=True)
def _fresh_op_tracking():
    torch.neuron.clear_op_tracking()
    yield
