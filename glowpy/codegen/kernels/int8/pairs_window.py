"""The integer GEMM of pairs.py for QConvs with a window: any kernel, stride, dilation and
padding, one or two spatial dims. A tile is a run of NR positions of one output row, or ROWS
whole rows (pairs_tiles.tile_shape); before its GEMM the tile's reduction (C x taps, in the weights'
order c * taps + t) is packed as int32 lanes of g neighbouring reduction steps (groups.py:
pairs or quads): per group of g input channels and tap a vector load of the input row (every
s-th byte at stride s), as the grouping stores it, with the lanes that fall in the padding the
grouping's pad. Narrow rows (pairs_tiles.tile_shape) go several to a tile, their positions flat
across the rows: a vector holding the end of one row and the start of the next is put together
from both rows' loads by shuffles. The packing is done once per tile for all output
channels."""
from __future__ import annotations

import functools
import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels import gaps
from glowpy.codegen.kernels.int8.pairs import (GROUP, SCRATCH, TILE_MAX, PairsEmitter,
                                               chosen_kind, plan)
from glowpy.codegen.kernels.int8.pairs_tiles import pointwise, reduction_steps, simd_of, tile_shape
from glowpy.codegen.kernels.int8.quant import I32
from glowpy.codegen.registry import variant

# inner tiles (_inside) from which a row's tiles loop over them instead of being unrolled: each
# tile's code is its packing (C / g groups of g taps' loads) and its GEMM, so an unrolled row was
# code proportional to the row's width (a 3x1 window over 45 channels of 8 x 3136, R(2+1)D's
# temporal Conv viewed as 2-D, or a 1-D Conv over 8,192 samples: tens of MB of LLVM IR, minutes
# in LLVM); images up to 112 wide keep at most one inner tile (NR = 48 on AVX2), unrolled as before
INNER_LOOP = 2


def _2d(t, fill):
    return tuple(t) if len(t) == 2 else (fill,) + tuple(t)


