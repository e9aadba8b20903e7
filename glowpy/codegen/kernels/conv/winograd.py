"""Winograd F(2x2, 3x3) convolution for vector targets (ConvWinograd).

A 3x3, stride-1, ungrouped float Conv computes each 2x2 output tile from a 4x4 input tile
with 16 multiplies per input/output channel pair instead of 36: Y = A^T [sum_c (G g G^T) .
(B^T d B)] A (Lavin & Gray, 2015). The weight transform U = G g G^T is done at compile time
and packed in the kernel's read order; at run time, per block of tile rows:

  1. input transform: V[xi][c][tau] = (B^T d B)[xi] for the block's tiles tau (tiles of one
     row are consecutive in tau); vectorized over the tiles of a row (stride-2 loads);
  2. per block of MR output channels, 16 GEMMs M[xi][i][tau] = sum_c U[xi][kb+i][c] V[xi][c][tau]
     on register tiles of MR channels x NV vectors of tiles (gemm_micro);
  3. output transform of those MR channels: A^T M A, the bias, lanes interleaved back into
     output rows, the node's fused epilogue (vec_epilogue), stored.

V and M live in a scratch buffer the planner places like any activation (an extra output of
the instruction, live only there), sized by `select` to a fraction of the output, so the
arithmetic stays in cache. When one block of MR channels covers all K, M[xi] is written over
V[xi] and the scratch is V alone (ResNet-8's 16-channel layers: half the scratch). Chosen by
`select`, the backend's post-lowering step, on targets with 8 or more float lanes: the
transforms cost vector shuffles that only wide vectors repay, and U is 16/9 the weights' size.
Other targets and other convolutions keep the direct kernels."""
from __future__ import annotations

import math
import weakref

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry
from glowpy.codegen.kernels.tiles import choose_tile
from glowpy.codegen.kernels.accumulators import Acc
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.ir import planner
from glowpy.ir.program import ACTIVATION, CONSTANT, Buffer

SCRATCH = "_winograd_scratch"  # name suffix of the scratch buffers (the manifest counts them)
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])
MIN_LANES = 8  # float lanes a target needs for the transforms to pay
MIN_CHANNELS = 16  # below this the transforms cost more than the multiplies they save
SCRATCH_MAX = 1 << 20  # scratch at most this big (V stays in L2)
MAX_TILES = 256  # tiles per block
MIN_TILES = 16  # tiles per block at least
BLOCK_TILES = 64  # tiles per block enough when U stays in cache
U_CACHED = 1 << 20  # bytes of U that stay in cache between blocks
MIN_PLANE = 144  # output pixels at least (smaller planes: too few tiles per weight)
MAX_U = 4 << 20  # bytes of transformed weights at most (more: streaming U costs more than it saves)
UNROLLED_C = 16  # reductions this short run unrolled: zeroing and storing the accumulators of
# every tile, and the loop itself, weigh on 16 steps (measured: ResNet-8's 16-channel layers
# 10% faster)


def _shape(ins):
    """(N, C, H, W, K, pads t/l/b/r) of a Conv instruction Winograd F(2x2,3x3) computes exactly,
    or None."""
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


def in_place(mr, c, kk):
    """M[xi] can overwrite V[xi]: one channel block covers all K output channels, so each
    register tile has read its columns of V[xi] for good before it stores them, and M's rows
    fit in V's."""
    return kk <= mr and kk <= c


def _blocking(simd, c, kk, ho, wo, budget, rows_wanted=None):
    """(tile rows per block, padded tiles per block, MR, NV, scratch bytes), or None when the
    budget holds too few tiles to repay streaming U once per block. Blocks are as few as the
    budget allows, and even. `rows_wanted` (forced through the registry, e.g.
    `forcing({"ConvWinograd": ("winograd", {"rows": 1})})`) fixes the tile rows per block."""
    th, tw = math.ceil(ho / 2), math.ceil(wo / 2)
    vecs = math.ceil(tw / simd.width) * simd.width

    def tpad(r):
        return math.ceil(((r - 1) * tw + vecs) / simd.width) * simd.width

    def scratch(r, mr):
        # one block of MR channels covering all K: M[xi] overwrites V[xi] (see _Emitter.gemm)
        return 16 * (c if in_place(mr, c, kk) else c + mr) * tpad(r) * 4

    def fits(r):
        return scratch(r, choose_tile(simd, kk, tpad(r), 1)[0]) <= budget and r * tw <= MAX_TILES

    # U in cache: blocks of ~BLOCK_TILES tiles (less scratch); U beyond: as few blocks as fit,
    # since every block streams all of U once
    want = BLOCK_TILES if 64 * c * kk <= U_CACHED else MAX_TILES
    if rows_wanted is not None:
        rows = min(rows_wanted, th)
        if not fits(rows):
            return None
    else:
        rows = 1
        while rows < th and rows * tw < want and fits(rows + 1):
            rows += 1
        if not fits(rows) or rows * tw < min(MIN_TILES, th * tw):
            return None
    rows = math.ceil(th / math.ceil(th / rows))
    mr, nv, _ = choose_tile(simd, kk, tpad(rows), 1)
    return rows, tpad(rows), mr, nv, scratch(rows, mr)


