"""Vectorized float MaxPool and AveragePool (1-D and 2-D windows, any stride, dilation,
padding, ceil_mode, count_include_pad): per output row, NV vectors of output columns keep
their running maximum (sum) in registers over the window's valid rows (a run-time range) and
columns (unrolled; lanes whose tap falls in the padding are masked and read as -inf (0)), then
are stored once (averages divided by the op's per-position divisors). A strided tap is a wide load
and a shuffle. Planes are the outermost loop, so each output plane is written within its own
(batch, channel) iteration, as the streaming contract of the planner requires. The window
loops take a fold (FloatFold here; int8/pool.py's ByteFold runs int8 MaxPool and QAvgPool on
them). The Indices output goes to the generic kernel, as do integer inputs on scalar targets."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.tiles import Shape, kh_range, row_runs
from glowpy.codegen.kernels.elementwise.arith import fmax
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant


def plan(k):
    """{} for float 1-D and 2-D windows (MaxPool without its indices output), else None."""
    x, y = k.in_buf(0), k.out_buf()
    if len(k.instr.outputs) > 1 or x.dtype != np.float32 or y.dtype != np.float32:
        return None
    return {} if len(k.node.opdef.window(k.node).in_size) in (1, 2) else None


@variant("MaxPool", "vector", rank=10, plan=plan)
def emit_maxpool(k, params):
    emit_pool(k, lambda vec, s: FloatFold(k, vec, True, None))


@variant("AveragePool", "vector", rank=10, plan=plan)
def emit_avgpool(k, params):
    emit_pool(k, lambda vec, s: FloatFold(k, vec, False,
                                          k.node.opdef.divisors(k.node).reshape(s.ho, s.wo)))


def plan_global(k):
    """{} for float global pools (whole planes as vector reductions), else None."""
    return {} if k.in_buf(0).dtype == np.float32 and k.out_buf().dtype == np.float32 else None


@variant("GlobalAveragePool", "vector", rank=10, plan=plan_global)
@variant("GlobalMaxPool", "vector", rank=10, plan=plan_global)
def emit_global(k, params):
    x = k.in_buf(0)
    planes, plane = x.shape[0] * x.shape[1], int(np.prod(x.shape[2:]))
    is_max = k.instr.op == "GlobalMaxPool"
    vec = Vec(k, Simd.of(k.caps))
    div = None if is_max else np.full((1, 1), plane)
    whole_plane(k, planes, plane, FloatFold(k, vec, is_max, div))


class FloatFold:
    """What a float pool folds its taps into, on float vectors: the running maximum, or the
    sum divided by the op's per-position divisors (div, an (ho, wo) array) at the store. The
    window loops below ask a fold for its identity, its operation, its loads of the input and
    its stores; int8/pool.py has the integer folds (int8 MaxPool, QAvgPool)."""

    def __init__(self, k, vec: Vec, is_max: bool, div):
        self.k, self.b, self.vec, self.div = k, k.b, vec, div
        self.fill = float("-inf") if is_max else 0.0
        self.identity = cg.const(vec.ty, self.fill)
        self.op = (lambda x, y: fmax(k.b, x, y)) if is_max else k.b.fadd
        # averages multiply by the divisors' reciprocals (within an ulp of dividing): a vector
        # division per output vector cost 10% of a 3x3 stride-1 window (288x35x35, AVX2: 112 -> 101 us)
        self.recip = None if div is None else \
            (np.float32(1) / div.astype(np.float32)).astype(np.float32)
        self.table = k.add_table(self.recip.reshape(-1), "avgpool_recip") \
            if div is not None and len(set(div.flat)) > 1 else None

    def load(self, off, mask):
        return self.vec.load(self.k.inp(0), off, mask, fill=self.fill)

    def load_strided(self, off, stride: int, mask):
        return self.vec.load_strided(self.k.inp(0), off, stride, mask, fill=self.fill)

    def store(self, pos, base, vals, store):
        """Output vectors vals of the positions pos + j*w of a plane (at base + j*w of the
        output); store[j]: the lanes inside the row."""
        b, k, vec = self.b, self.k, self.vec
        for j, val in enumerate(vals):
            if self.div is not None:
                r = vec.load(self.table, b.add(pos, k.c(j * vec.w)), store[j], fill=1.0) \
                    if self.table is not None else cg.const(vec.ty, float(self.recip.flat[0]))
                val = b.fmul(val, r)
            vec.store(val, k.out(), b.add(base, k.c(j * vec.w)), store[j])

    def store_plane(self, p, val):
        """The fold of a whole plane (a scalar) as output p."""
        if self.div is not None:
            val = self.b.fdiv(val, cg.const(cg.F32, float(self.div.flat[0])))
        self.b.store(val, cg.gep(self.b, self.k.out(), p, cg.F32), align=4)


def pool_shape(win) -> Shape:
    """The Shape of a 1-D or 2-D pool's window (one channel: planes are the outer loop)."""
    if len(win.in_size) == 1:
        return Shape(1, 1, 1, 1, 1, win.in_size[0], 1, win.out_size[0], 1, win.kernel[0], 1,
                     win.strides[0], 1, win.dilations[0], 0, win.pads_begin[0], 1)
    return Shape(1, 1, 1, 1, *win.in_size, *win.out_size, *win.kernel, *win.strides,
                 *win.dilations, win.pads_begin[0], win.pads_begin[1], 2)


