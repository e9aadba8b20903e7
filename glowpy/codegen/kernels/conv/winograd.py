"""Winograd F(m x m, 3x3) convolution, m = 2 or 4, for vector targets (ConvWinograd).

A 3x3, stride-1, ungrouped float Conv computes each m x m output tile from an alpha x alpha
input tile (alpha = m + 2) with alpha^2 multiplies per input/output channel pair instead of
9 m^2: Y = A^T [sum_c (G g G^T) . (B^T d B)] A (Lavin & Gray, 2015; the matrices and the
factored transforms are in winograd_transforms.py). F(2x2) does 16/4 = 4 multiplies per
output, 2.25x fewer than direct; F(4x4) 36/16 = 2.25, 4x fewer. The weight transform
U = G g G^T is done at compile time and packed in the kernel's read order; at run time, per
block of tile rows:

  1. input transform: V[xi][c][tau] = (B^T d B)[xi] for the block's tiles tau (tiles of one
     row are consecutive in tau); vectorized over the tiles of a row (stride-m loads);
  2. per block of MR output channels, alpha^2 GEMMs M[xi][i][tau] = sum_c U[xi][kb+i][c]
     V[xi][c][tau] on register tiles of MR channels x NV vectors of tiles (gemm_micro), U's
     stream prefetched; a few tiles alone in the block's last vector run with the MR
     channels in the lanes instead (`lone`: no multiply-adds on empty slots);
  3. output transform of those MR channels: A^T M A, the bias, lanes interleaved back into
     output rows, the node's fused epilogue (vec_epilogue), stored.

V and M live in a scratch buffer the planner places like any activation (an extra output of
the instruction, live only there), sized by `select` to a fraction of the output and at most
twice the target's L2 (winograd_plan.scratch_max), so the arithmetic stays near the core.
When one block of MR channels covers all K, M[xi] is written over V[xi] and the scratch is V
alone (ResNet-8's 16-channel layers: half the scratch). Chosen by
`select`, the backend's post-lowering step, on targets with 8 or more float lanes: the
transforms cost vector shuffles that only wide vectors repay, and U is alpha^2/9 the
weights' size. Other targets and other convolutions keep the direct kernels.

m per layer: winograd_plan.py (the cost model), with the blocking."""
from __future__ import annotations

import math
import weakref
from dataclasses import replace

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry
from glowpy.codegen.kernels.accumulators import Acc
from glowpy.codegen.kernels.conv import winograd_transforms as tf
from glowpy.codegen.kernels.conv.winograd_plan import (CHAINS, in_place, lone_tiles, plan,
                                                       plane, prefetch_v, scratch_max, tpad,
                                                       u_fits)
from glowpy.codegen.kernels.tiles import PREFETCH
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.ir import planner
from glowpy.ir.program import ACTIVATION, CONSTANT, Buffer

SCRATCH = "_winograd_scratch"  # name suffix of the scratch buffers (the manifest counts them)
MIN_LANES = 8  # float lanes a target needs for the transforms to pay
MIN_CHANNELS = 16  # below this the transforms cost more than the multiplies they save
MIN_PLANE = 144  # output pixels at least (smaller planes: too few tiles per weight)
UNROLLED_C = 16  # reductions this short run unrolled: zeroing and storing the accumulators of
# every tile, and the loop itself, weigh on 16 steps (measured: ResNet-8's 16-channel layers
# 10% faster)


def _shape(ins):
    """(N, C, H, W, K, pads t/l/b/r) of a Conv instruction Winograd F(m x m, 3x3) computes
    exactly, or None."""
    n = ins.node
    if ins.op != "Conv" or n is None or len(ins.inputs) < 2:
        return None
    x, w, y = ins.inputs[0], ins.inputs[1], ins.outputs[0]
    if len(x.shape) != 4 or x.dtype != np.float32 or y.dtype != np.float32 or \
            w.region != CONSTANT or w.value is None or w.value.const is None:
        return None
    win = n.opdef.window(n)
    if tuple(win.kernel) != (3, 3) or tuple(win.strides) != (1, 1) or \
            tuple(win.dilations) != (1, 1) or n.attrs.get("group", 1) != 1:
        return None
    pt, pl = win.pads_begin
    pb, pr = win.pads_end
    return (*x.shape, w.shape[0], (pt, pl, pb, pr))


