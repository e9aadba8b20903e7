"""QConv on the Arm M-profile DSP extension as a matrix product (CMSIS-NN's scheme; the "im2col"
variant of QConv, for ungrouped convolutions with int8 weights).

For each pair of output positions, their input windows are copied into two columns of 16-bit
values (x - x_zp; 0 for taps in the padding), K = C*KH*KW long, on the stack. Then for each
pair of output channels a 2x2 block of sums runs down K four at a time: one weight word per
channel split by SXTB16 into (w[k], w[k+2]) and (w[k+1], w[k+3]), and the columns stored
pre-shuffled as x[k], x[k+2], x[k+1], x[k+3], so each word of a column is the lane pair
SMLAD needs: eight SMLADs for 16 multiply-accumulates. The copy costs K stores per position
and is shared by all output channels; padding and the zero point cost nothing afterwards."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.conv_fast import load_word, smlad, sxtb16
from glowpy.codegen.kernels.int8.conv_shape import QConvShape, interior
from glowpy.codegen.kernels.int8.quant import I32, widen

I16 = cg.I16
MAX_K = 640  # two columns of K int16 on the stack: at most 2.5 KiB
ORDER = (0, 2, 1, 3)  # position of element j of a group of four in a column


def usable(c: QConvShape) -> bool:
    k = c.c * int(np.prod(c.win.kernel))
    return c.dsp and c.g == 1 and c.w.dtype == np.int8 and 4 <= k <= MAX_K and \
        len(c.win.in_size) == 2


def _slot(kk: int) -> int:
    return kk - kk % 4 + ORDER[kk % 4]


def build_column(k, c: QConvShape, col, n, oh, ow, checked: bool):
    """col[slot(k)] = x - zp for every tap k = (ic, kh, kw) of output (oh, ow); 0 in padding."""
    b = k.b
    win = c.win
    kh_, kw_ = win.kernel
    h, w = win.in_size
    taps = kh_ * kw_
    zp = ir.Constant(I32, c.zp)
    r0 = b.sub(b.mul(oh, k.c(win.strides[0])), k.c(win.pads_begin[0]))
    c0 = b.sub(b.mul(ow, k.c(win.strides[1])), k.c(win.pads_begin[1]))
    if checked:
        def inside(v, lim):
            return b.and_(b.icmp_signed(">=", v, k.c(0)), b.icmp_signed("<", v, k.c(lim)))
        row_ok = [inside(b.add(r0, k.c(r * win.dilations[0])), h) for r in range(kh_)]
        col_ok = [inside(b.add(c0, k.c(t * win.dilations[1])), w) for t in range(kw_)]
    x_base = b.add(b.mul(n, k.c(c.c * h * w)), b.add(b.mul(r0, k.c(w)), c0))

    def element(ic, kk_rel, base_k, j):
        r, t = divmod(kk_rel - j * taps, kw_)
        off = b.add(x_base, b.add(b.mul(ic, k.c(h * w)),
                                  k.c(r * win.dilations[0] * w + t * win.dilations[1])))
        if checked:
            ok = b.and_(row_ok[r], col_ok[t])
            off = b.select(ok, off, k.c(0))
        v = b.sub(widen(b, k.load(k.inp(0), off, c.x.dtype), c.x.dtype), zp)
        if checked:
            v = b.select(ok, v, ir.Constant(I32, 0))
        k.store(b.trunc(v, I16), col, b.add(base_k, k.c(_slot(kk_rel))))

    full = c.c - c.c % 4
    if full:
        with k.for_range(full // 4, name="ic4") as ic4:
            base_k = b.mul(ic4, k.c(4 * taps))  # a multiple of 4: slots stay static
            for j in range(4):
                ic = b.add(b.mul(ic4, k.c(4)), k.c(j))
                for kk in range(j * taps, (j + 1) * taps):
                    element(ic, kk, base_k, j)
    for ic_ in range(full, c.c):  # the channels left over, at static positions
        j = ic_ - full
        for kk in range(j * taps, (j + 1) * taps):
            element(k.c(ic_), kk, k.c(full * taps), j)


def emit(k, c: QConvShape, n, emit_out):
    """The whole convolution of batch n: pairs of positions x pairs of output channels."""
    b = k.b
    win = c.win
    m = c.w.shape[0]
    kk = c.c * int(np.prod(win.kernel))
    k4 = kk - kk % 4
    oh_, ow_ = win.out_size
    npos = oh_ * ow_
    cols = []
    for i in range(2):
        with b.goto_entry_block():  # (cgutils.alloca_in_entry, with a count)
            a = b.alloca(I16, size=ir.Constant(I32, kk + 4 - kk % 4 if kk % 4 else kk),
                         name=f"col{i}")
        a.align = 8  # word (and doubleword) loads of the column
        cols.append(a)
    accs = [cg.alloca_in_entry(b, I32, f"mm{i}") for i in range(4)]
    (r_lo, r_hi), (c_lo, c_hi) = interior(win)

    def column(col, pos):
        oh, ow = b.sdiv(pos, k.c(ow_)), b.srem(pos, k.c(ow_))
        inner = b.and_(b.and_(b.icmp_signed(">=", oh, k.c(r_lo)), b.icmp_signed("<", oh, k.c(r_hi))),
                       b.and_(b.icmp_signed(">=", ow, k.c(c_lo)), b.icmp_signed("<", ow, k.c(c_hi))))
        with b.if_else(inner) as (then, otherwise):
            with then:
                build_column(k, c, col, n, oh, ow, False)
            with otherwise:
                build_column(k, c, col, n, oh, ow, True)

    def block(oc, pos, n_oc: int, n_pos: int):
        """Sums for channels oc(+1) x positions pos(+1); the second of each pair is skipped
        (n_oc / n_pos = 1) by aliasing it to the first and not storing it."""
        chans = [oc, b.add(oc, k.c(1)) if n_oc == 2 else oc]
        for i in range(4):
            b.store(k.load(k.inp(2), chans[i // 2], np.int32), accs[i])
        w_rows = [b.mul(ch, k.c(kk)) for ch in chans]
        col_ptrs = [cols[0], cols[1] if n_pos == 2 else cols[0]]
        if k4:
            with k.for_range(k4 // 4, name="g") as g:
                kg = b.mul(g, k.c(4))
                lanes = []
                for cp in col_ptrs:  # (x[k], x[k+2]) and (x[k+1], x[k+3])
                    lanes.append((b.load(cg.gep(b, cp, kg, I16), typ=I32, align=4),
                                  b.load(cg.gep(b, cp, b.add(kg, k.c(2)), I16), typ=I32, align=4)))
                for i, wr in enumerate(w_rows):
                    ww = load_word(k, k.inp(1), b.add(wr, kg))
                    we, wo = sxtb16(k, ww), sxtb16(k, ww, True)
                    for q, (xe, xo) in enumerate(lanes):
                        a = accs[2 * i + q]
                        b.store(smlad(k, xo, wo, smlad(k, xe, we, b.load(a))), a)
        for t in range(k4, kk):  # the last K % 4 taps, one by one
            for i, wr in enumerate(w_rows):
                wv = b.sext(k.load(k.inp(1), b.add(wr, k.c(t)), np.int8), I32)
                for q, cp in enumerate(col_ptrs):
                    xv = b.sext(k.load(cp, k.c(_slot(t)), np.int16), I32)
                    a = accs[2 * i + q]
                    b.store(b.add(b.load(a), b.mul(wv, xv)), a)
        for i in range(n_oc):
            o_plane = b.mul(b.add(b.mul(n, k.c(m)), chans[i]), k.c(npos))
            for q in range(n_pos):
                p = b.add(pos, k.c(q)) if q else pos
                emit_out(b.load(accs[2 * i + q]), chans[i], b.add(o_plane, p))

    def positions(pos, n_pos):
        column(cols[0], pos)
        if n_pos == 2:
            column(cols[1], b.add(pos, k.c(1)))
        with k.for_range(m // 2, name="ocp") as ocp:
            block(b.mul(ocp, k.c(2)), pos, 2, n_pos)
        if m % 2:
            block(k.c(m - 1), pos, 1, n_pos)

    with k.for_range(npos // 2, name="pp") as pp:
        positions(b.mul(pp, k.c(2)), 2)
    if npos % 2:
        positions(k.c(npos - 1), 1)
