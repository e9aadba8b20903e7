"""Register-blocked float Conv (1-D and 2-D, any stride, dilation, padding and group count).

The output is computed in tiles of MR output channels x NV vectors of output pixels
(gemm_micro): per reduction step MR weights are broadcast and NV input vectors loaded. Weights
are re-laid out at compile time into exactly the order the kernel reads them -- per group and
block of MR output channels, the reduction order, MR weights innermost -- in place of the
original constant. Two tilings:

  * flat: the pixels of a tile are consecutive in the flattened output plane. With stride 1
    and an output as wide as the input, every tap reads the input plane shifted by a constant,
    so a tap is one (masked) vector load per vector; lanes whose tap lands in the padding are
    masked. 1x1 convolutions are plain GEMMs this way. Used where vectors are wider than one
    float.
  * row: the pixels of a tile lie in one output row (any stride: a strided tap is a wide load
    and a shuffle). Which lanes of which tap are valid is known at compile time for every tile
    position, so edge tiles get their own code and no mask in scalar code (the Cortex-M7
    path); the valid kernel rows of an output row are a run-time range.

Weights computed at run time (StyleGAN2's modulated convolutions, CondConv's expert
mixtures) are packed by the kernel into its scratch (conv/runtime_weights.py), or, without
one (memory-first targets), read in the model's layout: the MR broadcasts of a step then lie
a filter apart rather than side by side.

Depthwise convolution is the case MR = 1 with one input channel per group: taps unrolled, a
vector of output pixels per accumulator. Groups are the outermost loop, so each group's output
is written within its own iteration (the streaming contract of CONTRIBUTING.md)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.tiles import (Shape, _blocks, _pack, choose_tile, chunk_tiles, kh_range,
                                         row_runs, shape_of, tiles_outermost, valid_taps)
from glowpy.codegen.kernels.accumulators import Acc, const_input, pack_constant
from glowpy.codegen.kernels.conv import runtime_weights
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.codegen.registry import variant


class ConvEmitter:
    def __init__(self, k, s: Shape, flat: bool, tile=None, chunk: int = 0):
        self.k, self.s, self.b = k, s, k.b
        self.chunk = chunk  # flat tiles per chunk when tiles are outermost (tiles.chunk_tiles)
        self.prefetch = False  # the flat tiles' stores prefetched (flat_group: tiles outermost)
        self.simd = Simd.of(k.caps)
        self.vec = Vec(k, self.simd)
        self.flat = flat
        lanes = s.ho * s.wo if flat else s.wo
        self.mr, self.nv, _ = tile or choose_tile(self.simd, s.mg, lanes, 1 if flat else s.kw)
        self.nr = self.nv * self.vec.w
        self.lanes = lanes
        w = const_input(k, 1)
        # flat: taps outer, channels inner; row: kernel row, channel, kernel column
        order = (2, 3, 1) if flat else (2, 1, 3)
        self.packed = w is not None or runtime_weights.scratch(k) is not None
        if w is not None:
            self.wp = pack_constant(k, 1, _pack(w, s, self.mr, order), "packed_w")
        else:  # packed at run time where there is scratch, else read in the model's layout
            self.wp = runtime_weights.pack(k, s, self.mr, order) if self.packed else k.inp(1)
        out = k.out_buf().shape
        self.fin = Finisher(k, self.vec, out[2:] if flat else out[-1:])
        self.bias = k.inp(2)
        # a flat tile's masked-off lanes read at most a kernel's reach and a tile past the
        # plane: inside the tensor but for its first and last plane, and there too when the
        # region has that room around the input (then blends, not masked loads: Vec.load)
        reach = (s.kh * s.dh + 1) * s.win + s.kw * s.dw + self.nr
        self.roomy = all(k.readable(k.in_buf(0), reach))

    # -- loops ----------------------------------------------------------------------------------
    def blocks(self, body):
        """body(o0, mr) over the output-channel blocks of a group."""
        k = self.k
        full, tail = _blocks(self.s.mg, self.mr)
        if full == 1:
            body(k.c(0), self.mr)
        elif full > 1:
            with k.for_range(full, name="ob") as ob:
                body(self.b.mul(ob, k.c(self.mr)), self.mr)
        if tail:
            body(k.c(full * self.mr), tail)

    def lane_addr(self, n, gi, o0, i, pos, lead_extra, out_base, j):
        """(lead, position of lane 0, output offset) of accumulator (i, j)."""
        k, b, s, w = self.k, self.b, self.s, self.vec.w
        oc = b.add(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(i))
        plane = b.mul(b.add(b.mul(n, k.c(s.m)), oc), k.c(s.ho * s.wo))
        return [n, oc] + lead_extra, b.add(pos, k.c(j * w)), b.add(plane, b.add(out_base, k.c(j * w)))

    def store(self, n, gi, o0, mr, pos, lead_extra, out_base, masks):
        """Writes the accumulators of rows [0, mr): bias, then the epilogue."""
        k, b, vec = self.k, self.b, self.vec
        for i in range(mr):
            lead = self.lane_addr(n, gi, o0, i, pos, lead_extra, out_base, 0)[0]
            bias = vec.splat(k.load(self.bias, lead[1], np.float32)) if self.bias is not None else None
            for j in range(self.nv):
                a = self.acc.value(i, j)
                if bias is not None:
                    a = b.fadd(a, bias)
                _, p0, off = self.lane_addr(n, gi, o0, i, pos, lead_extra, out_base, j)
                self.fin.finish(a, lead, p0, off, masks[j])

    def prefetch_store(self, n, gi, o0, mr, pos, lead_extra, out_base):
        """Prefetches the tile's output vectors and residual operands before its reduction
        (fin.prefetch), where the output planes are more streams than the hardware follows:
        a 1x1 tile writes NR positions into each of M planes a plane apart (ResNet-50's
        64 -> 256 + residual on 56x56: 768 lines of 256 planes per tile, read and written)."""
        for i in range(mr):
            for j in range(self.nv):
                self.fin.prefetch(*self.lane_addr(n, gi, o0, i, pos, lead_extra, out_base, j))

    def emit(self):
        k, s = self.k, self.s
        with k.for_range(s.n, name="n") as n:
            if s.g == 1:
                self.group(n, k.c(0))
            else:
                with k.for_range(s.g, name="g") as gi:
                    self.group(n, gi)

    def group(self, n, gi):
        s = self.s
        w_bytes = s.mg * s.ktot * 4
        x_bytes = s.cg * s.hin * s.win * 4
        nblk = math.ceil(s.mg / self.mr)
        ntile = math.ceil(self.lanes / self.nr) * (1 if self.flat else s.ho)
        # keep the smaller operand streaming: pixel tiles outermost unless the weights are
        # large and re-reading them per tile would cost more than re-reading the input
        tiles_outer = tiles_outermost(self.k.caps, w_bytes, x_bytes, ntile, nblk)
        if self.flat:
            self.flat_group(n, gi, tiles_outer)
        else:
            self.row_group(n, gi, tiles_outer)

    # -- flat tiling ------------------------------------------------------------------------------
    def taps(self):
        return valid_taps(self.s)

    def flat_group(self, n, gi, tiles_outer):
        k, b, s = self.k, self.b, self.s
        taps = self.taps()
        lo_shift = min(t[2] for t in taps)
        hi_shift = max(t[2] for t in taps)
        p, pin, nr = s.ho * s.wo, s.hin * s.win, self.nr
        total = math.ceil(p / nr)
        head = min(total, max(0, math.ceil(-lo_shift / nr)))
        inner_end = max(head, (min(p, pin - hi_shift) - nr) // nr + 1)
        edge = list(range(head)) + list(range(inner_end, total))
        unshifted = lo_shift == hi_shift == 0 and p <= pin
        # free masks: one copy of the kernel for every tile, masks computed at run time. Not
        # where no tap is shifted (1x1): there only the last tile needs masks, and the others'
        # run-time ones (a vector division per vector, masked loads every step) cost: Zen 4,
        # KWS's 64 -> 64 on 125 positions, -instrument-profile, min of 16 alternating runs,
        # 25.8 -> 24.2 K cycles
        cheap = self.simd.cheap_masks and total > 1 and not unshifted
        if cheap:
            head, inner_end, edge = 0, 0, list(range(total))  # one copy of the kernel: masks are free

        def kernel(o0, mr, q0, tconst, inner):
            self.flat_kernel(n, gi, o0, mr, q0, tconst, inner, taps)

        # chunks of tiles, channel blocks within (tiles.chunk_tiles): the interior tiles, or
        # with free masks every tile but the last (interior too when no tap is shifted)
        per = self.chunk if tiles_outer or s.g > 1 else 0
        # tiles outermost, a tile's stores (and its residual) are M streams a plane apart:
        # prefetched before its reduction (prefetch_store). Zen 4, ResNet-50, -instrument-
        # profile, min of 8 rounds either order: its 1x1 + residual layers 15-23% faster
        # (conv_141 3.24 -> 2.65 M cycles), the 1x1s without 0-5%
        self.prefetch = (tiles_outer or s.g > 1) and self.vec.w > 1
        lo, hi = (0, total - 1) if cheap else (head, inner_end)
        nch = (hi - lo) // per if per else 0
        if nch < 2:
            nch = 0
        else:
            with k.for_range(nch, name="chunk") as ci:
                t0 = b.add(k.c(lo), b.mul(ci, k.c(per)))

                def chunk(o0, mr):
                    with k.for_range(per, name="t") as t:
                        kernel(o0, mr, b.mul(b.add(t0, t), k.c(nr)), None, not cheap or unshifted)
                self.blocks(chunk)
        done = nch * per  # tiles from lo already run
        start, skip = (head, done) if cheap else (head + done, 0)

        def tile_loop(body):
            if inner_end > start:
                with k.for_range(inner_end, start=start, name="t") as t:
                    body(b.mul(t, k.c(nr)), None, True)
            if self.vec.w == 1 or len(edge) == 1:
                for t in edge:
                    body(k.c(t * nr), t, False)
            elif len(edge) > skip:
                with k.for_range(len(edge), start=skip, name="te") as e:
                    t = b.select(b.icmp_signed("<", e, k.c(head)), e, b.add(e, k.c(inner_end - head)))
                    body(b.mul(t, k.c(nr)), None, False)

        if tiles_outer or s.g > 1:
            tile_loop(lambda q0, tc, inner: self.blocks(lambda o0, mr: kernel(o0, mr, q0, tc, inner)))
        else:
            self.blocks(lambda o0, mr: tile_loop(lambda q0, tc, inner: kernel(o0, mr, q0, tc, inner)))

    def flat_masks(self, q0, tconst, inner, a, c, cache):
        """Per vector: the lanes whose tap (a, c) reads inside the input (and whose pixel is in
        the plane), as a constant tuple, an IR mask, or None for all. In an inner tile every
        tap address lies inside the input plane, so a valid column implies a valid row and
        only columns are checked; `cache` keeps the tile's row/column vectors and masks."""
        s, vec, b, k = self.s, self.vec, self.b, self.k
        w = vec.w
        p = s.ho * s.wo
        if tconst is not None:
            out = []
            for j in range(self.nv):
                q = tconst * self.nr + j * w + np.arange(w)
                oh, ow = q // s.wo, q % s.wo
                ih, iw = oh + a * s.dh - s.pt, ow + c * s.dw - s.pl
                ok = (q < p) & (ih >= 0) & (ih < s.hin) & (iw >= 0) & (iw < s.win)
                out.append(tuple(bool(x) for x in ok))
            return out
        lo_h, hi_h = s.pt - a * s.dh, s.hin + s.pt - a * s.dh
        lo_w, hi_w = s.pl - c * s.dw, s.win + s.pl - c * s.dw

        def get(key, make):
            if key not in cache:
                cache[key] = make()
            return cache[key]

        out = []
        for j in range(self.nv):
            q = get(("q", j), lambda: b.add(vec.isplat(b.add(q0, k.c(j * w))), vec.iota()))
            m = None
            if lo_w > 0 or hi_w < s.wo:
                ow = get(("ow", j), lambda: b.urem(q, cg.const(vec.ity, s.wo)))
                if lo_w > 0:
                    m = vec.and_(m, get(("w>=", j, lo_w), lambda: b.icmp_signed(
                        ">=", ow, cg.const(vec.ity, lo_w))))
                if hi_w < s.wo:
                    m = vec.and_(m, get(("w<", j, hi_w), lambda: b.icmp_signed(
                        "<", ow, cg.const(vec.ity, hi_w))))
            if not inner:
                oh = get(("oh", j), lambda: b.udiv(q, cg.const(vec.ity, s.wo)) if s.wo > 1 else q)
                if lo_h > 0:
                    m = vec.and_(m, b.icmp_signed(">=", oh, cg.const(vec.ity, lo_h)))
                m = vec.and_(m, b.icmp_signed("<", oh, cg.const(vec.ity, min(hi_h, s.ho))))
            out.append(m)
        return out

    def flat_kernel(self, n, gi, o0, mr, q0, tconst, inner, taps):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        pin = s.hin * s.win
        xb = b.mul(b.add(b.mul(n, k.c(s.c)), b.mul(gi, k.c(s.cg))), k.c(pin))
        wb = b.mul(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(s.ktot))
        acc = self.acc = Acc(vec, mr, self.nv)
        cache = {}
        if self.prefetch:
            self.prefetch_store(n, gi, o0, mr, q0, [], q0)
        for a, c, shift in taps:
            masks = self.flat_masks(q0, tconst, inner, a, c, cache)
            tap = a * s.kw + c
            def step(ic, tap=tap, shift=shift, masks=masks):
                if self.packed:
                    wptr = cg.gep(b, self.wp, b.add(wb, b.mul(b.add(k.c(tap * s.cg), ic), k.c(mr))),
                                  cg.F32)
                    av = [vec.load_splat(wptr, i) for i in range(mr)]
                else:  # (M, cg, KH, KW): channel i a filter (ktot) further
                    wptr = cg.gep(b, self.wp, b.add(wb, b.add(b.mul(ic, k.c(s.kh * s.kw)), k.c(tap))),
                                  cg.F32)
                    av = [vec.load_splat(wptr, i * s.ktot) for i in range(mr)]
                xptr = cg.gep(b, k.inp(0), b.add(b.add(xb, b.mul(ic, k.c(pin))), b.add(q0, k.c(shift))),
                              cg.F32)
                bv = [None if isinstance(m, tuple) and not any(m) else
                      vec.load(xptr, j * vec.w, m, safe=inner or self.roomy)
                      for j, m in enumerate(masks)]
                acc.fma(av, bv)
            acc.reduce(k, s.cg, step, 1, name="ic")
        store_masks = self.store_masks(q0, tconst, inner)
        self.store(n, gi, o0, mr, q0, [], q0, store_masks)

    def store_masks(self, q0, tconst, inner, limit=None, lane_base=None):
        s, vec, b, k = self.s, self.vec, self.b, self.k
        limit = limit if limit is not None else s.ho * s.wo
        if inner:
            return [None] * self.nv
        if tconst is not None:
            return [tuple(bool(x) for x in (tconst * self.nr + j * vec.w + np.arange(vec.w) < limit))
                    for j in range(self.nv)]
        return [b.icmp_signed("<", b.add(vec.isplat(b.add(q0, k.c(j * vec.w))), vec.iota()),
                              cg.const(vec.ity, limit)) for j in range(self.nv)]

    # -- row tiling -------------------------------------------------------------------------------
    def row_signatures(self):
        return row_runs(self.s, self.vec.w, self.nv)

    def row_group(self, n, gi, tiles_outer):
        k, b, s = self.k, self.b, self.s
        runs = self.row_signatures()

        def run_loop(oh, body):
            for t0, t1, sig in runs:
                if t1 - t0 == 1:
                    body(oh, k.c(t0 * self.nr), sig)
                else:
                    with k.for_range(t1, start=t0, name="t") as t:
                        body(oh, b.mul(t, k.c(self.nr)), sig)

        def rows(body):
            if s.ho == 1:
                body(k.c(0))
            else:
                with k.for_range(s.ho, name="oh") as oh:
                    body(oh)

        def kernel(o0, mr, oh, ow0, sig):
            self.row_kernel(n, gi, o0, mr, oh, ow0, sig)

        if tiles_outer or s.g > 1:
            rows(lambda oh: run_loop(oh, lambda oh_, ow0, sig: self.blocks(
                lambda o0, mr: kernel(o0, mr, oh_, ow0, sig))))
        else:
            self.blocks(lambda o0, mr: rows(lambda oh: run_loop(
                oh, lambda oh_, ow0, sig: kernel(o0, mr, oh_, ow0, sig))))

    def kh_range(self, oh):
        return kh_range(self.k, self.s, oh)

    def row_kernel(self, n, gi, o0, mr, oh, ow0, sig):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        masks, store = sig
        pin = s.hin * s.win
        xb = b.mul(b.add(b.mul(n, k.c(s.c)), b.mul(gi, k.c(s.cg))), k.c(pin))
        wb = b.mul(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(s.ktot))
        acc = self.acc = Acc(vec, mr, self.nv)
        lo, hi = self.kh_range(oh)
        with acc.loop(k, hi, lo, name="kh", body_fmas=1 << 30) as a:
            ih = b.sub(b.add(b.mul(oh, k.c(s.sh)), b.mul(a, k.c(s.dh))), k.c(s.pt))
            with acc.loop(k, s.cg, name="ic", body_fmas=mr * self.nv * s.kw) as ic:
                row = b.add(xb, b.add(b.mul(ic, k.c(pin)), b.mul(ih, k.c(s.win))))
                if self.packed:
                    wptr = cg.gep(b, self.wp, b.add(wb, b.mul(b.add(b.mul(a, k.c(s.cg)), ic),
                                                              k.c(s.kw * mr))), cg.F32)
                    woff = lambda c, i: c * mr + i  # noqa: E731
                else:  # (M, cg, KH, KW): channel i a filter (ktot) further
                    wptr = cg.gep(b, self.wp, b.add(wb, b.add(b.mul(ic, k.c(s.kh * s.kw)),
                                                              b.mul(a, k.c(s.kw)))), cg.F32)
                    woff = lambda c, i: c + i * s.ktot  # noqa: E731
                xptr = cg.gep(b, k.inp(0), b.add(row, b.mul(ow0, k.c(s.sw))), cg.F32)
                for c in range(s.kw):
                    if not any(any(m) for m in masks[c]):
                        continue
                    av = [vec.load_splat(wptr, woff(c, i)) for i in range(mr)]
                    bv = []
                    for j in range(self.nv):
                        m = masks[c][j]
                        off = j * vec.w * s.sw + c * s.dw - s.pl
                        bv.append(None if not any(m) else vec.load_strided(xptr, off, s.sw, m))
                    acc.fma(av, bv)
        lead = [oh] if len(k.out_buf().shape) == 4 else []
        base = b.add(b.mul(oh, k.c(s.wo)), ow0)
        self.store(n, gi, o0, mr, ow0, lead, base, list(store))


