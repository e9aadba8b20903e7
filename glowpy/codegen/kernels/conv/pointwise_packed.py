"""Stride-1 1x1 float Conv on vector targets: a panel of input positions packed, then a GEMM.

conv/pixel.py's flat tiles run an unstrided 1x1 as a GEMM straight on the input planes: per
reduction step each of its NV vectors comes from another channel's plane, a plane's length
apart (56x56: 12,544 bytes, which maps the K rows of a tile onto 16 of the L1's 64 sets; 14x14:
784 bytes, every vector split across two lines). Here a panel of positions is first copied
once into a stack buffer laid out [tile][C][NR] -- each tile of NR positions a contiguous,
aligned K x NR micro-panel that the multiply-adds stream through -- and MR output channels x
NV vectors accumulate over C from it, the weights packed [M/MR][C][MR] as pointwise_strided
packs them (the same register tile: plan_tiles). Within a panel the output-channel blocks
are outermost, so a block's weights stay in L1 across the panel's tiles and all the weights
are read once per panel."""
from __future__ import annotations

import math

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import const_input
from glowpy.codegen.kernels.conv.pointwise_strided import (
    SCRATCH_MAX, PointwiseTiles, plan_tiles, tail_group)
from glowpy.codegen.kernels.tiles import L1_WAYS, LINE, l1_sets, shape_of
from glowpy.codegen.kernels.vectors import Simd
from glowpy.codegen.registry import variant

MIN_K = 16  # input channels from which packing pays (fewer: pixel_vectorized's flat tiles)


