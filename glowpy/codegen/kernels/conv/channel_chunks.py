"""Channel-vectorized row tiles with the reduction split into chunks of input channels (the
plan's "kc"), for layers whose block of weights does not fit L1.

conv/channel.py's tiles run a block's whole reduction per tile: each weight vector is loaded
for NPX multiply-adds and a block of 16 channels of a 3x3 over 128 inputs holds 74 KiB of
weights, so every tile streams them from L2 again. Here a row of tiles is cut into segments
whose partial sums fit a small stack buffer; each segment runs the chunks in turn, every tile
of it reading the chunk's few KiB of weights from L1, and is stored (turned around, with its
bias, residual and epilogue: the shape's store routine) after the last chunk. The partial sums
cost two passes over the buffer per chunk, a few vector loads and stores per hundred steps.

Zen 4, -mcpu=znver3 code (6 x 2 and 5 x 2 tiles), one layer + bias + Relu, best of 8-10
alternating rounds: 3x3/2 128 -> 128 on 56x56 78% -> 89-91% of the peak (onnxruntime's AVX2
kernels 87-89%), 256 -> 256 on 28x28 77-79% -> 84-90% (85-86%). In the models
(-instrument-profile, min of 8 alternating rounds): ResNet-50's conv_101 6.65 -> 5.62 M
cycles, wav2vec2's feature encoder (five Conv1d k3/2 and k2/2 over 512 channels) 0.89 of its
time, Inception's 17x17 3x3/2 0.85."""
from __future__ import annotations

import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import Acc
from glowpy.codegen.kernels.tiles import LINE

# L1 bytes a chunk's weights and its tiles' input lines may take (the rest: the partial sums,
# SEG_BYTES, and whatever else is passing through): a Conv1d k3/2 over 512 channels (AVX2,
# 6 x 2 tiles) ran at 80% of the peak in chunks of 86 channels (16 KiB of weights alone,
# 0.4 KiB of input lines each) and at 86% in chunks of 29; a 3x3/2 on 128 channels at 89-91%
# in chunks of 15, 16, 26 or 32 against 78% unchunked
CHUNK_BYTES = 16 * 1024
# reduction steps a chunk must have: the partial sums cost two memory operations per
# accumulator and chunk, about 2 / steps of the work. AVX-512 tiles (Zen 4, 7 x 2 and 8 x 2)
# gained nothing chunked and lost that much at 129-135 steps (128 -> 32 3x3/2 on 56x56, 488 ->
# 497 us; 512 -> 64 Conv1d k3/2: 1021 -> 1026 us); AVX2's 6 x 2 at 135-234 steps gained 13-16%
MIN_STEPS = 128
SEG_BYTES = 8 * 1024  # the partial sums of one segment of tiles (stack; stays in L1)


