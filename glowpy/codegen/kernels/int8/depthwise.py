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
top lanes and one more byte, 9 for 6). The weights are packed into 5 registers once per
channel. Every tap maps statically onto a lane of a word read inside the row, so border
pairs cost no more than interior ones: taps in the padding are skipped, and since the input
zero point is folded into the bias (bias - x_zp * sum(w)), each border class starts from
that bias plus x_zp * (its skipped weights), computed once per channel. Vertical stride 1
takes two output rows at a time: 4 input rows read and split for 6 kernel rows; vertical
stride 2 too (5 rows for 6), but only on narrow rows: with a loop of interior pairs the four
sums spilled (VWW 9.954M -> 9.961M instructions; narrow rows only: 9.953M). Rows with a
loop of interior pairs run row by row; narrow rows (keyword spotting's 5, VWW's 6 and 3)
column by column, so that one pair's values are live at a time. Requantization is fused into
the store: where no half-even tie can occur (requant_fast: the sums' bound follows from the
weights), one SMMLA, a shift, SSAT/USAT and the byte store.
Measured on the M7: 1.97 instructions per MAC on keyword spotting's depthwise layers (2.00
with the border start values and q, m, addend computed once per channel: live through the
whole channel they spilled; each unit now loads them, and LICM hoists them out of its loops:
141,940 instructions per layer against 143,920; VWW 10.257M -> 10.239M), 4.4 with the direct
kernel; TFLite Micro + CMSIS-NN: 7.8.
Registers only: no stack buffer."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen.kernels.int8.conv_fast import load_word, pack, smlad, sxtb16, _intr
from glowpy.codegen.kernels.int8.conv_shape import QConvShape
from glowpy.codegen.kernels.int8 import requant_fast
from glowpy.codegen.kernels.int8.quant import I32, finish
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.registry import variant


def plan(k):
    """{"stride": (sh, sw), "short": bool} for 3x3 depthwise convolutions on DSP cores;
    short: the tie-free requantization applies (requant_fast: SMMLA, shift, clamp)."""
    c = QConvShape.of(k)
    win = c.win
    if not (c.dsp and c.requant and c.g == c.c == c.m and c.w.dtype == np.int8
            and len(win.in_size) == 2 and tuple(win.kernel) == (3, 3)
            and all(d == 1 for d in win.dilations) and win.strides[1] in (1, 2)
            and np.dtype(c.x.dtype) in (np.dtype(np.int8), np.dtype(np.uint8))
            and k.const(1) is not None and k.const(2) is not None):
        return None
    short = requant_fast.plan(k, requant_fast.sum_bound(k, c.x.dtype, c.zp))
    return {"stride": tuple(win.strides), "short": short is not None}


def _smla(k, which, a, w, acc):
    """SMLA<x><y>: acc + a.<x> * w.<y> (b: bottom 16-bit half, t: top)."""
    return k.b.call(_intr(k, f"llvm.arm.smla{which}", 3), [a, w, acc])