def covers_plane(win) -> bool:
    """The window is the whole unpadded plane (one output a plane: whole_plane)."""
    s = pool_shape(win)
    return s.ho * s.wo == 1 and (s.kh, s.kw) == (s.hin, s.win) and s.pt == s.pl == 0 and \
        s.dh == s.dw == 1 and not any(win.pads_end)


def emit_pool(k, make_fold):
    """The window loops of a 1-D or 2-D pool over the fold make_fold(vec, shape) gives."""
    node = k.node
    x = k.in_buf(0)
    win = node.opdef.window(node)
    s = pool_shape(win)
    b = k.b
    vec = Vec(k, Simd.of(k.caps))
    w = vec.w
    nv = max(1, min(4, math.ceil(s.wo / w)))
    runs = row_runs(s, w, nv)
    planes = int(np.prod(x.shape[:2]))
    pin, pout = s.hin * s.win, s.ho * s.wo
    fold = make_fold(vec, s)
    op = fold.op
    if covers_plane(win):
        whole_plane(k, planes, pin, fold)
        return

    def finish(p, oh, ow0, store, vals):
        pos = b.add(b.mul(oh, k.c(s.wo)), ow0)
        fold.store(pos, b.add(b.mul(p, k.c(pout)), pos), vals, store)

    def window_rows(p, oh, ow0, init, body):
        """body(row offset of the window row's input at ow0, carried values) over the valid
        window rows of output row oh; returns the carried results."""
        lo, hi = kh_range(k, s, oh)
        with cg.for_range_carry(b, hi, init, lo, intp=k.intp, name="kh") as lp:
            ih = b.sub(b.add(b.mul(oh, k.c(s.sh)), b.mul(lp.index, k.c(s.dh))), k.c(s.pt))
            row = b.add(b.add(b.mul(p, k.c(pin)), b.mul(ih, k.c(s.win))), b.mul(ow0, k.c(s.sw)))
            lp.carry(body(row, list(lp.values)))
        return list(lp.results)

    def tile_taps(p, oh, ow0, sig):
        """Scalar targets, and spans past the vector cap: every tap of the window one load."""
        masks, store = sig

        def body(row, acc):
            for c in range(s.kw):
                for j in range(nv):
                    m = masks[c][j]
                    if any(m):
                        at = b.add(row, k.c(j * w * s.sw + c * s.dw - s.pl))
                        v = fold.load_strided(at, s.sw, m)
                        acc[j] = op(v, acc[j])
            return acc
        finish(p, oh, ow0, store, window_rows(p, oh, ow0, [fold.identity] * nv, body))

    # Vector targets, vertical first: per window row the span of input columns that a vector's
    # kernel columns read is loaded as whole vectors ("pieces", shared by neighbouring vectors of
    # a tile: with stride 2, vector j's last piece is vector j+1's first) and folded into
    # running maxima (sums); the kernel columns are picked out of the pieces by two-vector
    # shuffles once, after the last row. Loads per row: the span's vectors instead of one
    # strided (wide) load per kernel column (MNIST's 3x3 stride-3 pool on 14x14: 3x faster).
    # Pieces of the vector width, not one odd-sized wide vector: LLVM scalarized the shuffles
    # of a 17-float span into lane inserts (ResNeXt's 3x3 stride-2 pool, 64x80x80 on AVX2:
    # 206 us against onnxruntime's 58).
    span = (w - 1) * s.sw + (s.kw - 1) * s.dw + 1

    def tile_span(p, oh, ow0, sig):
        masks, store = sig
        # lane e of vector j's span is input column ow0*sw + j*w*sw - pl + e, lane e % w of
        # piece (j*w*sw + e) // w
        need = {}
        for j in range(nv):
            for e in range(span):
                if any(0 <= e - c * s.dw < w * s.sw and masks[c][j][e - c * s.dw] for c in range(s.kw)):
                    g, lane = divmod(j * w * s.sw + e, w)
                    need.setdefault(g, [False] * w)[lane] = True
        pieces = sorted(need)

        def body(row, acc):
            return [op(fold.load(b.add(row, k.c(g * w - s.pl)), tuple(need[g])), a)
                    for a, g in zip(acc, pieces)]
        res = dict(zip(pieces, window_rows(p, oh, ow0, [fold.identity] * len(pieces), body)))
        vals = []
        for j in range(nv):
            out = None
            for c in range(s.kw):
                if any(masks[c][j]):
                    v = pick(b, w, res, [j * w * s.sw + c * s.dw + l * s.sw for l in range(w)],
                             fold.identity)
                    out = v if out is None else op(v, out)
            vals.append(fold.identity if out is None else out)
        finish(p, oh, ow0, store, vals)

    tile = tile_taps if w == 1 or span > vec.cap else tile_span  # past the cap: lane loads

    def row(p, oh):
        for t0, t1, sig in runs:
            if t1 - t0 == 1:
                tile(p, oh, k.c(t0 * nv * w), sig)
            else:
                with k.for_range(t1, start=t0, name="t") as t:
                    tile(p, oh, b.mul(t, k.c(nv * w)), sig)

    with k.for_range(planes, name="p") as p:
        if s.ho == 1:
            row(p, k.c(0))
        else:
            with k.for_range(s.ho, name="oh") as oh:
                row(p, oh)


