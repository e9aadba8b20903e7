"""The columns of the DSP convolution blocks in the activation region, where it has room.

The im2col kernel (conv_im2col) copies the windows of up to four output positions into 16-bit
columns: four positions of K = 576 (ResNet-8's 3x3 layers over 64 channels) are 4.5 KiB,
more stack than a Cortex-M application should give a library (the kernels were at 2.5 KiB with
two positions). After planning, each such convolution looks for a gap in the activation
region that no buffer occupies while it runs (liveness.intervals: what the planner itself
keeps) and, where there is one, takes it as a scratch output: the columns then cost neither
stack nor activation bytes (the region does not grow), and the kernel can use four positions
per block at any K. Where the region is full at that instruction (a layer at the peak), the
columns stay on the stack within conv_im2col's budget."""
from __future__ import annotations

import numpy as np

from glowpy.codegen.kernels.int8 import conv_im2col
from glowpy.ir import liveness
from glowpy.ir.program import ACTIVATION, Buffer, Program

ALIGN = 8  # the columns are read by word and doubleword loads


def _gap(live: list, need: int, size: int):
    """The lowest offset of `need` free bytes (ALIGN-aligned) in [0, size) between the sorted
    (start, end) byte ranges of `live`; None if there is none."""
    at = 0
    for lo, hi in live:
        if lo - at >= need:
            return at
        at = max(at, -(-hi // ALIGN) * ALIGN)
    return at if size - at >= need else None


def place(prog: Program, caps) -> None:
    """Adds a scratch output (int16 columns) to the QConv instructions the im2col kernel will
    run whose four-position columns exceed conv_im2col.STACK_COLUMNS, where a gap allows."""
    size = prog.sizes.get("activation", 0)
    if not caps.dsp or not size:
        return
    ranges = []
    for s, (first, last) in liveness.intervals(prog).items():
        region, off = s.address
        if region == ACTIVATION:
            ranges.append((off, off + s.nbytes, first, last))
    for i, ins in enumerate(prog.instrs):
        if ins.op != "QConv" or len(ins.outputs) != 1:
            continue
        need = conv_im2col.scratch_need(ins.node)
        if need is None:
            continue
        live = sorted((lo, hi) for lo, hi, first, last in ranges if first <= i <= last)
        off = _gap(live, need, size)
        if off is None:
            continue
        ins.outputs.append(Buffer(f"{ins.name}_columns", np.dtype(np.int16), (need // 2,),
                                  ACTIVATION, offset=off))
        ranges.append((off, off + need, i, i))
