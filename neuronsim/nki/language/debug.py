"""``nl.device_print``: a tensor's value printed when the kernel runs."""

from __future__ import annotations

from neuronsim.nki import isa as _isa
from neuronsim.nki.language.tensor import NkiTensor, sbuf_operand
from neuronsim.nki.trace import caller_location, current_trace
from neuronsim.sim.ir import Memory


def device_print(print_prefix, tensor) -> None:
    """Print ``tensor``'s value when the kernel runs (captured with a DMA into HBM at this point)."""
    trace = current_trace()
    src = sbuf_operand(tensor, "device_print.psum_copy") if tensor.on_chip else tensor
    out = NkiTensor.whole(
        trace.new_buffer(
            f"__print{len(trace.prints)}",
            Memory.HBM,
            src.shape or (1,),
            src.buf.dtype,
            caller_location(),
            kind="output",
        )
    )
    _isa.dma_copy(out, src)
    trace.prints.append((str(print_prefix), out.buf))
