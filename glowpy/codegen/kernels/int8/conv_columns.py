"""The columns of the DSP convolution blocks (conv_im2col): for output position q of a block of
npos, the input window as 16-bit values at the slots the blocks read: per group of four k
(k = (ic, kh, kw)), the four values of position 0, then of position 1, ..., each four stored as
x[k], x[k+2], x[k+1], x[k+3]. Taps in the padding hold x_zp (the bias has the zero point
folded in, so they add nothing).

* build_column: interior positions (every tap inside the input), unrolled over the taps of
  four channels per loop trip: a load and a store per element at static offsets;
* build_border: positions whose window crosses the padding: the position's slots filled with
  x_zp a group at a time, then only the valid taps copied, in loops over the window's valid
  rows and columns (computed per position) and the channels. Before, every element of a
  border position tested its row and column (ResNet-8's 3x3 layers spent about 7
  instructions per element on border positions, 12% of their positions)."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.conv_fast import load_word, sxtb16
from glowpy.codegen.kernels.int8.conv_shape import QConvShape
from glowpy.codegen.kernels.int8.quant import I32, widen

I16 = cg.I16
ORDER = (0, 2, 1, 3)  # position of element j of a group of four in a column's group


def build_column(k, c: QConvShape, col, q, npos: int, n, oh, ow):
    """Position q's slots for an interior output (oh, ow): col[slot(k)] = x at tap k."""
    b = k.b
    win = c.win
    kh_, kw_ = win.kernel
    h, w = win.in_size
    taps = kh_ * kw_
    r0 = b.sub(b.mul(oh, k.c(win.strides[0])), k.c(win.pads_begin[0]))
    c0 = b.sub(b.mul(ow, k.c(win.strides[1])), k.c(win.pads_begin[1]))
    x_base = b.add(b.mul(n, k.c(c.c * h * w)), b.add(b.mul(r0, k.c(w)), c0))
    col = cg.gep(b, col, b.mul(q, k.c(4)), I16)

    def slot(kk: int) -> int:  # (plus q * 4: `col` is offset by the position)
        return kk // 4 * npos * 4 + ORDER[kk % 4]

    def element(ic, kk_rel, base, j):
        r, t = divmod(kk_rel - j * taps, kw_)
        off = b.add(x_base, b.add(b.mul(ic, k.c(h * w)),
                                  k.c(r * win.dilations[0] * w + t * win.dilations[1])))
        v = widen(b, k.load(k.inp(0), off, c.x.dtype), c.x.dtype)
        k.store(b.trunc(v, I16), col, b.add(base, k.c(slot(kk_rel))))

    full = c.c - c.c % 4
    if full:
        with k.for_range(full // 4, name="ic4") as ic4:
            base = b.mul(ic4, k.c(taps * npos * 4))  # 4 channels = `taps` groups of four k
            for j in range(4):
                ic = b.add(b.mul(ic4, k.c(4)), k.c(j))
                for kk in range(j * taps, (j + 1) * taps):
                    element(ic, kk, base, j)
    for ic_ in range(full, c.c):  # the channels left over, at static positions
        j = ic_ - full
        for kk in range(j * taps, (j + 1) * taps):
            element(k.c(ic_), kk, k.c(full * taps * npos), j)


@contextmanager
def _rolled(k, stop, start=0, name="i"):
    """k.for_range, marked not to be unrolled."""
    with cg.for_range_carry(k.b, stop, (), start, 1, k.intp, name, unroll=False) as lp:
        yield lp.index


def _tap_range(k, start, kk: int, dl: int, n: int):
    """[lo, hi): the taps t < kk with 0 <= start + t * dl < n (IR values)."""
    b = k.b
    zero = k.c(0)
    if dl == 1:
        neg = b.sub(zero, start)
        lo = b.select(b.icmp_signed(">", neg, zero), neg, zero)
        lim = b.sub(k.c(n), start)
        hi = b.select(b.icmp_signed("<", lim, k.c(kk)), lim, k.c(kk))
    else:  # lo = max(0, ceil(-start / dl)), hi = min(kk, ceil((n - start) / dl))
        lo = b.sub(zero, cg.floordiv(b, start, dl))
        lo = b.select(b.icmp_signed(">", lo, zero), lo, zero)
        hi = b.sub(zero, cg.floordiv(b, b.sub(start, k.c(n)), dl))
        hi = b.select(b.icmp_signed("<", hi, k.c(kk)), hi, k.c(kk))
    return lo, b.select(b.icmp_signed("<", hi, lo), lo, hi)


def _fill_zp(k, c: QConvShape, col, npos: int, k4: int):
    """x_zp in every slot of the position at `col` (i16*, offset by the position)."""
    b = k.b
    zz = (c.zp & 0xFFFF) | ((c.zp & 0xFFFF) << 16)
    zz = ir.Constant(I32, zz - (1 << 32) if zz >= 1 << 31 else zz)
    # (the loops kept rolled: border positions are few, and unrolled copies of these loops
    # cost ResNet-8 5 KB of code for 0.2% of its instructions)
    with _rolled(k, k4 // 4, name="zg") as g:
        at = cg.gep(b, col, b.mul(g, k.c(npos * 4)), I16)
        for half in range(2):
            b.store(zz, b.bitcast(cg.gep(b, at, k.c(2 * half), I16), I32.as_pointer()), align=4)


def build_border(k, c: QConvShape, col, q, npos: int, n, oh, ow, k4: int):
    """Position q's slots for an output (oh, ow) whose window crosses the padding."""
    b = k.b
    win = c.win
    kh_, kw_ = win.kernel
    dh, dw = win.dilations
    h, w = win.in_size
    taps = kh_ * kw_
    col = cg.gep(b, col, b.mul(q, k.c(4)), I16)
    _fill_zp(k, c, col, npos, k4)
    r0 = b.sub(b.mul(oh, k.c(win.strides[0])), k.c(win.pads_begin[0]))
    c0 = b.sub(b.mul(ow, k.c(win.strides[1])), k.c(win.pads_begin[1]))
    r_lo, r_hi = _tap_range(k, r0, kh_, dh, h)
    t_lo, t_hi = _tap_range(k, c0, kw_, dw, w)
    x_n = b.mul(n, k.c(c.c * h * w))
    full = c.c - c.c % 4

    def slot(v):  # (v >> 2) * npos * 4 + ORDER[v & 3], v an IR value
        one = k.c(1)
        low = b.or_(b.shl(b.and_(v, one), one), b.and_(b.ashr(v, one), one))
        return b.add(b.mul(b.ashr(v, k.c(2)), k.c(npos * 4)), low)

    with _rolled(k, r_hi, r_lo, name="br") as r:
        with _rolled(k, t_hi, t_lo, name="bt") as t:
            rt = b.add(b.mul(r, k.c(kw_)), t)
            x_rt = b.add(x_n, b.add(b.mul(b.add(r0, b.mul(r, k.c(dh))), k.c(w)),
                                    b.add(c0, b.mul(t, k.c(dw)))))
            slots = [slot(b.add(rt, k.c(j * taps)) if j else rt) for j in range(4)]

            def copy(ic, base, j):
                v = widen(b, k.load(k.inp(0), b.add(x_rt, b.mul(ic, k.c(h * w))), c.x.dtype),
                          c.x.dtype)
                k.store(b.trunc(v, I16), col, b.add(base, slots[j]))
            if full:
                with _rolled(k, full // 4, name="bc") as ic4:
                    base = b.mul(ic4, k.c(taps * npos * 4))
                    for j in range(4):
                        copy(b.add(b.mul(ic4, k.c(4)), k.c(j)), base, j)
            for ic_ in range(full, c.c):
                copy(k.c(ic_), k.c(full * taps * npos), ic_ - full)


# -- tap-major columns (C % 4 == 0) ----------------------------------------------------------
# k = (kh, kw, ic): a group of four k is four channels at one tap, so a position's column is
# per tap, per four channels, one 8-byte slot; stride-1 neighbours in a row share all taps but
# the last column of the window, which slide() copies from the previous position 8 bytes at a
# time (LDRD/STRD) instead of loading byte by byte.

def _store_four(k, c: QConvShape, at, x_off, hw: int):
    """The four channels at input offset x_off (channel stride hw) into slot `at` (i16*), as
    (x0, x2) and (x1, x3)."""
    b = k.b

    def v(j):
        return widen(b, k.load(k.inp(0), b.add(x_off, k.c(j * hw)) if j else x_off,
                               c.x.dtype), c.x.dtype)
    mask = ir.Constant(I32, 0xFFFF)
    for half, (lo, hi) in enumerate(((0, 2), (1, 3))):
        word = b.or_(b.and_(v(lo), mask), b.shl(v(hi), ir.Constant(I32, 16)))
        b.store(word, b.bitcast(cg.gep(b, at, k.c(2 * half), I16), I32.as_pointer()), align=4)


def _slot_tm(k, col, tap, ic4, groups_per_tap: int, npos: int):
    b = k.b
    g = b.add(b.mul(tap, k.c(groups_per_tap)), ic4) if not isinstance(tap, int) else \
        b.add(k.c(tap * groups_per_tap), ic4)
    return cg.gep(b, col, b.mul(g, k.c(npos * 4)), I16)


def build_taps(k, c: QConvShape, col, q, npos: int, n, oh, ow, ts=None):
    """Tap-major slots of an interior position; `ts`: only these window columns (all when
    None)."""
    b = k.b
    win = c.win
    kh_, kw_ = win.kernel
    h, w = win.in_size
    col = cg.gep(b, col, b.mul(q, k.c(4)), I16)
    r0 = b.sub(b.mul(oh, k.c(win.strides[0])), k.c(win.pads_begin[0]))
    c0 = b.sub(b.mul(ow, k.c(win.strides[1])), k.c(win.pads_begin[1]))
    x_base = b.add(b.mul(n, k.c(c.c * h * w)), b.add(b.mul(r0, k.c(w)), c0))
    gpt = c.c // 4
    with _rolled(k, gpt, name="tc") as ic4:
        x_c = b.add(x_base, b.mul(ic4, k.c(4 * h * w)))
        for r in range(kh_):
            for t in (range(kw_) if ts is None else ts):
                off = b.add(x_c, k.c(r * win.dilations[0] * w + t * win.dilations[1]))
                _store_four(k, c, _slot_tm(k, col, r * kw_ + t, ic4, gpt, npos), off, h * w)


def slide(k, c: QConvShape, col, q, npos: int):
    """Position q's taps (r, t < kw - 1) from position q - 1's (r, t + 1): a stride-1 neighbour
    in the same row."""
    b = k.b
    kh_, kw_ = c.win.kernel
    gpt = c.c // 4
    cur = cg.gep(b, col, b.mul(q, k.c(4)), I16)
    prev = cg.gep(b, col, b.mul(b.sub(q, k.c(1)), k.c(4)), I16)
    i64p = cg.I64.as_pointer()
    with _rolled(k, gpt, name="sc") as ic4:
        for r in range(kh_):
            for t in range(kw_ - 1):
                src = _slot_tm(k, prev, r * kw_ + t + 1, ic4, gpt, npos)
                dst = _slot_tm(k, cur, r * kw_ + t, ic4, gpt, npos)
                b.store(b.load(b.bitcast(src, i64p), typ=cg.I64, align=8), b.bitcast(dst, i64p),
                        align=8)


def build_border_taps(k, c: QConvShape, col, q, npos: int, n, oh, ow, k4: int):
    """Tap-major slots of a position whose window crosses the padding: x_zp, then the valid
    taps."""
    b = k.b
    win = c.win
    kh_, kw_ = win.kernel
    dh, dw = win.dilations
    h, w = win.in_size
    _fill_zp(k, c, cg.gep(b, col, b.mul(q, k.c(4)), I16), npos, k4)
    colq = cg.gep(b, col, b.mul(q, k.c(4)), I16)
    r0 = b.sub(b.mul(oh, k.c(win.strides[0])), k.c(win.pads_begin[0]))
    c0 = b.sub(b.mul(ow, k.c(win.strides[1])), k.c(win.pads_begin[1]))
    r_lo, r_hi = _tap_range(k, r0, kh_, dh, h)
    t_lo, t_hi = _tap_range(k, c0, kw_, dw, w)
    x_n = b.mul(n, k.c(c.c * h * w))
    gpt = c.c // 4
    with _rolled(k, r_hi, r_lo, name="br") as r:
        with _rolled(k, t_hi, t_lo, name="bt") as t:
            x_rt = b.add(x_n, b.add(b.mul(b.add(r0, b.mul(r, k.c(dh))), k.c(w)),
                                    b.add(c0, b.mul(t, k.c(dw)))))
            tap = b.add(b.mul(r, k.c(kw_)), t)
            with _rolled(k, gpt, name="bc") as ic4:
                _store_four(k, c, _slot_tm(k, colq, tap, ic4, gpt, npos),
                            b.add(x_rt, b.mul(ic4, k.c(4 * h * w))), h * w)


# -- pointwise columns of four positions from the planes' words ------------------------------
# A 1x1, stride-1, unpadded convolution reads output position p at input position p: the four
# positions of a block are one word of each input channel's plane. SXTB16 splits a word into
# the lanes (p0, p2) and, with ROR #8, (p1, p3); PKHBT / PKHTB then pair channel k with k+2 at
# one position, the (x[k], x[k+2]) word of a column's group. Per four channels x four positions
# 4 LDR, 8 SXTB16, 8 PKH and 8 word stores, against 16 byte loads and 16 halfword stores.

def words_ok(c: QConvShape) -> bool:
    """Four positions' columns are four words of each plane (build_words)."""
    win = c.win
    return len(win.in_size) == 2 and all(d == 1 for d in win.kernel) and \
        all(s == 1 for s in win.strides) and not any(win.pads_begin) and \
        not any(win.pads_end) and np.dtype(c.x.dtype).itemsize == 1


def build_words(k, c: QConvShape, col, n, pos, k4: int):
    """The columns of the four positions pos..pos+3 (a block of four) of a words_ok
    convolution; channels past c.c (K padded to k4) hold zeros. Up to WORD_GROUPS_FLAT groups
    unrolled, beyond them a loop of WORD_UNROLL groups per trip. Measured on VWW (Cortex-M7,
    QEMU instructions, .text): all unrolled 9,805,950, 60,112 B; flat up to 4, then a loop of
    1 group 9,854,070, 42,208 B; of 2 9,829,720; of 4 9,825,800, 44,352 B; flat up to 8, then
    4: 9,818,270, 44,952 B; flat up to 16: 9,817,080, 47,200 B."""
    b = k.b
    signed = cg.is_signed(c.x.dtype)
    lo16, hi16 = ir.Constant(I32, 0xFFFF), ir.Constant(I32, -0x10000)
    sixteen = ir.Constant(I32, 16)
    x_base = b.add(b.mul(n, k.c(c.c * c.plane_in)), pos)

    def group(g, x_g, present: int):
        """Group g (IR index) of four channels from input offset x_g; `present` of them real."""
        def lanes(j: int):  # (p0, p2), (p1, p3) of the group's channel j, 16-bit lanes
            if j >= present:
                return ir.Constant(I32, 0), ir.Constant(I32, 0)
            word = load_word(k, k.inp(0), b.add(x_g, k.c(j * c.plane_in)) if j else x_g)
            return sxtb16(k, word, signed=signed), sxtb16(k, word, True, signed)

        at = cg.gep(b, col, b.mul(g, k.c(16)), I16)  # the group's 4 positions x 4 values
        for half in range(2):  # (k, k+2), then (k+1, k+3)
            a, h = lanes(half), lanes(half + 2)
            for parity in range(2):  # positions (0, 2), then (1, 3)
                ea, eh = a[parity], h[parity]
                first = b.or_(b.and_(ea, lo16), b.shl(eh, sixteen))  # PKHBT
                second = b.or_(b.and_(eh, hi16), b.lshr(ea, sixteen))  # PKHTB
                for q, word in ((parity, first), (parity + 2, second)):
                    ptr = cg.gep(b, at, k.c(4 * q + 2 * half), I16)
                    b.store(word, b.bitcast(ptr, I32.as_pointer()), align=4)

    full = c.c // 4
    if full > WORD_GROUPS_FLAT:
        u = WORD_UNROLL if full % WORD_UNROLL == 0 else 1
        with _rolled(k, full // u, name="wg") as gu:
            for j in range(u):
                g = b.add(b.mul(gu, k.c(u)), k.c(j)) if u > 1 else gu
                group(g, b.add(x_base, b.mul(g, k.c(4 * c.plane_in))), 4)
    else:
        for g in range(full):
            group(k.c(g), b.add(x_base, k.c(4 * g * c.plane_in)), 4)
    if c.c % 4:
        group(k.c(full), b.add(x_base, k.c(4 * full * c.plane_in)), c.c % 4)


WORD_GROUPS_FLAT = 8
WORD_UNROLL = 4