def form(k, runtime_weights: bool = False):
    """(shape, simd, pointwise, flat, tile) of a float Conv the register-blocked layouts cover,
    or None: what both the pixel- and the channel-vectorized variants decide from (weights
    computed at run time only with `runtime_weights`: the pixel tiles read them unpacked)."""
    s = shape_of(k, runtime_weights)
    if s is None:
        return None
    simd = Simd.of(k.caps)
    pointwise = s.kh == 1 and s.kw == 1 and s.pt == 0 and s.pl == 0 and s.ho <= s.hin
    flat = s.sh == 1 and s.sw == 1 and s.wo == s.win and (simd.width > 1 or pointwise)
    if flat and not pointwise and s.cg == 1 and \
            s.wo / (math.ceil(s.wo / (2 * simd.width)) * 2 * simd.width) >= 0.85:
        # one input channel (depthwise, a first layer on a grey image) over rows that fill
        # two vectors: per-row tiles need no run-time masks, which would cost as much as the
        # loads when each tap is a single channel (MNIST's 28-wide 5x5 layer: 6.2 -> 3.1 us
        # on Zen 4, where the flat tile's 25 taps x 3 masks also spilled)
        flat = False
    # unaligned (line-splitting) input vectors of shifted taps, shuffles of strided ones
    per_vector = 0.0 if pointwise else 0.25 if flat else 0.25 + 0.5 * (s.sw > 1)
    if flat and not valid_taps(s):
        flat = False  # every tap lands in the padding: the row tiling stores the bias
    tile = choose_tile(simd, s.mg, s.ho * s.wo if flat else s.wo, 1 if flat else s.kw, per_vector)
    return s, simd, pointwise, flat, tile


def plan(k):
    """{flat, mr, nv, chunk}: the flat or row tiling, its MR x NV register tile (choose_tile)
    and the flat tiles per chunk (tiles.chunk_tiles; 0: none)."""
    f = form(k, runtime_weights=True)
    if f is None:
        return None
    s, simd, pointwise, flat, (mr, nv, _) = f
    # (pointwise only: a shifted tap's masks, which tiles outermost compute once per tile for
    # every block, would be computed per block and tile: a 3 -> 32 3x3 layer on 112x112 ran
    # 279 -> 412 us chunked)
    chunk = chunk_tiles(k.caps, s.cg, nv * simd.width) if flat and pointwise and simd.width > 1 \
        else 0
    return {"flat": flat, "mr": mr, "nv": nv, "chunk": chunk}


@variant("Conv", "pixel_vectorized", rank=20, plan=plan)
def emit(k, p):
    """Pixels in the vector lanes, MR output channels broadcast (any target, scalar ones with
    one-float vectors)."""
    ConvEmitter(k, shape_of(k, runtime_weights=True), p["flat"], (p["mr"], p["nv"], None),
                p.get("chunk", 0)).emit()
