"""ConvTranspose kernel: the output plane of each (n, m) starts at the bias; then, for every
input channel of m's group and every kernel tap, a run of input positions scatters
x * w into outputs o = i*stride + tap*dilation - pad. The run along the last spatial dim is the
range of inputs whose output lands inside the output (computed in Python from the static
shapes), so the innermost loop has no bounds checks; outer spatial dims loop over input rows
and taps in IR with a row-validity test."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits

CONTRACT = ("contract",)
UNROLL_TAPS = 16  # last-dim taps unrolled in Python up to this kernel width


def _for_each_tap(k, win, body):
    """Calls body(i_off, o_off, taps, lo, hi, off) for every tap: i_off/o_off are the element
    offsets (within one plane) of the current input/output rows, taps the tap indices (IR values
    for outer dims, ints or an IR value for the last), [lo, hi) the valid input range along the
    last dim and off the output column of input column 0 (o = i*s + off)."""
    b = k.b
    nd = len(win.in_size)
    in_st, out_st = cg.contiguous_strides(win.in_size), cg.contiguous_strides(win.out_size)
    last = nd - 1

    def outer(d, i_off, o_off, taps):
        if d == last:
            return inner(i_off, o_off, taps)
        with k.for_range(win.in_size[d], name=f"i{d}") as i:
            with k.for_range(win.kernel[d], name=f"t{d}") as t:
                pos = b.add(b.sub(b.mul(i, k.c(win.strides[d])), k.c(win.pads_begin[d])),
                            b.mul(t, k.c(win.dilations[d])))
                ok = b.and_(b.icmp_signed(">=", pos, k.c(0)),
                            b.icmp_signed("<", pos, k.c(win.out_size[d])))
                with cg.if_then(b, ok):
                    outer(d + 1, b.add(i_off, b.mul(i, k.c(in_st[d]))),
                          b.add(o_off, b.mul(pos, k.c(out_st[d]))), taps + [t])

    def inner(i_off, o_off, taps):
        s, p, dl = win.strides[last], win.pads_begin[last], win.dilations[last]
        if win.kernel[last] <= UNROLL_TAPS:
            for t in range(win.kernel[last]):
                lo, hi = win.in_range(last, t)
                if lo < hi:
                    body(i_off, o_off, taps + [t], k.c(lo), k.c(hi), k.c(t * dl - p))
        else:
            with k.for_range(win.kernel[last], name="tl") as t:
                off = b.sub(b.mul(t, k.c(dl)), k.c(p))
                # lo = ceil(-off / s) clamped at 0; hi = floor((out-1-off)/s) + 1 clamped at in
                lo = b.sub(k.c(0), cg.floordiv(b, off, s))
                lo = b.select(b.icmp_signed("<", lo, k.c(0)), k.c(0), lo)
                hi = b.add(cg.floordiv(b, b.sub(k.c(win.out_size[last] - 1), off), s), k.c(1))
                hi = b.select(b.icmp_signed(">", hi, k.c(win.in_size[last])),
                              k.c(win.in_size[last]), hi)
                body(i_off, o_off, taps + [t], lo, hi, off)

    outer(0, k.c(0), k.c(0), [])


@emits("ConvTranspose")
def emit_convtranspose(k):
    b = k.b
    node = k.node
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    win = node.opdef.window(node)
    g = node.attrs["group"]
    n_, c = x.shape[:2]
    mg = w.shape[1]
    m = mg * g
    cg_ = c // g
    plane_in, plane_out = int(np.prod(win.in_size)), int(np.prod(win.out_size))
    ktaps = int(np.prod(win.kernel))
    f32 = cg.llvm_type(y.dtype)
    bias = k.inp(2)
    s_last = win.strides[-1]
    with k.for_range(n_, name="n") as n:
        with k.for_range(m, name="oc") as oc:
            gi = b.sdiv(oc, k.c(mg))
            ml = b.srem(oc, k.c(mg))
            o_plane = b.mul(b.add(b.mul(n, k.c(m)), oc), k.c(plane_out))
            init = k.load(bias, oc, y.dtype) if bias is not None else cg.const(f32, 0)
            with k.for_range(plane_out, name="z") as z:
                k.store(init, k.out(), b.add(o_plane, z))
            with k.for_range(cg_, name="ic") as ic:
                cin = b.add(b.mul(gi, k.c(cg_)), ic)
                i_plane = b.mul(b.add(b.mul(n, k.c(c)), cin), k.c(plane_in))
                # W is [C, M/group, k...]
                w_base = b.mul(b.add(b.mul(cin, k.c(mg)), ml), k.c(ktaps))

                def body(i_off, o_off, taps, lo, hi, off):
                    widx = cg.linear(b, [t if not isinstance(t, int) else k.c(t) for t in taps],
                                     cg.contiguous_strides(win.kernel), w_base, k.intp)
                    wv = k.load(k.inp(1), widx, w.dtype)
                    i_row = b.add(i_plane, i_off)
                    o_row = b.add(b.add(o_plane, o_off), off)
                    with k.for_range(hi, start=lo, name="iw") as iw:
                        xv = k.load(k.inp(0), b.add(i_row, iw), x.dtype)
                        oi = b.add(o_row, iw if s_last == 1 else b.mul(iw, k.c(s_last)))
                        acc = k.load(k.out(), oi, y.dtype)
                        k.store(b.fadd(acc, b.fmul(wv, xv, flags=CONTRACT), flags=CONTRACT),
                                k.out(), oi)

                _for_each_tap(k, win, body)
