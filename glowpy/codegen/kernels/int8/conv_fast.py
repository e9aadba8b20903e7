"""Fast paths of the integer convolution (int8/conv.py).

* Interior positions: where every tap of the window lands inside the input, the taps are
  unrolled per kernel row with no bounds arithmetic, and the input zero point is folded into a
  per-channel bias (bias - x_zp * sum(w)), so the inner code is loads and multiply-adds.
* M-profile cores with the DSP extension (TargetCaps.dsp: Armv7E-M, i.e. Cortex-M4/M7, and
  the Armv8-M Mainline cores that have it: Cortex-M33/M35P/M55/M85): SXTB16 sign-extends
  bytes 0 and 2 of a word into two 16-bit lanes (with ROR #8: bytes 1 and 3), and SMLAD
  multiplies both lanes and adds both products to an accumulator. A word of four int8 taps and a word of their four weights
  therefore give four multiply-accumulates in two SMLADs (CMSIS-NN's reordered-operand trick,
  which needs no repacked weights: the same byte lanes are taken from both words).
  - kernel rows: four taps per word along the row;
  - pointwise (1x1) convolutions: four input channels per step, CHANNELS output channels and
    two positions at a time (pointwise_dsp).
These reach LLVM as the llvm.arm.sxtb16 / smlad / smlabb intrinsics."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.conv_shape import QConvShape
from glowpy.codegen.kernels.int8.quant import I32, widen

I16 = cg.I16


def _intr(k, name, nargs):
    fn = k.module.globals.get(name)
    if fn is None:
        fn = ir.Function(k.module, ir.FunctionType(I32, [I32] * nargs), name)
    return fn


def sxtb16(k, v, rot=False, signed=True):
    if rot:  # rotate right by 8 (LLVM folds it into the instruction's ROR #8)
        v = k.b.or_(k.b.lshr(v, ir.Constant(I32, 8)), k.b.shl(v, ir.Constant(I32, 24)))
    return k.b.call(_intr(k, "llvm.arm.sxtb16" if signed else "llvm.arm.uxtb16", 1), [v])


def smlad(k, a, w, acc):
    return k.b.call(_intr(k, "llvm.arm.smlad", 3), [a, w, acc])


def smlabb(k, a, w, acc):
    return k.b.call(_intr(k, "llvm.arm.smlabb", 3), [a, w, acc])


def load_word(k, ptr, off, align=1):
    """Four bytes at ptr+off as an i32 (an unaligned LDR: Armv7-M and Armv8-M Mainline allow
    it; `align` >= 4 where the caller knows better, so that LLVM may pair loads into LDRD)."""
    return k.b.load(cg.gep(k.b, ptr, off, cg.I8), typ=I32, align=align)


def load_half(k, ptr, off):
    return k.b.zext(k.b.load(cg.gep(k.b, ptr, off, cg.I8), typ=I16, align=1), I32)


def pack(k, lo, hi):
    """Two i32 values (16-bit range) as the lanes (lo, hi) of one word."""
    b = k.b
    return b.or_(b.and_(lo, ir.Constant(I32, 0xFFFF)), b.shl(hi, ir.Constant(I32, 16)))


# -- interior positions -----------------------------------------------------------------------

def row_dot(k, acc, x_ptr, x_off, w_ptr, w_off, width, x_dtype, dsp, x_word_ok):
    """acc + sum_t x[x_off + t] * w[w_off + t] for t < width (int8 weights)."""
    b = k.b
    signed = cg.is_signed(x_dtype)
    t = 0

    def xv(j):
        return widen(b, k.load(x_ptr, b.add(x_off, k.c(j)), x_dtype), x_dtype)

    def wv(j):
        return b.sext(k.load(w_ptr, b.add(w_off, k.c(j)), np.int8), I32)
    if dsp:
        while width - t >= 4:
            xw, ww = load_word(k, x_ptr, b.add(x_off, k.c(t))), load_word(k, w_ptr, b.add(w_off, k.c(t)))
            acc = smlad(k, sxtb16(k, xw, signed=signed), sxtb16(k, ww), acc)
            acc = smlad(k, sxtb16(k, xw, True, signed), sxtb16(k, ww, True), acc)
            t += 4
        if width - t == 3:
            x02 = sxtb16(k, load_word(k, x_ptr, b.add(x_off, k.c(t))), signed=signed) if x_word_ok \
                else pack(k, xv(t), xv(t + 2))
            acc = smlad(k, x02, pack(k, wv(t), wv(t + 2)), acc)
            return smlabb(k, xv(t + 1), wv(t + 1), acc)
    while t < width:
        acc = b.add(acc, b.mul(xv(t), wv(t)))
        t += 1
    return acc


def interior_position(k, c: QConvShape, acc_p, n, oc, gi, oidx, acc0):
    """The sum of one interior output position (2-D window, dilation 1): the taps of each
    kernel row read as one run of the input row. acc_p: an i32 slot; gi: oc's group."""
    b = k.b
    win = c.win
    kh, kw = win.kernel
    h, w = win.in_size
    b.store(acc0, acc_p)
    r0 = b.sub(b.mul(oidx[0], k.c(win.strides[0])), k.c(win.pads_begin[0]))
    c0 = b.sub(b.mul(oidx[1], k.c(win.strides[1])), k.c(win.pads_begin[1]))
    with k.for_range(c.cg, name="ic") as ic:
        cin = b.add(b.mul(gi, k.c(c.cg)), ic) if c.g > 1 else ic
        plane = b.mul(b.add(b.mul(n, k.c(c.c)), cin), k.c(h * w))
        w_base = b.mul(b.add(b.mul(oc, k.c(c.cg)), ic), k.c(kh * kw))
        acc = b.load(acc_p)
        for r in range(kh):
            x_off = b.add(plane, b.add(b.mul(b.add(r0, k.c(r)), k.c(w)), c0))
            acc = row_dot(k, acc, k.inp(0), x_off, k.inp(1), b.add(w_base, k.c(r * kw)), kw,
                          c.x.dtype, c.dsp, c.x_word_ok)
        b.store(acc, acc_p)
    return b.load(acc_p)


