"""How x86's integer multiply-adds fill an int32 lane with several reduction steps, for the int8
GEMM kernels (pairs.py, pairs_window.py, pairs_matmul.py): a Grouping says how many steps
share a lane (g), how an activation is stored there, how the weights are packed and which
instruction multiplies and adds.

* pairs (TargetCaps.pair_madd, every x86 level): pmaddwd, two int16 (x - zp) times two int16
  weights, the sums added to the accumulator; exact (a pair's sum fits 17 bits).
* quads (TargetCaps.quad_madd: AVX512-VNNI or AVX-VNNI): vpdpbusd, four u8 activations times
  four s8 weights added into the accumulator: twice pmaddwd's multiply-adds per instruction
  (this Zen 4, 6 x 2 register tile of 8-lane vectors from L1: 234 G multiply-adds/s against
  117 and the float FMA's 58). Also exact: a product fits 16 bits and the sums are int32 ones
  that wrap as the sums of the references do. The activations are stored as u = x (uint8) or
  x + 128 (int8: the sign bit flipped), whose zero point is zp_u = zp (+ 128); then
  sum (x - zp) w = sum u w - zp_u sum w, the second term a constant of each output channel
  folded into the bias (bias). Padding is stored as zp_u, so it adds nothing, as the
  references' zero does. The weights must be int8 values (a uint8 weight past 127 is not).
* quads16 (AVX2 or AVX512BW without VNNI: TargetCaps.pair_madd >= 8): the quads' layout,
  multiplied by pmaddubsw (u8 x s8 byte pairs added into int16) and pmaddwd by ones (the int16
  pairs into int32): 32 multiply-adds per two multiplies and an add, where pmaddwd pairs take
  two of each. This Zen 3, 256 steps from L1 (hand-written loops): 82 G multiply-adds/s with a
  5 x 2 tile against 55 for pairs' 6 x 2 (pmaddwd and paddd contend for its pipes: 1.5 pairs a
  cycle); onnxruntime's AVX2 kernels use the same instructions. pmaddubsw saturates its int16
  sum: a pair of weights (w0, w1) is exact for every u8 activation when its positive parts add
  up to at most 128 and its negative parts too (255 x 128 = 32640). The 0.7-7% of pairs that do
  not (per-channel weights: a 127 in every channel) keep w0 and the part of w1 that fits; the
  rest of w1 (|c| <= 126, alone in its pair) is a sparse correction added to the channel's
  accumulators after the dense reduction (corrections; pairs.PairsEmitter), 2-5% of a 3x3
  layer's quads per channel, 7-14% of a small 1x1's; a 1x1 pairs its input channels in the
  order pair_order.py gives, which halves that (order, ordered). With the output columns on
  the lanes (QMatMul, pairs_matmul.py) a correction step is one vector of columns times one
  quad of a row (lane_corrections): onnxruntime's per-tensor transformer weights need one at
  1-5% of those blocks."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.vectors import declare

I8, I16, I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)


def byte(v: int) -> int:
    """An 8-bit value (signed or unsigned) as the signed constant LLVM's i8 holds."""
    return v - 256 if v > 127 else v

# pmaddwd by vector width (int32 lanes): LLVM's generic form of it (sext, mul, the even and
# odd lanes added) is rewritten by the IR optimizer before the x86 backend can match it, and
# became vpmulld and shuffles (2.0x slower than the float kernel on a 64 -> 64 1x1 layer)
PMADD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd",
         16: "llvm.x86.avx512.pmaddw.d.512"}
DPBUSD = {4: "llvm.x86.avx512.vpdpbusd.128", 8: "llvm.x86.avx512.vpdpbusd.256",
          16: "llvm.x86.avx512.vpdpbusd.512"}
PMADDUBSW = {8: "llvm.x86.avx2.pmadd.ub.sw", 16: "llvm.x86.avx512.pmaddubs.w.512"}