class _Emitter:
    def __init__(self, k, c: QConvShape, params):
        self.k, self.b, self.c = k, k.b, c
        win = c.win
        self.h, self.w = win.in_size
        self.oh, self.ow = win.out_size
        self.sh, self.sw = win.strides
        self.pt, self.pl = win.pads_begin
        self.signed = np.dtype(c.x.dtype) == np.dtype(np.int8)
        self.short = requant_fast.plan(k, requant_fast.sum_bound(k, c.x.dtype, c.zp)) \
            if params["short"] else None
        self.q_c, self.s_c = channel_params(k, 3), channel_params(k, 4)

    # -- the taps of one unit -----------------------------------------------------------------

    def taps(self, c0, count, valid):
        """Per output j of a unit whose first window starts at column c0 (an int, or None for
        an interior unit: every tap inside, the word at c0): the word's load column relative
        to c0 (None: no word) and per output {(r, t): byte of the word, or ("col", offset
        from c0) for a tap read on its own}; taps in the padding are left out (`skipped`)."""
        w = self.w
        if c0 is None:
            load = 0
        elif w >= 4:
            load = min(max(c0, 0), w - 4) - c0  # a word inside the row: always a safe read
        else:
            load = None
        outs, skipped = [], []
        for j in range(count):
            taps, skip = {}, []
            for r in range(3):
                for t in range(3):
                    d = j * self.sw + t  # column relative to c0
                    if not valid[r] or (c0 is not None and not 0 <= c0 + d < w):
                        skip.append((r, t))
                    elif load is not None and 0 <= d - load < 4:
                        taps[r, t] = d - load
                    else:
                        taps[r, t] = ("col", d)
            outs.append(taps)
            skipped.append(frozenset(skip))
        return load, outs, skipped

    def unit(self, rows, ow, c0, count, static_c0):
        """Sums for outputs ow (.. ow+count-1) of len(rows) - 2 output rows (one, or two with
        vertical stride 1: each input row's word is then read and split once for both),
        requantized and stored. rows: the input rows' offsets (None: in the padding); c0: the
        outputs' first input column (an IR value); static_c0: the same as an int for border
        units, None for interior ones."""
        b, k = self.b, self.k
        nv = (len(rows) - 3) // self.sh + 1
        per_v = [self.taps(static_c0, count, [rows[v * self.sh + r] is not None for r in range(3)])
                 for v in range(nv)]
        load = per_v[0][0]
        accs = [[self.start_of(sk) for sk in skipped] for _, _, skipped in per_v]
        if self.short is not None:  # here, not per channel: see start_of
            self.prm = self.short.channel(k, self.ch)
        for i, row in enumerate(rows):
            if row is None:  # a row in the padding
                continue
            base = b.add(row, c0)
            lanes = {}
            bytewise = self.bytewise(i, per_v, self.sh)

            def lane(byte):  # SXTB16 of the word: (bytes 0, 2) or (ROR #8) (bytes 1, 3)
                if bytewise:
                    if byte not in lanes:
                        lanes[byte] = self.byte_at(b.add(base, k.c(load + byte)))
                    return lanes[byte], "b"
                if byte % 2 not in lanes:
                    word = lanes.setdefault("w", load_word(k, k.inp(0), b.add(base, k.c(load))))
                    lanes[byte % 2] = sxtb16(k, word, byte % 2 == 1, self.signed)
                return lanes[byte % 2], "b" if byte < 2 else "t"

            for v in range(nv):
                r = i - v * self.sh  # the kernel row input row i is for output row v
                if 0 <= r < 3:
                    for j, taps in enumerate(per_v[v][1]):
                        accs[v][j] = self.row_taps(r, taps, accs[v][j], lane, base)
        for v in range(nv):
            o_row = b.add(self.o_row, k.c(v * self.ow)) if v else self.o_row
            for j, acc in enumerate(accs[v]):
                self.store(acc, b.add(o_row, b.add(ow, k.c(j)) if j else ow))

    @staticmethod
    def bytewise(i, per_v, sh) -> bool:
        """Whether input row i's taps are cheaper read byte by byte (one LDRSB each) than as
        the word (LDR + one SXTB16 per lane parity): when they use fewer bytes than that and
        no (w0, w2) pair, as at a border whose third tap is in the padding (2 bytes: 2
        instructions against 3)."""
        used, paired = set(), False
        for v, (_, outs, _) in enumerate(per_v):
            r = i - v * sh
            for taps in outs if 0 <= r < 3 else ():
                row = {t: x for (rr, t), x in taps.items() if rr == r and isinstance(x, int)}
                used.update(row.values())
                paired |= row.get(0) in (0, 1) and row.get(2) == row[0] + 2
        return bool(used) and not paired and len(used) < 1 + len({x % 2 for x in used})

    def row_taps(self, r, taps, acc, lane, base):
        """acc plus the taps of kernel row r: SMLAD where (w0, w2) meet one lane pair, else
        one SMLA<x><y> per tap."""
        b, k = self.b, self.k
        row_taps = {t: v for (rr, t), v in taps.items() if rr == r}
        t0 = row_taps.get(0)
        if t0 in (0, 1) and row_taps.get(2) == t0 + 2:
            acc = smlad(k, lane(t0)[0], self.w02[r], acc)
            del row_taps[0], row_taps[2]
        for t, v in sorted(row_taps.items()):
            wreg, y = (self.w02[r], "t" if t == 2 else "b") if t != 1 else self.w1[r]
            if isinstance(v, int):
                xv, x = lane(v)
            else:
                xv, x = self.byte_at(b.add(base, k.c(v[1]))), "b"
            acc = _smla(k, x + y, xv, wreg, acc)
        return acc

    def start_of(self, sk):
        """The start of a sum skipping the padding taps sk: the bias, plus x_zp * w for each
        (the folded bias assumed x_zp there; skipping the tap is cheaper than reading it).
        Loaded where a unit uses it (LICM hoists it out of the unit's loops), not once per
        channel: live through the whole channel, these values and q, m, addend spilled."""
        b, k = self.b, self.k
        v = k.load(self.bias, self.ch, np.int32)
        if sk and self.c.zp:
            terms = [b.sext(k.load(k.inp(1), b.add(self.wb, k.c(3 * r + t)), np.int8), I32)
                     for r, t in sorted(sk)]
            total = terms[0]
            for tv in terms[1:]:
                total = b.add(total, tv)
            v = b.add(v, b.mul(total, ir.Constant(I32, self.c.zp)))
        return v

    def store(self, acc, off):
        """Requantized, clamped and stored (requant_fast where no tie is possible)."""
        k = self.k
        dtype = k.out_buf().dtype
        if self.short is not None:
            self.short.store(k, acc, self.prm, k.out(), off, dtype)
        else:
            finish(k, acc, self.q, self.s, k.out(), off, dtype, wide=self.c.wide)

    def byte_at(self, off):
        v = self.k.load(self.k.inp(0), off, self.c.x.dtype)
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

    def row(self, rows, units):
        b, k = self.b, self.k
        i = 0
        while i < len(units):
            ow, count, c0, inner = units[i]
            j = i
            while j < len(units) and units[j][3]:
                j += 1
            if j - i >= 2:  # a run of interior pairs: one loop
                with k.for_range(j - i, name="u") as u:
                    o = b.add(b.mul(u, k.c(2)), k.c(ow))
                    self.unit(rows, o, b.sub(b.mul(o, k.c(self.sw)), k.c(self.pl)), 2, None)
                i = j
                continue
            self.unit(rows, k.c(ow), k.c(c0), count, c0)
            i += 1

    def channel(self, n, ch):
        b, k, c = self.b, self.k, self.c
        wb = b.mul(ch, k.c(9))
        wv = [b.sext(k.load(k.inp(1), b.add(wb, k.c(t)), np.int8), I32) for t in range(9)]
        self.w02 = [pack(k, wv[3 * r], wv[3 * r + 2]) for r in range(3)]
        w1 = pack(k, wv[1], wv[4])  # the middle taps of rows 0 and 1 share a register
        self.w1 = [(w1, "b"), (w1, "t"), (wv[7], "b")]
        self.ch, self.wb = ch, wb
        if self.short is None:
            self.q = self.q_c if self.q_c is not None else k.load(k.inp(3), ch, np.int32)
            self.s = self.s_c if self.s_c is not None else k.load(k.inp(4), ch, np.int32)
        plane = b.add(b.mul(n, k.c(c.c)), ch)
        x_plane = b.mul(plane, k.c(self.h * self.w))
        y_plane = b.mul(plane, k.c(self.oh * self.ow))
        if self.loops():
            self.rows(x_plane, y_plane, self.units())
        else:  # narrow rows: column by column, one unit's values live in a loop body
            for u in self.units():
                self.rows(x_plane, y_plane, [u])

    def rows(self, x_plane, y_plane, units):
        """The output rows of one channel, each restricted to `units`."""
        b, k = self.b, self.k
        for lo, hi, valid in self.row_classes():
            def emit(oh, nv=1, valid=valid):
                r0 = b.sub(b.mul(oh, k.c(self.sh)), k.c(self.pt))
                rows = [b.add(x_plane, b.mul(b.add(r0, k.c(r)), k.c(self.w)))
                        if (valid + (True,) * 2)[r] else None
                        for r in range(3 + self.sh * (nv - 1))]
                self.o_row = b.add(y_plane, b.mul(oh, k.c(self.ow)))
                self.row(rows, units)
            pairs = (hi - lo) // 2 if all(valid) and (self.sh == 1 or not self.loops()) else 0
            if pairs:  # two output rows at a time: 3 + sh input rows read for 6 kernel rows
                with k.for_range(pairs, name="ohp") as p:
                    emit(b.add(b.mul(p, k.c(2)), k.c(lo)), 2)
                lo += 2 * pairs
            if hi - lo == 1:
                emit(k.c(lo))
            elif hi > lo:
                with k.for_range(hi, start=lo, name="oh") as oh:
                    emit(oh)

    def loops(self) -> bool:
        """Whether a row has a loop of interior pairs: then the channel runs row by row.
        Without one (narrow rows: keyword spotting's 5, VWW's 6 and 3), column by column:
        a row unrolled whole keeps every unit's start values, accumulators and lanes live
        at once and spills (measured on the M7, keyword spotting's depthwise layers: 2.08
        instructions per MAC row by row, 2.01 column by column with two rows at a time,
        2.30 column by column one row at a time)."""
        inner = [u[3] for u in self.units()]
        return any(a and b for a, b in zip(inner, inner[1:]))

    def skip_sets(self):
        """Every set of padding taps some output of this convolution skips."""
        out = set()
        for _, _, valid in self.row_classes():
            for ow, count, c0, inner in self.units():
                out.update(self.taps(None if inner else c0, count, valid)[2])
        return out

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
    if e.short is not None:
        e.short.prepare(k)
    with k.for_range(c.n, name="n") as n:
        with k.for_range(c.c, name="ch") as ch:
            e.channel(n, ch)
