"""The integer GEMM of pairs.py with the output channels on the lanes: each packed position's
group of g reduction steps is broadcast, and NVC vectors of w output channels' packed weights
are the vector operand (onnxruntime's MLAS kernels do the same). Positions on the lanes (the
other tiles of pairs.py) leave lanes empty where a row or a plane is no multiple of a vector:
a 7x7 plane's 49 positions fill 4 vectors of 16 lanes to 77%, and ResNet-18 int8's last
stage ran at 1.5x onnxruntime's time inside the model (Zen 5, 16-lane quads). Here every lane
holds an output channel (M a multiple of w); the packed tile is the same one, its positions
read one group at a time, and the outputs leave through a small stack block, a channel's P
positions at a time (their cost is counted in `lanes_cycles`). quads16's corrections are
made with the positions on the lanes, as its other tiles make them, and start the block's
sums (_fix_block)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.groups import HELD
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize
from glowpy.codegen.kernels.tiles import step_cycles


def lanes_tile(simd, name: str = "quads") -> tuple[int, int]:
    """(positions P, channel vectors NVC) of the register tile: P x NVC accumulators, NVC
    weight vectors, a broadcast position and what the grouping's multiply-add holds
    (groups.HELD) within the target's registers: 6 x 4 in 32, 6 x 2 in 16 (quads16: 5 x 2)."""
    nvc = 4 if simd.registers >= 32 else 2
    return (simd.registers - nvc - 1 - HELD.get(name, 0)) // nvc, nvc


# cycles an output byte costs when the outputs leave through the stack block (a vector store,
# then a byte load and store; its share of the requantization): fitted to one-layer runs on a
# Zen 5 (16-lane quads), positions -> channels on the lanes: 3x3 64 -> 64 on 56x56 0.96, 128 on
# 28x28 0.94, 1x1 1024 -> 256 on 14x14 1.01, 1x1 512 -> 2048 on 7x7 0.89 (the model at 1.5:
# 1.01, 0.91, 0.99, 0.93)
STORE = 1.5
# cycles an output costs for quads16's corrections (_fix_block: w extracts and stores a channel
# and vector of positions)
FIX = 1.0
# ... and the share of the positions' model cycles it must stay under
GAIN = 0.95


