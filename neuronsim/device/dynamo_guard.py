"""Keeping Dynamo out of the device's own Python code.

The dispatcher calls the device's Python kernels from whatever frame ran the op. Under
``torch.compile`` that can be eager code between graph breaks (or a frame past Dynamo's recompile
limit), where Dynamo's frame hook is on: Dynamo would then compile the device's runtime as model
code — planners, the signature cache — with guards that let one signature's cached entry answer
another's call (hubert's loss came out 1.5x the CPU's on a second compile in one process). torch
keeps ``__torch_dispatch__`` out the same way. Marking code objects costs nothing per call and
needs no import of Dynamo (which takes seconds).
"""

from __future__ import annotations

import functools


def outside_dynamo(kernel):
    """``kernel`` (a Python kernel the dispatcher calls) run, with everything it calls, outside
    Dynamo: the wrapper's code is marked once (all wrappers share it)."""

    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        return kernel(*args, **kwargs)

    skip_dynamo(wrapper, recursive=True)
    return wrapper


def skip_dynamo(fn, recursive: bool = False) -> None:
    """Mark ``fn``'s code so Dynamo never traces it (``recursive``: nor what it calls): the
    frame-hook strategy ``torch._dynamo.disable`` sets, without importing Dynamo (seconds)."""
    from torch._C._dynamo.eval_frame import _FrameAction, _FrameExecStrategy, set_code_exec_strategy

    inner = _FrameAction.SKIP if recursive else _FrameAction.DEFAULT
    set_code_exec_strategy(fn.__code__, _FrameExecStrategy(_FrameAction.SKIP, inner))