def may_take(lanes: int, c: int, kk: int, outputs: int) -> bool:
    """Whether Winograd may take a 3x3 stride-1 convolution of C -> K channels and `outputs`
    output positions on a target of `lanes` float lanes, before its scratch budget is known:
    what `select` asks first, and what catalog.late_rewrites asks before it leaves a deep layer
    unsplit for Winograd's own blocks."""
    return lanes >= MIN_LANES and min(c, kk) >= MIN_CHANNELS and outputs >= MIN_PLANE and \
        u_fits(c, kk)


def _live_bytes(prog) -> list[int]:
    """Activation bytes live at each instruction: the planner's own profile, before placement."""
    groups, _, _, pairs = planner.members(prog)
    return planner.live_profile(groups, pairs, len(prog.instrs))


_PACKED: dict = {}  # id(weights array) -> {(m, MR): U}, while the array lives (the schedule search re-lowers)


def _weights(const: np.ndarray, m: int, mr: int) -> np.ndarray:
    """U packed for F(m x m) and register tiles of MR channels (winograd_transforms.weights)."""
    if id(const) not in _PACKED:
        _PACKED[id(const)] = {}
        weakref.finalize(const, _PACKED.pop, id(const), None)
    cache = _PACKED[id(const)]
    if (m, mr) not in cache:
        cache[m, mr] = tf.weights(np.asarray(const, np.float32), m, mr)
    return cache[m, mr]


