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
from glowpy.codegen.kernels.tiles import BLOCK_L2, L1_SETS, L1_WAYS, LINE, l1_sets
from glowpy.ir import epilogue

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
    chunked in the model (AVX2 code, Zen 4, -instrument-profile, min of 8 rounds).

    Unstrided tiles share their input lines with the next tile, and the planes stay in L2
    where they fit: three 3x3s whose input did measured +5%, +5% and -5% chunked (128 on
    28x28, 384 -> 256 on 13x13, 256 on 14x14, AVX2), so those are chunked only where the
    input is past half the L2 (`_past_l2`; not windows one column wide, whose taps share no
    lines: ResNeXt's 1x1 1024 -> 2048 on 10x10 3-6% slower chunked) or where the planes collide
    (`collision_chunk`)."""
    if not caps.l1d_bytes or nhwc:
        return None
    clash = collision_chunk(s)
    span = (npx - 1) * s.sw + (s.kw - 1) * s.dw + 1  # input columns of a tile's kernel row
    x_channel = LINE * (1 + math.ceil(4 * (span - 1) / LINE))  # lines of one channel's plane
    fits = s.cg * (s.kw * ob * 4 + x_channel) <= caps.l1d_bytes
    if fits or s.sw == 1 and not (s.kw > 1 and _past_l2(caps, s)):
        return clash
    per_channel = s.kh * (s.kw * ob * 4 + x_channel)
    count = math.ceil(s.cg / max(1, min(caps.l1d_bytes // 2, CHUNK_BYTES) // per_channel))
    kc = math.ceil(s.cg / count)
    if count > 1 and kc * s.kh * s.kw >= MIN_STEPS:
        return min(kc, clash or kc)
    return clash or stream_chunk(caps, s, ob, npx)


def stream_chunk(caps, s, ob: int, npx: int):
    """Input channels per chunk where one block's weights (ob output channels) take BLOCK_L2 of
    the L2 or more and several row tiles read them (tiles.block_streams' blocks): chunks of a
    quarter of the L2, so that every tile but the first reads its chunk from L2 where it read
    the whole block from L3 again; None elsewhere, or where a chunk would have fewer than
    MIN_STEPS steps. Where no chunk of a kernel row's taps fits L1 (chunk_channels' own rule),
    this is the one that applies: CapsNet's primary capsules (9x9 / 2, 256 -> 256 onto 6x6:
    21 MB of weights, 2.65 MB a block of 32, six rows of one tile; Zen 5, 1 MiB L2, the model
    in alternating rounds) 2.70 -> 2.25 ms in chunks of 16 channels (1,296 steps, 166 KB a
    block's chunk) without the channels-last copy, which channel_last.place then leaves out
    (chunked tiles on a copy ran as slowly as unchunked ones)."""
    tiles = s.ho * math.ceil(s.wo / npx)
    per_channel = ob * s.kh * s.kw * 4
    if not caps.l2_bytes or tiles < 2 or s.cg * per_channel < BLOCK_L2 * caps.l2_bytes:
        return None
    count = math.ceil(s.cg / max(1, caps.l2_bytes // 4 // per_channel))
    kc = math.ceil(s.cg / count)
    return kc if count > 1 and kc * s.kh * s.kw >= MIN_STEPS else None


def _past_l2(caps, s) -> bool:
    """The input image is over half the L2, so the unchunked tiles' channel sweeps (a line of
    each plane per tile) come from L3. Zen 4, -mcpu=znver3 code (6 x 2 tiles), one layer +
    Relu, -instrument-profile, best of 6 alternating rounds, chunked / unchunked: Conv1d k3
    512 -> 512 over 1,600 frames 0.85, 256 over 1,000 0.90, k3 dilation 2 512 over 800 0.87,
    k5 384 over 500 0.93; 3x3 dilation 4 512 on 28x28 0.96, 3x3 128 on 28x28 0.95-0.97, 5x5
    128 -> 192 on 27x27 level; the 3x3 256 on 14x14 (input 0.2 MB, in L2) 1.02."""
    return bool(caps.l2_bytes) and 4 * s.cg * s.hin * s.win > caps.l2_bytes // 2


def collision_chunk(s):
    """Input channels per chunk where the planes are a multiple of the L1's set span apart
    (4 KiB: 1,024 or 4,096 audio samples, 32x32 or 64x64 images): a tile's lines at one
    offset in each plane then fall in one or a few sets, whose 8 ways cannot hold them, and
    every kernel column reads its lines from L2 again. A chunk holds at most half the ways'
    worth of planes in each set (the weights and the partial sums pass through too); None
    where all the channels fit that way. Zen 4, -mcpu=znver3 code (6 x 2 tiles), one layer,
    -instrument-profile, best of 6 alternating rounds, chunks of 4 / unchunked: Conv1d over
    16 channels of 4,096 samples (16 KiB planes) k3 0.68 (of the pixel-vectorized tiles'
    time), k7 0.65, k11 0.51, k11 dilation 5 0.67; 32 channels of 2,048 k3 0.68, k7 0.77,
    k11 0.80; 5x5 16 -> 16 on 64x64 0.73, 32 -> 32 0.77 (chunks of 8 there: 0.90-0.96, each
    of 5 kernel rows puts 8 lines in a set). 64 channels of 256 samples (1 KiB: 4 sets) in
    chunks of 16: 0.97. Not 1x1 windows, where no kernel column reads the lines again, nor
    planes spread over half the sets they could fill or more: there the channels are just
    many (the size rule above decides; x-vector's 512 channels of 296 frames, 64 sets, came
    out 2.6% slower on AVX-512 in chunks of 23)."""
    def per_set(count):  # planes at most in one L1 set, at one offset in each
        return -(-count // l1_sets(4 * s.hin * s.win, count))
    ways = L1_WAYS // 2
    spread = l1_sets(4 * s.hin * s.win, s.cg)  # (a 1x1 reads each line for one tap)
    if s.kh * s.kw == 1 or per_set(s.cg) <= ways or 2 * spread >= min(s.cg, L1_SETS):
        return None
    most = 1
    while most < s.cg and per_set(most + 1) <= ways:  # (at most 4 x 64 channels)
        most += 1
    return math.ceil(s.cg / math.ceil(s.cg / most))


def takes_colliding(k, s) -> bool:
    """Whether the channel-vectorized tiles take a Conv (not 1x1) they would leave to the pixel
    tiles, for its planes' collisions (collision_chunk): those cost the pixel tiles as much,
    and only these take the reduction in chunks (Conv1d k3 over 16 or 32 channels of 4,096 or
    2,048 samples 0.68 of the pixel tiles' time). Not with a residual to read: the turned-
    around stores and the residual's reads then collide too (HiFi-GAN's first residual k3 of a
    stage 1.4-1.7x slower this way, AVX2 code); per-channel operands (a BatchNormalization
    after the activation) are a vector each and do not."""
    out = k.out_buf().nbytes
    residual = k.instr.attrs.get("accumulate") is not None or any(
        x is not None and x.nbytes >= out for x in k.instr.inputs[epilogue.base_count(k.node):])
    return collision_chunk(s) is not None and not residual


def emit(em, n, gi, blocks, outer: bool):
    """The layer's tiles for image n, group gi (em: the ChanEmitter; blocks(body): body(o0,
    nch) over its channel blocks; outer: blocks inside the rows). A segment is part of a row,
    or whole rows where they are short (a 14-wide row has 3 tiles: chunking them alone would
    read every chunk's weights for 3 tiles)."""
    k, b, s, w = em.k, em.b, em.s, em.vec.w
    slot = em.npx * math.ceil(em.ob / w) * w  # floats of partial sums per tile
    sigs = em.sigs()
    per_seg = max(1, SEG_BYTES // (4 * slot))
    buf = cg.alloca_in_entry(b, ir.ArrayType(cg.F32, per_seg * slot), "partial")
    buf.type = cg.PTR  # an untyped pointer, as the store routines take it
    edges, inner = ((), ()), None
    if len(sigs) >= per_seg or s.ho == 1:
        nrows = 1
        # the row's edge tiles (each its own code: which of its taps fall in the padding) run
        # unchunked, the interior ones in segments of one code, the last segment's length a
        # run-time count: the chunked reduction is copied once (the lead tile aside), not for
        # every edge tile and a shorter last segment as well. HiFi-GAN (54 chunked layers, k3 to
        # k11, dilations to 5, five edge tiles a side): compile 21.3 -> 16.2 s (13.7 unchunked;
        # Zen 4, AVX2 code)
        common = max(set(sigs), key=sigs.count)
        lo, hi = sigs.index(common), len(sigs) - sigs[::-1].index(common)
        if all(sig == common for sig in sigs[lo:hi]):
            edges, inner = (range(lo), range(hi, len(sigs))), common
        pieces = []  # consecutive segments with the same tiles share a loop
        for a in range(0, len(sigs), per_seg) if inner is None else ():
            rel = sigs[a:a + per_seg]
            if pieces and pieces[-1][2] == rel:
                pieces[-1][1] += 1
            else:
                pieces.append([a, 1, rel])
    else:
        nrows, pieces = min(s.ho, per_seg // len(sigs)), [[0, 1, sigs]]

    def segments(o0, nch, oh0, rows):
        for side in edges:
            for t0, t1, sig in _runs(side, sigs):  # (run-time-masked edge tiles: one loop)
                if t1 - t0 == 1:
                    em.kernel(n, gi, o0, nch, oh0, k.c(t0 * em.npx), sig)
                else:
                    with k.for_range(t1, start=t0, name="e") as t:
                        em.kernel(n, gi, o0, nch, oh0, b.mul(t, k.c(em.npx)), sig)
        if inner is not None:
            with k.for_range(math.ceil((hi - lo) / per_seg), name="sg") as si:
                a = b.add(k.c(lo), b.mul(si, k.c(per_seg)))
                left = b.sub(k.c(hi), a)
                count = k.c(per_seg) if (hi - lo) % per_seg == 0 else \
                    b.select(b.icmp_signed("<", left, k.c(per_seg)), left, k.c(per_seg))
                _segment(em, buf, n, gi, o0, nch, oh0, rows, a, [inner], count)
        for a, count, rel in pieces:
            if count == 1:
                _segment(em, buf, n, gi, o0, nch, oh0, rows, k.c(a), rel)
            else:
                with k.for_range(count, name="sg") as si:
                    _segment(em, buf, n, gi, o0, nch, oh0, rows,
                             b.add(k.c(a), b.mul(si, k.c(len(rel)))), rel)

    def row_groups(body):
        cg.for_runs(b, s.ho, nrows, body, k.intp, "rg")

    if outer:
        row_groups(lambda oh0, rows: blocks(lambda o0, nch: segments(o0, nch, oh0, rows)))
    else:
        blocks(lambda o0, nch: row_groups(lambda oh0, rows: segments(o0, nch, oh0, rows)))


def _runs(tiles: range, sigs: list) -> list:
    """The tiles as (first, end, sig) runs of one sig."""
    out = []
    for t in tiles:
        if out and out[-1][2] == sigs[t]:
            out[-1][1] = t + 1
        else:
            out.append([t, t + 1, sigs[t]])
    return out


def _tiles(k, b, rows: int, rel, oh0, body, lead: bool = True, count=None):
    """body(oh, slot index, tile index in the row, sig, lead) over `rows` rows from oh0 and
    the tiles `rel` of each (or `count`, an IR value, tiles of the one sig in `rel`): a loop
    over each run of equal tiles; with `lead`, the segment's first tile on its own (it alone
    prefetches the weights ahead, the others find them in L1)."""
    if count is not None:
        runs = [[0, 1, rel[0]], [1, count, rel[0]]] if lead else [[0, count, rel[0]]]
        width = count
    else:
        runs, width = [], k.c(len(rel))
        for i, sig in enumerate(rel):
            if runs and runs[-1][2] == sig and (runs[-1][0] > 0 or not lead):
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1, sig])

    def row(r, first_row):
        oh = b.add(oh0, r)
        for t0, t1, sig in runs:
            if isinstance(t1, int) and t1 - t0 == 1:
                body(oh, b.add(b.mul(r, width), k.c(t0)), k.c(t0), sig,
                     lead and first_row and t0 == 0)
            else:
                with k.for_range(t1, start=t0, name="t") as i:
                    body(oh, b.add(b.mul(r, width), i), i, sig, False)
    row(k.c(0), True)
    if rows > 1:
        with k.for_range(rows, start=1, name="r") as r:
            row(r, False)


def _segment(em, buf, n, gi, o0, nch, oh0, rows: int, t0, rel, count=None):
    """Tiles t0 .. t0 + len(rel) (or + count, an IR value: tiles of the one sig in rel) of rows
    oh0 .. oh0 + rows: partial sums zeroed (in buf), every chunk of input channels added in
    turn, then the tiles stored."""
    k, b, s, vec = em.k, em.b, em.s, em.vec
    w = vec.w
    nvo = math.ceil(nch / w)
    slot = em.npx * nvo * w
    zeros = k.c(rows * len(rel) * slot // w) if count is None else \
        b.mul(count, k.c(rows * slot // w))
    with k.for_range(zeros, name="z") as z:
        vec.store(vec.zero(), buf, b.mul(z, k.c(w)))
    _, chmask, xb, wb = em.bases(n, gi, o0, nch)
    kc = em.kc
    # a block's weights that stay in L1 need no lead tile to prefetch them (one copy of the
    # reduction less per segment: compile time)
    lead = 4 * s.ktot * nvo * w > k.caps.l1d_bytes // 2
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
        _tiles(k, b, rows, rel, oh0, tile, lead, count)

    oc0 = b.add(b.mul(gi, k.c(s.mg)), o0)

    def store(oh, j, i, sig, lead):
        npx = sig[0]
        key = (npx, nvo, tuple(chmask))
        if key not in em.store_fns:
            em.store_fns[key] = em.make_store_fn(npx, nvo, chmask)
        ptr = cg.gep(b, buf, b.mul(j, k.c(slot)), cg.F32)
        b.call(em.store_fns[key], k.params + [k.cbase, ptr, n, oc0, oh,
                                              b.mul(b.add(t0, i), k.c(em.npx))])
    _tiles(k, b, rows, rel, oh0, store, lead, count)