class Pairs:
    name, g, elem = "pairs", 2, I16

    def __init__(self, caps, xdt, zp: int):
        self.caps, self.signed, self.zp = caps, cg.is_signed(xdt), zp

    def steps(self, k: int) -> int:
        """int32 lanes a reduction of k steps takes."""
        return -(-k // self.g)

    def lanes(self, b, v):
        """Loaded activations (an 8-bit vector) as this grouping stores them."""
        vt = ir.VectorType(self.elem, v.type.count)
        v = b.sext(v, vt) if self.signed else b.zext(v, vt)
        return b.sub(v, cg.const(vt, self.zp)) if self.zp else v

    def pad(self, w: int):
        """w lanes of an activation that adds nothing (padding, the steps past the end)."""
        return cg.const(ir.VectorType(self.elem, w), 0)

    def word(self, b, values):
        """One int32 lane from g loaded 8-bit scalars (None: a step past the end)."""
        et = next(v.type for v in values if v is not None)
        # x = zp: (x - zp) and u - zp_u are 0
        v = ir.Constant(ir.VectorType(et, self.g), [byte(self.zp)] * self.g)
        for s, x in enumerate(values):
            if x is not None:
                v = b.insert_element(v, x, ir.Constant(I32, s))
        return b.bitcast(self.lanes(b, v), I32)

    def interleave(self, b, vecs):
        """g vectors of w activations (steps r .. r + g - 1) as w int32 lanes of g steps."""
        w = vecs[0].type.count
        while len(vecs) > 1:  # neighbours joined: (0 1)(2 3) then ((0 1)(2 3))
            vecs = [b.shuffle_vector(vecs[i], vecs[i + 1],
                                     ir.Constant(ir.VectorType(I32, 2 * vecs[i].type.count),
                                                 list(range(2 * vecs[i].type.count))))
                    for i in range(0, len(vecs), 2)]
        order = [s * w + e for e in range(w) for s in range(self.g)]
        v = b.shuffle_vector(vecs[0], ir.Constant(vecs[0].type, ir.Undefined),
                             ir.Constant(ir.VectorType(I32, self.g * w), order))
        return b.bitcast(v, ir.VectorType(I32, w))

    def packed(self, w: np.ndarray, mr: int) -> np.ndarray:
        """[M, K] weights as int32 groups of g steps (a step's bits from the low end; K padded
        with zero steps) laid out [M/MR][K/g][MR], the last block [K/g][M % MR]."""
        m, g, bits = w.shape[0], self.g, 32 // self.g
        w = w.reshape(m, -1).astype(np.int64)
        w = np.concatenate([w, np.zeros((m, -w.shape[1] % g), np.int64)], axis=1)
        words = sum((w[:, s::g] & ((1 << bits) - 1)) << (bits * s) for s in range(g))
        words = words.astype(np.uint32).view(np.int32)
        return np.concatenate([words[m0:m0 + mr].T.reshape(-1) for m0 in range(0, m, mr)])

    def bias(self, w: np.ndarray, bias: np.ndarray) -> np.ndarray | None:
        """The bias the sums of u w need (None: the model's own)."""
        return None

    @staticmethod
    def order(node) -> np.ndarray | None:
        """The input channels in the order the kernel packs them; None: the model's."""
        return None

    @classmethod
    def ordered(cls, node, w: np.ndarray) -> np.ndarray:
        """w (the node's weights, [M, C, ...]) as [M, K], its steps in the packed order."""
        return w.reshape(w.shape[0], -1)

    def madd(self, b, acc, act, wt):
        """acc + the products of g steps of activations `act` and weights `wt`, lane by lane
        (int32 vectors)."""
        w = acc.type.count
        ht = ir.VectorType(I16, 2 * w)
        fn = declare(b.module, PMADD[w], ir.FunctionType(acc.type, [ht, ht]))
        return b.add(acc, b.call(fn, [b.bitcast(wt, ht), b.bitcast(act, ht)]))


class Quads(Pairs):
    name, g, elem = "quads", 4, I8

    def __init__(self, caps, xdt, zp: int):
        super().__init__(caps, xdt, zp)
        self.zp_u = zp + 128 if self.signed else zp

    def lanes(self, b, v):
        return b.xor(v, cg.const(v.type, -128)) if self.signed else v

    def pad(self, w: int):
        return cg.const(ir.VectorType(I8, w), byte(self.zp_u))

    def bias(self, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
        sums = w.reshape(w.shape[0], -1).astype(np.int64).sum(axis=1)
        full = bias.astype(np.int64).reshape(-1) - self.zp_u * sums
        # int32 sums wrap: what they come to after the bias is the references' int32 sum
        return (full & 0xFFFFFFFF).astype(np.uint32).view(np.int32)

    def madd(self, b, acc, act, wt):
        w = acc.type.count
        if self.caps.quad_madd:
            fn = declare(b.module, DPBUSD[w], ir.FunctionType(acc.type, [acc.type] * 3))
            return b.call(fn, [acc, act, wt])
        # the same sums on a target without VNNI (the variant forced: tests on any host)
        bt, wide = ir.VectorType(I8, 4 * w), ir.VectorType(I32, 4 * w)
        prod = b.mul(b.zext(b.bitcast(act, bt), wide), b.sext(b.bitcast(wt, bt), wide))
        for s in range(4):
            acc = b.add(acc, b.shuffle_vector(prod, ir.Constant(wide, ir.Undefined),
                                              ir.Constant(ir.VectorType(I32, w),
                                                          [4 * e + s for e in range(w)])))
        return acc


# quads16 where at most this share of the quads needs a correction (groups.Quads16), unless
# forced: a correction costs about 2.4 dense quad steps of its channel (it shares no load with
# the tile's other channels), and the dense steps 0.69 of pairs' time. This Zen 3, a 3x3 over
# 128 channels on 28x28 against pairs: 0.73 of the time at 2.8% (trained-like weights: a 127
# per channel), 1.29 at 44% (uniform random weights); 1x1 64 -> 256 on 56x56 at 12.7%: 0.91.
# And where a channel's reduction has at least Q16_MIN quads: on short ones the tile's fixed
# costs (packing four byte vectors a lane, a correction loop per channel) can outweigh the
# dense steps' gain. Both forced, rounds interleaved: keyword spotting int8's 1x1s over 64
# channels (16 quads, 12-16% corrected, 125 positions) 1.39-1.42 of pairs' time; ResNet-50
# int8's 1x1s over 64 (16 quads, 12-15%, 56x56) 0.92-0.96, its 3x3s and deeper 1x1s 0.78-0.93
# (the rule leaves the first on pairs, a few % of ResNet-50's time, for the second's safety)
FIX_MAX, Q16_MIN = 0.15, 32
# quads16 for a QMatMul (its output columns on the lanes, pairs_matmul.py) where at most this
# share of its (vector of columns, quad) blocks takes a correction step (Quads16.lane_share):
# there each step is a whole vector's multiply-add, after the dense loop, and the rows are
# read in place (no packing: short reductions pay too). MatMulInteger 128 x 256 by 768 alone,
# AVX2 code, Zen 4, against pairs: 0.72 of the time at a 2% share, 0.86 at 18%, 1.04 at 40%,
# 1.49 with uniform weights; 3136 x 16 by 64 at 2%: 0.68
LANE_FIX_MAX = 0.3


class Quads16(Quads):
    name = "quads16"

    @classmethod
    def pays(cls, node, lanes: int = 0) -> bool:
        """Is a QConv or QMatMul (constant int8 weights) faster as quads16 than as pairs? A
        QConv by FIX_MAX and Q16_MIN over the share of corrected quads in the order the kernel
        pairs the input channels (ordered); with `lanes` (a QMatMul's output columns on the
        lanes) by LANE_FIX_MAX over the share of its correction steps (lane_share). Computed
        once per node."""
        share = cls.fix_share(node, lanes)
        if lanes:
            return share <= LANE_FIX_MAX
        return -(-node.inputs[1].const[0].size // 4) >= Q16_MIN and share <= FIX_MAX

    @classmethod
    def fix_share(cls, node, lanes: int = 0) -> float:
        """The share of a QConv's quads in its packed order that need a correction (share), or
        with `lanes` a QMatMul's share of correction steps (lane_share). Computed once per
        node."""
        if "_fix_share" not in node.attrs:
            w = node.inputs[1].const
            w = cls.ordered(node, w)
            node.attrs["_fix_share"] = cls.lane_share(w, lanes) if lanes else cls.share(w)
        return node.attrs["_fix_share"]

    @staticmethod
    def order(node) -> np.ndarray | None:
        """The input channels of a pointwise QConv, or the K of a QMatMul where the copy of
        its rows pays (copy_pays), in the order its kernel packs them (the pairs pmaddubsw
        adds, pair_order.py), or None: the model's order. Decided once per node."""
        from glowpy.codegen.kernels.int8 import pair_order
        order = pair_order.order_of(node)
        if order is None or node.op != "QMatMul":
            return order
        if "_copy_pays" not in node.attrs:
            node.attrs["_copy_pays"] = copy_pays(node.inputs[1].const, order)
        return order if node.attrs["_copy_pays"] else None

    @classmethod
    def ordered(cls, node, w: np.ndarray) -> np.ndarray:
        """w (the node's weights, [M, C, ...]) as [M, K] with the input channels in `order`."""
        w = w.reshape(w.shape[0], -1)
        p = cls.order(node)
        return w if p is None else w[:, p]

    @staticmethod
    def split(w: np.ndarray):
        """[M, K] int8 weights (K padded to whole quads with zeros) as (dense, correction):
        dense pairs that pmaddubsw adds exactly (pairs' positive parts <= 128, negative parts
        <= 128), the correction the rest of a pair's second weight (dense + correction = w)."""
        m = w.shape[0]
        w = w.reshape(m, -1).astype(np.int64)
        w = np.concatenate([w, np.zeros((m, -w.shape[1] % 4), np.int64)], axis=1)
        a, b = w[:, 0::2], w[:, 1::2]
        over = (np.maximum(a, 0) + np.maximum(b, 0) > 128) | \
            (np.maximum(-a, 0) + np.maximum(-b, 0) > 128)  # same signs, |a| + |b| > 128
        fit = np.where(over, np.sign(b) * (128 - np.abs(a)), b)
        dense = w.copy()
        dense[:, 1::2] = fit
        return dense, w - dense

    def packed(self, w: np.ndarray, mr: int) -> np.ndarray:
        return super().packed(self.split(w)[0], mr)

    @classmethod
    def share(cls, w: np.ndarray) -> float:
        """The share of the channels' quads that need a correction."""
        corr = cls.split(w)[1]
        return float(np.count_nonzero(corr.reshape(corr.shape[0], -1, 4).any(axis=2))) / \
            max(1, corr.size // 4)

    @classmethod
    def corrections(cls, w: np.ndarray):
        """(offsets [M + 1], entries [2 n]): channel o's corrections are the entries
        offsets[o] .. offsets[o + 1] - 1, each (quad index, int32 word of its four correction
        bytes), or None where no pair needs one."""
        corr = cls.split(w)[1]
        m = corr.shape[0]
        words = sum((corr[:, s::4] & 0xFF) << (8 * s) for s in range(4))
        o, q = np.nonzero(words)
        if not len(o):
            return None
        offsets = np.searchsorted(o, np.arange(m + 1)).astype(np.int32)
        entries = np.stack([q, words[o, q]], axis=1).astype(np.uint32).view(np.int32)
        return offsets, entries.reshape(-1)

    @classmethod
    def lane_steps(cls, w: np.ndarray, lanes: int) -> np.ndarray:
        """[ceil(M / lanes), K/4] bool: the (vector of `lanes` output columns, quad) blocks of
        [M, K] weights where some column needs a correction. With the columns on the lanes
        (pairs_matmul.py) a correction is a multiply-add of a whole vector (the block's
        corrections, zeros in the other lanes) by the quad's activations."""
        corr = cls.split(w)[1]
        bad = corr.reshape(corr.shape[0], -1, 4).any(axis=2)
        bad = np.concatenate([bad, np.zeros((-bad.shape[0] % lanes, bad.shape[1]), bool)])
        return bad.reshape(-1, lanes, bad.shape[1]).any(axis=1)

    @classmethod
    def lane_share(cls, w: np.ndarray, lanes: int) -> float:
        """The share of lane_steps' blocks that take a correction step. The quantizer's
        transformer weights (onnxruntime's quantize_static, per tensor, on 8 lanes): 1-5%,
        where 0.2-0.7% of each column's quads are corrected."""
        steps = cls.lane_steps(w, lanes)
        return float(steps.mean()) if steps.size else 0.0

    @classmethod
    def lane_corrections(cls, w: np.ndarray, lanes: int):
        """(offsets [V + 1], entries) for [M, K] weights with the columns on the lanes,
        V = ceil(M / lanes): vector v's correction steps are the entries offsets[v] ..
        offsets[v + 1] - 1, each 1 + lanes int32 (its quad index, then each lane's word of
        four correction bytes, 0 in the lanes without one), or None where no pair needs one."""
        corr = cls.split(w)[1]
        words = sum((corr[:, s::4] & 0xFF) << (8 * s) for s in range(4))
        words = np.concatenate([words, np.zeros((-words.shape[0] % lanes, words.shape[1]),
                                                np.int64)]).reshape(-1, lanes, words.shape[1])
        v, q = np.nonzero(words.any(axis=1))
        if not len(v):
            return None
        offsets = np.searchsorted(v, np.arange(words.shape[0] + 1)).astype(np.int32)
        entries = np.concatenate([q[:, None], words[v, :, q]], axis=1)
        return offsets, entries.astype(np.uint32).view(np.int32).reshape(-1)

    def tables(self, k):
        """(offsets, entries) of the instruction's corrections as tables, or None."""
        fixes = self.corrections(self.ordered(k.node, k.const(1)))
        return fixes and (k.add_table(fixes[0], "quads16 correction offsets"),
                          k.add_table(fixes[1], "quads16 corrections (quad, word)"))

    def correct(self, k, fixes, acc, o0, rows: int, load):
        """Channels o0 .. o0 + rows: their corrections added to their accumulators (an Acc
        of rows x NV int32 vectors), load(q, j) the activations' vector j of quad q (the
        dense loop's)."""
        b = k.b
        for i in range(rows):
            def step(q, at, i=i):
                word = acc.vec.isplat(k.load(fixes[1], at, np.int32))
                for j in range(acc.nv):
                    acc.vals[i][j] = self.madd(b, acc.vals[i][j], load(q, j), word)
            fix_steps(k, fixes, b.add(o0, k.c(i)), 2, acc, step)

    def madd(self, b, acc, act, wt):
        w = acc.type.count
        bt, ht = ir.VectorType(I8, 4 * w), ir.VectorType(I16, 2 * w)
        ub = declare(b.module, PMADDUBSW[w], ir.FunctionType(ht, [bt, bt]))
        wd = declare(b.module, PMADD[w], ir.FunctionType(acc.type, [ht, ht]))
        pairs = b.call(ub, [b.bitcast(act, bt), b.bitcast(wt, bt)])  # (unsigned, signed)
        return b.add(acc, b.call(wd, [pairs, cg.const(ht, 1)]))


# A QMatMul reads its rows in the order from a copy (pairs_matmul._reorder_rows: bytes moved
# through the order's table, 16 a step by vpinsrb as LLVM vectorizes it; 0.7 cycles a byte,
# 1.5% of the cycles of 99 x 1024 by 1024 x 1024 as AVX2 code on a Zen 5, perf); a
# correction step costs a row about one cycle (its pmaddubsw + pmaddwd of the rows' quad by a
# vector of columns). LANES: AVX2's int32 lanes, quads16's main target (AVX-512BW without
# VNNI counts half the vectors)
COPY, LANES = 0.7, 8


def copy_pays(w: np.ndarray, order: np.ndarray) -> bool:
    """Do the correction steps a row saves in `order` ((vector, quad) blocks over [N, K]
    weights w) outweigh the copy of its K bytes? onnxruntime's per-channel quantizer, 8 lanes:
    N = 1024 by K = 1024 24% -> 14% of the blocks, 3.3 steps a row saved a byte moved; a
    transformer's 256 x 256 projections 42% -> 21%, 1.7; the Conformer's subsampling Linear
    (K = 4864, N = 256) 10.7% -> 0, 0.85; 40 columns over K = 128 where the order leaves none
    of 34%, 0.43: that one keeps the model's order."""
    saved = Quads16.lane_share(w, LANES) - Quads16.lane_share(w[:, order], LANES)
    return saved * (w.shape[1] // 4) * -(-w.shape[0] // LANES) > COPY * w.shape[1]


# registers a grouping's multiply-add holds besides a register tile: quads16 keeps pmaddwd's
# vector of ones and pmaddubsw's product (pairs_matmul.py, pairs_lanes.py)
HELD = {"quads16": 2}


def fix_steps(k, fixes, slot, size: int, acc, step):
    """step(q, at) for each of slot's corrections, in a loop carrying acc: fixes = (offsets,
    entries) tables, slot's entries offsets[slot] .. offsets[slot + 1] - 1 of `size` int32
    each, the first its quad index q, `at` the offset of the rest (Quads16.corrections per
    channel, lane_corrections per vector of columns)."""
    b = k.b
    offsets, entries = fixes

    def index(v):
        return b.sext(v, k.intp) if k.intp.width > 32 else v
    lo, hi = (index(k.load(offsets, b.add(slot, k.c(d)), np.int32)) for d in (0, 1))
    with acc.loop(k, hi, lo, name="fix") as e:
        at = b.mul(e, k.c(size))
        step(index(k.load(entries, at, np.int32)), b.add(at, k.c(1)))


def fits_quads(w: np.ndarray) -> bool:
    """Weights whose values are int8 ones (vpdpbusd's signed operand)."""
    return w.size == 0 or (int(w.min()) >= -128 and int(w.max()) <= 127)


def grouping(name: str, caps, xdt, zp: int) -> Pairs:
    return {"quads": Quads, "quads16": Quads16}.get(name, Pairs)(caps, xdt, zp)