def panel_tiles(c: int, nr: int, tiles: int, budget: int) -> int:
    """Tiles of NR positions per panel: as many as `budget` bytes hold, at most the plane's,
    panels of equal size."""
    fit = max(1, budget // (4 * c * nr))
    return math.ceil(tiles / math.ceil(tiles / min(fit, tiles)))


def pays(caps, c: int, npos: int) -> bool:
    """Packing pays where pixel_vectorized's flat tiles read their K rows badly: planes that
    are not whole cache lines, whose every vector straddles two lines (14x14: 784 bytes, 7x7,
    25x5), with an input past L1 (one already in L1 gains nothing: the keyword-spotting
    model's 64-channel 25x5 layers, 32 KB, ran 1.8% slower packed). Zen 3, AVX2, one layer
    + bias + Relu, flat tiles -> packed (two runs): 512 -> 512 at 14x14 1.20-1.31 ->
    1.09-1.15 ms, 1024 -> 1024 at 7x7 1.46-1.51 -> 1.28-1.41 ms; planes of whole lines level or slower packed (the
    copy, with nothing to gain: 128 -> 128 at 56x56 1.08 -> 1.10 ms, 256 -> 64 at 56x56
    1.05 -> 1.11-1.15 ms, 256 -> 256 at 28x28 1.03-1.09 -> 1.05-1.07 ms). Whole models,
    packing every stride-1 1x1 / only these (the bundles alone, best of 5 alternating
    rounds): MobileNetV1 0.958 / 0.957 of the unpacked time, MobileNetV2 0.951 / 0.961,
    ResNet-50 0.987 / 0.979, DenseNet-121 0.982 / 0.988, ResNeXt 0.992 / 0.988.
    Planes a multiple of 2 KiB apart (32x32, 64x64, a 2048-point Conv1d) pay too: their K
    rows fall in one or two L1 sets, which 8 ways cannot hold. Zen 4, AVX2 code, one layer,
    best of 6 alternating rounds, flat 6 x 2 tiles -> packed: 128 -> 1024 on 2048 points (PointNet)
    9.09 -> 5.02 ms, 64 -> 256 on 64x64 1.57 -> 1.31 ms, 256 -> 256 on 32x32 2.10 -> 1.71,
    32 -> 32 on 128x128 586 -> 492 us; AVX-512 -4% to +9% (level on the whole); 16x16 planes
    (four sets) stay unpacked: AVX2 128 -> 128 level, 256 -> 64 89 -> 98 us packed."""
    past_l1 = not caps.l1d_bytes or 4 * c * npos > caps.l1d_bytes
    sets = l1_sets(4 * npos, c)
    return past_l1 and ((4 * npos) % LINE != 0 or (sets <= 2 and sets * L1_WAYS < c))


def plan(k):
    """{"mr", "nv", "tiles"} for an unpadded stride-1 1x1 Conv (shape_of flattens it into one
    row), one group, constant weights, at least MIN_K input channels, on a vector target, where
    packing pays or the plane ends in a short_tail, and one micro-panel (C x NR floats) fits
    SCRATCH_MAX of stack."""
    s = shape_of(k)
    simd = Simd.of(k.caps)
    if s is None or simd.width == 1 or s.g != 1 or s.hin != 1 or s.kw != 1 or s.sw != 1 or \
            s.pl or s.wo != s.win or s.c < MIN_K or const_input(k, 1) is None:
        return None
    mr, nv = plan_tiles(s.m, s.c, s.wo, simd)
    nr = nv * simd.width
    tail = short_tail(s.wo, nr, simd) and tail_group(mr, s.c, s.wo % nr, simd)
    if 4 * s.c * nr > SCRATCH_MAX or not (pays(k.caps, s.c, s.wo) or tail):
        return None
    return {"mr": mr, "nv": nv, "tiles": panel_tiles(s.c, nr, math.ceil(s.wo / nr), SCRATCH_MAX)}


def short_tail(npos: int, nr: int, simd) -> bool:
    """The last tile has at most a quarter vector of positions: there these tiles, whose full
    tiles fill every lane and whose tail runs lanes over channels (tail_group), beat the
    channel-vectorized ones on small planes even with their input in L1 (conv/channel.py
    defers to them). Zen 3, one 1x1 layer + bias + Relu, channel-vectorized -> packed: on 7x7
    (49 = 3 x 16 + 1) 64 -> 64 5.4 -> 4.9 us, 128 -> 128 20.2 -> 18.7, 96 -> 576 69 -> 61,
    160 -> 960 202 -> 169; on 6x6 (36 = 2 x 16 + 4) 128 -> 128 13.5 -> 14.1 us."""
    return 0 < npos % nr <= simd.width // 4


def takes_small_plane(k) -> bool:
    """The plan applies with a short_tail (conv/channel.py's small-plane rule yields)."""
    p, simd = plan(k), Simd.of(k.caps)
    return p is not None and short_tail(shape_of(k).wo, p["nv"] * simd.width, simd)


def channel_chunk(caps, node) -> int | None:
    """Input channels per chunk (kernels/catalog.late_rewrites: the Conv split over chunks of
    its input channels, glowpy/ir/passes/split_reduction.py) for a stride-1 1x1 whose
    micro-panel (C x NR floats) outgrows SCRATCH_MAX where packing would pay; None otherwise.
    Unpacked, such a layer reads every reduction step's vectors a plane apart: ResNet-50's
    2048 -> 512 on 7x7 (with bias and Relu, Zen 3, best of 12 alternating rounds) took 1.88 ms,
    in two packed chunks of 1024 channels 1.34 ms (four of 512: 1.36; onnxruntime 1.24)."""
    x, w = node.inputs[0], node.inputs[1]
    win = node.opdef.window(node)
    simd = Simd.of(caps)
    if simd.width == 1 or len(x.shape) not in (3, 4) or any(k != 1 for k in win.kernel) or \
            any(v != 1 for v in win.strides) or any(win.pads_begin) or any(win.pads_end):
        return None
    c, npos = x.shape[1], math.prod(x.shape[2:])
    _, nv = plan_tiles(w.shape[0], c, npos, simd)
    most = SCRATCH_MAX // (4 * nv * simd.width)
    if c <= most or most < MIN_K:
        return None
    chunks = math.ceil(c / most)
    while math.ceil(c / chunks / 8) * 8 > most:
        chunks += 1
    chunk = math.ceil(c / chunks / 8) * 8
    return chunk if pays(caps, chunk, npos) else None


class PointwisePackedEmitter(PointwiseTiles):
    def __init__(self, k, p):
        super().__init__(k, p["mr"], p["nv"])
        self.nt = p["tiles"]
        self.nr = self.nv * self.vec.w
        self.buf = self.stack_buffer(self.nt * self.s.c * self.nr, "panel")

    def emit(self):
        """Panels of nt full tiles (a loop), the rest of the full tiles, the partial tile."""
        k, b, s = self.k, self.b, self.s
        nr, nt = self.nr, self.nt
        full, rest = divmod(s.wo, nr)
        panels, left = divmod(full, nt)
        with k.for_range(s.n, name="n") as n:
            if panels == 1:
                self.panel(n, k.c(0), nt, None)
            elif panels > 1:
                with k.for_range(panels, name="panel") as pi:
                    self.panel(n, b.mul(pi, k.c(nt * nr)), nt, None)
            if left:
                self.panel(n, k.c(panels * nt * nr), left, None)
            if rest and tail_group(self.mr, s.c, rest, Simd.of(k.caps)):
                self.pack(n, k.c(full * nr), 1, rest)
                self.tail(n, lambda c, j: b.add(b.mul(c, k.c(nr)), k.c(j)), k.c(full * nr), rest)
            elif rest:
                self.panel(n, k.c(full * nr), 1, rest)

    def blocks(self, body):
        cg.for_runs(self.b, self.s.m, self.mr, body, self.k.intp, "mb")

    def tiles(self, count, body):
        k = self.k
        if count == 1:
            body(k.c(0))
        else:
            with k.for_range(count, name="t") as t:
                body(t)

    def panel(self, n, p0, count, last):
        """Positions p0 .. p0 + count * NR (`last`: the valid ones of a single partial tile)."""
        self.pack(n, p0, count, last)
        self.blocks(lambda o0, rows: self.tiles(count, lambda t: self.panel_tile(n, p0, t, o0, rows, last)))

    def pack(self, n, p0, count, last):
        """buf[t][c][0:NR] = x[n, c, p0 + t*NR : p0 + (t+1)*NR] (lanes past `last`: zero)."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w

        def one(t):
            q0 = b.add(p0, b.mul(t, k.c(self.nr)))
            dst = b.mul(t, k.c(s.c * self.nr))
            with k.for_range(s.c, name="c") as c:
                src = b.add(b.mul(b.add(b.mul(n, k.c(s.c)), c), k.c(s.wo)), q0)
                d = b.add(dst, b.mul(c, k.c(self.nr)))
                for j in range(self.nv):
                    mask = None if last is None else tuple(j * w + e < last for e in range(w))
                    vec.store(vec.load(k.inp(0), b.add(src, k.c(j * w)), mask), self.buf,
                              b.add(d, k.c(j * w)))
        self.tiles(count, one)

    def panel_tile(self, n, p0, t, o0, rows, last):
        """Output channels o0 .. o0 + rows x tile t of the panel at p0."""
        k, b, s = self.k, self.b, self.s
        tnv = self.nv if last is None else math.ceil(last / self.vec.w)
        xblk = b.mul(t, k.c(s.c * self.nr))
        self.tile(n, o0, rows, tnv, lambda c: b.add(xblk, b.mul(c, k.c(self.nr))),
                  b.add(p0, b.mul(t, k.c(self.nr))), last)


@variant("Conv", "pointwise_packed", rank=25, plan=plan)
def emit(k, p):
    PointwisePackedEmitter(k, p).emit()
