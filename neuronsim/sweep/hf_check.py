"""One tiny Hugging Face model on ``neuron`` against the CPU: forward, backward, an optimizer step,
eagerly or under ``torch.compile(backend="neuron")``, and greedy ``generate()``.

A check passes when the device's loss, every gradient and every parameter after one AdamW step match
the CPU's (rtol 2e-3) with the same parameters (tied weights stay one parameter), and, for a model
that generates, the same tokens come out (or the two runs part at a near tie of the CPU's own
scores, which no device can be asked to break the same way). Each check also reports which ops fell
back to the host and the share of simulated device time spent in native kernels.
"""

from __future__ import annotations

import copy
import time
import traceback
from dataclasses import dataclass, field

import torch

from neuronsim.sweep.device_time import DeviceTime
from neuronsim.sweep.hf_zoo import Arch, build

RTOL = 2e-3
GRAD_ATOL = 1e-6  # or 1e-4 of the tensor's largest gradient, if more (CTC losses of ~100 scale them)
LR = 1e-3
PARAM_ATOL = LR / 20
# One AdamW step moves a parameter by ~LR * g / (|g| + eps), ill-conditioned where g is at noise level
# (a key projection's bias, whose exact gradient is 0 since softmax ignores it): there the device may
# take any step up to LR, as a second CPU run with another summation order would.
NOISE_GRAD = 1e-6
NEW_TOKENS = 4
TIE = 1e-3  # scores closer than this (relative) are a tie the two devices may break differently


@dataclass
class Check:
    """The result of one architecture in one mode."""

    arch: str
    group: str
    mode: str  # eager | compiled | generate
    status: str = "pass"  # pass | fail | error
    detail: str = ""
    seconds: float = 0.0
    device: DeviceTime = field(default_factory=DeviceTime)

    @property
    def passed(self) -> bool:
        return self.status == "pass"


class Mismatch(AssertionError):
    """The device's result differs from the CPU's (the message says where)."""


def _close(name: str, got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> None:
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise Mismatch(f"{name}: {'; '.join(lines[1:3]) or lines[0]}") from None


def train_step(model, batch: dict, device: str, compiled: bool = False):
    """(loss, gradients by name, parameters after one AdamW step by name, parameter count) of one
    forward, backward and optimizer step on ``device``."""
    model = model.to(device)
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    run = torch.compile(model, backend="neuron") if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    optimizer.zero_grad(set_to_none=True)
    loss = run(**inputs).loss
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    optimizer.step()
    params = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return loss.detach().cpu(), grads, params, len(list(model.parameters()))


def compare_training(arch: Arch, compiled: bool) -> None:
    """Raises :class:`Mismatch` where the device's step differs from the CPU's."""
    model, batch = build(arch)
    cpu = train_step(copy.deepcopy(model), batch, "cpu")
    if compiled:
        torch._dynamo.reset()
    dev = train_step(model, batch, "neuron", compiled)
    if dev[3] != cpu[3]:
        raise Mismatch(f"{dev[3]} parameters on neuron, {cpu[3]} on the CPU (a tie broken by the move?)")
    _close("loss", dev[0], cpu[0], RTOL, 0.0)
    if dev[1].keys() != cpu[1].keys():
        raise Mismatch(f"gradients of {sorted(dev[1].keys() ^ cpu[1].keys())} on one device only")
    for name, want in cpu[1].items():
        atol = max(GRAD_ATOL, 1e-4 * float(want.abs().max())) if want.numel() else GRAD_ATOL
        _close(f"grad {name}", dev[1][name], want, RTOL, atol)
    for name, want in cpu[2].items():
        got, grad = dev[2][name], cpu[1].get(name)
        if grad is not None:  # noise-level gradients: their elements may differ by up to one step
            noise = grad.abs() <= NOISE_GRAD
            got = torch.where(noise & ((got - want).abs() <= LR), want, got)
        _close(f"{name} after the step", got, want, RTOL, PARAM_ATOL)


def _generate(model, batch: dict, device: str):
    model = model.to(device)
    ids = batch["input_ids"].to(device)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                         min_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=model.config.pad_token_id)
    return out.sequences.cpu(), [s.cpu() for s in out.scores]


def compare_generate(arch: Arch) -> str:
    """Greedy generate() on both devices: ``""`` if the tokens agree, a note if they part at a near
    tie of the CPU's scores; raises :class:`Mismatch` otherwise."""
    model, batch = build(arch)
    cpu_ids, cpu_scores = _generate(copy.deepcopy(model), batch, "cpu")
    ids, scores = _generate(model, batch, "neuron")
    if ids.shape == cpu_ids.shape and torch.equal(ids, cpu_ids):
        return ""
    if ids.shape != cpu_ids.shape:
        raise Mismatch(f"generated {tuple(ids.shape)} tokens, the CPU {tuple(cpu_ids.shape)}")
    new = ids.shape[1] - len(cpu_scores)
    step = int((ids[:, new:] != cpu_ids[:, new:]).any(0).nonzero()[0])
    top = cpu_scores[step].float().topk(2, dim=-1).values
    gap = (top[:, 0] - top[:, 1]).abs() / top[:, 0].abs().clamp_min(1e-6)
    if bool((gap < TIE).any()):
        return f"tokens part at new token {step} on a near tie of the CPU's scores"
    _close(f"scores of new token {step}", scores[step], cpu_scores[step], RTOL, 1e-5)
    raise Mismatch(f"tokens differ from new token {step}: {ids[:, new:].tolist()} vs "
                   f"{cpu_ids[:, new:].tolist()}")


def check(arch: Arch, mode: str) -> Check:
    """Run one check (``eager``, ``compiled`` or ``generate``), never raising: errors are results."""
    result = Check(arch.name, arch.group, mode)
    start = time.perf_counter()
    try:
        with result.device:
            if mode == "generate":
                result.detail = compare_generate(arch)
            else:
                compare_training(arch, compiled=mode == "compiled")
    except Mismatch as exc:
        result.status, result.detail = "fail", str(exc)
    except Exception as exc:  # noqa: BLE001  (a model's failure is a row of the table, not the end)
        result.status = "error"
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        where = f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}"
        result.detail = f"{type(exc).__name__}: {first[:300]} ({where})"
    result.seconds = time.perf_counter() - start
    return result
