"""The torch module on the emulated `neuron` device: the same values as on the CPU, every op native,
and its simulated device time held to a baseline."""

import torch
from kernelpack.mlp import MLPBlock


def test_forward(neuron_device, neuron_perf):
    torch.manual_seed(0)
    cpu_model, x = MLPBlock(256, 1024), torch.randn(64, 256)
    want = cpu_model(x)
    model = MLPBlock(256, 1024).to(neuron_device)
    model.load_state_dict(cpu_model.state_dict())
    x = x.to(neuron_device)

    with neuron_perf.gate(no_fallback=True, baseline="forward", budget_us=100):
        y = model(x)
    torch.testing.assert_close(y.cpu(), want, rtol=1e-4, atol=1e-4)


def test_training_step(neuron_device, neuron_perf, neuron_profile):
    torch.manual_seed(0)
    model = MLPBlock(256, 1024).to(neuron_device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(64, 256, device=neuron_device)

    with neuron_perf.no_host_fallback(), neuron_perf.baseline("step", tolerance_pct=0.5):
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    # the whole test, as `neuronsim profile` would summarize it: TensorE did the matmuls
    assert neuron_profile.summary["model_flops"] >= 3 * 2 * 64 * 256 * 1024 * 2
    assert torch.isfinite(loss).item()
