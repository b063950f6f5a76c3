"""``neuronxcc.nki.compiler``: NKI 0.1's direct-allocation API and compiler directives.

The allocators (``ncc.sbuf.mod_alloc(...)``, ``ncc.psum.alloc(fn)``...) are accepted as the
``buffer=`` of ``nl.ndarray`` and name its memory; the addresses they ask for are not honoured —
neuronsim's allocator places the tile (``nl.ndarray(..., address=)`` pins one in the current API).
The directives (``skip_middle_end_transformations``, ``enable_stack_allocator``) change nothing here.
"""

from __future__ import annotations

from neuronsim.nki.language import no_reorder  # noqa: F401
from neuronsim.nki.language.dtypes import psum as _psum
from neuronsim.nki.language.dtypes import sbuf as _sbuf


class _Allocation:
    def __init__(self, region, *args, **kwargs):
        self.memory_region = region
        self.args, self.kwargs = args, kwargs


class _Memory:
    def __init__(self, region):
        self._region = region

    def alloc(self, *args, **kwargs):
        return _Allocation(self._region, *args, **kwargs)

    mod_alloc = auto_alloc = alloc


sbuf = _Memory(_sbuf)
psum = _Memory(_psum)


def skip_middle_end_transformations(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


def enable_stack_allocator(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


def force_auto_alloc(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)
