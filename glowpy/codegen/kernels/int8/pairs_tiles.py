"""The register tile of the integer GEMM (pairs.py, pairs_window.py): its vectors (simd_of), and
the tile shape the cycle model (tiles.step_cycles per reduction step, plus each tile's
epilogue) gives the least time, within an output row or over several whole rows flat."""
from __future__ import annotations

import math
from dataclasses import replace

from glowpy.codegen.kernels.conv.pointwise_strided import SCRATCH_MAX, TILE, plan_tiles
from glowpy.codegen.kernels.tiles import step_cycles
from glowpy.codegen.kernels.vectors import Simd

# int32 lanes the kernels use at most (simd_of); 16 where the target has AVX512BW's 512-bit
# pmaddwd (TargetCaps.pair_madd)
PAIR_LANES = 16


def simd_of(caps, most: int = PAIR_LANES) -> Simd:
    """The kernel's vectors: the integer instructions' int32 lanes (TargetCaps.pair_madd), at
    most `most`, with all the target's registers. 16 lanes where the target has AVX512BW's
    512-bit pmaddwd: on a Zen 5, whose 512-bit pipes are whole, ResNet-18 int8 9.73 -> 6.44 ms
    as quads (ResNet-50 int8 21.05 -> 12.96); a Zen 4 runs a 512-bit one as two 256-bit
    halves and keeps 8 (TargetCaps.pair_madd, caps.HALF_512: as fast there, compiled in 60% of
    the time)."""
    simd = Simd.of(caps)
    return replace(simd, width=min(simd.width, caps.pair_madd or 8, most))


def pointwise(node) -> bool:
    """An unpadded 1x1 (the flat panels: positions across rows). At a stride the packing
    gathers every s-th row and column (PairsEmitter.pack): ResNet-50's downsampling 1x1s
    (256 -> 512 at stride 2 onto 28x28, quads16, one layer alone) took 1.19x the time of the
    same layer on its subsampled input as a window layer, whose 28-position rows fill 3.5
    vectors of 8."""
    win = node.opdef.window(node)
    return all(d == 1 for d in node.inputs[1].shape[2:]) and \
        not any(win.pads_begin) and not any(win.pads_end)


def tile_shape(caps, node, g: int = 2, limit: int = SCRATCH_MAX):
    """(MR, NV, ROWS) of the register tile, or None where one tile's packed groups (C x taps /
    g x NR int32) outgrow `limit` bytes even with one vector of positions. ROWS > 1: a window
    layer's tile holds ROWS whole output rows, their positions flat across the rows in NV
    vectors (flat_rows), where that costs fewer cycles than tiles within a row: rows that
    are no multiple of a vector leave lanes empty (a 7x7 plane's rows filled 7 of 16 lanes,
    the ResNet-18 int8 last 3x3 layers at 2.2x onnxruntime's time on 16-lane quads), and a
    row of one vector held 8 accumulators, whose loads outnumber the multiply-adds' pipes
    (ResNet-50's last 3x3 layers at 143 G multiply-adds/s against 185 on 14x14 planes, quads
    on a Zen 4)."""
    best = tile_model(caps, node, g, limit)
    return None if best is None else best[1:]


def tile_model(caps, node, g: int, limit: int):
    """(model cycles, MR, NV, ROWS) of tile_shape's tile, or None."""
    simd = simd_of(caps)
    w, y = simd.width, node.outputs[0]
    steps = reduction_steps(node, g)
    fits = (lambda nv: 4 * steps * nv * w <= limit)  # noqa: E731
    point = pointwise(node)
    wo, ho = (math.prod(y.shape[2:]), 1) if point else (y.shape[-1], math.prod(y.shape[2:-1]))
    mr, nv = plan_tiles(y.shape[1], steps, wo, simd)
    while nv > 1 and not fits(nv):
        nv -= 1
    if not fits(nv):
        return None
    m, nr = y.shape[1], nv * w
    full, rest = divmod(wo, nr)
    row = math.ceil(m / mr) * ho * (full * _tile_cycles(steps, mr, nv) + (
        _tile_cycles(steps, mr, math.ceil(rest / w)) if rest else 0))
    if not point and ho > 1:
        flat = flat_rows(simd, m, steps, wo, ho, fits)
        if flat is not None and flat[0] < FLAT_GAIN * row:
            return flat
    return row, mr, nv, 1


# flat rows where the model gives them at least this much less time than tiles within a row:
# their packing puts most vectors together from two rows, and that code costs compile time
# (ResNet-18 int8 on 16 lanes, CPU s: 14.7 within rows, 21.3 with every layer the model gave a
# gain flat, most of it the 56x56 and 28x28 layers' 1-3%)
FLAT_GAIN = 0.9


def _tile_cycles(steps: int, mr: int, nv: int) -> float:
    return steps * step_cycles(mr, nv) + TILE * mr * nv


def flat_rows(simd, m: int, steps: int, wo: int, ho: int, fits):
    """(cycles, MR, NV, ROWS) of the cheapest tile of ROWS > 1 whole output rows of width wo,
    their positions flat in NV vectors (plan_tiles's model: a tile's cycles per reduction
    step, each block of MR output channels over every tile), or None."""
    w, regs = simd.width, simd.registers
    best = None
    for rows in range(2, ho + 1):
        nv = math.ceil(rows * wo / w)
        if nv > 8 or not fits(nv):
            break
        full, rest = divmod(ho, rows)
        for mr in range(1, 9):
            if mr * nv + nv + 1 >= regs:
                break
            total = math.ceil(m / mr) * (full * _tile_cycles(steps, mr, nv) + (
                _tile_cycles(steps, mr, math.ceil(rest * wo / w)) if rest else 0))
            if best is None or total < best[0]:
                best = (total, mr, nv, rows)
    return best


def reduction_steps(node, g: int) -> int:
    """int32 lanes of g steps a QConv's reduction (input channels x taps) takes."""
    return -(-node.inputs[0].shape[1] * math.prod(node.inputs[1].shape[2:]) // g)
