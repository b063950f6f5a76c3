"""Exceptions raised in tensor hooks during a neuron backward reach the caller, not ``abort()``.

Backward of device tensors runs on torch's autograd device thread. When a Python tensor hook
raises there, torch 2.13 unwinds with the Python error still pending and a stream guard calls the
Python device guard in a ``noexcept`` destructor: the process aborts. So hooks are wrapped: an
exception is kept aside and the hook returns a value torch rejects with a plain C++ error (a
tensor of another size, a tuple of another length); the backward entry point then re-raises the
kept exception. Covered: tensor hooks, post-accumulate-grad hooks and hooks on custom-Function
nodes (which carry module full backward hooks). Hooks on built-in C++ nodes
(``y.grad_fn.register_hook``) cannot be wrapped from Python and still abort when they raise.
Errors met by C++ code that waits on a torch future during backward (DDP's reducer waiting on a
failed gradient all-reduce) arrive as text; :func:`keep_for_backward` keeps the original for the
backward entry point to raise.
"""

from __future__ import annotations

import functools
import threading

import torch
import torch.autograd

_kept: list[BaseException] = []
_lock = threading.Lock()
_installed = False


def _resized(grad: torch.Tensor) -> torch.Tensor:
    return grad.new_empty((0,) if grad.numel() else (1,))


def _longer(first, *rest) -> tuple:
    return (*first, None)


def _guarded(hook, rejected):
    @functools.wraps(hook)
    def guarded(*args):
        try:
            return hook(*args)
        except BaseException as exc:
            with _lock:
                _kept.append(exc)
            return rejected(*args)

    return guarded


def keep_for_backward(exc: BaseException) -> None:
    """Have the backward that fails next raise ``exc`` (a collective's error that reached C++ waiters
    as text)."""
    with _lock:
        _kept.append(exc)


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    register_hook = torch.Tensor.register_hook
    register_post_accumulate = torch.Tensor.register_post_accumulate_grad_hook
    run_backward = torch.autograd._engine_run_backward

    def register_hook_guarded(self, hook):
        return register_hook(self, _guarded(hook, _resized) if self.device.type == "neuron" else hook)

    def register_post_accumulate_guarded(self, hook):
        guarded = _guarded(hook, _resized) if self.device.type == "neuron" else hook
        return register_post_accumulate(self, guarded)

    def engine_run_backward(*args, **kwargs):
        with _lock:
            _kept.clear()  # what an earlier backward, or a failure outside one, left behind
        try:
            return run_backward(*args, **kwargs)
        except RuntimeError:
            with _lock:
                kept = _kept[:1]
                _kept.clear()
            if kept:
                raise kept[0].with_traceback(kept[0].__traceback__) from None
            raise

    node = torch.autograd.function.BackwardCFunction
    node_register_hook, node_register_prehook = node.register_hook, node.register_prehook

    def node_register_hook_guarded(self, hook):
        return node_register_hook(self, _guarded(hook, _longer))

    def node_register_prehook_guarded(self, hook):
        return node_register_prehook(self, _guarded(hook, _longer))

    node.register_hook = node_register_hook_guarded
    node.register_prehook = node_register_prehook_guarded
    functools.update_wrapper(register_hook_guarded, register_hook)
    functools.update_wrapper(register_post_accumulate_guarded, register_post_accumulate)
    torch.Tensor.register_hook = register_hook_guarded
    torch.Tensor.register_post_accumulate_grad_hook = register_post_accumulate_guarded
    torch.autograd._engine_run_backward = engine_run_backward