def chunk_channels(caps, s, ob: int, npx: int, nhwc: bool):
    """Input channels per chunk, or None where a kernel row's pass over all the channels
    (its weights for the block and the tile's input lines) fits L1: the whole reduction per
    tile then finds its input where the previous kernel column left it. Tiles reading a
    channels-last copy (nhwc) are not chunked: their input is a few contiguous lines per
    kernel row, and ResNet-50's 256-channel 3x3/2 (conv_208, 28 -> 14) ran 4% slower
    chunked in the model (AVX2 code, Zen 4, -instrument-profile, min of 8 rounds). Nor are
    unstrided ones: consecutive tiles share their input lines there, and three 3x3s measured
    +5%, +5% and -5% chunked (128 on 28x28, 384 -> 256 on 13x13, 256 on 14x14, AVX2)."""
    if not caps.l1d_bytes or nhwc or s.sw == 1:
        return None
    span = (npx - 1) * s.sw + (s.kw - 1) * s.dw + 1  # input columns of a tile's kernel row
    x_channel = LINE * (1 + math.ceil(4 * (span - 1) / LINE))  # lines of one channel's plane
    if s.cg * (s.kw * ob * 4 + x_channel) <= caps.l1d_bytes:
        return None
    per_channel = s.kh * (s.kw * ob * 4 + x_channel)
    count = math.ceil(s.cg / max(1, min(caps.l1d_bytes // 2, CHUNK_BYTES) // per_channel))
    kc = math.ceil(s.cg / count)
    return kc if count > 1 and kc * s.kh * s.kw >= MIN_STEPS else None


def emit(em, n, gi, blocks, outer: bool):
    """The layer's tiles for image n, group gi (em: the ChanEmitter; blocks(body): body(o0,
    nch) over its channel blocks; outer: blocks inside the rows). A segment is part of a row,
    or whole rows where they are short (a 14-wide row has 3 tiles: chunking them alone would
    read every chunk's weights for 3 tiles)."""
    k, b, s, w = em.k, em.b, em.s, em.vec.w
    slot = em.npx * math.ceil(em.ob / w) * w  # floats of partial sums per tile
    sigs = [sig for t0, t1, sig in em.runs() for _ in range(t0, t1)]
    per_seg = max(1, SEG_BYTES // (4 * slot))
    buf = cg.alloca_in_entry(b, ir.ArrayType(cg.F32, per_seg * slot), "partial")
    buf.type = cg.PTR  # an untyped pointer, as the store routines take it
    if len(sigs) >= per_seg or s.ho == 1:
        nrows = 1
        pieces = []  # consecutive segments with the same tiles (the interior ones) share a loop
        for a in range(0, len(sigs), per_seg):
            rel = sigs[a:a + per_seg]
            if pieces and pieces[-1][2] == rel:
                pieces[-1][1] += 1
            else:
                pieces.append([a, 1, rel])
    else:
        nrows, pieces = min(s.ho, per_seg // len(sigs)), [[0, 1, sigs]]

    def segments(o0, nch, oh0, rows):
        for a, count, rel in pieces:
            if count == 1:
                _segment(em, buf, n, gi, o0, nch, oh0, rows, k.c(a), rel)
            else:
                with k.for_range(count, name="sg") as si:
                    _segment(em, buf, n, gi, o0, nch, oh0, rows,
                             b.add(k.c(a), b.mul(si, k.c(len(rel)))), rel)

    def row_groups(body):
        full, rest = divmod(s.ho, nrows)
        if full == 1:
            body(k.c(0), nrows)
        elif full > 1:
            with k.for_range(full, name="rg") as g:
                body(b.mul(g, k.c(nrows)), nrows)
        if rest:
            body(k.c(full * nrows), rest)

    if outer:
        row_groups(lambda oh0, rows: blocks(lambda o0, nch: segments(o0, nch, oh0, rows)))
    else:
        blocks(lambda o0, nch: row_groups(lambda oh0, rows: segments(o0, nch, oh0, rows)))


def _tiles(k, b, rows: int, rel, oh0, body):
    """body(oh, slot index, tile index in the row, sig, lead) over `rows` rows from oh0 and
    the tiles `rel` of each: a loop over each run of equal tiles; the segment's first tile on
    its own (lead: it alone prefetches the weights ahead, the others find them in L1)."""
    runs = []
    for i, sig in enumerate(rel):
        if runs and runs[-1][2] == sig and runs[-1][0] > 0:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1, sig])

    def row(r, first_row):
        oh = b.add(oh0, r)
        for t0, t1, sig in runs:
            if t1 - t0 == 1:
                body(oh, b.add(b.mul(r, k.c(len(rel))), k.c(t0)), k.c(t0), sig, first_row and t0 == 0)
            else:
                with k.for_range(t1, start=t0, name="t") as i:
                    body(oh, b.add(b.mul(r, k.c(len(rel))), i), i, sig, False)
    row(k.c(0), True)
    if rows > 1:
        with k.for_range(rows, start=1, name="r") as r:
            row(r, False)


def _segment(em, buf, n, gi, o0, nch, oh0, rows: int, t0, rel):
    """Tiles t0 .. t0 + len(rel) of rows oh0 .. oh0 + rows: partial sums zeroed (in buf),
    every chunk of input channels added in turn, then the tiles stored."""
    k, b, s, vec = em.k, em.b, em.s, em.vec
    w = vec.w
    nvo = math.ceil(nch / w)
    slot = em.npx * nvo * w
    with k.for_range(rows * len(rel) * slot // w, name="z") as z:
        vec.store(vec.zero(), buf, b.mul(z, k.c(w)))
    _, chmask, xb, wb = em.bases(n, gi, o0, nch)
    kc = em.kc
    with k.for_range(math.ceil(s.cg / kc), name="kc") as ci:
        first = b.mul(ci, k.c(kc))
        end = b.add(first, k.c(kc))
        if s.cg % kc:
            end = b.select(b.icmp_unsigned("<", end, k.c(s.cg)), end, k.c(s.cg))

        def tile(oh, j, i, sig, lead):
            npx, valid = sig
            base = b.mul(j, k.c(slot))
            acc = Acc(vec, npx, nvo)
            acc.set_flat([vec.load(buf, b.add(base, k.c((p * nvo + v) * w)))
                          for p in range(npx) for v in range(nvo)])
            ow0 = b.mul(b.add(t0, i), k.c(em.npx))
            em.reduce(acc, xb, wb, nch, chmask, oh, ow0, valid, ic=(first, end), prefetch=lead)
            for p in range(npx):
                for v in range(nvo):
                    vec.store(acc.value(p, v), buf, b.add(base, k.c((p * nvo + v) * w)))
        _tiles(k, b, rows, rel, oh0, tile)

    oc0 = b.add(b.mul(gi, k.c(s.mg)), o0)

    def store(oh, j, i, sig, lead):
        npx = sig[0]
        key = (npx, nvo, tuple(chmask))
        if key not in em.store_fns:
            em.store_fns[key] = em.make_store_fn(npx, nvo, chmask)
        ptr = cg.gep(b, buf, b.mul(j, k.c(slot)), cg.F32)
        b.call(em.store_fns[key], k.params + [k.cbase, ptr, n, oc0, oh,
                                              b.mul(b.add(t0, i), k.c(em.npx))])
    _tiles(k, b, rows, rel, oh0, store)
