"""A fresh op-tracking scope: which ops ran natively and which fell back to the host since it began.

It reads ``torch.neuron.get_op_counts()`` at the start and at each look, so it does not clear the
process's counters (scopes nest, and the user's own tracking is left as it was).
"""

from __future__ import annotations

from neuronsim.testing.measure import counts_since, op_counts


class OpScope:
    def __init__(self) -> None:
        self._before = op_counts()

    @property
    def fallback_ops(self) -> dict[str, int]:
        """Ops computed on the host since the scope began, with their call counts."""
        return counts_since(self._before, "fallback")

    @property
    def executed_ops(self) -> dict[str, int]:
        """Ops run by native kernels since the scope began, with their call counts."""
        return counts_since(self._before, "executed")

    def assert_no_fallback(self) -> None:
        __tracebackhide__ = True
        from neuronsim.testing.gates import check_no_fallback
        from neuronsim.testing.measure import Measurement

        message = check_no_fallback(Measurement({}, {}, self.fallback_ops, chip=_chip_name()))
        if message:
            from neuronsim.errors import GateFailure

            raise GateFailure(message)


def _chip_name() -> str:
    from neuronsim.options import current

    return current().chip
