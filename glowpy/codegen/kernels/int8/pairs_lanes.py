"""The integer GEMM of pairs.py with the output channels on the lanes: each packed position's
group of g reduction steps is broadcast, and NVC vectors of w output channels' packed weights
are the vector operand (onnxruntime's MLAS kernels do the same). Positions on the lanes (the
other tiles of pairs.py) leave lanes empty where a row or a plane is no multiple of a vector:
a 7x7 plane's 49 positions fill 4 vectors of 16 lanes to 77%, and ResNet-18 int8's last
stage ran at 1.5x onnxruntime's time inside the model (Zen 5, 16-lane quads). Here every lane
holds an output channel (M a multiple of w); the packed tile is the same one, its positions
read one group at a time, and the outputs leave through a small stack block, a channel's P
positions at a time (their cost is counted in `lanes_cycles`)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize
from glowpy.codegen.kernels.tiles import step_cycles


NVC = 4  # channel vectors of the register tile (lanes_width asks for 32 registers)


def lanes_tile(simd) -> tuple[int, int]:
    """(positions P, channel vectors NVC) of the register tile: P x NVC accumulators, NVC
    weight vectors and a broadcast position within the target's registers (6 x 4 in 32)."""
    return (simd.registers - NVC - 1) // NVC, NVC


# cycles an output byte costs when the outputs leave through the stack block (a vector store,
# then a byte load and store; its share of the requantization): fitted to one-layer runs on a
# Zen 5 (16-lane quads), positions -> channels on the lanes: 3x3 64 -> 64 on 56x56 0.96, 128 on
# 28x28 0.94, 1x1 1024 -> 256 on 14x14 1.01, 1x1 512 -> 2048 on 7x7 0.89 (the model at 1.5:
# 1.01, 0.91, 0.99, 0.93)
STORE = 1.5
# ... and the share of the positions' model cycles it must stay under
GAIN = 0.95


def lanes_cycles(simd, m: int, steps: int, npos: int) -> float:
    """Model cycles of the GEMM over `npos` positions and M output channels with the channels on
    the lanes: P x NVC tiles (the last ones narrower), and STORE a output byte."""
    w = simd.width
    p, nvc = lanes_tile(simd)
    total = 0.0
    for chans in (nvc,) * (m // (nvc * w)) + ((m % (nvc * w)) // w,) * bool(m % (nvc * w)):
        full, rest = divmod(npos, p)
        total += full * steps * step_cycles(p, chans, -0.3) + \
            (steps * step_cycles(rest, chans, -0.3) if rest else 0)
    return total + STORE * m * npos


def lanes_width(simd, name: str, m: int, steps: int, npos: int, positions: float) -> int:
    """Output channels a block with them on the lanes (NVC vectors), or 0 where the positions
    stay on the lanes: the grouping is VNNI's quads (the one measured), every lane holds a
    channel (M a multiple of w), and the model gives the channels on the lanes less than GAIN
    of the positions' `positions` cycles (pairs_tiles.tile_model). Zen 5, 16-lane quads, one layer with
    its quantize and dequantize, positions -> channels on the lanes (onnxruntime): 3x3 512 on
    7x7 323 -> 252 us (269), 3x3 256 on 14x14 347 -> 280 (251-256), 3x3/2 256 -> 512 onto 7x7
    203 -> 159 (146-153), 3x3 128 on 28x28 324 -> 306 (268-273), 1x1 512 -> 2048 on 7x7
    151 -> 135 (153); 3x3 64 on 56x56 (0.96 when forced) and 1x1 1024 -> 256 on 14x14 (1.01)
    keep the positions. Only with 32 vector registers (AVX-512): with 16 (AVX-VNNI on ymm
    registers, 6 x 2 tiles of 8 lanes, the same Zen 5) 3x3 512 on 7x7 ran 4% and 64 on 56x56
    7% slower than with the positions on the lanes, whose rows of 8 leave fewer lanes empty;
    Zen 4 code (-mcpu=znver4: 8 lanes, 32 registers, 6 x 4 tiles) on the Zen 5 ran 3x3 512 on
    7x7, 256 on 14x14 and 128 on 28x28 in 0.87, 0.93 and 0.91 of the positions' time."""
    if name != "quads" or m % simd.width or simd.registers < 32:
        return 0
    if lanes_cycles(simd, m, steps, npos) >= GAIN * positions:
        return 0
    return lanes_tile(simd)[1] * simd.width


class LanesTile:
    """Mixin of PairsEmitter: `lanes_block` runs output channels o0 .. o0 + chans (a multiple
    of w) over the packed tile t, as `tile` does with the positions on the lanes."""

    def lanes_stage(self):
        """The stack block [P][NVC w] the outputs leave through (_store_channels)."""
        p, nvc = lanes_tile(self.vec.simd)
        stage = cg.alloca_in_entry(self.b, ir.ArrayType(cg.llvm_type(self.k.out_buf().dtype),
                                                        p * nvc * self.w), "lanes")
        stage.align = 64
        stage.type = cg.PTR
        return stage

    def lanes_block(self, n, t, o0, chans, spots):
        """Output channels o0 .. o0 + chans over the packed tile t, whose lanes hold the
        consecutive positions from spots[0][0] on (spots: tile's), P at a time: a loop over
        the whole blocks of P, then the rest."""
        k, b, w = self.k, self.b, self.w
        p, _ = lanes_tile(self.vec.simd)
        vt = ir.VectorType(I32, w)
        nvc = chans // w
        xblk = b.mul(t, k.c(self.c2 * self.nr))
        wblk = b.mul(o0, k.c(self.c2))
        bias = [b.load(cg.gep(b, self.bias, b.add(o0, k.c(j * w)), I32), typ=vt, align=4)
                for j in range(nvc)]
        q = self._channel_vectors(3, self.q, o0, nvc)
        s = self._channel_vectors(4, self.s, o0, nvc)
        first = spots[0][0]

        def block(lane0, count):
            acc = self.acc_of(count, nvc)
            acc.vals = [list(bias) for _ in range(count)]
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
