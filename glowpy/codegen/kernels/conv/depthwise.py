"""Depthwise float Conv (one input channel per group) on vector targets.

A depthwise tap is one multiply-add per loaded input value, so the kernel is bound by loads,
by lanes idle past the edge of a row and by run-time mask arithmetic, not by FMAs. Every
(batch, channel) plane is therefore unrolled at compile time into tiles whose lane masks are
constants, and loaded inputs are reused from registers:

  * rows: R output rows x NV vectors of an output row. Each input row of the block is loaded
    once per kernel column (a strided tap is a wide load and a shuffle) and feeds every output
    row of the block that reads it -- (R + KH - 1) loads for R * KH multiply-adds. Blocks
    whose valid kernel rows are the same (the interior) run in a loop; edge blocks and edge
    column tiles are their own code. From 7x7 (looped_plan), the input rows that feed every
    output row of a block run as a loop, and from 13 columns so do runs of kernel columns with
    the same lane masks: the code then grows with the kernel's width, not its area.
  * flat: stride-1 planes whose output is as wide as the input (6x6, 25x5, 24x24): a tap is
    the whole plane shifted by a constant, so the plane's vectors run across row ends and no
    lane idles at the end of a short row; each vector's masks per tap are constants. Large
    planes run in chunks of whole rows, interior chunks in a loop. (Several channels per
    tile, for more independent accumulators, measured no faster on 3x3 to 25x5 planes.)

The (batch, channel) loop is outermost and each channel's output plane is written within its
own iteration (the streaming contract of CONTRIBUTING.md: the output may overlap the dying
input's earlier planes)."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg

from glowpy.codegen.kernels.tiles import Shape, row_runs, shape_of
from glowpy.codegen.kernels.accumulators import Acc
from glowpy.codegen.kernels.conv.depthwise_loops import looped_plan, looped_rows
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.codegen.registry import variant

FLAT_MAX = 48  # vectors of a plane unrolled flat at most (code: taps x vectors loads)
MAX_ROWS = 6  # output rows per block at most (more: the weights no longer stay in registers)
ROW_TILE = 3.5  # cycles per accumulator vector of a row tile beyond its loads and FMAs
FLAT_LOAD = 0.85  # cycles per (unaligned, shifted) tap load of a flat chunk
FLAT_STORE = 3.0  # cycles per vector of a flat chunk to add the bias and store


def flat_chunk(s: Shape, simd):
    """Vectors per flat chunk, or None when the plane cannot run flat: the whole plane when it
    fits the accumulators, else a chunk of whole rows (so interior chunks share their masks and
    run in a loop), else the plane unrolled in chunks when it is small."""
    if not (s.sh == s.sw == 1 and s.wo == s.win):
        return None
    w, acc_max = simd.width, max(1, simd.registers - 6)
    nvec = math.ceil(s.ho * s.wo / w)
    if nvec <= acc_max:
        return nvec
    rows = [ft for ft in range(4, acc_max + 1) if ft * w % s.wo == 0]
    if rows:
        return max(rows)
    return acc_max if nvec <= FLAT_MAX else None


def plan(s: Shape, simd):
    """The tiling `estimate` finds cheapest."""
    return estimate(s, simd)[1]


def estimate(s: Shape, simd):
    """(cycles per plane, tiling): ("flat", vectors per chunk) or ("rows", R, NV) with the
    fewest estimated cycles per plane:
    two FMAs a cycle, about one (line-splitting, unaligned) vector load a cycle, a strided tap
    costing Simd.strided_load plain loads, and some cycles per tile to add the bias and store
    (calibrated on AVX-512 with 3x3 layers from 3x3 to 112x112)."""
    w, regs = simd.width, simd.registers
    acc_max = max(1, regs - 6)
    taps = s.kh * s.kw
    per_load = simd.strided_load(s.sw)
    best = None
    for nv in range(1, math.ceil(s.wo / w) + 1):
        tiles = math.ceil(s.wo / (nv * w))
        for r in range(1, min(s.ho, MAX_ROWS) + 1):
            if r * nv > acc_max:
                break
            rows_in = (r - 1) * s.sh + (s.kh - 1) * s.dh + 1
            cyc = max(r * taps * nv / 2, rows_in * s.kw * nv * per_load) + ROW_TILE * r * nv + 8
            total = math.ceil(s.ho / r) * tiles * cyc
            if best is None or total < best[0]:
                best = (total, ("rows", r, nv))
    ft = flat_chunk(s, simd)
    if ft is not None:
        nvec = math.ceil(s.ho * s.wo / w)
        total = nvec * (taps * FLAT_LOAD + FLAT_STORE) + math.ceil(nvec / ft) * 8
        if total < best[0]:
            best = (total, ("flat", ft))
    return best


class DepthwiseEmitter:
    def __init__(self, k, s: Shape, choice):
        self.k, self.s, self.b = k, s, k.b
        self.vec = Vec(k, Simd.of(k.caps))
        self.choice = choice
        self.fin = Finisher(k, self.vec, k.out_buf().shape[2:])
        self.bias = k.inp(2)
        self.x, self.wsrc = k.inp(0), k.inp(1)  # the input planes and the weights (floats)
        # An edge tap's masked-off lanes read past its row into the neighbouring rows and, in
        # the plane's first and last rows, into the neighbouring planes: within the tensor but
        # for its first and last plane, and there too when the region has that much room
        # around the input. Such loads blend the lanes away instead of loading with masks
        # (Vec.load's `safe`); the edge blocks of the first and last plane keep the masks.
        w = self.vec.w
        reach = (s.kh * s.dh + 1) * s.win + s.kw * s.dw + (w - 1) * s.sw + 2 * w
        self.room = k.readable(k.in_buf(0), reach)  # (before, after)
        self.safe = False
        self.loops = looped_plan(s, choice)

    def emit(self):
        k, b, s = self.k, self.b, self.s
        with k.for_range(s.n, name="n") as n:
            with k.for_range(s.m, name="oc") as oc:
                self.xb = b.mul(b.add(b.mul(n, k.c(s.c)), oc), k.c(s.hin * s.win))
                self.ob = b.mul(b.add(b.mul(n, k.c(s.m)), oc), k.c(s.ho * s.wo))
                self.wb = b.mul(oc, k.c(s.kh * s.kw))
                self.lead = [n, oc]
                self.bv = self.vec.splat(k.load(self.bias, oc, np.float32)) \
                    if self.bias is not None else None
                self.enter_plane()
                if self.choice[0] == "flat":
                    self.flat_plane()
                else:
                    self.row_plane()

    def enter_plane(self):
        """Called as each (batch, channel) plane begins (self.xb, self.ob, self.lead set)."""

    def weight(self, a, c):
        return self.weight_at(self.k.c(a * self.s.kw + c))

    def weight_at(self, tap):
        """The weight of kernel tap `tap` (an IR value: row * kw + column) in every lane."""
        return self.vec.load_splat(self.wsrc, self.b.add(self.wb, tap))

    def finish(self, acc, p0, mask):
        b, k = self.b, self.k
        if self.bv is not None:
            acc = b.fadd(acc, self.bv)
        self.fin.finish(acc, self.lead, p0, b.add(self.ob, p0), mask)

    # -- flat: the plane's vectors in chunks, chunks with the same masks in a loop -------------
    def flat_chunks(self):
        """[(first chunk, end chunk, (vectors, masks per tap and vector, store masks))]."""
        s, w, ft = self.s, self.vec.w, self.choice[1]
        p = s.ho * s.wo
        runs = []
        for t in range(math.ceil(p / (ft * w))):
            js = range(t * ft, min(math.ceil(p / w), (t + 1) * ft))
            taps = []
            for a in range(s.kh):
                for c in range(s.kw):
                    per = []
                    for j in js:
                        q = j * w + np.arange(w)
                        ih, iw = q // s.wo + a * s.dh - s.pt, q % s.wo + c * s.dw - s.pl
                        ok = (q < p) & (ih >= 0) & (ih < s.hin) & (iw >= 0) & (iw < s.win)
                        per.append(tuple(bool(x) for x in ok))
                    taps.append(tuple(per))
            store = tuple(tuple(bool(x) for x in (j * w + np.arange(w) < p)) for j in js)
            sig = (len(js), tuple(taps), store)
            if runs and runs[-1][2] == sig and runs[-1][1] == t:
                runs[-1] = (runs[-1][0], t + 1, sig)
            else:
                runs.append((t, t + 1, sig))
        return runs

    def flat_plane(self):
        k, b = self.k, self.b
        width = self.choice[1] * self.vec.w
        s = self.s
        # a tap reads up to `before` floats ahead of its output position, `after` past it
        before = s.pt * s.win + s.pl
        after = (s.kh - 1) * s.dh * s.win + (s.kw - 1) * s.dw + width
        for run in self.flat_chunks():
            self.guarded(run[0] * width < before, run[1] * width + after > s.ho * s.wo,
                         lambda run=run: self.each(run, lambda q0: self.flat_tile(q0, *run[2]), width))

    def guarded(self, first: bool, last: bool, body):
        """body() with self.safe: its loads blend (safe) unless the run holds the plane's first
        (last) rows and the region has no room before (after) the input; then the tensor's
        first (last) plane runs a copy of it with masked loads."""
        k, b, s = self.k, self.b, self.s
        n, oc = self.lead
        plane = b.add(b.mul(n, k.c(s.c)), oc)
        conds = []
        if first and not self.room[0]:
            conds.append(b.icmp_signed("!=", plane, k.c(0)))
        if last and not self.room[1]:
            conds.append(b.icmp_signed("!=", plane, k.c(s.n * s.c - 1)))

        def run(safe):
            self.safe = safe
            body()
        if not conds:
            run(True)
        else:
            cg.either(b, conds[0] if len(conds) == 1 else b.and_(*conds),
                      lambda: run(True), lambda: run(False))
        self.safe = False

    def flat_tile(self, q0, nv, masks, store):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        acc = Acc(vec, 1, nv)
        for a in range(s.kh):
            for c in range(s.kw):
                shift = (a * s.dh - s.pt) * s.win + c * s.dw - s.pl
                m = masks[a * s.kw + c]
                vals = [vec.load(self.x, b.add(self.xb, b.add(q0, k.c(j * vec.w + shift))), m[j],
                                 safe=self.safe) if any(m[j]) else None for j in range(nv)]
                if any(v is not None for v in vals):
                    acc.fma([self.weight(a, c)], vals)
        for j in range(nv):
            self.finish(acc.value(0, j), b.add(q0, k.c(j * vec.w)), store[j])

    def each(self, run, body, width):
        """body(start) for the positions of a run (a loop when there are several)."""
        k, b = self.k, self.b
        t0, t1 = run[0], run[1]
        if t1 - t0 == 1:
            body(k.c(t0 * width))
        else:
            with k.for_range(t1, start=t0, name="t") as t:
                body(b.mul(t, k.c(width)))

    # -- rows: blocks of R output rows x NV vectors, edge blocks specialised --------------------
    def row_blocks(self):
        """Runs of blocks with the same valid kernel rows per output row:
        [(first block, end block, rows in the block, ((valid kernel rows) per row))]."""
        s, r = self.s, self.choice[1]
        runs = []
        for blk in range(math.ceil(s.ho / r)):
            oh0 = blk * r
            n = min(r, s.ho - oh0)
            sig = (n, tuple(tuple(a for a in range(s.kh)
                                  if 0 <= (oh0 + i) * s.sh + a * s.dh - s.pt < s.hin)
                            for i in range(n)))
            if runs and runs[-1][2:] == sig and runs[-1][1] == blk:
                runs[-1] = (runs[-1][0], blk + 1, *sig)
            else:
                runs.append((blk, blk + 1, *sig))
        return runs

    def row_plane(self):
        k, b = self.k, self.b
        _, r, nv = self.choice
        cols = row_runs(self.s, self.vec.w, nv)
        nr = nv * self.vec.w
        s = self.s
        for rrun in self.row_blocks():
            def block(oh0, rrun=rrun):
                for crun in cols:
                    self.each(crun, lambda ow0, crun=crun: self.tile(oh0, ow0, rrun[2], rrun[3], crun[2]), nr)
            # the run's blocks read input rows top..bottom: an edge tap of the plane's first
            # row reads before the plane, one of its last row past it
            top = rrun[0] * r * s.sh - s.pt
            bottom = (min(rrun[1] * r, s.ho) - 1) * s.sh + (s.kh - 1) * s.dh - s.pt
            self.guarded(top <= 0, bottom >= s.hin - 1,
                         lambda rrun=rrun, block=block: self.each(rrun, block, r))

    def row_taps(self, row, masks, nv):
        """[kernel column][vector]: the input lanes of each tap along one input row. Strided
        taps come from one masked window load per vector, shuffled once per kernel column
        (each column would otherwise load its own wide window: measured 20-40% slower on
        12x12 and 24x24 planes)."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w
        offs = [c * s.dw - s.pl for c in range(s.kw)]
        lo = min(offs)
        span = (w - 1) * s.sw + max(offs) - lo + 1
        n = math.ceil(span / w) * w
        if s.sw == 1 or n > vec.cap:  # past the cap, strided loads go lane by lane
            return [[vec.load_strided(self.x, b.add(row, k.c(j * w * s.sw + offs[c])), s.sw,
                                      masks[c][j], safe=self.safe)
                     if any(masks[c][j]) else None for j in range(nv)] for c in range(s.kw)]
        if s.sw == 2 and vec.pairs_in_lanes():
            return self.paired_taps(row, masks, nv, offs)
        out = [[None] * nv for _ in range(s.kw)]
        for j in range(nv):
            ok = [False] * n
            for c, off in enumerate(offs):
                for e, v in enumerate(masks[c][j]):
                    if 0 <= off - lo + e < n:
                        ok[off - lo + e] = ok[off - lo + e] or v
            if not any(ok):
                continue
            win = vec.load(self.x, b.add(row, k.c(j * w * s.sw + lo)), tuple(ok), n=n,
                           safe=self.safe)
            for c, off in enumerate(offs):
                if any(masks[c][j]):
                    idx = ir.Constant(ir.VectorType(cg.I32, w), [l * s.sw + off - lo for l in range(w)])
                    out[c][j] = b.shuffle_vector(win, ir.Constant(win.type, ir.Undefined), idx)
        return out

    def paired_taps(self, row, masks, nv, offs):
        """row_taps for stride 2 on vectors of 128-bit halves: kernel columns c and c + 1
        (dilation 1) read the even and odd lanes of one window, both from one Vec.load_pairs
        (four 128-bit loads, two in-lane shuffles)."""
        k, b, w = self.k, self.b, self.vec.w
        out = [[None] * nv for _ in offs]
        for j in range(nv):
            c = 0
            while c < len(offs):
                cols = [c] + ([c + 1] if c + 1 < len(offs) and offs[c + 1] == offs[c] + 1 else [])
                ok = [False] * (2 * w)
                for d in cols:
                    for e, v in enumerate(masks[d][j]):
                        if e + d - c < 2 * w:
                            ok[e + d - c] = ok[e + d - c] or v
                if any(ok):
                    pair = self.vec.load_pairs(self.x, b.add(row, k.c(j * w * 2 + offs[c])),
                                               tuple(ok), safe=self.safe)
                    for d in cols:
                        if any(masks[d][j]):
                            out[d][j] = pair[d - c]
                c += len(cols)
        return out

    def tile(self, oh0, ow0, nrows, valid, sig):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        masks, store = sig
        nv = len(store)
        acc = Acc(vec, nrows, nv)
        users = {}  # input row (relative to the block) -> [(output row, kernel row)]
        for i, rows in enumerate(valid):
            for a in rows:
                users.setdefault(i * s.sh + a * s.dh, []).append((i, a))
        top = b.sub(b.mul(oh0, k.c(s.sh)), k.c(s.pt))

        def row_at(rr):
            return b.add(self.xb, b.add(b.mul(b.add(top, rr), k.c(s.win)), b.mul(ow0, k.c(s.sw))))
        if self.loops:
            looped_rows(self, acc, users, row_at, masks, nrows)
        else:
            for rr in sorted(users):
                taps = self.row_taps(row_at(k.c(rr)), masks, nv)
                for c in range(s.kw):
                    if any(v is not None for v in taps[c]):
                        for i, a in users[rr]:
                            acc.fma([None] * i + [self.weight(a, c)], taps[c])
        for i in range(nrows):
            for j in range(nv):
                p0 = b.add(b.mul(b.add(oh0, k.c(i)), k.c(s.wo)), b.add(ow0, k.c(j * vec.w)))
                self.finish(acc.value(i, j), p0, store[j])


def plan_kernel(k):
    """The tiling (see `plan`) when this kernel applies (vector targets, one input and one
    output channel per group, a 2-D or 1-D window of more than one tap). With more output
    channels per input channel the register-blocked kernels reuse each input vector for
    several channels, which this one does not. Scalar targets keep the row tiles of
    conv/pixel.py: on the Cortex-M7 this kernel ran 4-6% fewer instructions (kws, VWW) for
    two to three times the code."""
    s = shape_of(k)
    if s is None:
        return None
    simd = Simd.of(k.caps)
    if simd.width == 1 or s.cg != 1 or s.mg != 1 or s.kh * s.kw == 1:
        return None
    return plan(s, simd)


@variant("Conv", "depthwise", rank=40, plan=plan_kernel)
def emit(k, choice):
    DepthwiseEmitter(k, shape_of(k), choice).emit()
