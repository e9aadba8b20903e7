"""Window walks for the generic sliding-window kernels (conv/direct.py, pool/direct.py).

Every window op is written as "for each tap, update a run of output positions": the innermost
loop walks the last spatial dim over the range of outputs for which that tap lands inside the
input (computed in Python from the static shapes), so it has no bounds checks and vectorizes."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.ir.ops.conv import Window

CONTRACT = ("contract",)
UNROLL_TAPS = 16  # last-dim taps unrolled in Python up to this kernel width


def flatten_pointwise(win: Window) -> Window:
    """A 1x1, stride-1, unpadded window over N-D is the same as one over the flattened plane."""
    if all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides) and \
            not any(win.pads_begin) and not any(win.pads_end) and len(win.in_size) > 1:
        n = int(np.prod(win.in_size))
        return Window((n,), (n,), (1,), (1,), (1,), (0,), (0,))
    return win


def for_each_tap(k, win: Window, body):
    """Calls body(out_outer_offset, in_outer_offset, tap_index_list, lo, hi, ...) for every
    kernel tap, inside IR loops over the outer output dims and the outer taps whose input row is
    valid. Offsets are element offsets within one (n, c) plane; `body` receives:
      o_row: offset of output row start, i_row: offset of input row start (at input col 0),
      taps: [ir or int] tap indices, k_last: python int or ir value, lo/hi: the valid output
      range along the last dim (ir values), in_col(o): input column for output column o."""
    b = k.b
    nd = len(win.in_size)
    in_st, out_st = cg.contiguous_strides(win.in_size), cg.contiguous_strides(win.out_size)
    last = nd - 1

    def outer(d, o_off, i_off, taps):
        if d == last:
            return inner(o_off, i_off, taps)
        with k.for_range(win.out_size[d], name=f"o{d}") as o:
            with k.for_range(win.kernel[d], name=f"t{d}") as t:
                pos = b.add(b.sub(b.mul(o, k.c(win.strides[d])), k.c(win.pads_begin[d])),
                            b.mul(t, k.c(win.dilations[d])))
                ok = b.and_(b.icmp_signed(">=", pos, k.c(0)),
                            b.icmp_signed("<", pos, k.c(win.in_size[d])))
                with cg.if_then(b, ok):
                    outer(d + 1, b.add(o_off, b.mul(o, k.c(out_st[d]))),
                          b.add(i_off, b.mul(pos, k.c(in_st[d]))), taps + [t])

    def inner(o_off, i_off, taps):
        s, p, dl = win.strides[last], win.pads_begin[last], win.dilations[last]
        if win.kernel[last] <= UNROLL_TAPS:
            for t in range(win.kernel[last]):
                lo, hi = win.valid_range(last, t)
                if lo < hi:
                    body(o_off, i_off, taps + [t], k.c(lo), k.c(hi), t * dl - p)
        else:
            with k.for_range(win.kernel[last], name="tl") as t:
                base = b.sub(b.mul(t, k.c(dl)), k.c(p))  # input col = o*s + base
                lo = cg.floordiv(b, b.sub(k.c(s - 1), base), s)
                hi = b.add(cg.floordiv(b, b.sub(k.c(win.in_size[last] - 1), base), s), k.c(1))
                lo = b.select(b.icmp_signed("<", lo, k.c(0)), k.c(0), lo)
                hi = b.select(b.icmp_signed(">", hi, k.c(win.out_size[last])), k.c(win.out_size[last]), hi)
                body(o_off, i_off, taps + [t], lo, hi, base)

    outer(0, k.c(0), k.c(0), [])


def in_col(k, o, win, base):
    """Input column of output column o for a tap whose offset is `base` (= t*dl - p)."""
    s = win.strides[-1]
    b = k.b
    col = o if s == 1 else b.mul(o, k.c(s))
    return b.add(col, base if not isinstance(base, int) else k.c(base))