# -- pointwise on the DSP extension -----------------------------------------------------------

def pointwise_ok(c: QConvShape) -> bool:
    win = c.win
    return (c.dsp and c.g == 1 and all(d == 1 for d in win.kernel) and
            all(s == 1 for s in win.strides) and not any(win.pads_begin) and
            not any(win.pads_end) and c.zp == 0 and c.c % 4 == 0 and c.w.dtype == np.int8)


POSITIONS = 2  # output positions per step of the pointwise kernel
CHANNELS = 2  # output channels per step


def pointwise_dsp(k, c: QConvShape, accs, n, oc, p, store):
    """Output channels oc..oc+CHANNELS-1 at positions p, p+1: store(j, q, acc) for each sum.

    Per four input channels: two 16-bit loads per channel (positions p, p+1) assembled into
    words pairing channel ic with ic+2 (and ic+1 with ic+3); SXTB16 splits each into the lanes
    of position p and (ROR #8) p+1, matching the lanes SXTB16 gives the weight word:
    (w[ic], w[ic+2]) and (w[ic+1], w[ic+3]). Then per output channel one weight word and four
    SMLADs. (Four positions at a time need more registers than Armv7-M has: the spills cost
    more than the shared operand preparation saves.)"""
    b = k.b
    P, C = c.plane_out, c.c
    signed = cg.is_signed(c.x.dtype)
    chans = [b.add(oc, k.c(j)) if j else oc for j in range(CHANNELS)]
    for j, ch in enumerate(chans):
        bias = k.load(k.inp(2), ch, np.int32)
        for q in range(POSITIONS):
            b.store(bias, accs[j * POSITIONS + q])
    x_base = b.add(b.mul(n, k.c(C * P)), p)
    with k.for_range(C // 4, name="ic4") as ic4:
        ic = b.mul(ic4, k.c(4))
        xo = b.add(x_base, b.mul(ic, k.c(P)))
        h = [load_half(k, k.inp(0), b.add(xo, k.c(j * P))) for j in range(4)]
        t02, t13 = pack(k, h[0], h[2]), pack(k, h[1], h[3])
        # per position q: (x[ic], x[ic+2]) and (x[ic+1], x[ic+3])
        lanes = [(sxtb16(k, t02, signed=signed), sxtb16(k, t13, signed=signed)),
                 (sxtb16(k, t02, True, signed), sxtb16(k, t13, True, signed))]
        for j, ch in enumerate(chans):
            ww = load_word(k, k.inp(1), b.add(b.mul(ch, k.c(C)), ic))
            we, wo = sxtb16(k, ww), sxtb16(k, ww, True)  # (w[ic], w[ic+2]), (w[ic+1], w[ic+3])
            for q, (xe, xd) in enumerate(lanes):
                acc_p = accs[j * POSITIONS + q]
                b.store(smlad(k, xd, wo, smlad(k, xe, we, b.load(acc_p))), acc_p)
    for j in range(CHANNELS):
        for q in range(POSITIONS):
            store(j, q, b.load(accs[j * POSITIONS + q]))
