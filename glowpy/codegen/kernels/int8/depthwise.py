"""3x3 depthwise QConv on the Arm M-profile DSP extension (the "depthwise_dsp" variant: group ==
C_in == C_out, int8 weights, horizontal stride 1 or 2, dilation 1, int8/uint8 output).

The layout is NCHW, so a channel's taps are contiguous along a row and two channels are a
plane apart. Pairing channels (CMSIS-NN's NHWC scheme) would cost two byte loads and a PKHBT
per pair of taps; pairing *output positions* of one channel costs one LDR per kernel row:
the word x[c0..c0+3] split by SXTB16 into (x0, x2) and (x1, x3) serves both outputs of a
stride-1 pair, with the weights of the row held in registers as (w0, w2) and w1:

    out0 += SMLAD((x0, x2), (w0, w2)) + SMLABB(x1, w1)
    out1 += SMLAD((x1, x3), (w0, w2)) + SMLATB(x2, w1)

7 instructions for 6 multiply-accumulates (stride 2: out1 = w0*x2 + w1*x3 + w2*x4 from the
top lanes and one more byte, 9 for 6). The weights are packed once per channel (13
instructions), the input zero point is folded into the bias (bias - x_zp * sum(w)), so a tap
in the padding is simply the byte x_zp: border words are the row's word shifted with x_zp
bytes or'ed in (two more instructions) and rows in the padding are constant words. Output
rows and pairs whose windows lie inside the input run in loops without any bounds
arithmetic; the few border rows and pairs are emitted statically. Requantization is fused
into the store and drops the half-even tie correction where qmath.ties_possible proves it
dead (the accumulators' bound is known from the weights). Registers only: no stack buffer."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen.kernels.int8.conv_fast import load_word, pack, smlad, sxtb16, _intr
from glowpy.codegen.kernels.int8.conv_shape import QConvShape
from glowpy.codegen.kernels.int8.quant import I32, finish
from glowpy.codegen.kernels.int8.taps import channel_params, ties
from glowpy.codegen.registry import variant


def plan(k):
    """{"stride": (sh, sw), "ties": bool} for 3x3 depthwise convolutions on DSP cores."""
    c = QConvShape.of(k)
    win = c.win
    if not (c.dsp and c.requant and c.g == c.c == c.m and c.w.dtype == np.int8
            and len(win.in_size) == 2 and tuple(win.kernel) == (3, 3)
            and all(d == 1 for d in win.dilations) and win.strides[1] in (1, 2)
            and np.dtype(c.x.dtype) in (np.dtype(np.int8), np.dtype(np.uint8))
            and k.const(1) is not None and k.const(2) is not None):
        return None
    return {"stride": tuple(win.strides), "ties": ties(k, c.x.dtype, c.zp)}


def _smla(k, which, a, w, acc):
    """SMLA<x><y>: acc + a.<x> * w.<y> (b: bottom 16-bit half, t: top)."""
    return k.b.call(_intr(k, f"llvm.arm.smla{which}", 3), [a, w, acc])


class _Row:
    """One kernel row's input for the current output row: its element offset (an IR value)
    or None when the row lies in the padding, and the largest input row it can be (for the
    static memory-safety check of reads past the row's end)."""

    def __init__(self, off, rmax):
        self.off, self.rmax = off, rmax


class _Emitter:
    def __init__(self, k, c: QConvShape, params):
        self.k, self.b, self.c = k, k.b, c
        win = c.win
        self.h, self.w = win.in_size
        self.oh, self.ow = win.out_size
        self.sh, self.sw = win.strides
        self.pt, self.pl = win.pads_begin
        self.signed = np.dtype(c.x.dtype) == np.dtype(np.int8)
        zb = c.zp & 0xFF
        self.zp_word = zb * 0x01010101
        self.ties = params["ties"]
        self.q_c, self.s_c = channel_params(k, 3), channel_params(k, 4)

    # -- words of four input bytes ----------------------------------------------------------

    def _lanes(self, v: int):
        """SXTB16/UXTB16 of a constant word, as two constants (even, odd bytes)."""
        def ext(byte):
            return byte - 256 if self.signed and byte >= 128 else byte
        by = [(v >> (8 * j)) & 0xFF for j in range(4)]
        mk = lambda lo, hi: ir.Constant(I32, (ext(lo) & 0xFFFF) | ((ext(hi) & 0xFFFF) << 16))
        return mk(by[0], by[2]), mk(by[1], by[3])

    def _safe(self, row: _Row, col: int) -> bool:
        """Reading the byte at `col` of the row (col may pass the row's end) stays inside the
        input tensor for every row this code runs for."""
        c = self.c
        last = ((c.n * c.c - 1) * self.h + row.rmax) * self.w + col
        return col >= 0 and last < c.n * c.c * self.h * self.w

    def word(self, row: _Row, c0: int, needed):
        """x[c0 .. c0+3] of the row as (even lanes, odd lanes), x_zp for columns in the
        padding; bytes not in `needed` may hold anything."""
        b, k, w = self.b, self.k, self.w
        inside = [j for j in range(4) if 0 <= c0 + j < w]
        pad = [j for j in needed if j not in inside]
        pad_word = sum(((self.zp_word >> (8 * j)) & 0xFF) << (8 * j) for j in pad)
        if row.off is None or not [j for j in needed if j in inside]:
            return self._lanes(self.zp_word)
        if not pad and len(inside) == 4:
            v = load_word(k, k.inp(0), b.add(row.off, k.c(c0)))
        elif c0 < 0 and self._safe(row, 3):  # left padding: the row's first word, shifted
            v = b.shl(load_word(k, k.inp(0), row.off), ir.Constant(I32, -8 * c0))
            garbage = [j for j in needed if c0 + j >= w]
            if garbage:
                keep = sum(0xFF << (8 * j) for j in range(4) if j in inside)
                v = b.and_(v, ir.Constant(I32, keep))
        elif c0 >= 0 and w >= 4 and c0 > w - 4:  # right padding: the row's last word, shifted
            v = b.lshr(load_word(k, k.inp(0), b.add(row.off, k.c(w - 4))),
                       ir.Constant(I32, 8 * (c0 - (w - 4))))
        else:  # narrow rows: byte by byte
            v = ir.Constant(I32, 0)
            for j in needed:
                if j in inside:
                    byte = b.zext(k.load(k.inp(0), b.add(row.off, k.c(c0 + j)), np.uint8), I32)
                    v = b.or_(v, b.shl(byte, ir.Constant(I32, 8 * j)) if j else byte)
        if pad_word:
            v = b.or_(v, ir.Constant(I32, pad_word))
        return sxtb16(k, v, signed=self.signed), sxtb16(k, v, True, self.signed)

    def byte(self, row: _Row, col: int):
        """One input value (sign/zero-extended) in the bottom half of an i32; x_zp in the
        padding."""
        if row.off is None or not 0 <= col < self.w:
            return ir.Constant(I32, self.c.zp)
        v = self.k.load(self.k.inp(0), self.b.add(row.off, self.k.c(col)), self.c.x.dtype)
        return self.b.sext(v, I32) if self.signed else self.b.zext(v, I32)

    # -- one unit: a pair of outputs (or one) of the current output row ---------------------

    def unit(self, rows, ow: int | ir.Value, c0, count: int, border: bool):
        """Sums for outputs ow (.. ow+count-1) of the row; c0: their first input column (an
        int for border units, which need static column checks)."""
        b, k = self.b, self.k
        s2 = self.sw == 2
        needed = range(4) if count == 2 else range(3)
        accs = [self.acc0] * count
        ow = k.c(ow) if isinstance(ow, int) else ow
        for r, row in enumerate(rows):
            w02, w1 = self.w02[r], self.w1[r]
            if border:
                xe, xo = self.word(row, c0, needed)
            elif row.off is None:
                xe, xo = self._lanes(self.zp_word)
            else:
                v = load_word(k, k.inp(0), b.add(row.off, c0))
                xe, xo = sxtb16(k, v, signed=self.signed), sxtb16(k, v, True, self.signed)
            accs[0] = _smla(k, "bb", xo, w1, smlad(k, xe, w02, accs[0]))
            if count == 2 and not s2:
                accs[1] = _smla(k, "tb", xe, w1, smlad(k, xo, w02, accs[1]))
            elif count == 2:  # stride 2: out1 = w0*x2 + w1*x3 + w2*x4
                if border:
                    x4 = self.byte(row, c0 + 4)
                elif row.off is None:
                    x4 = ir.Constant(I32, self.c.zp)
                else:
                    x4 = self.byte_at(row, b.add(c0, k.c(4)))
                a1 = _smla(k, "tb", xe, w02, accs[1])
                a1 = _smla(k, "tb", xo, w1, a1)
                accs[1] = _smla(k, "bt", x4, w02, a1)
        for j, acc in enumerate(accs):
            o = b.add(ow, k.c(j)) if j else ow
            finish(k, acc, self.q, self.s, k.out(), b.add(self.o_row, o), k.out_buf().dtype,
                   wide=self.c.wide, ties=self.ties)

    def byte_at(self, row: _Row, col):
        v = self.k.load(self.k.inp(0), self.b.add(row.off, col), self.c.x.dtype)
        return self.b.sext(v, I32) if self.signed else self.b.zext(v, I32)

    # -- one output row ---------------------------------------------------------------------

    def units(self):
        """[(ow, count, c0, interior)] along an output row."""
        step = 2
        out = []
        for ow in range(0, self.ow, step):
            count = min(step, self.ow - ow)
            c0 = ow * self.sw - self.pl
            last = c0 + (4 if self.sw == 2 and count == 2 else 3)  # last column read
            out.append((ow, count, c0, count == 2 and c0 >= 0 and last < self.w))
        return out

    def row(self, rows):
        b, k = self.b, self.k
        units = self.units()
        i = 0
        while i < len(units):
            ow, count, c0, inner = units[i]
            j = i
            while j < len(units) and units[j][3]:
                j += 1
            if j - i >= 2:  # a run of interior pairs: one loop
                with k.for_range(j - i, name="u") as u:
                    o = b.add(b.mul(u, k.c(2)), k.c(ow))
                    self.unit(rows, o, b.sub(b.mul(o, k.c(self.sw)), k.c(self.pl)), 2, False)
                i = j
                continue
            self.unit(rows, ow, c0, count, True)
            i += 1

    def channel(self, n, ch):
        b, k, c = self.b, self.k, self.c
        wb = b.mul(ch, k.c(9))
        wv = [b.sext(k.load(k.inp(1), b.add(wb, k.c(t)), np.int8), I32) for t in range(9)]
        self.w02 = [pack(k, wv[3 * r], wv[3 * r + 2]) for r in range(3)]
        self.w1 = [wv[3 * r + 1] for r in range(3)]
        self.acc0 = k.load(self.bias, ch, np.int32)
        self.q = self.q_c if self.q_c is not None else k.load(k.inp(3), ch, np.int32)
        self.s = self.s_c if self.s_c is not None else k.load(k.inp(4), ch, np.int32)
        plane = b.add(b.mul(n, k.c(c.c)), ch)
        x_plane = b.mul(plane, k.c(self.h * self.w))
        y_plane = b.mul(plane, k.c(self.oh * self.ow))
        for lo, hi, valid in self.row_classes():
            def emit(oh, lo=lo, hi=hi, valid=valid):
                r0 = b.sub(b.mul(oh, k.c(self.sh)), k.c(self.pt))
                rows = []
                for r in range(3):
                    if not valid[r]:
                        rows.append(_Row(None, 0))
                        continue
                    rmax = min((hi - 1) * self.sh - self.pt + r, self.h - 1)
                    rows.append(_Row(b.add(x_plane, b.mul(b.add(r0, k.c(r)), k.c(self.w))),
                                     rmax))
                self.o_row = b.add(y_plane, b.mul(oh, k.c(self.ow)))
                self.row(rows)
            if hi - lo == 1:
                emit(k.c(lo))
            else:
                with k.for_range(hi, start=lo, name="oh") as oh:
                    emit(oh)

    def row_classes(self):
        """Output rows grouped into runs [lo, hi) with the same valid kernel rows."""
        out = []
        for oh in range(self.oh):
            valid = tuple(0 <= oh * self.sh - self.pt + r < self.h for r in range(3))
            if out and out[-1][2] == valid:
                out[-1][1] = oh + 1
            else:
                out.append([oh, oh + 1, valid])
        return out


@variant("QConv", "depthwise_dsp", rank=25, plan=plan)
def emit(k, params):
    c = QConvShape.of(k)
    e = _Emitter(k, c, params)
    bias = k.inp(2)
    if c.zp:  # padding taps read as x_zp: bias - x_zp * sum(w) makes them cost nothing
        wsum = k.const(1).reshape(c.m, -1).astype(np.int64).sum(axis=1)
        bias = k.add_table((k.const(2).astype(np.int64) - c.zp * wsum).astype(np.int32),
                           "dwbias")
    e.bias = bias
    with k.for_range(c.n, name="n") as n:
        with k.for_range(c.c, name="ch") as ch:
            e.channel(n, ch)
