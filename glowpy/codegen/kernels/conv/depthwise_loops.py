"""Depthwise row tiles whose taps run as loops (DepthwiseEmitter of conv/depthwise.py, for
kernels of LOOP_ROWS rows and more): the input rows that feed every output row of a block in
a loop, and from LOOP_COLUMNS columns the runs of kernel columns with the same lane masks in
a loop, so a tile's code grows with the kernel's width, not with its area."""
from __future__ import annotations

from glowpy.codegen.kernels.tiles import Shape

LOOP_ROWS = 7  # kernel rows from which a row tile's interior rows run as a loop (looped_plan)
LOOP_COLUMNS = 13  # kernel columns from which runs of same-mask columns run as a loop
LOOP_MIN = 3  # taps of the same shape that run as a loop rather than unrolled


def looped_rows(em, acc, users, row_at, masks, nrows):
    """The taps of a row tile as loops where consecutive taps have the same shape: input
    rows that feed every output row of the block (the kernel's interior rows) in a loop,
    and in each input row the kernel columns whose lane masks are the same in a loop. The
    unrolled tiles of a 31x31 kernel on 56x56 planes (RepLKNet) held 34 x 31 taps per tile
    over 45 edge and interior tiles: 2.7 MB of AVX2 code a layer, 20 s to emit it, and a
    154 s compile of the model (21 s with the loops). The loops also run faster (Zen 3,
    AVX2 code, one layer + Relu, best of 6 alternating rounds, unrolled -> loops):
    31x31 on 64 x 56x56 10.4 -> 6.5 ms, 29x29 on 128 x 28x28 4.0 -> 1.6 ms, 9x9 on
    512 x 32x32 1.39 -> 1.01 ms, 7x7 on 192 x 28x28 317 -> 215 us, 384 x 14x14 125 -> 103
    us: the unrolled tiles of every edge run outgrow the op cache. On 96 x 56x56, where
    one interior tile takes most of the time, 7x7 measured 537 unrolled and 565 us
    looped, level in ConvNeXt-T (105.2 / 105.8 ms)."""
    k, b, s = em.k, em.b, em.s
    full = [rr for rr in sorted(users)
            if [i for i, _ in users[rr]] == list(range(nrows))]
    runs, rest = [], [rr for rr in sorted(users) if rr not in full]
    for rr in full:  # consecutive input rows that every output row reads
        if runs and runs[-1][1] == rr:
            runs[-1][1] = rr + 1
        else:
            runs.append([rr, rr + 1])
    for r0, r1 in runs:
        if r1 - r0 < LOOP_MIN:
            rest += list(range(r0, r1))
            continue
        with acc.loop(k, r1, start=r0, name="kr") as rr:
            # the kernel row of output row i is rr - i * sh (dilation 1: looped_plan)
            looped_cols(em, acc, row_at(rr), masks,
                        [(i, b.sub(rr, k.c(i * s.sh))) for i in range(nrows)])
    for rr in sorted(rest):
        looped_cols(em, acc, row_at(k.c(rr)), masks, [(i, k.c(a)) for i, a in users[rr]])


def looped_cols(em, acc, row, masks, uses):
    """The kernel columns of one input row for the output rows `uses` [(i, kernel row)]:
    runs of columns with the same masks in a loop (stride 1: each column one shifted
    load a vector)."""
    k, b, s, vec = em.k, em.b, em.s, em.vec
    c0 = 0
    while c0 < s.kw:
        c1 = c0 + 1
        while c1 < s.kw and masks[c1] == masks[c0]:
            c1 += 1
        m = masks[c0]
        if any(any(x) for x in m):
            def body(c, m=m):
                at = b.add(row, b.mul(c, k.c(s.dw)))
                vals = [vec.load(em.x, b.add(at, k.c(j * vec.w - s.pl)), m[j], safe=em.safe)
                        if any(m[j]) else None for j in range(len(m))]
                for i, a in uses:
                    acc.fma([None] * i + [em.weight_at(b.add(b.mul(a, k.c(s.kw)), c))], vals)
            if c1 - c0 < LOOP_MIN or s.kw < LOOP_COLUMNS:
                for c in range(c0, c1):
                    body(k.c(c))
            else:
                with acc.loop(k, c1, start=c0, name="kc") as c:
                    body(c)
        c0 = c1


def looped_plan(s: Shape, choice) -> bool:
    """Whether a row tiling runs its taps in loops (looped_rows): column
    stride 1 (one shifted load a kernel column), row dilation 1 (consecutive input rows are
    consecutive kernel rows), a kernel of LOOP_ROWS rows or more (3x3 and 5x5 tiles are
    small; their loops would be one or two rows) and at least LOOP_MIN input rows that feed
    every output row of a block."""
    if choice[0] != "rows" or s.sw != 1 or s.dh != 1:
        return False
    return s.kh >= LOOP_ROWS and s.kh - (choice[1] - 1) * s.sh >= LOOP_MIN
