"""Strided 1x1 float Conv (the downsampling shortcut of ResNet-50, ResNeXt, RegNet) on
vector targets: the subsampled input gathered into a stack buffer, then a plain GEMM on it.

conv/pixel.py runs a strided 1x1 as row tiles whose every input vector is a wide load and a
shuffle, once per output-channel block: on AVX2 a 256 -> 512 channel layer at 56x56 -> 28x28
took 3.73 ms against onnxruntime's 2.77, and the same layer behind a strided Slice 2.22 ms
(benchmarks/op_probe.py-style probes, one thread, same run). Here the Slice is in the kernel:
a chunk of whole output rows is gathered once per input channel into a buffer [C][positions]
(one wide load and shuffle per input vector, no longer one per output-channel block), and
MR output channels x NV vectors of positions accumulate over C from it, the weights packed
[M/MR][C][MR] so each step reads MR consecutive floats."""
from __future__ import annotations

import math

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels import gaps
from glowpy.codegen.kernels.accumulators import Acc, const_input, pack_constant
from glowpy.codegen.kernels.tiles import PREFETCH, shape_of, step_cycles, window_shape
from glowpy.codegen.kernels.vector_epilogue import Finisher, LaneFinisher
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant

SCRATCH_MAX = 65536  # stack bytes of the gathered buffer
# planes narrower than a vector, flattened: at least this share of their vectors' lanes used
# (channel.py's rule for 7x7 1x1s): 7x7 fills 49 of 56 AVX2 lanes, 0.85 of onnxruntime's time
# against 1.08 channel-vectorized (1024 -> 2048, Zen 3); 5x5 fills 25 of 32, 1.04-1.47 against
# 0.98
NARROW_FILL = 0.8
SCRATCH = "_gathered"  # name suffix of its scratch output in the activation region
TILE = 3.5  # cycles per accumulator vector of a tile to add the bias and store
SCATTER = 2  # a tail result vector's store (lane by lane) against a tile vector's, roughly
FMA_LATENCY = 4  # cycles before an accumulator's next multiply-add can issue


def plan_tiles(m: int, c: int, npos: int, simd, held: int = 0):
    """(MR, NV) with the fewest estimated cycles over a chunk: per reduction step the cycles
    of tiles.step_cycles, the model conv/pixel.py's tiles are chosen by (fewer than 8
    accumulators leave the FMA pipes idle: 2x2 ran 1.5x slower than 6x1 on AVX2; exactly 8,
    4 x 2, ran 1.2x slower than 6 x 2, which a latency of 4 cycles a step called equal),
    padded blocks and the last partial tile (its own vector count) counted; MR*NV
    accumulators + NV vectors + a weight (+ `held` registers the multiply-add keeps) leave a
    register free."""
    w, regs = simd.width, simd.registers

    def tile(mr, nv):
        return c * step_cycles(mr, nv) + TILE * mr * nv

    best = None
    for nv in range(1, min(4, math.ceil(npos / w)) + 1):
        for mr in range(1, 9):
            if mr * nv + nv + 1 + held >= regs:  # (all 16 of AVX2's, 4x3: spills, 1.14x slower than 6x2)
                break
            full, rest = divmod(npos, nv * w)
            total = math.ceil(m / mr) * (full * tile(mr, nv) + (tile(mr, math.ceil(rest / w)) if rest else 0))
            if best is None or total < best[0]:
                best = (total, mr, nv)
    return best[1], best[2]


