"""Winograd F(m x m, r x r) convolution for vector targets (ConvWinograd): 3x3 kernels in
F(2x2) or F(4x4), 5x5 kernels in F(2x2).

An r x r, stride-1, ungrouped float Conv computes each m x m output tile from an alpha x alpha
input tile (alpha = m + r - 1) with alpha^2 multiplies per input/output channel pair instead
of r^2 m^2: Y = A^T [sum_c (G g G^T) . (B^T d B)] A (Lavin & Gray, 2015; the matrices and the
factored transforms are in winograd_transforms.py). F(2x2, 3x3) does 16/4 = 4 multiplies per
output, 2.25x fewer than direct; F(4x4, 3x3) 36/16 = 2.25, 4x fewer; F(2x2, 5x5) 36/4 = 9,
2.8x fewer. The weight transform
U = G g G^T is done at compile time and packed in the kernel's read order; at run time, per
block of tile rows (on planes too wide for one tile row's scratch, per block of a tile row's
columns, winograd_plan._blocking):

  1. input transform: V[xi][c][tau] = (B^T d B)[xi] for the block's tiles tau (tiles of one
     row are consecutive in tau); vectorized over the tiles of a row (stride-m loads);
  2. alpha^2 GEMMs M[xi][k][tau] = sum_c U[xi][k][c] V[xi][c][tau] on register tiles of MR
     channels x NV vectors of tiles (gemm_micro), U's stream prefetched; a few tiles alone in
     the block's last vector run with the MR channels in the lanes instead (`lone`: no
     multiply-adds on empty slots);
  3. output transform: A^T M A, the bias, lanes interleaved back into output rows, the
     node's fused epilogue (vec_epilogue), stored.

The GEMMs run in one of two orders (winograd_plan.points_outer). Where a block's V fits in
half the L2, the blocks of MR output channels are outermost: each sweeps all of V (from L2)
for its MR channels, whose M (MR rows a point) stays in L1 for their output transform
right after. Where V is larger, that sweep would stream V from L3 once per channel block;
the points are outermost instead: for each xi and register tile's columns of V (in L1),
every channel block in turn while U[xi] streams past, M[xi] for all K written over the
plane V[xi - 1] has left (V[xi] is plane xi + 1 of alpha^2 + 1), then the output transform
of all K.

V and M live in a scratch buffer the planner places like any activation (an extra output of
the instruction, live only there), sized by `select` (winograd_select.py) to a fraction of
the output and at most twice the target's L2 (winograd_plan.scratch_max), so the arithmetic
stays near the core.
With the channel blocks outermost and one block of MR channels covering all K, M[xi] is
written over V[xi] and the scratch is V alone (ResNet-8's 16-channel layers: half the
scratch). Chosen by `select` (winograd_select.py), the backend's post-lowering step, on
targets with 8 or more float lanes: the transforms cost vector shuffles that only wide
vectors repay, and U is alpha^2/r^2 the weights' size. Other targets and other convolutions
keep the direct kernels.

m per layer: winograd_plan.py (the cost model), with the blocking."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry
from glowpy.codegen.kernels.accumulators import Acc
from glowpy.codegen.kernels.conv import winograd_transforms as tf
from glowpy.codegen.kernels.conv.winograd_plan import (CHAINS, in_place, layout, lone_tiles,
                                                       plane, tpad)
from glowpy.codegen.kernels.tiles import PREFETCH
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.vector_epilogue import Finisher

UNROLLED_C = 16  # reductions this short run unrolled: zeroing and storing the accumulators of
# every tile, and the loop itself, weigh on 16 steps (measured: ResNet-8's 16-channel layers
# 10% faster)


class _Emitter:
    def __init__(self, k):
        self.k, self.b = k, k.b
        n_, self.c, self.h, self.w = k.in_buf(0).shape
        self.kk, self.ho, self.wo = k.out_buf().shape[1:]
        win = k.node.opdef.window(k.node)
        self.pt, self.pl = win.pads_begin
        a = k.instr.attrs["winograd"]
        self.m, self.rows, self.tpad, self.mr, self.nv = a["m"], a["rows"], a["tpad"], a["mr"], a["nv"]
        self.r = a.get("r", 3)
        self.alpha = tf.alpha(self.m, self.r)
        self.a2 = self.alpha ** 2
        self.vec = Vec(k, Simd.of(k.caps))
        self.th, self.tw = math.ceil(self.ho / self.m), math.ceil(self.wo / self.m)
        # column blocks (winograd_plan._blocking): a block is `cols` tiles of one tile row;
        # tcb: the tile slots of a block row in V and M
        self.cols = a.get("cols", 0)
        self.tcb = self.cols or self.tw
        self.nkb = math.ceil(self.kk / self.mr)
        self.outer = a["points_outer"]
        self.vplane = layout(self.a2, self.c, self.kk, self.mr, self.tpad, self.outer)[0]
        if self.outer:
            # points outermost (winograd_plan.layout): V[xi] is plane xi + 1, M[xi] (all K)
            # is written to plane xi, which V[xi - 1] has left
            self.mp = k.out(1)
            self.vp = cg.gep(self.b, self.mp, k.c(self.vplane), cg.F32)
            self.mplane, self.vrows = self.vplane, max(self.c, self.nkb * self.mr)
        else:
            # V: [alpha^2][C][tpad]; M: [alpha^2][MR][tpad] after it, or in V's place with V's
            # row and plane strides where one block of MR channels covers K
            self.vp, self.vrows = k.out(1), self.c
            if in_place(self.mr, self.c, self.kk):
                self.mp, self.mplane = self.vp, self.vplane
            else:
                self.mp = cg.gep(self.b, self.vp, k.c(self.a2 * self.vplane), cg.F32)
                self.mplane = plane(self.mr * self.tpad, self.a2)
        self.fin = Finisher(k, self.vec, (self.wo,))
        self.n = n_

    def emit(self):
        k, vec = self.k, self.vec
        # tile slots past the last row's tiles are read by the GEMM and never written: zero
        # them once, so no stale bits (NaNs, denormals) slow the multiply-adds
        used = self.rows * self.tcb
        if used < self.tpad:  # (points outermost: every plane, M's rows too)
            planes, start = (self.a2 + 1, k.out(1)) if self.outer else (self.a2, self.vp)
            with k.for_range(planes, name="vzx") as xi, k.for_range(self.vrows, name="vzc") as c:
                base = self.b.add(self.b.mul(xi, k.c(self.vplane)), self.b.mul(c, k.c(self.tpad)))
                for t in range(used, self.tpad, vec.w):
                    vec.store(vec.zero(), start, self.b.add(base, k.c(t)),
                              tuple(t + l < self.tpad for l in range(vec.w)))
        full, tail = divmod(self.th, self.rows)
        # M's slots past a block's lone tiles (lone_tiles) are read by the output transform
        # and never written: zero them once too (in place, they are V's)
        if not self.outer and self.mp is not self.vp and any(
                lone_tiles(vec.simd, self.mr, r * self.tcb) for r in {self.rows, tail} if r):
            with k.for_range(self.a2 * self.mplane // vec.w, name="mz") as r:
                vec.store(vec.zero(), self.mp, self.b.mul(r, k.c(vec.w)))
        with k.for_range(self.n, name="n") as n:
            if full:
                with k.for_range(full, name="blk") as blk:
                    self.block(n, self.b.mul(blk, k.c(self.rows)), self.rows)
            if tail:
                self.block(n, k.c(full * self.rows), tail)

    def block(self, n, r0, rows):
        """The block(s) of tile rows r0 .. r0 + rows: whole rows, or one tile row's column
        blocks, the first and last (edge masks) as their own code, those between in a loop."""
        k, b, cols, w = self.k, self.b, self.cols, self.vec.w
        if not cols:
            self.columns(n, r0, rows, 0, self.tw)
            return
        ncb = math.ceil(self.tw / cols)
        inner = range(cols // w, (ncb - 1) * cols // w)
        free = not any(self.in_masked(j) or self.out_masked(j) for j in inner)
        self.columns(n, r0, rows, 0, cols)
        if free and ncb > 2:
            with k.for_range(ncb - 1, start=1, name="cb") as cb:
                self.columns(n, r0, rows, b.mul(cb, k.c(cols)), cols)
        else:
            for cb in range(1, ncb - 1):
                self.columns(n, r0, rows, cb * cols, cols)
        self.columns(n, r0, rows, (ncb - 1) * cols, self.tw - (ncb - 1) * cols)

    def columns(self, n, r0, rows, c0, ncols):
        """Tiles c0 .. c0 + ncols of tile rows r0 .. r0 + rows (c0 an int, or an IR value for
        column blocks whose vectors need no masks), through V and M."""
        k, b = self.k, self.b
        self.span = (c0, ncols)
        with k.for_range(rows, name="ri") as rr:
            with k.for_range(self.c, name="c") as c:
                self.input_tiles(n, b.add(r0, rr), rr, c)
        if self.outer:
            with k.for_range(self.a2, name="xi") as xi:
                self.gemm(xi, rows)
            with k.for_range(self.kk, name="oc") as oc, k.for_range(rows, name="ro") as rr:
                self.output_tiles(n, b.add(r0, rr), rr, oc, oc)
            return
        nkb = self.nkb
        with k.for_range(nkb, name="kb") as kb:
            with k.for_range(self.a2, name="xi") as xi:
                self.gemm(xi, rows, kb)
            last = self.kk - (nkb - 1) * self.mr
            count = k.c(self.mr) if last == self.mr else b.select(
                b.icmp_signed("<", kb, k.c(nkb - 1)), k.c(self.mr), k.c(last))
            with k.for_range(rows, name="ro") as rr:
                with k.for_range(count, name="i") as i:
                    self.output_tiles(n, b.add(r0, rr), rr, b.add(b.mul(kb, k.c(self.mr)), i), i)

    def vectors(self, body, masked):
        """body(j0, j, s0) per vector of the span's tiles (self.span; first tile j0, an IR
        value; s0 = j0 - c0, its slot in a block row): the vectors that need masks (masked(j))
        one by one with their index j, the unmasked ones between them in one loop (j None): a
        wide plane's transforms are emitted once, not once per vector."""
        k, b, w = self.k, self.b, self.vec.w
        c0, ncols = self.span
        if not isinstance(c0, int):  # a column block between the edges: no masks (block)
            with k.for_range(ncols, 0, w, name="s0") as s0:
                body(b.add(c0, s0), None, s0)
            return
        j_lo, nj = c0 // w, math.ceil((c0 + ncols) / w)
        lo, hi = j_lo, nj
        while lo < nj and masked(lo):
            lo += 1
        while hi > lo and masked(hi - 1):
            hi -= 1
        for j in list(range(j_lo, lo)) + ([lo] if hi - lo == 1 else []) + list(range(hi, nj)):
            body(k.c(j * w), j, k.c(j * w - c0))
        if hi - lo > 1:
            with k.for_range(hi * w, lo * w, w, name="j0") as j0:
                body(j0, None, b.sub(j0, k.c(c0)))

    def window_mask(self, j):
        """Per element of vector j's input window (the alpha columns at stride m): only what
        lies outside the row is masked; lanes past the row's tiles compute values no store
        keeps."""
        m, w = self.m, self.vec.w
        c0 = m * j * w - self.pl
        return tuple(0 <= c0 + e < self.w for e in range(m * w + self.alpha - m))

    def in_masked(self, j):
        """Whether the input transform's vector j of a row needs masks: its window leaves the
        row, or its lanes pass the row's tiles."""
        return (j + 1) * self.vec.w > self.tw or not all(self.window_mask(j))

    def out_masked(self, j):
        return (j + 1) * self.vec.w * self.m > self.wo

    # -- 1. B^T d B ------------------------------------------------------------------------------
    def input_tiles(self, n, r, rr, c):
        k, b, vec, m, al, w = self.k, self.b, self.vec, self.m, self.alpha, self.vec.w
        plane = b.mul(b.add(b.mul(n, k.c(self.c)), c), k.c(self.h * self.w))
        rows = []
        for a in range(al):
            iy = b.add(b.mul(r, k.c(m)), k.c(a - self.pt))
            ok = b.and_(b.icmp_signed(">=", iy, k.c(0)), b.icmp_signed("<", iy, k.c(self.h)))
            rows.append((self._splat_bool(ok),
                         b.add(plane, b.mul(b.select(ok, iy, k.c(0)), k.c(self.w)))))
        ar = tf.Ir(vec)
        vrow = b.add(b.mul(c, k.c(self.tpad)), b.mul(rr, k.c(self.tcb)))  # V[0][c][row's tiles]

        def body(j0, j, s0):
            mj = b.mul(j0, k.c(m))
            d = [[b.select(ok, v, vec.zero()) for v in vec.load_phases(
                k.inp(0), b.add(b.add(row, mj), k.c(-self.pl)), m, al,
                None if j is None else self.window_mask(j))] for ok, row in rows]
            v = tf.input_2d(ar, d)
            slot = b.add(vrow, s0)
            keep = None if j is None else tuple(j * w + l < self.tw for l in range(w))
            for a in range(al):
                for e in range(al):
                    vec.store(v[a][e], self.vp, b.add(slot, k.c((al * a + e) * self.vplane)),
                              keep)
        self.vectors(body, self.in_masked)

    def _splat_bool(self, x):
        b, w = self.b, self.vec.w
        ty = ir.VectorType(cg.I1, w)
        v = b.insert_element(ir.Constant(ty, ir.Undefined), x, ir.Constant(cg.I32, 0))
        return b.shuffle_vector(v, ir.Constant(ty, ir.Undefined),
                                ir.Constant(ir.VectorType(cg.I32, w), [0] * w))

    # -- 2. the alpha^2 GEMMs ----------------------------------------------------------------------
    def gemm(self, xi, rows, kb=None):
        """M[xi] = U[xi] V[xi]: for output-channel block kb (channel blocks outermost), or for
        every block inside each register tile's columns of V (points outermost: that panel
        of V stays in L1 while U[xi] streams past)."""
        k, b, vec, mr = self.k, self.b, self.vec, self.mr
        nvec = tpad(vec.simd, self.tcb, rows) // vec.w
        lone = lone_tiles(vec.simd, mr, rows * self.tcb)
        if lone:
            nvec -= 1
        vbase = b.mul(xi, k.c(self.vplane))
        full, tail = divmod(nvec, self.nv)

        def blocks(body):
            """body(U's panel, M[xi]'s rows) per block of MR output channels"""
            if kb is not None:  # U [K/MR][alpha^2][C][MR]; M[xi] MR rows
                body(b.mul(b.add(b.mul(kb, k.c(self.a2)), xi), k.c(self.c * mr)),
                     b.mul(xi, k.c(self.mplane)))
                return
            with k.for_range(self.nkb, name="kb") as kbi:  # U [alpha^2][K/MR][C][MR]; M[xi] K
                body(b.mul(b.add(b.mul(xi, k.c(self.nkb)), kbi), k.c(self.c * mr)),
                     b.add(b.mul(xi, k.c(self.mplane)), b.mul(kbi, k.c(mr * self.tpad))))

        def tile(v0, nv):
            def body(ubase, mbase):
                acc = Acc(vec, mr, nv)

                def step(c):
                    up = b.add(ubase, b.mul(c, k.c(mr)))
                    # U streams from memory inside a model (4 MiB for ResNet-50's 14x14
                    # layers), from L3 in a one-layer probe: Zen 4, ResNet-50, -instrument-
                    # profile, min of 8 rounds either order: its 11 Winograd layers 8-26% faster
                    vec.prefetch(k.inp(1), b.add(up, k.c(PREFETCH)))
                    vp = b.add(b.add(vbase, b.mul(c, k.c(self.tpad))), v0)
                    acc.fma([vec.load_splat(k.inp(1), b.add(up, k.c(i))) for i in range(mr)],
                            [vec.load(self.vp, b.add(vp, k.c(j * vec.w))) for j in range(nv)])
                acc.reduce(k, self.c, step, unroll=self.c if self.c <= UNROLLED_C else 1)
                for i in range(mr):
                    for j in range(nv):
                        vec.store(acc.value(i, j), self.mp,
                                  b.add(b.add(mbase, k.c(i * self.tpad + j * vec.w)), v0))
            blocks(body)
        if full == 1:
            tile(k.c(0), self.nv)
        elif full > 1:
            with k.for_range(full, name="tv") as tv:
                tile(b.mul(tv, k.c(self.nv * vec.w)), self.nv)
        if tail:
            tile(k.c(full * self.nv * vec.w), tail)
        if lone:
            blocks(lambda ubase, mbase: self.lone(ubase, vbase, mbase, nvec * vec.w, lone,
                                                  first=nvec == 0))

    def lone(self, ubase, vbase, mbase, t0, count, first: bool):
        """Tiles t0 .. t0 + count, alone in the block's last vector of tile slots, with the
        MR output channels in the lanes instead (lone_tiles): per input channel one load of
        U's packed MR row and count multiply-adds, against MR for the padded vector. The
        input channels go round up to CHAINS accumulators a tile (CHAINS sums in all), so the
        sums do not wait on one another's latency. `first`: no register tile read U's rows
        before (every tile of the block is alone), so this loop prefetches U's stream as they
        do."""
        k, b, mr = self.k, self.b, self.mr
        vec = Vec(k, replace(self.vec.simd, width=1 << (mr - 1).bit_length()))
        rowmask = None if vec.w == mr else tuple(l < mr for l in range(vec.w))
        chains = -(-CHAINS // count)  # CHAINS independent sums in all, at least one a tile
        acc = Acc(vec, count, chains)
        calls = iter(range(self.c))  # reduce's calls in order: `chains` a loop step, the rest

        def step(c):
            j = next(calls) % chains
            vrow = b.add(b.add(vbase, b.mul(c, k.c(self.tpad))), k.c(t0))
            up = b.add(ubase, b.mul(c, k.c(mr)))
            u = vec.load(k.inp(1), up, rowmask)
            if first:
                vec.prefetch(k.inp(1), b.add(up, k.c(PREFETCH)))
            acc.fma([vec.load_splat(self.vp, b.add(vrow, k.c(t))) for t in range(count)],
                    [u if jj == j else None for jj in range(chains)])
        acc.reduce(k, self.c, step, unroll=chains)
        for t in range(count):
            total = acc.value(t, 0)
            for j in range(1, chains):
                total = b.fadd(total, acc.value(t, j))
            for i in range(mr):
                x = b.extract_element(total, ir.Constant(cg.I32, i))
                b.store(x, cg.gep(b, self.mp, b.add(mbase, k.c(i * self.tpad + t0 + t)), cg.F32))

    # -- 3. A^T M A, bias, epilogue --------------------------------------------------------------
    def output_tiles(self, n, r, rr, oc, i):
        k, b, vec, m, al = self.k, self.b, self.vec, self.m, self.alpha
        bias = vec.splat(k.load(k.inp(2), oc, np.float32)) if k.inp(2) is not None else None
        plane = b.mul(b.add(b.mul(n, k.c(self.kk)), oc), k.c(self.ho * self.wo))
        ar = tf.Ir(vec)
        mrow = b.add(b.mul(i, k.c(self.tpad)), b.mul(rr, k.c(self.tcb)))  # M[0][i][row's tiles]

        def body(j0, j, s0):
            slot = b.add(mrow, s0)
            x = [[vec.load(self.mp, b.add(slot, k.c((al * a + e) * self.mplane)))
                  for e in range(al)] for a in range(al)]
            for row, y in enumerate(tf.output_2d(m, ar, x)):
                if bias is not None:
                    y = [b.fadd(v, bias) for v in y]
                oy = b.add(b.mul(r, k.c(m)), k.c(row))
                if self.ho % m and row >= self.ho % m:  # past the plane in the last tile row
                    with cg.if_then(b, b.icmp_signed("<", oy, k.c(self.ho))):
                        self.store_row(n, oc, oy, plane, j0, j, y)
                else:
                    self.store_row(n, oc, oy, plane, j0, j, y)
        self.vectors(body, self.out_masked)

    def store_row(self, n, oc, oy, plane, j0, j, y):
        """Lane l of y[p] is output column m(j0 + l) + p: the m vectors interleaved into m
        output vectors (one shuffle of the pair, or of two pairs concatenated), stored."""
        k, b, vec, m = self.k, self.b, self.vec, self.m
        w = vec.w

        def cat(u, v):
            n2 = 2 * u.type.count
            return b.shuffle_vector(u, v, ir.Constant(ir.VectorType(cg.I32, n2), list(range(n2))))
        pair = (y[0], y[1]) if m == 2 else (cat(y[0], y[1]), cat(y[2], y[3]))
        orow = b.add(plane, b.mul(oy, k.c(self.wo)))
        for part in range(m):
            # j None: a vector inside the row (no masks)
            x0 = None if j is None else m * j * w + part * w
            if x0 is not None and x0 >= self.wo:
                break
            # lane l holds tile (part*w + l) // m, position (part*w + l) % m
            idx = [((part * w + l) % m) * w + (part * w + l) // m for l in range(w)]
            v = b.shuffle_vector(*pair, ir.Constant(ir.VectorType(cg.I32, w), idx))
            mask = None if x0 is None else tuple(x0 + l < self.wo for l in range(w))
            xs = b.add(b.mul(j0, k.c(m)), k.c(part * w))
            self.fin.finish(v, [n, oc, oy], xs, b.add(orow, xs), mask)


@registry.variant("ConvWinograd", "winograd", rank=0)
def emit(k, params=None):
    _Emitter(k).emit()
