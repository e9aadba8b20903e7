"""Channel-vectorized tiles at the edges of a row (conv/channel.py), where some taps fall in
the padding: which tiles share one code whose taps are checked at run time, and that check.

An edge tile's valid taps are known at compile time, and each kind of edge tile had code of
its own. A long or dilated kernel with a wide padding has many kinds: HiFi-GAN's Conv1d k11
dilation 5 (pad 25) five a side, wav2vec2's positional k128 (pad 64) one per tile of its
49-frame rows. Beyond EDGE_CODES kinds a row's full edge tiles run one code instead: each
kernel column's taps are found at run time, a tap in the padding reads the row's first column
(always there) and a lane mask zeroes it, and only the columns some pixel of the tile reads
inside the row are visited (channel.py: the column loop). The mask is an AND of each
broadcast, beside the tile's multiply-adds; the layers with such rows ran level with their
edge tiles specialized (channel.py's LOOP_COLUMNS gives the figures)."""
from __future__ import annotations

import math

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.tiles import Shape

# distinct edge tiles (which taps fall in the padding) a row may give their own code; beyond,
# they share one whose taps are checked at run time (`masked`). A 3x3, 5x5 or 7x7 has at most
# two (npx >= pad). HiFi-GAN's k11 dilation 5 (pad 25) had five a side: its edge tiles were
# half its compile time (AVX2 code, Zen 3, CPU s: 36.5 with them, 19.0 with none at all)
EDGE_CODES = 2


def tile_sigs(s: Shape, npx: int) -> list:
    """Per tile position along a row: (pixels, valid pixels per kernel column), or (pixels,
    None) for the edge tiles that share one code whose taps are checked at run time
    (`masked`): where a row has more than EDGE_CODES distinct full edge tiles."""
    out = []
    for t in range(math.ceil(s.wo / npx)):
        ow0 = t * npx
        n = min(npx, s.wo - ow0)
        out.append((n, tuple(tuple(0 <= (ow0 + p) * s.sw + c * s.dw - s.pl < s.win
                                   for p in range(n)) for c in range(s.kw))))
    common = max(set(out), key=out.count)
    edge = {sig for sig in out if sig != common and sig[0] == npx}
    if len(edge) > EDGE_CODES:
        out = [(sig[0], None) if sig in edge else sig for sig in out]
    return out


def masked(em, ow0, c, npx: int):
    """Kernel column c (an IR value) of the tile at ow0, its validity found at run time:
    per pixel (offset from the tile's row start, lane mask of all ones where the tap is
    inside the row and zeros in the padding). A tap in the padding reads the row's first
    column instead (always there) and the mask zeroes it."""
    k, b, s, vec = em.k, em.b, em.s, em.vec
    first = b.mul(ow0, k.c(s.sw))
    out = []
    for p in range(npx):
        rel = b.add(b.mul(c, k.c(s.dw)), k.c(p * s.sw - s.pl))
        at = b.add(first, rel)
        ok = b.and_(b.icmp_signed(">=", at, k.c(0)), b.icmp_signed("<", at, k.c(s.win)))
        off = b.select(ok, rel, b.neg(first))
        out.append((off, vec.isplat(b.sext(ok, cg.I32))))
    return out


def splat(em, xptr, o, col: int):
    """The input value at offset o (pixels; (offset, lane mask): `masked`) in every lane."""
    if not isinstance(o, tuple):
        return em.vec.load_splat(xptr, o * col)
    b, vec = em.b, em.vec
    off, mask = o
    v = vec.load_splat(xptr, b.mul(off, em.k.c(col)) if col != 1 else off)
    return b.bitcast(b.and_(b.bitcast(v, vec.ity), mask), vec.ty)
