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

from glowpy.codegen.kernels import gaps
from glowpy.codegen.kernels.int8 import conv_im2col
from glowpy.ir.program import Program

ALIGN = 8  # the columns are read by word and doubleword loads


def place(prog: Program, caps) -> None:
    """Adds a scratch output (int16 columns) to the QConv instructions the im2col kernel will
    run whose four-position columns exceed conv_im2col.STACK_COLUMNS, where a gap allows."""
    if not caps.dsp:
        return

    def wants(ins):
        if ins.op != "QConv" or len(ins.outputs) != 1:
            return None
        need = conv_im2col.scratch_need(ins.node)
        return None if need is None else (need, "_columns", "int16", ALIGN)
    # a patch-based plan (ir/patch) leaves the region too tight for gaps: the columns take a
    # shared area past its end rather than the stack (the region grows by the largest). ResNet-8
    # int8 on the Cortex-M7 in 32 bands: the bands' 4 x 2 blocks with columns on the stack
    # needed 5,016 B of it, the 8 x 8 layers after the cut 2,404 B in 2 x 4 blocks
    patched = any(ins.node is not None and ins.node.attrs.get("_band_of") for ins in prog.instrs)
    gaps.place(prog, wants, grow=(lambda ins: True) if patched else None)
