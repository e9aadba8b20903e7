"""Channel-vectorized float Conv: lanes over output channels, pixels broadcast.

The micro-kernel of conv_fast with the operands' roles swapped: per reduction step it loads
NVO vectors of weights (NVO x width consecutive output channels, packed contiguously at
compile time) and broadcasts the input value of each of NPX output pixels of one output row;
every pixel/vector pair is one accumulator. No lane is ever wasted on pixels, so this wins
where the pixel-vectorized tilings waste lanes -- small planes (7x7, 14x14) and strided
convolutions, whose input columns are not contiguous -- provided the reduction is long enough
to amortize writing the result, which goes out channel-strided (scatter; gathers for the
residual and epilogue operands). Which input pixels of which kernel column are valid is known
at compile time for every tile position along the row, as in the row tiling; the valid kernel
rows of an output row are a run-time range. Only for vector targets (width > 1)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.codegen import cgutils as cg

from glowpy.codegen.kernels.conv_fast import Shape, _blocks, _pack, kh_range
from glowpy.codegen.kernels.gemm_micro import Acc, LaneFinisher, Vec, const_input, pack_constant, simd_of

SCATTER_CYCLES = 12  # a 16-lane scatter or gather, roughly (AVX-512)


def choose(simd, s: Shape, accumulate: bool):
    """(score, NPX, NVO): useful multiply-adds per cycle, in the units of conv_fast's scores."""
    v, regs = simd.width, simd.registers
    if v == 1:
        return None
    taps = s.cg * s.kh * s.kw
    best = None
    for nvo in range(1, 4):  # measured on AVX-512: 7 pixels x 3 vectors is the sweet spot
        ob = nvo * v
        if nvo > 1 and (nvo - 1) * v >= s.mg:
            break
        full, tail = _blocks(s.mg, ob)
        for npx in range(1, min(s.wo, 8) + 1):
            if npx * nvo > min(24, regs - 8):  # measured: more accumulators spill
                break

            def cost(px, nv):
                step = max(px * nv / 2, (1.2 * px + nv) / 2, 4.5) + 1.0
                store = px * nv * SCATTER_CYCLES * (2 if accumulate else 1) / taps
                return step + store
            pfull, prem = divmod(s.wo, npx)
            row = pfull * cost(npx, nvo) + (cost(prem, nvo) if prem else 0)
            if tail:
                row_t = pfull * cost(npx, math.ceil(tail / v)) + (cost(prem, math.ceil(tail / v)) if prem else 0)
            else:
                row_t = 0
            score = s.mg * s.wo / (full * row + row_t)
            if tail:
                score *= 0.97
            if best is None or score > best[0]:
                best = (score, npx, nvo)
    return best