def tail_group(mr: int, c: int, rest: int, simd) -> int:
    """Blocks of MR output channels per tile of the last positions when fewer than a vector
    are left (7x7: 49 = 3 x 16 + 1), computed with lanes over output channels; 0 where the
    ordinary partial tile is cheaper. That tile holds MR accumulators of one vector whose
    lanes are mostly past the plane, and with fewer than eight accumulators it waits on the
    FMA latency: on a 7x7 plane, with 6 x 2 tiles, it took 4 of the 22 cycles a block spends
    per reduction step for 1 of the 49 positions. Lanes over channels, G blocks of weights
    (MR consecutive floats per step of the packed [M/MR][C][MR] layout, a masked load) times
    each position broadcast keep G x positions accumulators busy; the results are stored lane
    by lane (LaneFinisher). Zen 3, one 1x1 layer + bias + Relu on 7x7, 6 x 2 tiles, bundle
    alone: 1024 -> 1024 1.35 -> 1.19 ms, 960 -> 160 201 -> 177 us, 320 -> 1280 506 -> 458 us;
    14x14 (196 = 12 x 16 + 4), 512 -> 512: 1.14 -> 1.11 ms."""
    w, regs = simd.width, simd.registers
    if not rest or rest >= w:
        return 0
    nvec = math.ceil(mr / w)
    chains = rest * nvec
    g = max(1, min(math.ceil(2 * FMA_LATENCY / chains), (regs - rest - 2) // chains))
    if g * chains + rest + 1 >= regs:
        return 0
    old = c * max(mr / 2, (mr + 1) / 2, FMA_LATENCY) + TILE * mr
    new = c * max(chains / 2, (nvec + rest / g) / 2, FMA_LATENCY / g) + SCATTER * TILE * chains
    return g if new < old else 0


def _applies(s, simd, weights_const: bool) -> bool:
    if s is None or s.rank != 2 or s.kh * s.kw != 1 or s.g != 1 or s.sw == 1:
        return False
    if s.pt or s.pl or s.ho * s.sh > s.hin + s.sh - 1 or s.wo * s.sw > s.win + s.sw - 1:
        return False  # (a pad at the end: the kernel gathers only inside the input)
    return simd.width > 1 and weights_const


def reduction(s) -> int:
    """Floats of one output position's reduction: the gathered buffer's rows (input channels
    x kernel taps, the order of the ONNX weights' [M][C][KH][KW])."""
    return s.c * s.kh * s.kw


def chunk_rows(s, w: int, budget: int) -> int:
    """Output rows per chunk whose gathered buffer fits `budget` bytes (0: not even one row):
    the most rows whose positions fill whole vectors, else the most rows, the chunks of equal
    size. A chunk ending inside a vector ends in a masked tile: Zen 3, 512 -> 1024 at 28x28
    (14-wide rows) 1 / 2 / 4 / 7 rows per chunk 0.99 / 1.36 / 0.89 / 0.99 of onnxruntime's
    time; 256 -> 512 at 56x56 (28-wide) 1 / 2 / 4 rows 1.30 / 0.90 / 0.88; 512 -> 1024 at
    20x20 (10-wide) 1 / 2 / 4 / 7 / 10 rows 1.29 / 1.01 / 0.97 / 1.15 / 0.87."""
    fits = [r for r in range(1, s.ho + 1) if 4 * reduction(s) * pitch(s, w, r) <= budget]
    if s.wo < w:  # a narrow plane: whole, flattened, in one chunk that fills its vectors
        npos = s.ho * s.wo
        full = fits and fits[-1] == s.ho and npos / (math.ceil(npos / w) * w) >= NARROW_FILL
        return s.ho if full else 0
    if not fits:
        return 0
    whole = [r for r in fits if r * s.wo % w == 0]
    if whole:
        return whole[-1]
    return math.ceil(s.ho / math.ceil(s.ho / fits[-1]))


def pitch(s, w: int, rows: int) -> int:
    """Floats per channel of the gathered buffer: the chunk's positions rounded up to a vector,
    plus one unless a row's width is whole vectors (a gathered row's last vector may spill
    into the next row's start, rewritten next, the chunk's last into this slack)."""
    return math.ceil(rows * s.wo / w) * w + (w if s.wo % w else 0)


def cache_budget(caps, s, w: int) -> int:
    """Bytes of gathered input per chunk: a quarter of L2 (the buffer is re-read once per
    output-channel block and must stay there beside the weight stream and the outputs); every
    chunk re-reads all the weights, so fewer chunks pay where the weights are past L2. Zen 3
    (512 KiB L2), one thread, strided 1x1 layers at 64 KiB / 128 KiB / 256 KiB / 512 KiB
    chunks, bundle/onnxruntime: 512 -> 1024 at 28x28 1.32 / 0.90 / 0.93 / 0.96, 512 -> 1024
    at 20x20 1.23 / 0.94 / 0.87 / 0.87, 256 -> 512 at 56x56 0.85 / 0.88 / 0.85 / 1.32. No
    cache figures (microcontrollers): the stack budget alone. Rows narrower than a vector
    (chunk_rows: one chunk of the whole plane) may take half of L2, what tiles.py's loop-order
    rule still counts as in L2: ResNet-50's 1024 -> 2048 at 14x14 -> 7x7 0.85 of onnxruntime's
    time from 256 KiB, 1.00 from three chunks of 128 KiB, 1.08 channel-vectorized."""
    return max(SCRATCH_MAX, caps.l2_bytes // (2 if s.wo < w else 4))


def scratch_need(node, caps, applies=None) -> int | None:
    """Bytes of the gathered buffer for a Conv node this kernel (or, with `applies`, the one
    that test stands for: conv/im2col.py) serves when its chunks are sized by cache_budget and
    exceed the stack's SCRATCH_MAX (gaps.place puts it in the activation region), else None."""
    x, w = node.inputs[0], node.inputs[1]
    if any(np.dtype(v.dtype) != np.float32 for v in (x, w, node.outputs[0])):
        return None
    s = window_shape(node, x.shape, w.shape)  # as the kernels' plans see it (shape_of)
    if s is None:
        return None
    simd = Simd.of(caps)
    budget = cache_budget(caps, s, simd.width)
    if budget <= SCRATCH_MAX or not (applies or _applies)(s, simd, w.const is not None):
        return None
    rows = chunk_rows(s, simd.width, budget)
    if rows <= chunk_rows(s, simd.width, SCRATCH_MAX):
        return None
    return 4 * reduction(s) * pitch(s, simd.width, rows)


def scratch_of(k):
    """The instruction's scratch output for the gathered input (gaps.place), or None."""
    outs = k.instr.outputs
    return outs[1] if len(outs) == 2 and outs[1].name.endswith(SCRATCH) else None


def plan(k):
    """{"rows": output rows per chunk, "mr", "nv"} for a 2-D 1x1 Conv with a stride > 1 along
    the rows, no padding, one group, constant weights, on a vector target, one of whose
    gathered rows fits the buffer: the scratch in the activation region when the instruction
    has one, else SCRATCH_MAX of stack. Output rows narrower than a vector only as one chunk of
    the whole plane filling NARROW_FILL of its vectors (in smaller chunks the channel-vectorized
    kernel, which reads inputs as broadcast scalars, is no slower)."""
    s = shape_of(k)
    simd = Simd.of(k.caps)
    if not _applies(s, simd, s is not None and const_input(k, 1) is not None):
        return None
    scratch = scratch_of(k)
    budget = scratch.nbytes if scratch is not None else SCRATCH_MAX
    rows = chunk_rows(s, simd.width, budget)
    if rows < 1:
        return None
    mr, nv = plan_tiles(s.m, reduction(s), rows * s.wo, simd)
    return {"rows": rows, "mr": mr, "nv": nv, "scratch": scratch is not None}


class PointwiseTiles:
    """What the GEMM emitters over a buffer of inputs share (this one, pointwise_packed.py and
    im2col.py): the weights packed [M/MR][K][MR] (K = reduction(): C, or C x taps for
    im2col's columns), MR x NV register tiles over the buffer, their store."""

    def __init__(self, k, mr: int, nv: int):
        self.k, self.b, self.s = k, k.b, shape_of(k)
        self.vec = Vec(k, Simd.of(k.caps))
        self.mr, self.nv = mr, nv
        self.fin = Finisher(k, self.vec, k.out_buf().shape[2:])
        s = self.s
        self.kred = reduction(s)
        wts = const_input(k, 1).reshape(s.m, self.kred)
        # [M/MR][C][MR], the last block [C][M % MR]: the constant's own size, so the packed
        # bytes replace it (zero rows padding the block appended a second copy instead)
        packed = np.concatenate([wts[m0:m0 + mr].T.reshape(-1) for m0 in range(0, s.m, mr)])
        self.wp = pack_constant(k, 1, packed, f"[M/{mr}][K][{mr}], the last block [K][M % {mr}]")
        self.bias = k.inp(2)

    def stack_buffer(self, floats: int, name: str):
        return cg.stack_block(self.b, cg.F32, floats, name)

    def tile(self, n, o0, rows, tnv, xoff, q0, last):
        """Output channels o0 .. o0 + rows x tnv vectors of positions: xoff(c) is the offset in
        self.buf of reduction step c's first vector, q0 the flat output position of lane 0,
        `last` the positions of a partial tile (lanes past them are not stored), else None."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w
        acc = Acc(vec, rows, tnv)
        wblk = b.mul(o0, k.c(self.kred))
        plane = s.ho * s.wo

        def at(i, j):
            """(lead indices, flat position, output offset) of accumulator (i, j)."""
            oc, p = b.add(o0, k.c(i)), b.add(q0, k.c(j * w))
            return [n, oc], p, b.add(b.mul(b.add(b.mul(n, k.c(s.m)), oc), k.c(plane)), p)
        for i in range(rows):  # the tile's stores, a reduction ahead (pixel.prefetch_store)
            for j in range(tnv):
                self.fin.prefetch(*at(i, j))
        with acc.loop(k, self.kred, name="c") as c:
            x0 = xoff(c)
            xs = [vec.load(self.buf, b.add(x0, k.c(j * w))) for j in range(tnv)]
            wrow = b.add(wblk, b.mul(c, k.c(rows)))
            vec.prefetch(self.wp, b.add(wrow, k.c(PREFETCH)))
            acc.fma([vec.load_splat(self.wp, b.add(wrow, k.c(i))) for i in range(rows)], xs)
        for i in range(rows):
            oc = b.add(o0, k.c(i))
            bias = vec.splat(k.load(self.bias, oc, np.float32)) if self.bias is not None else None
            for j in range(tnv):
                v = acc.value(i, j)
                if bias is not None:
                    v = b.fadd(v, bias)
                mask = None if last is None else tuple(j * w + l < last for l in range(w))
                self.fin.finish(v, *at(i, j), mask)

    def tail(self, n, xoff, q0, rest: int):
        """Output positions q0 .. q0 + rest (q0: an IR value) of every output channel, lanes
        over the channels of tail_group's G blocks at a time; xoff(c, j) is the
        offset in self.buf of position j's input at reduction step c."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w, mr = vec.w, self.mr
        g = tail_group(mr, self.kred, rest, Simd.of(k.caps))
        nvec = math.ceil(mr / w)
        fin = LaneFinisher(k, vec, 1)
        width, rank = k.out_buf().shape[-1], len(k.out_buf().shape)

        def run(o0, rows_list):
            acc = Acc(vec, len(rows_list) * nvec, rest)
            with acc.loop(k, self.kred, name="c") as c:
                xs = [vec.load_splat(self.buf, xoff(c, j)) for j in range(rest)]
                ws = []
                for bi, rows in enumerate(rows_list):
                    base = b.add(b.mul(b.add(o0, k.c(bi * mr)), k.c(self.kred)), b.mul(c, k.c(rows)))
                    ws += [vec.load(self.wp, b.add(base, k.c(v * w)),
                                    tuple(v * w + l < rows for l in range(w)))
                           for v in range(nvec)]
                acc.fma(ws, xs)
            for bi, rows in enumerate(rows_list):
                for v in range(nvec):
                    mask = tuple(v * w + l < rows for l in range(w))
                    oc = b.add(o0, k.c(bi * mr + v * w))
                    bias = None if self.bias is None else vec.load(self.bias, oc, mask)
                    for j in range(rest):
                        val = acc.value(bi * nvec + v, j)
                        if bias is not None:
                            val = b.fadd(val, bias)
                        q = b.add(q0, k.c(j))
                        pos = [b.udiv(q, k.c(width)), b.urem(q, k.c(width))] if rank == 4 else [q]
                        fin.finish_at(val, [n, oc] + pos, mask)

        blocks, mrest = divmod(s.m, mr)
        groups, left = divmod(blocks, g)
        if groups == 1:
            run(k.c(0), [mr] * g)
        elif groups > 1:
            with k.for_range(groups, name="tg") as gi:
                run(b.mul(gi, k.c(g * mr)), [mr] * g)
        tail_rows = [mr] * left + ([mrest] if mrest else [])
        if tail_rows:
            run(k.c(groups * g * mr), tail_rows)


class PointwiseStridedEmitter(PointwiseTiles):
    def __init__(self, k, p):
        super().__init__(k, p["mr"], p["nv"])
        self.rows = p["rows"]
        self.pitch = pitch(self.s, self.vec.w, self.rows)
        self.buf = k.out(1) if p.get("scratch") else self.stack_buffer(self.kred * self.pitch, "gathered")

    def emit(self):
        k, s = self.k, self.s
        full, rest = divmod(s.ho, self.rows)
        with k.for_range(s.n, name="n") as n:
            for r0, r1, nrows in ([(0, full, self.rows)] if full else []) + \
                    ([(full, full + 1, rest)] if rest else []):
                if r1 - r0 == 1:
                    self.chunk(n, k.c(r0 * self.rows), nrows)
                else:
                    with k.for_range(r1, start=r0, name="chunk") as t:
                        self.chunk(n, self.b.mul(t, k.c(self.rows)), nrows)

    def chunk(self, n, oh0, nrows):
        self.gather(n, oh0, nrows)
        k, b, s, w = self.k, self.b, self.s, self.vec.w
        mr, nv = self.mr, self.nv
        npos = nrows * s.wo
        nfull, mrest = divmod(s.m, mr)
        blocks = ([(0, nfull, mr)] if nfull else []) + ([(nfull, nfull + 1, mrest)] if mrest else [])
        pfull, prest = divmod(npos, nv * w)
        tail = prest and tail_group(mr, self.kred, prest, Simd.of(k.caps))
        tiles = ([(0, pfull, nv, None)] if pfull else []) + \
            ([(pfull, pfull + 1, math.ceil(prest / w), prest)] if prest and not tail else [])
        for blk0, blk1, rows in blocks:
            with k.for_range(blk1, start=blk0, name="mb") as mb:
                for t0, t1, tnv, last in tiles:
                    with k.for_range(t1, start=t0, name="pt") as pt:
                        p0 = b.mul(pt, k.c(nv * w))
                        self.tile(n, b.mul(mb, k.c(mr)), rows, tnv,
                                  lambda c, p0=p0: b.add(b.mul(c, k.c(self.pitch)), p0),
                                  b.add(b.mul(oh0, k.c(s.wo)), p0), last)
        if tail:
            q = pfull * nv * w
            self.tail(n, lambda c, j: b.add(b.mul(c, k.c(self.pitch)), k.c(q + j)),
                      b.add(b.mul(oh0, k.c(s.wo)), k.c(q)), prest)

    def gather(self, n, oh0, nrows):
        """buf[c][r * wo + q] = x[n, c, (oh0 + r) * sh, q * sw] for the chunk's rows."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w
        with k.for_range(s.c, name="c") as c:
            plane = b.mul(b.add(b.mul(n, k.c(s.c)), c), k.c(s.hin * s.win))
            dst0 = b.mul(c, k.c(self.pitch))
            for r in range(nrows):
                row = b.add(plane, b.mul(b.add(b.mul(oh0, k.c(s.sh)), k.c(r * s.sh)), k.c(s.win)))
                for j in range(math.ceil(s.wo / w)):
                    q0 = j * w * s.sw
                    mask = tuple(q0 + e < s.win for e in range(w * s.sw))
                    v = vec.load_strided(k.inp(0), b.add(row, k.c(q0)), s.sw, mask)
                    vec.store(v, self.buf, b.add(dst0, k.c(r * s.wo + j * w)))


@variant("Conv", "pointwise_strided", rank=35, plan=plan)
def emit(k, p):
    PointwiseStridedEmitter(k, p).emit()


def place(prog, caps, applies=None, grow: bool = False) -> None:
    """catalog.post_planning: the gathered buffers sized by cache_budget, in gaps (`applies`:
    of the layers that test names, scratch_need's). grow: where no gap has room and the stack
    holds no chunk at all (one output row's columns past SCRATCH_MAX), past the region's end
    (gaps.place): the layer takes the kernel instead of falling back to a direct tiling."""
    def wants(ins):
        if ins.op != "Conv" or len(ins.outputs) != 1:
            return None
        need = scratch_need(ins.node, caps, applies)
        return None if need is None else (need, SCRATCH, "float32", 64)

    def stack_holds_none(ins):
        x, w = ins.node.inputs[0], ins.node.inputs[1]
        s = window_shape(ins.node, x.shape, w.shape)
        return s is not None and chunk_rows(s, Simd.of(caps).width, SCRATCH_MAX) == 0
    gaps.place(prog, wants, grow=stack_holds_none if grow else None)