def lanes_cycles(simd, name: str, m: int, steps: int, npos: int, fixes: bool = False) -> float:
    """Model cycles of the GEMM over `npos` positions and M output channels with the channels on
    the lanes: P x NVC tiles (the last ones narrower), STORE a output byte, and FIX a output
    where quads16 has corrections (their transposing stores, _fix_block; the corrections'
    multiply-adds are those of the positions' tiles)."""
    w = simd.width
    p, nvc = lanes_tile(simd, name)
    total = 0.0
    full, rest = divmod(npos, p)
    for chans in (nvc,) * (m // (nvc * w)) + ((m % (nvc * w)) // w,) * bool(m % (nvc * w)):
        total += full * steps * step_cycles(p, chans, -0.3) + \
            (steps * step_cycles(rest, chans, -0.3) if rest else 0)
    return total + (STORE + FIX * fixes) * m * npos


def lanes_width(simd, name: str, m: int, steps: int, npos: int, positions: float,
                fixes: bool = False) -> int:
    """Output channels a block with them on the lanes (NVC vectors), or 0 where the positions
    stay on the lanes: every lane holds a channel (M a multiple of w), and the model gives the
    channels on the lanes less than GAIN of the positions' `positions` cycles
    (pairs_tiles.tile_model). Zen 5, 16-lane quads, one layer with its quantize and
    dequantize, positions -> channels on the lanes (onnxruntime): 3x3 512 on 7x7 323 -> 252 us
    (269), 3x3 256 on 14x14 347 -> 280 (251-256), 3x3/2 256 -> 512 onto 7x7 203 -> 159
    (146-153), 3x3 128 on 28x28 324 -> 306 (268-273), 1x1 512 -> 2048 on 7x7 151 -> 135 (153);
    3x3 64 on 56x56 (0.96 when forced) and 1x1 1024 -> 256 on 14x14 (1.01) keep the positions.
    With 16 vector registers the tile is 6 x 2 (quads16: 5 x 2): AVX-VNNI on ymm registers
    (-mcpu=x86-64-v3 -mattr=+avxvnni on the same Zen 5) with a 2 x 4 tile had run 3x3 512 on
    7x7 4% and 64 on 56x56 7% slower than the positions; with 6 x 2 ResNet-18 int8 runs in
    0.956 of the positions' time, ResNet-50 int8 in 0.977. quads16 (AVX2 code on the Zen 5,
    ResNet-18 int8, every convolution direct, bundle-profile, builds alternated), the channels
    on the lanes against the positions: cycles 0.84-0.86 on its 3x3 512 on 7x7 (the model
    0.78), 0.88 on 256 on 14x14 (0.86), 0.90-0.91 on 128 on 28x28 (0.87), 0.90-0.93 at stride
    2 (0.80-0.95); 64 on 56x56 0.92 forced without corrections (the model 1.02: it keeps the
    positions). The corrections' block is NR x NVC w int32 of stack (AVX2: 1 KiB). Whole
    models, AVX2 code: ResNet-18 int8 0.964 of the time, ResNet-50 int8 0.972; as AVX-512 code
    without VNNI (-mcpu=skylake-avx512, 16-lane quads16) ResNet-18 int8 0.80."""
    if name not in ("quads", "quads16") or m % simd.width:
        return 0
    if lanes_cycles(simd, name, m, steps, npos, fixes) >= GAIN * positions:
        return 0
    return lanes_tile(simd, name)[1] * simd.width


class LanesTile:
    """Mixin of PairsEmitter: `lanes_block` runs output channels o0 .. o0 + chans (a multiple
    of w) over the packed tile t, as `tile` does with the positions on the lanes."""

    def lanes_stage(self):
        """The stack block [P][NVC w] the outputs leave through (_store_channels), and where
        quads16 has corrections the block [NR][NVC w] of a packed tile's (_fix_block)."""
        p, nvc = lanes_tile(self.vec.simd, self.grp.name)
        self.fix_stage = cg.stack_block(self.b, I32, self.nr * nvc * self.w, "fixes") \
            if self.fixes else None
        return cg.stack_block(self.b, cg.llvm_type(self.k.out_buf().dtype), p * nvc * self.w,
                              "lanes")

    def lanes_block(self, n, t, o0, chans, spots):
        """Output channels o0 .. o0 + chans over the packed tile t, whose lanes hold the
        consecutive positions from spots[0][0] on (spots: tile's), P at a time: a loop over
        the whole blocks of P, then the rest."""
        k, b, w = self.k, self.b, self.w
        p, _ = lanes_tile(self.vec.simd, self.grp.name)
        vt = ir.VectorType(I32, w)
        nvc = chans // w
        xblk = b.mul(t, k.c(self.c2 * self.nr))
        wblk = b.mul(o0, k.c(self.c2))
        bias = [b.load(cg.gep(b, self.bias, b.add(o0, k.c(j * w)), I32), typ=vt, align=4)
                for j in range(nvc)]
        q = self._channel_vectors(3, self.q, o0, nvc)
        s = self._channel_vectors(4, self.s, o0, nvc)
        first = spots[0][0]
        if self.fixes:
            self._fix_block(t, o0, chans)

        def block(lane0, count):
            acc = self.acc_of(count, nvc)
            acc.vals = [list(bias) for _ in range(count)]
            if self.fixes:  # the sums start from the block's corrections too
                acc.vals = [[b.add(v, b.load(cg.gep(b, self.fix_stage, b.add(
                    b.mul(b.add(lane0, k.c(i)), k.c(self.lanes)), k.c(j * w)), I32), typ=vt,
                    align=4)) for j, v in enumerate(row)] for i, row in enumerate(acc.vals)]
            with acc.loop(k, self.c2, name="cc") as cc:
                x0 = b.add(b.add(xblk, b.mul(cc, k.c(self.nr))), lane0)
                xs = [self.vec.isplat(k.load(self.buf, b.add(x0, k.c(i)), np.int32))
                      for i in range(count)]
                w0 = b.add(wblk, b.mul(cc, k.c(chans)))
                ws = [b.load(cg.gep(b, self.wp, b.add(w0, k.c(j * w)), I32), typ=vt, align=4)
                      for j in range(nvc)]
                acc.madd(xs, ws, act_rows=True)
            self._store_channels(n, o0, acc, b.add(first, lane0), q, s)
        cg.for_runs(b, sum(lanes for _, lanes in spots), p, block, k.intp, "pb")

    def _fix_block(self, t, o0, chans):
        """quads16's corrections of channels o0 .. o0 + chans over the packed tile t into the
        stack block [NR][lanes] (fix_stage), whose rows the accumulators start from: each
        channel's computed as the positions' tile does (groups.Quads16.correct, a
        multiply-add of a vector of positions for each of its corrected quads), then stored a
        position a row. Corrections with the channels on the lanes would take a multiply-add
        of a vector of channels for every position and every (vector, quad) block where one of
        them saturates, 8 times the work of these on 8 lanes: ResNet-18 int8's 3x3 512 on 7x7
        layers (AVX2 code, Zen 5) ran in 0.82 of the positions' cycles without corrections and
        0.92-0.96 with them so."""
        k, b, w = self.k, self.b, self.w
        xblk = b.mul(t, k.c(self.c2 * self.nr))
        vt = ir.VectorType(I32, w)

        def load(q, j):
            at = b.add(b.add(xblk, b.mul(q, k.c(self.nr))), k.c(j * w))
            return b.load(cg.gep(b, self.buf, at, I32), typ=vt, align=4)
        with k.for_range(chans, name="fc") as c:
            acc = self.acc_of(1, self.nv)
            self.grp.correct(k, self.fixes, acc, b.add(o0, c), 1, load)
            for j in range(self.nv):
                v = acc.value(0, j)
                for e in range(w):
                    at = b.add(k.c((j * w + e) * self.lanes), c)
                    b.store(b.extract_element(v, ir.Constant(I32, e)),
                            cg.gep(b, self.fix_stage, at, I32))

    def _channel_vectors(self, idx, shared, o0, nvc):
        """The requantization multipliers or shifts of the block's channel vectors: a Python
        int shared by every channel, else vectors loaded from the table (input idx)."""
        if shared is not None:
            return [shared] * nvc
        b, k = self.b, self.k
        vt = ir.VectorType(I32, self.w)
        return [b.load(cg.gep(b, k.inp(idx), b.add(o0, k.c(j * self.w)), I32), typ=vt, align=4)
                for j in range(nvc)]

    def _store_channels(self, n, o0, acc, at, q, s):
        """Each accumulator (position at + i, w channels) requantized, clamped and stored as
        bytes into a stack block [P][channels], then copied out a channel at a time (its P
        positions, a plane apart from the next channel's) in a loop: storing each vector's
        bytes in place, 16 extracts and stores a vector unrolled, took ResNet-18 int8 from
        18.8 to 36.8 s of compile (Zen 5, 16 lanes)."""
        k, b, w = self.k, self.b, self.w
        et = cg.llvm_type(k.out_buf().dtype)
        chans = len(q) * w
        for i in range(acc.mr):
            for j in range(len(q)):
                v = clamp(b, requantize(b, acc.value(i, j), q[j], s[j], k.attrs["mode"],
                                        self.wide, self.ties), self.attrs)
                b.store(b.trunc(v, ir.VectorType(et, w)),
                        cg.gep(b, self.stage, k.c(i * chans + j * w), et), align=1)
        base = b.add(b.mul(b.add(b.mul(n, k.c(self.m)), o0), k.c(self.npos)), at)
        with k.for_range(chans, name="oc") as c:
            row = b.add(base, b.mul(c, k.c(self.npos)))
            for i in range(acc.mr):
                v = b.load(cg.gep(b, self.stage, b.add(c, k.c(i * chans)), et), typ=et)
                b.store(v, cg.gep(b, k.out(), b.add(row, k.c(i)), et))
