"""Col2Im kernel: each (n, c) output plane starts at zero; then every block element (tap) of
the columns adds its run of block positions into the image positions o = i*stride +
tap*dilation - pad (ConvTranspose's scatter, `transpose._for_each_tap`, without the reduction
over input channels: that is the 1x1 product before it when a strided ConvTranspose is
computed as product + Col2Im, glowpy/ir/passes/convtranspose.py). One add per column value:
next to the product's C multiply-adds per value it is a small share of the time. Where the
blocks tile the image exactly (kernel = stride, unpadded) each value is stored in place."""
from __future__ import annotations

import math

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.conv.transpose import CONTRACT, _for_each_tap
from glowpy.codegen.registry import emits


@emits("Col2Im")
def emit_col2im(k):
    b = k.b
    node = k.node
    win = node.opdef.window(node)
    y = k.out_buf()
    planes = y.shape[0] * y.shape[1]
    plane_in, plane_out = math.prod(win.in_size), math.prod(win.out_size)
    ktaps = math.prod(win.kernel)
    s_last = win.strides[-1]
    zero = cg.const(cg.llvm_type(y.dtype), 0)
    place = win.tiles_exactly()  # each output position is one column value: store, do not add
    with k.for_range(planes, name="nc") as nc:
        o_plane = b.mul(nc, k.c(plane_out))
        if not place:
            with k.for_range(plane_out, name="z") as z:
                k.store(zero, k.out(), b.add(o_plane, z))
        col_base = b.mul(nc, k.c(ktaps))

        def body(i_off, o_off, taps, lo, hi, off):
            tap = cg.linear(b, [t if not isinstance(t, int) else k.c(t) for t in taps],
                            cg.contiguous_strides(win.kernel), col_base, k.intp)
            i_row = b.add(b.mul(tap, k.c(plane_in)), i_off)
            o_row = b.add(b.add(o_plane, o_off), off)
            with k.for_range(hi, start=lo, name="iw") as iw:
                v = k.load(k.inp(0), b.add(i_row, iw), y.dtype)
                oi = b.add(o_row, iw if s_last == 1 else b.mul(iw, k.c(s_last)))
                k.store(v if place else b.fadd(k.load(k.out(), oi, y.dtype), v, flags=CONTRACT),
                        k.out(), oi)

        _for_each_tap(k, win, body)
