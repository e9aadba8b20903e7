"""QConvShape: the static facts every QConv code path reads (shapes, window, zero point,
groups, whether the target has the DSP extension). The variants' plans decide from it, and the
emitters take it together with the IR values they create themselves."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glowpy.ir.program import Buffer
from glowpy.ir.ops.conv import Window

def interior(win):
    """Per spatial dim, the output range [lo, hi) whose windows lie inside the input."""
    out = []
    for d in range(len(win.in_size)):
        s, p, dl, kk, n = (win.strides[d], win.pads_begin[d], win.dilations[d], win.kernel[d],
                           win.in_size[d])
        lo = -(-p // s)
        hi = (n - 1 - (kk - 1) * dl + p) // s + 1
        out.append((max(lo, 0), max(min(hi, win.out_size[d]), max(lo, 0))))
    return out


@dataclass(frozen=True)
class QConvShape:
    x: Buffer  # input (int8/uint8)
    w: Buffer  # weights (int8, or int16 from wide quantization)
    win: Window
    n: int  # batch
    c: int  # input channels
    m: int  # output channels
    g: int  # groups
    plane_in: int  # elements of one input plane
    plane_out: int
    zp: int  # input zero point
    requant: bool  # int8/uint8 output (False: the int32 sums themselves)
    wide: bool  # requantization rounds in the high word (quant.requantize's `wide` form)
    dsp: bool  # SMLAD/SXTB16 available (TargetCaps.dsp)
    interior: tuple  # per spatial dim, the output range whose windows lie inside the input
    # 2-D, dilation 1, int8 weights, an interior in every dim: rows of taps read as runs
    # (conv_fast.interior_position), the zero point folded into a bias table
    use_inner: bool
    x_word_ok: bool  # the last taps of a row may be read as a word (one byte past them)

    @property
    def cg(self) -> int:
        return self.c // self.g

    @property
    def mg(self) -> int:
        return self.m // self.g

    @property
    def ktaps(self) -> int:
        return int(np.prod(self.win.kernel))

    @classmethod
    def of(cls, k) -> "QConvShape":
        node, t = k.node, k.attrs
        x, w = k.in_buf(0), k.in_buf(1)
        win = node.opdef.window(node)
        n_, c = x.shape[:2]
        requant = t["out_dtype"] != "int32"
        inner = tuple(interior(win))
        use_inner = len(win.in_size) == 2 and all(d == 1 for d in win.dilations) and \
            w.dtype == np.int8 and all(hi > lo for lo, hi in inner)
        word_ok = False
        if use_inner:
            kh_, kw_ = win.kernel
            last = ((n_ * c - 1) * win.in_size[0] + (inner[0][1] - 1) * win.strides[0]
                    - win.pads_begin[0] + kh_ - 1) * win.in_size[1] + \
                (inner[1][1] - 1) * win.strides[1] - win.pads_begin[1] + kw_ - 1
            word_ok = last + 1 < int(np.prod(x.shape))
        return cls(x, w, win, n_, c, w.shape[0], t["group"], int(np.prod(win.in_size)),
                   int(np.prod(win.out_size)), t["x_zp"], requant, requant and _all_wide(k),
                   k.caps.dsp, inner, use_inner, word_ok)


def _all_wide(k) -> bool:
    """Every channel's shift leaves at least 33 bits to drop (shift <= -2): the requantization
    can round in the high word of the 64-bit product (quant.requantize's `wide` form)."""
    s = k.const(4)
    return s is not None and np.asarray(s).size > 0 and int(np.asarray(s).max()) <= -2