def pick(b, w: int, pieces: dict, elements: list, fill):
    """The vector of `elements` (indices into the concatenated pieces {g: vector of w lanes
    g*w...}; a missing piece reads as `fill`, a vector constant) by a chain of two-vector
    shuffles, one per piece after the first."""
    by = {}
    for lane, e in enumerate(elements):
        by.setdefault(e // w, []).append((lane, e % w))
    src = lambda g: pieces.get(g, fill)  # noqa: E731
    ity = ir.VectorType(cg.I32, w)
    out, idx = None, [0] * w
    for g in sorted(by):
        if out is None:
            for lane, at in by[g]:
                idx[lane] = at
            out = b.shuffle_vector(src(g), ir.Constant(fill.type, ir.Undefined), ir.Constant(ity, idx))
        else:
            idx = list(range(w))
            for lane, at in by[g]:
                idx[lane] = w + at
            out = b.shuffle_vector(out, src(g), ir.Constant(ity, idx))
    return out


def whole_plane(k, planes: int, pin: int, fold):
    """The fold of each contiguous plane of the input (global pools, windows as large as the
    input): per plane, up to four vector accumulators over its vectors (independent chains: a
    single running sum would wait on every add's latency), the last vector masked, then one
    horizontal reduction (fold.store_plane)."""
    b, w = k.b, fold.vec.w
    full, rem = divmod(pin, w)
    nacc = max(1, min(4, full))
    op = fold.op
    steps, extra = divmod(full, nacc)
    with k.for_range(planes, name="p") as p:
        base = b.mul(p, k.c(pin))
        init = [fold.identity] * nacc
        with cg.for_range_carry(b, steps, init, intp=k.intp, name="v", unroll=steps <= 4) as lp:
            at = b.add(base, b.mul(lp.index, k.c(nacc * w)))
            lp.carry([op(a, fold.load(b.add(at, k.c(i * w)), None)) for i, a in enumerate(lp.values)])
        acc = list(lp.results)
        for i in range(extra):
            acc[i] = op(acc[i], fold.load(b.add(base, k.c((steps * nacc + i) * w)), None))
        if rem:
            acc[0] = op(acc[0], fold.load(b.add(base, k.c(full * w)), tuple(l < rem for l in range(w))))
        while len(acc) > 1:
            acc = [op(acc[i], acc[i + 1]) if i + 1 < len(acc) else acc[i] for i in range(0, len(acc), 2)]
        fold.store_plane(p, fold.vec.reduce(acc[0], op))