class WindowPairs(PairsEmitter):
    def __init__(self, k, p):
        super().__init__(k, p)
        x, y = k.in_buf(0), k.out_buf()
        win = k.node.opdef.window(k.node)
        self.h, self.wd = _2d(x.shape[2:], 1)
        self.ho, self.wo = _2d(y.shape[2:], 1)
        self.kh, self.kw = _2d(k.in_buf(1).shape[2:], 1)
        self.sh, self.sw = _2d(win.strides, 1)
        self.dh, self.dw = _2d(win.dilations, 1)
        self.ph, self.pw = _2d(win.pads_begin, 0)
        self.rows = p["rows"]
        span = self.w * self.sw
        # strays of an edge vector read bytes of the region (Kernel.readable), not past it
        self.room = k.room_around(k.inp(0), math.ceil((span + self.pw + self.kw * self.dw) / 4))

    def emit(self):
        k, b, w = self.k, self.b, self.w
        rows = self.rows
        with k.for_range(self.n, name="n") as n:
            if rows > 1:  # ROWS whole rows a tile, their positions flat in the vectors
                def group(oh0, count):
                    ohs = [b.add(oh0, k.c(r)) for r in range(count)]
                    vectors = []
                    for p0 in range(0, count * self.wo, w):
                        lanes = min(w, count * self.wo - p0)
                        segs = [(ohs[p // self.wo], p % self.wo,
                                 min(self.wo - p % self.wo, p0 + lanes - p), p - p0)
                                for p in range(p0, p0 + lanes)
                                if p == p0 or p % self.wo == 0]
                        vectors.append((segs, b.add(b.mul(oh0, k.c(self.wo)), k.c(p0)), lanes))
                    self.run(n, vectors)
                full, rest = divmod(self.ho, rows)
                if full:
                    with k.for_range(full, name="rg") as rg:
                        group(b.mul(rg, k.c(rows)), rows)
                if rest:
                    group(k.c(full * rows), rest)
                return
            tiles = range(0, self.wo, self.nr)  # a row in tiles of NR positions
            inner = [t for t in tiles if self._inside(t)]
            if len(inner) < INNER_LOOP:
                inner = []
            with k.for_range(self.ho, name="oh") as oh:
                row = b.mul(oh, k.c(self.wo))

                def tile(ow0, lanes):
                    """The tile from output column ow0: an int, or an inner tile's at run time."""
                    fixed = isinstance(ow0, int)
                    self.run(n, [([(oh, col, min(w, lanes - j), 0)],
                                  b.add(row, k.c(col) if fixed else col), min(w, lanes - j))
                                 for j in range(0, lanes, w)
                                 for col in [ow0 + j if fixed else b.add(ow0, k.c(j))]])
                for ow0 in (t for t in tiles if not inner or t < inner[0]):
                    tile(ow0, min(self.nr, self.wo - ow0))
                if inner:
                    with k.for_range(len(inner), name="ot") as ot:
                        tile(b.add(b.mul(ot, k.c(self.nr)), k.c(inner[0])), self.nr)
                for ow0 in (t for t in tiles if inner and t > inner[-1]):
                    tile(ow0, min(self.nr, self.wo - ow0))

    def _inside(self, ow0) -> bool:
        """Whether the tile of NR positions from output column ow0 reads only bytes of its
        input rows at every tap column: whole vector loads (w x stride bytes) without
        padding lanes, the same code for each such tile."""
        last = (ow0 + self.nr - 1) * self.sw + (self.kw - 1) * self.dw - self.pw + self.sw - 1
        return ow0 + self.nr <= self.wo and ow0 * self.sw >= self.pw and last < self.wd

    def run(self, n, vectors):
        """Packs the tile whose vector j holds the positions of vectors[j][0]: segments (output
        row, first column, count, first lane), and runs every block of output channels over
        it, vector j stored at output position vectors[j][1] (vectors[j][2] lanes)."""
        k, b = self.k, self.b
        self.pack_spots(n, [segs for segs, _, _ in vectors])
        out = [(at, lanes) for _, at, lanes in vectors]
        self.blocks(lambda o0, rows: self.tile(n, k.c(0), o0, rows, out),
                    lambda o0, chans: self.lanes_block(n, k.c(0), o0, chans, out))

    def _row(self, n, c, oh, kh):
        """(offset of input row ih = oh * sh + kh * dh - ph of channel c, an i1 that it lies
        inside the input, or None where it always does)."""
        k, b = self.k, self.b
        lo = kh * self.dh - self.ph
        hi = (self.ho - 1) * self.sh + lo
        ih = b.add(b.mul(oh, k.c(self.sh)), k.c(lo)) if self.sh != 1 or lo else oh
        ok = None
        if lo < 0 or hi >= self.h:
            ok = b.and_(b.icmp_signed(">=", ih, k.c(0)), b.icmp_signed("<", ih, k.c(self.h)))
            ih = b.select(ok, ih, k.c(0))  # an address inside the input; the lanes are zeroed
        chan = b.add(b.mul(n, k.c(self.c)), c)
        return b.mul(b.add(b.mul(chan, k.c(self.h)), ih), k.c(self.wd)), ok

    def _vector(self, row, ok, kw, first, lanes):
        """The lanes of tap column kw for output columns first .. first + w as the grouping
        stores them (those from `lanes` on, and those in the padding, its pad)."""
        k, b, w = self.k, self.b, self.w
        zero = self.grp.pad(w)
        if isinstance(first, int):
            iws = [(first + e) * self.sw + kw * self.dw - self.pw for e in range(w)]
            valid = [e < lanes and 0 <= iw < self.wd for e, iw in enumerate(iws)]
            if not any(valid):
                return zero
            start = k.c(iws[0])
            whole = self.room or iws[-1] + self.sw - 1 < self.wd
        else:  # a column at run time: an inner tile's (_inside), whole and inside the row
            valid, whole = [True] * w, True
            start = b.add(b.mul(first, k.c(self.sw)), k.c(kw * self.dw - self.pw))
        et = cg.llvm_type(self.xdt)
        ptr = k.inp(0)
        if all(valid) or self.room:
            # w * s bytes where they stay inside the row (or the region): a power of two, one
            # load and one byte shuffle; the (w - 1) * s + 1 the lanes need were pieced together
            # from 8-, 4-, 2- and 1-byte loads (the 7x7 stride-2 stem over 3 channels: 1.38 ms,
            # 0.78 at stride 1)
            span = w * self.sw if whole else (w - 1) * self.sw + 1
            v = b.load(cg.gep(b, ptr, b.add(row, start), et),
                       typ=ir.VectorType(et, span), align=1)
            if self.sw > 1:
                v = b.shuffle_vector(v, ir.Constant(ir.VectorType(et, span), ir.Undefined),
                                     ir.Constant(ir.VectorType(I32, w),
                                                 [e * self.sw for e in range(w)]))
        else:  # an edge vector, read lane by lane
            v = ir.Constant(ir.VectorType(et, w), [0] * w)
            for e in (e for e in range(w) if valid[e]):
                v = b.insert_element(v, k.load(ptr, b.add(row, k.c(iws[e])), self.xdt),
                                     ir.Constant(I32, e))
        v = self.grp.lanes(b, v)
        if not all(valid):
            v = b.select(ir.Constant(ir.VectorType(cg.I1, w), valid), v, zero)
        return b.select(ok, v, zero) if ok is not None else v

    def _tap(self, n, c, kh, kw, spots, rows):
        """The vectors of channel c at tap (kh, kw) for the tile's spots (each a list of
        segments: `run`); a vector of several rows' segments is put together by shuffles.
        rows: the input rows' addresses of earlier taps, by (channel, kh, output row)."""
        b, w = self.b, self.w
        vecs = []
        for segs in spots:
            v = None
            for oh, first, count, lane in segs:
                key = (id(c), kh, id(oh))
                if key not in rows:
                    rows[key] = self._row(n, c, oh, kh)
                part = self._vector(*rows[key], kw, first, count)
                if v is None and not lane:
                    v = part
                    continue
                v = self.grp.pad(w) if v is None else v
                v = b.shuffle_vector(part, v, ir.Constant(ir.VectorType(I32, w), [
                    e - lane if lane <= e < lane + count else w + e for e in range(w)]))
            vecs.append(v)
        return vecs

    def pack_spots(self, n, spots):
        """buf[r // g][0:NR] = the groups (r .. r + g - 1) of reduction steps r = c * taps + t
        (a C that is no multiple of g: pad steps at the end). Each group's vectors are loaded
        just before its stores: loaded all first (3 channels x 49 taps of the 7x7 stem), the
        loads shared one chain in LLVM's selection DAG, over whose users X86's combineLoad
        looks for each load, and the stem took 11 of ResNet-50 int8's 14.5 s in LLVM."""
        k, b, g = self.k, self.b, self.g
        taps = self.kh * self.kw

        def store(cs, first):
            """The groups of the steps of channels cs (pad steps to a multiple of g) from
            group index `first` on."""
            rows = {}
            steps = [(c, t) for c in cs for t in range(taps)]
            steps += [None] * (-len(steps) % g)
            for i in range(len(steps) // g):
                seq = [[self.grp.pad(self.w)] * len(spots) if st is None else
                       self._tap(n, st[0], *divmod(st[1], self.kw), spots, rows)
                       for st in steps[g * i:g * i + g]]
                d = b.mul(b.add(first, k.c(i)), k.c(self.nr))
                for j in range(len(spots)):
                    self.vec_store(self.grp.interleave(b, [seq[s][j] for s in range(g)]),
                                   b.add(d, k.c(j * self.w)))
        if self.c // g:
            with k.for_range(self.c // g, name="cg") as cq:
                c0 = b.mul(cq, k.c(g))
                store([b.add(c0, k.c(s)) for s in range(g)], b.mul(cq, k.c(taps)))
        if self.c % g:
            store([k.c(self.c - self.c % g + s) for s in range(self.c % g)],
                  k.c(self.c // g * taps))


def place(prog, caps) -> None:
    """catalog.post_planning: the packed tile in a gap of the activation region where the
    stack's SCRATCH_MAX holds only single-row tiles (3x3 over 512 channels at 7x7: 36 KiB a
    vector of quads), as pointwise_strided.place does for its gathered input; where it does not
    hold even one vector (pairs of that layer: 72 KiB; takes allows TILE_MAX), past the
    region's end if no gap has room (the region grows by the largest such tile)."""
    def shapes(ins):
        """(bytes of the best tile within TILE_MAX, whether the stack holds none), or None."""
        node = ins.node
        if ins.op != "QConv" or len(ins.outputs) != 1 or node is None:
            return None
        name = chosen_kind(caps, node)
        if name not in GROUP or pointwise(node):
            return None
        best = tile_shape(caps, node, GROUP[name], TILE_MAX)
        stack = tile_shape(caps, node, GROUP[name])
        if best is None or best == stack:
            return None
        return 4 * reduction_steps(node, GROUP[name]) * best[1] * simd_of(caps).width, \
            stack is None

    def wants(ins):
        need = shapes(ins)
        return None if need is None else (need[0], SCRATCH, "int32", 64)
    gaps.place(prog, wants, grow=lambda ins: shapes(ins)[1])


@variant("QConv", "quads", rank=35, plan=functools.partial(plan, name="quads"))
@variant("QConv", "quads16", rank=32, plan=functools.partial(plan, name="quads16"))
@variant("QConv", "pairs", rank=30, plan=plan)
def emit(k, p):
    e = (WindowPairs if p["window"] else PairsEmitter)(k, p)  # (its tables written)
    # the requantization's immediates (s, and q where the code holds it) with the plan
    if not k.taken_over((p, e.q_code, e.s)):
        e.emit()
