"""Integer convolution (QConv): int8/uint8 input, int8 (or int16) weights, int32 accumulation,
per-channel fixed-point requantization.

The kernel is output-stationary: each output element's sum is kept in a register while the
loops visit its valid taps (the range of taps that land inside the input is computed per output
position, so padding costs no bounds checks and no padded copy), then requantized and stored.
Nothing but the output tensor is written: no int32 scratch plane, which keeps the activation
region at the size of the int8 tensors themselves."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8 import conv_fast as fast
from glowpy.codegen.kernels.int8 import conv_im2col, requant_fast
from glowpy.codegen.kernels.int8.quant import I32, finish, widen
from glowpy.codegen.kernels.int8.conv_shape import QConvShape, interior
from glowpy.codegen.kernels.int8.taps import channel_params, tap_loops
from glowpy.codegen.registry import variant

def _plan_im2col(k):
    """{"block": (positions, channels)} when the DSP matrix-product form applies (ungrouped,
    constant int8 weights, the block's columns within conv_im2col.MAX_COLUMN_BYTES)."""
    c = QConvShape.of(k)
    if not conv_im2col.usable(c, k.const(1), k.const(2)):
        return None
    if conv_im2col.scratch_of(k) is not None:  # columns in the activation region: 4 positions
        return {"block": conv_im2col.BLOCK, "columns": "activations"}
    return {"block": conv_im2col.block_of(c)}


def _plan_pointwise(k):
    """{} for 1x1, stride-1, unpadded convolutions with zero input zero point on DSP cores
    (two positions x two channels per step, SMLAD on word pairs)."""
    c = QConvShape.of(k)
    return {} if c.requant and fast.pointwise_ok(c) else None


@variant("QConv", "im2col", rank=20, plan=_plan_im2col)
def emit_im2col(k, params):
    _emit(k, "im2col", params["block"])


@variant("QConv", "pointwise_dsp", rank=10, plan=_plan_pointwise)
def emit_pointwise(k, params):
    _emit(k, "pointwise")


@variant("QConv", "direct", rank=0)
def emit_direct(k, params=None):
    """Any QConv: per output channel, the interior positions with rows of taps read as runs
    (DSP word pairs where available), the border positions in static blocks or loops."""
    _emit(k, "direct")


def _emit(k, path: str, block=None):
    b = k.b
    c = QConvShape.of(k)
    x, w, y, win, g = c.x, c.w, k.out_buf(), c.win, c.g
    n_, m, mg, ktaps = c.n, c.m, c.mg, c.ktaps
    requant = c.requant
    q_c, s_c = (channel_params(k, 3), channel_params(k, 4)) if requant else (0, 0)
    # the short requantization where no rounding tie can occur (requant_fast)
    short = requant_fast.plan(k, requant_fast.sum_bound(k, x.dtype, c.zp)) if requant else None
    if short is not None:
        short.prepare(k)
    acc_p = cg.alloca_in_entry(b, I32, "acc")
    zp = ir.Constant(I32, c.zp)
    # interior fast path: 2-D, dilation 1, int8 weights; zero point folded into a bias table
    inner, use_inner = c.interior, c.use_inner
    ibias = k.inp(2)
    if use_inner and c.zp:
        wsum = k.const(1).reshape(m, -1).astype(np.int64).sum(axis=1)
        ibias = k.add_table((k.const(2).astype(np.int64) - c.zp * wsum).astype(np.int32), "ibias")
    if requant and fast.pointwise_ok(c):  # (allocated whenever the form applies)
        accs = [cg.alloca_in_entry(b, I32, f"acc{i}")
                for i in range(fast.CHANNELS * fast.POSITIONS)]

    def emit_out(acc, oc, yi):
        if short is not None:
            short.store(k, acc, short.channel(k, oc), k.out(), yi, y.dtype)
        elif requant:
            q = q_c if q_c is not None else k.load(k.inp(3), oc, np.int32)
            s = s_c if s_c is not None else k.load(k.inp(4), oc, np.int32)
            finish(k, acc, q, s, k.out(), yi, y.dtype, wide=c.wide)
        else:
            k.store(acc, k.out(), yi)

    def generic(n, oc, gi, oidx, o_plane):
        b.store(k.load(k.inp(2), oc, np.int32), acc_p)
        with k.for_range(c.cg, name="ic") as ic:
            cin = b.add(b.mul(gi, k.c(c.cg)), ic) if g > 1 else ic
            i_plane = b.mul(b.add(b.mul(n, k.c(c.c)), cin), k.c(c.plane_in))
            w_base = b.mul(b.add(b.mul(oc, k.c(c.cg)), ic), k.c(ktaps))

            def body(i_off, k_off):
                xv = widen(b, k.load(k.inp(0), b.add(i_plane, i_off), x.dtype), x.dtype)
                if c.zp:
                    xv = b.sub(xv, zp)
                wv = widen(b, k.load(k.inp(1), b.add(w_base, k_off), w.dtype), w.dtype)
                b.store(b.add(b.load(acc_p), b.mul(xv, wv)), acc_p)

            tap_loops(k, win, oidx, body)
        o_lin = cg.linear(b, oidx, cg.contiguous_strides(win.out_size), 0, k.intp)
        emit_out(b.load(acc_p), oc, b.add(o_plane, o_lin))

    def box(ranges, fn):
        with k.loop_nest([hi - lo for lo, hi in ranges], name="o") as idx:
            fn([b.add(i, k.c(lo)) if lo else i for i, (lo, _) in zip(idx, ranges)])

    classes = _classes(win) if use_inner else None
    if classes is not None:
        budget = sum((r[3] - r[2]) * (cc[3] - cc[2]) for r in classes[0] for cc in classes[1])
        if budget > MAX_UNROLLED_TAPS:
            classes = None

    def static_block(n, oc, gi, rc, cc, o_plane):
        """Positions whose valid taps are the static ranges rc[2:4] x cc[2:4] (a border
        block): the taps unrolled, the zero point subtracted per element."""
        bias = k.load(k.inp(2), oc, np.int32)

        def pos(idx):
            b.store(bias, acc_p)
            r0 = b.sub(b.mul(idx[0], k.c(win.strides[0])), k.c(win.pads_begin[0]))
            c0 = b.sub(b.mul(idx[1], k.c(win.strides[1])), k.c(win.pads_begin[1]))
            with k.for_range(c.cg, name="ic") as ic:
                cin = b.add(b.mul(gi, k.c(c.cg)), ic) if g > 1 else ic
                plane = b.mul(b.add(b.mul(n, k.c(c.c)), cin), k.c(c.plane_in))
                w_base = b.mul(b.add(b.mul(oc, k.c(c.cg)), ic), k.c(ktaps))
                acc = b.load(acc_p)
                for r in range(rc[2], rc[3]):
                    row = b.add(plane, b.mul(b.add(r0, k.c(r)), k.c(win.in_size[1])))
                    for t_ in range(cc[2], cc[3]):
                        xv = widen(b, k.load(k.inp(0), b.add(row, b.add(c0, k.c(t_))), c.x.dtype),
                                   c.x.dtype)
                        if c.zp:
                            xv = b.sub(xv, zp)
                        wv = b.sext(k.load(k.inp(1), b.add(w_base, k.c(r * win.kernel[1] + t_)),
                                           np.int8), I32)
                        acc = b.add(acc, b.mul(xv, wv))
                b.store(acc, acc_p)
            o_lin = cg.linear(b, idx, cg.contiguous_strides(win.out_size), 0, k.intp)
            emit_out(b.load(acc_p), oc, b.add(o_plane, o_lin))
        box([(rc[0], rc[1]), (cc[0], cc[1])], pos)

    def channel(n, oc):
        gi = b.sdiv(oc, k.c(mg)) if g > 1 else k.c(0)
        o_plane = b.mul(b.add(b.mul(n, k.c(m)), oc), k.c(c.plane_out))
        if not use_inner:
            box([(0, o) for o in win.out_size], lambda idx: generic(n, oc, gi, idx, o_plane))
            return
        acc0 = k.load(ibias, oc, np.int32)

        def fast_pos(idx):
            acc = fast.interior_position(k, c, acc_p, n, oc, gi, idx, acc0)
            o_lin = cg.linear(b, idx, cg.contiguous_strides(win.out_size), 0, k.intp)
            emit_out(acc, oc, b.add(o_plane, o_lin))
        (r_lo, r_hi), (c_lo, c_hi) = inner
        if classes is not None:
            for rc in classes[0]:
                for cc in classes[1]:
                    if (rc[0], rc[1]) == (r_lo, r_hi) and (cc[0], cc[1]) == (c_lo, c_hi):
                        box([(r_lo, r_hi), (c_lo, c_hi)], fast_pos)
                    else:
                        static_block(n, oc, gi, rc, cc, o_plane)
            return
        oh, ow = win.out_size
        for ranges in ([(0, r_lo), (0, ow)], [(r_lo, r_hi), (0, c_lo)],
                       [(r_lo, r_hi), (c_hi, ow)], [(r_hi, oh), (0, ow)]):
            if all(hi > lo for lo, hi in ranges):
                box(ranges, lambda idx: generic(n, oc, gi, idx, o_plane))
        box([(r_lo, r_hi), (c_lo, c_hi)], fast_pos)

    with k.for_range(n_, name="n") as n:
        if path == "im2col":
            conv_im2col.emit(k, c, n, emit_out, block, short)
        elif path == "pointwise":
            def store(j, q, acc, n=n):
                ch = b.add(oc, k.c(j))
                emit_out(acc, ch, b.add(b.mul(b.add(b.mul(n, k.c(m)), ch), k.c(c.plane_out)),
                                        b.add(p, k.c(q))))
            npos, nch = fast.POSITIONS, fast.CHANNELS
            with k.for_range(m // nch, name="ocb") as ocb:
                oc = b.mul(ocb, k.c(nch))
                with k.for_range(c.plane_out // npos, name="pb") as pb:
                    p = b.mul(pb, k.c(npos))
                    fast.pointwise_dsp(k, c, accs, n, oc, p, store)
                for last in range(c.plane_out - c.plane_out % npos, c.plane_out):  # the rest
                    for j in range(nch):
                        ch = b.add(oc, k.c(j))
                        o_plane = b.mul(b.add(b.mul(n, k.c(m)), ch), k.c(c.plane_out))
                        generic(n, ch, k.c(0), _unflatten(k, last, win.out_size), o_plane)
            for last_oc in range(m - m % nch, m):
                channel(n, k.c(last_oc))
        else:
            with k.for_range(m, name="oc") as oc:
                channel(n, oc)


MAX_UNROLLED_TAPS = 1024  # border blocks with static tap ranges, unrolled; beyond: loops


def _classes(win):
    """Per spatial dim, the output ranges that share one static range of valid taps:
    [(o_lo, o_hi, t_lo, t_hi)]: each border position alone, the interior as one range."""
    out = []
    for d, (lo, hi) in enumerate(interior(win)):
        s, p, dl, kk, n = (win.strides[d], win.pads_begin[d], win.dilations[d], win.kernel[d],
                           win.in_size[d])
        cls = []
        for o in list(range(0, lo)) + [None] + list(range(hi, win.out_size[d])):
            if o is None:
                cls.append((lo, hi, 0, kk))
                continue
            taps = [t for t in range(kk) if 0 <= o * s - p + t * dl < n]
            cls.append((o, o + 1, min(taps), max(taps) + 1) if taps else (o, o + 1, 0, 0))
        out.append(cls)
    return out


def _unflatten(k, flat: int, shape):
    idx = []
    for st in cg.contiguous_strides(shape):
        idx.append(k.c(flat // st))
        flat %= st
    return idx
