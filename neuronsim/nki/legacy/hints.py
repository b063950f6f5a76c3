"""Migration hints: each legacy construct a kernel uses, with its NKI 0.6 form, once per source line.

``neuronxcc.nki`` kernels run unchanged; on the way each legacy construct (an index grid, ``mask=``,
an ``nisa`` call returning its result, ``nki.baremetal``...) prints one line to stderr naming the
kernel line and the current-API form, e.g.::

    nki legacy: kernel.py:31: nl.arange index grid -> slices, t[0:128, 0:512] (or t.ap(...))

Each (construct, line) is shown once per process. ``NEURON_SIM_NKI_HINTS=0`` silences them, as does
a warnings filter ignoring :class:`LegacyApiHint` (``-W ignore::...LegacyApiHint``).
"""

from __future__ import annotations

import os
import sys
import warnings

from neuronsim import env
from neuronsim.nki.trace import caller_location


class LegacyApiHint(UserWarning):
    """A legacy (``neuronxcc.nki``) construct and its NKI 0.6 form."""


# construct -> its current-API form (the NKI migration guide's, nki/migration/index.rst)
FORMS = {
    "import neuronxcc.nki": "import nki; import nki.language as nl; import nki.isa as nisa",
    "nl.arange": "slices, t[0:128, 0:512] (or t.ap([[step, num], ...], offset))",
    "nl.mgrid": "slices, t[0:128, 0:512] (or t.ap([[step, num], ...], offset))",
    "mask=": "bounded slices: p = slice(i * 128, min(n, (i + 1) * 128)); t[p, :]",
    "nl.par_dim": "a plain shape: the partition dimension is always the first",
    "block dimensions": "one tile per block: [nl.ndarray((128, F), ...) for _ in range(B)]",
    "nl.spmd_dim": "kernel[n](...) (LNC=2: kernel[2])",
    "nki.baremetal": "nki.jit; numpy arrays run on the simulator: nki.simulate(kernel)(*arrays)",
    "nki.simulate_kernel": "nki.simulate(kernel)(*arrays)",
    "nki.benchmark": "nki.simulate(kernel, profile=True)(*arrays)[1].summary['total_time']",
    "nki.profile": "nki.simulate(kernel, profile=True)(*arrays), or `neuronsim profile script.py`",
    "nl.affine_range(directives=/precise_schedule=)": "nl.affine_range(n) (scheduling keywords removed)",
    "nl.sequential_range(directives=/precise_schedule=)": (
        "nl.sequential_range(n), inside `with nl.no_reorder():` to keep program order"
    ),
    "nl.static_range(directives=/precise_schedule=)": "nl.static_range(n) (scheduling keywords removed)",
    "tile.broadcast_to": "nl.broadcast_to(t, (P, F)) (a NkiTensor view has no partition broadcast)",
    "kernel[0]": "kernel(...) or kernel[1](...) (a launch grid counts instances; 0 ran one in NKI 0.1)",
    "nki.jit(mode=)": "nki.jit (mode is ignored since NKI 0.3)",
    "buffer='sbuf'": "buffer=nl.sbuf (string buffer names were removed in NKI 0.3)",
    "nki.compiler allocation": "nl.ndarray(..., address=(partition, byte)) or the compiler's allocator",
    "psum[...] += nisa.nc_matmul": "nisa.nc_matmul(psum[...], stationary, moving) (accumulate=None)",
    "nisa.iota(expr)": "nisa.iota(dst, pattern=[[step, num]], offset=, channel_multiplier=)",
    "nisa.affine_select(pred)": (
        "nisa.affine_select(dst, pattern, channel_multiplier, on_true, on_false, cmp_op=)"
    ),
}

_shown: set = set()


def enabled() -> bool:
    return os.environ.get(env.NEURON_SIM_NKI_HINTS, "").strip() != "0"


def hint(construct: str, form: str | None = None, location: str | None = None) -> None:
    """Show ``construct -> form`` for the kernel line calling (once per construct and line)."""
    if not enabled():
        return
    where = location or caller_location()
    key = (construct, where)
    if key in _shown:
        return
    _shown.add(key)
    form = form or FORMS.get(construct, "")
    text = f"nki legacy: {where}: {construct} -> {form}"
    if not _filtered_out(text):
        print(text, file=sys.stderr)


def _filtered_out(text: str) -> bool:
    """True when the first warnings filter matching a LegacyApiHint with this text ignores it."""
    for action, message, category, _module, _lineno in warnings.filters:
        if issubclass(LegacyApiHint, category) and (message is None or message.match(text)):
            return action == "ignore"
    return False


def shown() -> set:
    """The (construct, location) pairs shown so far (tests, the compatibility runner)."""
    return set(_shown)