def _live_bytes(prog) -> list[int]:
    """Activation bytes live at each instruction: the planner's own profile, before placement."""
    groups, _, _, pairs = planner.members(prog)
    return planner.live_profile(groups, pairs, len(prog.instrs))


_PACKED: dict = {}  # id(weights array) -> {MR: U}, while the array lives (the schedule search re-lowers)


def _weights(const: np.ndarray, mr: int) -> np.ndarray:
    """U = G g G^T per (k, c), packed [k block][xi][c][MR] (K padded with zeros to MR)."""
    if id(const) not in _PACKED:
        _PACKED[id(const)] = {}
        weakref.finalize(const, _PACKED.pop, id(const), None)
    cache = _PACKED[id(const)]
    if mr not in cache:
        cache[mr] = _transform(np.asarray(const, np.float32), mr)
    return cache[mr]


def _transform(w: np.ndarray, mr: int) -> np.ndarray:
    kk, c = w.shape[:2]
    u = np.einsum("ai,kcij,bj->kcab", G, w.astype(np.float64), G).reshape(kk, c, 16)
    nkb = math.ceil(kk / mr)
    p = np.zeros((nkb * mr, c, 16))
    p[:kk] = u
    return p.reshape(nkb, mr, c, 16).transpose(0, 3, 2, 1).astype(np.float32)


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
        if c < MIN_CHANNELS or kk < MIN_CHANNELS or ho * wo < MIN_PLANE or 64 * c * kk > MAX_U:
            continue
        budget = min(SCRATCH_MAX, int(bound * (1 + planner.TRANSFORM_GROWTH)) - live[idx])
        forced = registry.forced_params("ConvWinograd") or {}
        blocking = _blocking(simd, c, kk, ho, wo, budget, forced.get("rows"))
        if blocking is None:
            continue
        rows, tpad, mr, nv, nbytes = blocking
        wbuf = ins.inputs[1]
        u = _weights(wbuf.value.const, mr)
        ubuf = Buffer(f"{ins.name}_winograd_weights", np.dtype(np.float32), u.shape, CONSTANT,
                      data=u, layout={"layout": f"winograd F(2x2,3x3) [K/{mr}][16][C][{mr}]",
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
        ins.attrs["winograd"] = dict(rows=rows, tpad=tpad, mr=mr, nv=nv)
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
        self.rows, self.tpad, self.mr, self.nv = a["rows"], a["tpad"], a["mr"], a["nv"]
        self.vec = Vec(k, Simd.of(k.caps))
        self.th, self.tw = math.ceil(self.ho / 2), math.ceil(self.wo / 2)
        self.vp = k.out(1)  # V: [16][C][tpad]
        # M: [16][MR][tpad] after V, or in V's place with V's row stride
        if in_place(self.mr, self.c, self.kk):
            self.mp, self.mrows = self.vp, self.c
        else:
            self.mp = cg.gep(self.b, self.vp, k.c(16 * self.c * self.tpad), cg.F32)
            self.mrows = self.mr
        self.fin = Finisher(k, self.vec, (self.wo,))
        self.n = n_

    def emit(self):
        k, vec = self.k, self.vec
        # tile slots past the last row's tiles are read by the GEMM and never written: zero
        # them once, so no stale bits (NaNs, denormals) slow the multiply-adds
        used = self.rows * self.tw
        if used < self.tpad:
            with k.for_range(16 * self.c, name="vz") as r:
                base = self.b.mul(r, k.c(self.tpad))
                for t in range(used, self.tpad, vec.w):
                    vec.store(vec.zero(), self.vp, self.b.add(base, k.c(t)),
                              tuple(t + l < self.tpad for l in range(vec.w)))
        full, tail = divmod(self.th, self.rows)
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

    # -- 1. B^T d B ------------------------------------------------------------------------------
    def input_tiles(self, n, r, rr, c):
        k, b, vec = self.k, self.b, self.vec
        plane = b.mul(b.add(b.mul(n, k.c(self.c)), c), k.c(self.h * self.w))
        rows = []
        for a in range(4):
            iy = b.add(b.mul(r, k.c(2)), k.c(a - self.pt))
            ok = b.and_(b.icmp_signed(">=", iy, k.c(0)), b.icmp_signed("<", iy, k.c(self.h)))
            rows.append((ok, b.add(plane, b.mul(b.select(ok, iy, k.c(0)), k.c(self.w)))))
        for j0 in range(0, self.tw, vec.w):
            d = []
            for ok, row in rows:
                line = []
                for col in range(4):
                    c0 = 2 * j0 - self.pl + col
                    # only what lies outside the row is masked: lanes past the row's tiles
                    # compute values no store keeps
                    mask = tuple(0 <= c0 + e < self.w for e in range(2 * vec.w))
                    v = vec.load_strided(k.inp(0), b.add(row, k.c(c0)), 2, mask)
                    line.append(b.select(self._splat_bool(ok), v, vec.zero()))
                d.append(line)
            t = [self._bt([d[a][e] for a in range(4)]) for e in range(4)]  # B^T d, by column e
            v = [self._bt([t[e][a] for e in range(4)]) for a in range(4)]  # (B^T d) B, by row a
            slot = b.add(b.mul(rr, k.c(self.tw)), k.c(j0))
            keep = tuple(j0 + l < self.tw for l in range(vec.w))
            for a in range(4):
                for e in range(4):
                    off = b.add(b.mul(b.add(k.c((4 * a + e) * self.c), c), k.c(self.tpad)), slot)
                    vec.store(v[a][e], self.vp, off, keep)

    def _splat_bool(self, x):
        b, w = self.b, self.vec.w
        ty = ir.VectorType(cg.I1, w)
        v = b.insert_element(ir.Constant(ty, ir.Undefined), x, ir.Constant(cg.I32, 0))
        return b.shuffle_vector(v, ir.Constant(ty, ir.Undefined),
                                ir.Constant(ir.VectorType(cg.I32, w), [0] * w))

    def _bt(self, d):
        """B^T applied to four values (rows or columns of a tile)."""
        b = self.b
        return [b.fsub(d[0], d[2]), b.fadd(d[1], d[2]), b.fsub(d[2], d[1]), b.fsub(d[1], d[3])]

    # -- 2. the 16 GEMMs -------------------------------------------------------------------------
    def gemm(self, kb, rows):
        k, b, vec, mr = self.k, self.b, self.vec, self.mr
        nvec = math.ceil(((rows - 1) * self.tw + math.ceil(self.tw / vec.w) * vec.w) / vec.w)
        with k.for_range(16, name="xi") as xi:
            ubase = b.mul(b.add(b.mul(kb, k.c(16)), xi), k.c(self.c * mr))
            vbase = b.mul(xi, k.c(self.c * self.tpad))
            mbase = b.mul(xi, k.c(self.mrows * self.tpad))
            full, tail = divmod(nvec, self.nv)

            def tile(v0, nv):
                acc = Acc(vec, mr, nv)

                def step(c):
                    up = b.add(ubase, b.mul(c, k.c(mr)))
                    vp = b.add(b.add(vbase, b.mul(c, k.c(self.tpad))), v0)
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

    # -- 3. A^T M A, bias, epilogue --------------------------------------------------------------
    def output_tiles(self, n, r, rr, oc, i):
        k, b, vec = self.k, self.b, self.vec
        bias = vec.splat(k.load(k.inp(2), oc, np.float32)) if k.inp(2) is not None else None
        plane = b.mul(b.add(b.mul(n, k.c(self.kk)), oc), k.c(self.ho * self.wo))
        for j0 in range(0, self.tw, vec.w):
            slot = b.add(b.mul(rr, k.c(self.tw)), k.c(j0))
            m = [vec.load(self.mp, b.add(b.mul(b.add(k.c(xi * self.mrows), i), k.c(self.tpad)),
                                         slot)) for xi in range(16)]
            u = [self._at([m[4 * a + e] for a in range(4)]) for e in range(4)]  # A^T M: 2 x 4
            for row in range(2):
                y = self._at([u[e][row] for e in range(4)])  # (A^T M) A: 2 values
                if bias is not None:
                    y = [b.fadd(v, bias) for v in y]
                oy = b.add(b.mul(r, k.c(2)), k.c(row))
                if row == 1 and self.ho % 2:
                    with cg.if_then(b, b.icmp_signed("<", oy, k.c(self.ho))):
                        self.store_row(n, oc, oy, plane, j0, y)
                else:
                    self.store_row(n, oc, oy, plane, j0, y)

    def _at(self, m):
        b = self.b
        return [b.fadd(b.fadd(m[0], m[1]), m[2]), b.fsub(b.fsub(m[1], m[2]), m[3])]

    def store_row(self, n, oc, oy, plane, j0, y):
        """Lanes of y[0] and y[1] are output columns 2j and 2j+1: interleaved, two stores."""
        k, b, vec = self.k, self.b, self.vec
        w = vec.w
        for half in range(2):
            x0 = 2 * j0 + half * w
            if x0 >= self.wo:
                break
            idx = [l // 2 + (l % 2) * w + half * w // 2 for l in range(w)]
            v = b.shuffle_vector(y[0], y[1], ir.Constant(ir.VectorType(cg.I32, w), idx))
            mask = tuple(x0 + l < self.wo for l in range(w))
            off = b.add(plane, b.add(b.mul(oy, k.c(self.wo)), k.c(x0)))
            self.fin.finish(v, [n, oc, oy], k.c(x0), off, mask)


@registry.variant("ConvWinograd", "winograd", rank=0)
def emit(k, params=None):
    _Emitter(k).emit()
