"""What the integer window kernels share: the walk over the taps of one output position that
land inside the input (tap_loops: QConv, QAvgPool), per-channel requantization parameters
that collapse to one constant (channel_params: QConv, QMatMul)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg

UNROLL = 4  # taps along a dim unrolled in Python when every output position reads all of them


def tap_loops(k, win, oidx, body):
    """For the output position `oidx` (IR indices per spatial dim), calls body(in_off, k_off)
    for every tap of the window that lands inside the input: in_off is the element offset in
    the input plane, k_off the tap's offset in the kernel (both IR values)."""
    b = k.b
    nd = len(win.in_size)
    in_st, k_st = cg.contiguous_strides(win.in_size), cg.contiguous_strides(win.kernel)

    def rec(d, i_off, k_off):
        if d == nd:
            return body(i_off, k_off)
        s, p, dl = win.strides[d], win.pads_begin[d], win.dilations[d]
        kk, n = win.kernel[d], win.in_size[d]
        start = b.sub(b.mul(oidx[d], k.c(s)), k.c(p)) if p else b.mul(oidx[d], k.c(s))
        full = p == 0 and (win.out_size[d] - 1) * s + (kk - 1) * dl <= n - 1
        if full and kk <= UNROLL:
            for t in range(kk):
                pos = b.add(start, k.c(t * dl)) if t else start
                rec(d + 1, b.add(i_off, b.mul(pos, k.c(in_st[d]))), b.add(k_off, k.c(t * k_st[d])))
            return
        if full:
            lo, hi = k.c(0), k.c(kk)
        elif dl == 1:
            zero = k.c(0)
            neg = b.sub(zero, start)
            lo = b.select(b.icmp_signed(">", neg, zero), neg, zero)
            lim = b.sub(k.c(n), start)
            hi = b.select(b.icmp_signed("<", lim, k.c(kk)), lim, k.c(kk))
        else:  # lo = max(0, ceil(-start / dl)), hi = min(kk, ceil((n - start) / dl))
            zero = k.c(0)
            lo = b.sub(zero, cg.floordiv(b, start, dl))
            lo = b.select(b.icmp_signed(">", lo, zero), lo, zero)
            hi = b.sub(zero, cg.floordiv(b, b.sub(start, k.c(n)), dl))
            hi = b.select(b.icmp_signed("<", hi, k.c(kk)), hi, k.c(kk))
        with k.for_range(hi, start=lo, name=f"t{d}") as t:
            pos = b.add(start, b.mul(t, k.c(dl)) if dl != 1 else t)
            rec(d + 1, b.add(i_off, b.mul(pos, k.c(in_st[d]))), b.add(k_off, b.mul(t, k.c(k_st[d]))))

    rec(0, k.c(0), k.c(0))


def channel_params(k, idx: int):
    """The requantization multipliers or shifts (input idx): a Python int when one value serves
    every channel, else the table itself (loaded per channel)."""
    v = k.const(idx)
    if v is not None and len(set(np.asarray(v).reshape(-1).tolist())) == 1:
        return int(np.asarray(v).reshape(-1)[0])
    return None

