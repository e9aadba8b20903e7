"""Scratch buffers in the activation region's gaps, after planning (catalog.post_planning).

A kernel that wants working memory larger than the stack should give a library takes, where
there is one, a gap of the activation region that no buffer occupies while its instruction
runs (liveness.intervals: what the planner itself keeps) as a scratch output: it then costs
neither stack nor activation bytes (the region does not grow). Where the region is full at
that instruction (a layer at the peak), the kernel keeps its stack budget."""
from __future__ import annotations

import numpy as np

from glowpy.ir import liveness
from glowpy.ir.program import ACTIVATION, Buffer, Program
from glowpy.ir.program import align as align_region


def _gap(live: list, need: int, size: int, align: int):
    """The lowest offset of `need` free bytes (align-aligned) in [0, size) between the sorted
    (start, end) byte ranges of `live`; None if there is none."""
    at = 0
    for lo, hi in live:
        if lo - at >= need:
            return at
        at = max(at, -(-hi // align) * align)
    return at if size - at >= need else None


def place(prog: Program, wants, grow=None) -> None:
    """wants(ins) -> (bytes, name suffix, dtype, alignment) or None: each instruction that
    wants scratch gets it as an extra output where a gap allows (instructions in order, each
    placement seen by the later ones). grow(ins): where there is no gap, place it past the
    region's end instead, which then grows by the largest such scratch (all of them share that
    area: each lives during its own instruction only)."""
    size = prog.sizes.get("activation", 0)
    if not size and grow is None:
        return
    end = size
    ranges = []
    for s, (first, last) in liveness.intervals(prog).items():
        region, off = s.address
        if region == ACTIVATION:
            ranges.append((off, off + s.nbytes, first, last))
    for i, ins in enumerate(prog.instrs):
        want = wants(ins)
        if want is None:
            continue
        need, suffix, dtype, align = want
        live = sorted((lo, hi) for lo, hi, first, last in ranges if first <= i <= last)
        off = _gap(live, need, size, align)
        if off is None and grow is not None and grow(ins):
            off = -(-size // align) * align
            end = max(end, off + need)
        if off is None:
            continue
        ins.outputs.append(Buffer(f"{ins.name}{suffix}", np.dtype(dtype),
                                  (need // np.dtype(dtype).itemsize,), ACTIVATION, offset=off))
        ranges.append((off, off + need, i, i))
    if end > size:
        prog.sizes["activation"] = align_region(end)