def select(prog, caps):
    """The backend's post-lowering step: Conv instructions Winograd serves better become
    ConvWinograd, with the transformed weights as a constant of their own (replacing the
    original when nothing else reads it) and the scratch buffer as a second output."""
    simd = Simd.of(caps)
    if simd.width < MIN_LANES:
        return prog
    # scratch up to what another instruction needs anyway costs no memory; beyond that, the
    # region may grow by the share planner.build accepts (-winograd=false: not at all)
    live = _live_bytes(prog)
    bound = max(live, default=0)
    for idx, ins in enumerate(prog.instrs):
        s = _shape(ins)
        if s is None:
            continue
        n, c, h, w, kk, pads = s
        ho, wo = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
        if not may_take(simd.width, c, kk, ho * wo):
            continue
        budget = min(scratch_max(caps), int(bound * (1 + planner.TRANSFORM_GROWTH)) - live[idx])
        chosen = plan(simd, s, budget, registry.forced_params("ConvWinograd"))
        if chosen is None:
            continue
        m, (rows, tp, mr, nv, nbytes) = chosen
        wbuf = ins.inputs[1]
        u = _weights(wbuf.value.const, m, mr)
        a2 = tf.alpha(m) ** 2
        ubuf = Buffer(f"{ins.name}_winograd_weights", np.dtype(np.float32), u.shape, CONSTANT,
                      data=u, layout={"layout": f"winograd F({m}x{m},3x3) [K/{mr}][{a2}][C][{mr}]",
                                      "for": ins.name})
        readers = sum(1 for i in prog.instrs for x in i.inputs if x is wbuf)
        if readers == 1 and wbuf in prog.constants and \
                not any(b.base is wbuf for b in prog.constants):
            prog.constants[prog.constants.index(wbuf)] = ubuf
        else:
            prog.constants.append(ubuf)
        ins.inputs[1] = ubuf
        ins.op = "ConvWinograd"
        prog.transformed = True
        # executed multiply-adds: alpha^2 per tile and channel pair (the transforms' adds not
        # counted), for the report's "executed_macs"
        macs = n * math.ceil(ho / m) * math.ceil(wo / m) * a2 * c * kk
        ins.attrs["winograd"] = dict(m=m, rows=rows, tpad=tp, mr=mr, nv=nv, macs=macs)
        ins.outputs = [ins.outputs[0], Buffer(ins.name + SCRATCH, np.dtype(np.float32),
                                              (nbytes // 4,), ACTIVATION)]
    return prog


class _Emitter:
    def __init__(self, k):
        self.k, self.b = k, k.b
        n_, self.c, self.h, self.w = k.in_buf(0).shape
        self.kk, self.ho, self.wo = k.out_buf().shape[1:]
        win = k.node.opdef.window(k.node)
        self.pt, self.pl = win.pads_begin
        a = k.instr.attrs["winograd"]
        self.m, self.rows, self.tpad, self.mr, self.nv = a["m"], a["rows"], a["tpad"], a["mr"], a["nv"]
        self.alpha = tf.alpha(self.m)
        self.a2 = self.alpha ** 2
        self.vec = Vec(k, Simd.of(k.caps))
        self.th, self.tw = math.ceil(self.ho / self.m), math.ceil(self.wo / self.m)
        self.vp = k.out(1)  # V: [alpha^2][C][tpad], its planes `plane` apart (winograd_plan.plane)
        # M: [alpha^2][MR][tpad] after V, or in V's place with V's row and plane strides
        self.vplane = plane(self.c * self.tpad, self.a2)
        if in_place(self.mr, self.c, self.kk):
            self.mp, self.mrows, self.mplane = self.vp, self.c, self.vplane
        else:
            self.mp = cg.gep(self.b, self.vp, k.c(self.a2 * self.vplane), cg.F32)
            self.mrows = self.mr
            self.mplane = plane(self.mr * self.tpad, self.a2)
        self.fin = Finisher(k, self.vec, (self.wo,))
        self.n = n_
        self.prefetch_v = prefetch_v(k.caps, self.a2 * self.vplane * 4)

    def emit(self):
        k, vec = self.k, self.vec
        # tile slots past the last row's tiles are read by the GEMM and never written: zero
        # them once, so no stale bits (NaNs, denormals) slow the multiply-adds
        used = self.rows * self.tw
        if used < self.tpad:
            with k.for_range(self.a2, name="vzx") as xi, k.for_range(self.c, name="vzc") as c:
                base = self.b.add(self.b.mul(xi, k.c(self.vplane)), self.b.mul(c, k.c(self.tpad)))
                for t in range(used, self.tpad, vec.w):
                    vec.store(vec.zero(), self.vp, self.b.add(base, k.c(t)),
                              tuple(t + l < self.tpad for l in range(vec.w)))
        full, tail = divmod(self.th, self.rows)
        # M's slots past a block's lone tiles (lone_tiles) are read by the output transform
        # and never written: zero them once too (in place, they are V's)
        if self.mp is not self.vp and any(
                lone_tiles(vec.simd, self.mr, r * self.tw) for r in {self.rows, tail} if r):
            with k.for_range(self.a2 * self.mplane // vec.w, name="mz") as r:
                vec.store(vec.zero(), self.mp, self.b.mul(r, k.c(vec.w)))
        with k.for_range(self.n, name="n") as n:
            if full:
                with k.for_range(full, name="blk") as blk:
                    self.block(n, self.b.mul(blk, k.c(self.rows)), self.rows)
            if tail:
                self.block(n, k.c(full * self.rows), tail)

    def block(self, n, r0, rows):
        k, b = self.k, self.b
        with k.for_range(rows, name="ri") as rr:
            with k.for_range(self.c, name="c") as c:
                self.input_tiles(n, b.add(r0, rr), rr, c)
        nkb = math.ceil(self.kk / self.mr)
        with k.for_range(nkb, name="kb") as kb:
            self.gemm(kb, rows)
            last = self.kk - (nkb - 1) * self.mr
            count = k.c(self.mr) if last == self.mr else b.select(
                b.icmp_signed("<", kb, k.c(nkb - 1)), k.c(self.mr), k.c(last))
            with k.for_range(rows, name="ro") as rr:
                with k.for_range(count, name="i") as i:
                    self.output_tiles(n, b.add(r0, rr), rr, b.add(b.mul(kb, k.c(self.mr)), i), i)

    def vectors(self, body, masked):
        """body(j0, j) per vector of a row's tiles (first tile j0, an IR value): the vectors that
        need masks (masked(j)) one by one with their index j, the unmasked ones between them in
        one loop (j None): a wide plane's transforms are emitted once, not once per vector."""
        k, w = self.k, self.vec.w
        nj = math.ceil(self.tw / w)
        lo, hi = 0, nj
        while lo < nj and masked(lo):
            lo += 1
        while hi > lo and masked(hi - 1):
            hi -= 1
        for j in range(lo):
            body(k.c(j * w), j)
        if hi - lo > 1:
            with k.for_range(hi * w, lo * w, w, name="j0") as j0:
                body(j0, None)
        elif hi - lo == 1:
            body(k.c(lo * w), lo)
        for j in range(hi, nj):
            body(k.c(j * w), j)

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
        vrow = b.add(b.mul(c, k.c(self.tpad)), b.mul(rr, k.c(self.tw)))  # V[0][c][row's tiles]

        def mask(j):
            # per element of a row's window (the alpha columns at stride m): only what lies
            # outside the row is masked; lanes past the row's tiles compute values no store keeps
            c0 = m * j * w - self.pl
            return tuple(0 <= c0 + e < self.w for e in range(m * w + al - m))

        def masked(j):
            return (j + 1) * w > self.tw or not all(mask(j))

        def body(j0, j):
            mj = b.mul(j0, k.c(m))
            d = [[b.select(ok, v, vec.zero()) for v in vec.load_phases(
                k.inp(0), b.add(b.add(row, mj), k.c(-self.pl)), m, al,
                None if j is None else mask(j))] for ok, row in rows]
            v = tf.input_2d(m, ar, d)
            slot = b.add(vrow, j0)
            keep = None if j is None else tuple(j * w + l < self.tw for l in range(w))
            for a in range(al):
                for e in range(al):
                    vec.store(v[a][e], self.vp, b.add(slot, k.c((al * a + e) * self.vplane)),
                              keep)
        self.vectors(body, masked)

    def _splat_bool(self, x):
        b, w = self.b, self.vec.w
        ty = ir.VectorType(cg.I1, w)
        v = b.insert_element(ir.Constant(ty, ir.Undefined), x, ir.Constant(cg.I32, 0))
        return b.shuffle_vector(v, ir.Constant(ty, ir.Undefined),
                                ir.Constant(ir.VectorType(cg.I32, w), [0] * w))

    # -- 2. the alpha^2 GEMMs ----------------------------------------------------------------------
    def gemm(self, kb, rows):
        k, b, vec, mr = self.k, self.b, self.vec, self.mr
        nvec = tpad(vec.simd, self.tw, rows) // vec.w
        lone = lone_tiles(vec.simd, mr, rows * self.tw)
        if lone:
            nvec -= 1
        with k.for_range(self.a2, name="xi") as xi:
            ubase = b.mul(b.add(b.mul(kb, k.c(self.a2)), xi), k.c(self.c * mr))
            vbase = b.mul(xi, k.c(self.vplane))
            mbase = b.mul(xi, k.c(self.mplane))
            full, tail = divmod(nvec, self.nv)

            def tile(v0, nv):
                acc = Acc(vec, mr, nv)

                def step(c):
                    up = b.add(ubase, b.mul(c, k.c(mr)))
                    # U streams from memory inside a model (4 MiB for ResNet-50's 14x14
                    # layers), from L3 in a one-layer probe: Zen 4, ResNet-50, -instrument-
                    # profile, min of 8 rounds either order: its 11 Winograd layers 8-26% faster
                    vec.prefetch(k.inp(1), b.add(up, k.c(PREFETCH)))
                    vp = b.add(b.add(vbase, b.mul(c, k.c(self.tpad))), v0)
                    if self.prefetch_v:  # this row of V's next plane, into L2 (prefetch_v)
                        vec.prefetch_run(self.vp, b.add(vp, k.c(self.vplane)), nv * vec.w, 2)
                    acc.fma([vec.load_splat(k.inp(1), b.add(up, k.c(i))) for i in range(mr)],
                            [vec.load(self.vp, b.add(vp, k.c(j * vec.w))) for j in range(nv)])
                acc.reduce(k, self.c, step, unroll=self.c if self.c <= UNROLLED_C else 1)
                for i in range(mr):
                    for j in range(nv):
                        vec.store(acc.value(i, j), self.mp,
                                  b.add(b.add(mbase, k.c(i * self.tpad + j * vec.w)), v0))
            if full == 1:
                tile(k.c(0), self.nv)
            elif full > 1:
                with k.for_range(full, name="tv") as tv:
                    tile(b.mul(tv, k.c(self.nv * vec.w)), self.nv)
            if tail:
                tile(k.c(full * self.nv * vec.w), tail)
            if lone:
                self.lone(ubase, vbase, mbase, nvec * vec.w, lone, first=nvec == 0)

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
        k, b, vec, m, al, w = self.k, self.b, self.vec, self.m, self.alpha, self.vec.w
        bias = vec.splat(k.load(k.inp(2), oc, np.float32)) if k.inp(2) is not None else None
        plane = b.mul(b.add(b.mul(n, k.c(self.kk)), oc), k.c(self.ho * self.wo))
        ar = tf.Ir(vec)
        mrow = b.add(b.mul(i, k.c(self.tpad)), b.mul(rr, k.c(self.tw)))  # M[0][i][row's tiles]

        def body(j0, j):
            slot = b.add(mrow, j0)
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
        self.vectors(body, lambda j: (j + 1) * w * m > self.wo)

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