class ChanEmitter:
    def __init__(self, k, s: Shape, npx: int, nvo: int):
        self.k, self.s, self.b = k, s, k.b
        self.simd = simd_of(k.target)
        self.vec = Vec(k, self.simd)
        self.npx, self.nvo = npx, nvo
        self.ob = nvo * self.vec.w
        # per group and block of OB channels: kernel row, kernel column, channel, OB channels
        self.wp = pack_constant(k, 1, _pack(const_input(k, 1), s, self.ob, (2, 3, 1)), "packed_w")
        self.fin = LaneFinisher(k, self.vec, 1)
        self.bias = k.inp(2)

    def emit(self):
        k, s = self.k, self.s
        with k.for_range(s.n, name="n") as n:
            if s.g == 1:
                self.group(n, k.c(0))
            else:
                with k.for_range(s.g, name="g") as gi:
                    self.group(n, gi)

    def runs(self):
        """Tile positions along a row sharing (pixels, valid pixels per kernel column)."""
        s, out = self.s, []
        for t in range(math.ceil(s.wo / self.npx)):
            ow0 = t * self.npx
            npx = min(self.npx, s.wo - ow0)
            sig = (npx, tuple(tuple(0 <= (ow0 + p) * s.sw + c * s.dw - s.pl < s.win for p in range(npx))
                              for c in range(s.kw)))
            if out and out[-1][2] == sig and out[-1][1] == t:
                out[-1] = (out[-1][0], t + 1, sig)
            else:
                out.append((t, t + 1, sig))
        return out

    def group(self, n, gi):
        k, b, s = self.k, self.b, self.s
        runs = self.runs()
        full, tail = _blocks(s.mg, self.ob)

        def blocks(body):
            if full == 1:
                body(k.c(0), self.ob)
            elif full > 1:
                with k.for_range(full, name="ob") as ob:
                    body(b.mul(ob, k.c(self.ob)), self.ob)
            if tail:
                body(k.c(full * self.ob), tail)

        def rows(body):
            if s.ho == 1:
                body(k.c(0))
            else:
                with k.for_range(s.ho, name="oh") as oh:
                    body(oh)

        def tiles(oh, body):
            for t0, t1, sig in runs:
                if t1 - t0 == 1:
                    body(oh, k.c(t0 * self.npx), sig)
                else:
                    with k.for_range(t1, start=t0, name="t") as t:
                        body(oh, b.mul(t, k.c(self.npx)), sig)

        def kernel(o0, nch, oh, ow0, sig):
            self.kernel(n, gi, o0, nch, oh, ow0, sig)

        w_bytes = s.mg * s.ktot * 4
        import os
        order = os.environ.get("GLOWPY_ORDER")  # TEMP
        if (order == "tiles" or (order is None and w_bytes <= (256 << 10))) or s.g > 1:  # weights stay in cache: pixels outermost
            rows(lambda oh: tiles(oh, lambda oh_, ow0, sig: blocks(
                lambda o0, nch: kernel(o0, nch, oh_, ow0, sig))))
        else:  # stream the weights once, re-read the (smaller) input per block
            blocks(lambda o0, nch: rows(lambda oh: tiles(
                oh, lambda oh_, ow0, sig: kernel(o0, nch, oh_, ow0, sig))))

    def kh_range(self, oh):
        return kh_range(self.k, self.s, oh)

    def kernel(self, n, gi, o0, nch, oh, ow0, sig):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w
        npx, valid = sig
        nvo = math.ceil(nch / w)
        chmask = [tuple(v * w + l < nch for l in range(w)) for v in range(nvo)]
        pin = s.hin * s.win
        xb = b.mul(b.add(b.mul(n, k.c(s.c)), b.mul(gi, k.c(s.cg))), k.c(pin))
        wb = b.mul(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(s.ktot))
        acc = Acc(vec, npx, nvo)
        lo, hi = self.kh_range(oh)
        with acc.loop(k, hi, lo, name="kh") as a:
            ih = b.sub(b.add(b.mul(oh, k.c(s.sh)), b.mul(a, k.c(s.dh))), k.c(s.pt))
            row0 = b.add(b.add(xb, b.mul(ih, k.c(s.win))), b.mul(ow0, k.c(s.sw)))
            # kernel columns outside the channel loop: one column's NPX broadcasts are live at
            # a time (shared across columns they would crowd the accumulators out of registers)
            for c in range(s.kw):
                if not any(valid[c]):
                    continue
                wcol = b.add(wb, b.mul(b.add(b.mul(a, k.c(s.kw)), k.c(c)), k.c(s.cg * nch)))
                with acc.loop(k, s.cg, name="ic") as ic:
                    woff = b.add(wcol, b.mul(ic, k.c(nch)))
                    col0 = b.add(row0, b.mul(ic, k.c(pin)))
                    bv = [vec.load(self.wp, b.add(woff, k.c(v * w)), chmask[v]) for v in range(nvo)]
                    av = [k.load(k.inp(0), b.add(col0, k.c(p * s.sw + c * s.dw - s.pl)), np.float32)
                          if valid[c][p] else None for p in range(npx)]
                    acc.fma(av, bv)
        spatial = k.out_buf().shape[2:]
        for v in range(nvo):
            oc = b.add(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(v * w))
            bias = vec.load(self.bias, oc, chmask[v]) if self.bias is not None else None
            for p in range(npx):
                val = acc.value(p, v)
                if bias is not None:
                    val = b.fadd(val, bias)
                ow = b.add(ow0, k.c(p))
                if len(spatial) == 2 and s.rank == 2:
                    pos = [oh, ow]
                else:  # a flattened 1x1 convolution: ow is the position in the whole plane
                    pos, rem = [], ow
                    for st in cg.contiguous_strides(spatial):
                        pos.append(b.udiv(rem, k.c(st)) if st > 1 else rem)
                        rem = b.urem(rem, k.c(st)) if st > 1 else k.c(0)
                self.fin.finish_at(val, [n, oc] + pos, chmask[v])
