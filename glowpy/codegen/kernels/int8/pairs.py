"""Stride-1 1x1 QConv on x86 vectors as an int16 GEMM: pairs of input channels multiplied and
added in one instruction (pmaddwd), the requantization in the tile's epilogue.

pmaddwd multiplies 2w int16 lanes pairwise and adds neighbouring products into w int32 lanes:
2w multiply-adds per instruction, exact (|(x - zp) * w| <= 255 * 128: a pair's sum fits 17
bits), where a float FMA does w. Measured on this Zen 4 with a 6 x 2 register tile from L1
(benchmarks/pair_madd.py): AVX2 code 95-117 G multiply-adds/s against the FMA's 58.6, so the
float path (passes/quant/float_exact.py) runs these layers at about half the rate this
instruction allows. Layout: a panel of positions is packed once into a stack buffer
[tile][C/2][NR] of int32 pairs (x[2c][p] - zp, x[2c+1][p] - zp), reading the int8 input
straight (no float copy of it); the weights are packed [M/MR][C/2][MR] as int32 pairs
(conv/pointwise_packed.py's layout with pairs for floats); MR output channels x NV vectors
accumulate over C/2 in int32; each accumulator gets the bias, the QConv's requantization
(quant.requantize on vectors, as QFinish) and its clamp, and is stored as int8: no float
output to write and read back."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import Acc, pack_constant
from glowpy.codegen.kernels.conv.pointwise_packed import panel_tiles
from glowpy.codegen.kernels.conv.pointwise_strided import SCRATCH_MAX, plan_tiles
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Simd, Vec, declare
from glowpy.codegen import registry
from glowpy.ir import qmath

I16 = ir.IntType(16)


def _pointwise(node) -> bool:
    """An unpadded stride-1 1x1 (the flat panels: positions across rows)."""
    win = node.opdef.window(node)
    return all(d == 1 for d in node.inputs[1].shape[2:]) and all(v == 1 for v in win.strides) \
        and not any(win.pads_begin) and not any(win.pads_end)


def tile_shape(caps, node):
    """(MR, NV) of the register tile, or None where one tile's packed pairs (C x taps / 2 x NR
    int32) outgrow SCRATCH_MAX even with one vector of positions."""
    simd = simd_of(caps)
    x, y = node.inputs[0], node.outputs[0]
    k2 = (x.shape[1] * math.prod(node.inputs[1].shape[2:]) + 1) // 2
    npos = math.prod(y.shape[2:]) if _pointwise(node) else y.shape[-1]
    mr, nv = plan_tiles(y.shape[1], k2, npos, simd)
    while nv > 1 and 4 * k2 * nv * simd.width > SCRATCH_MAX:
        nv -= 1
    return None if 4 * k2 * nv * simd.width > SCRATCH_MAX else (mr, nv)


def takes(caps, node) -> bool:
    """A QConv or QMatMul this kernel runs (pairs_matmul.py the QMatMul), on a target with the
    pair multiply-add, the variant not passed over (-kernel-variant=QConv:!pairs): constant
    weights, bias and requantization tables, 8-bit input, 8-bit output (QMatMul: or int32
    sums), sums within int32; a QConv with one group, one or two spatial dims, one tile's
    pairs within SCRATCH_MAX."""
    if not caps.pair_madd or node.op not in ("QConv", "QMatMul") or \
            not registry.allowed(node.op, "pairs"):
        return False
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    outs = (np.int8, np.uint8) + ((np.int32,) if node.op == "QMatMul" else ())
    tables = node.inputs[1:3] if y.dtype == np.int32 else node.inputs[1:5]
    if any(v is None or v.const is None for v in tables) or \
            np.dtype(x.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)) or \
            np.dtype(y.dtype) not in [np.dtype(d) for d in outs]:
        return False
    zp = node.attrs["x_zp" if node.op == "QConv" else "a_zp"]
    if not np.all(qmath.sum_bound(w.const, node.inputs[2].const, x.dtype, zp) < 1 << 31):
        return False
    if node.op == "QMatMul":  # at least a vector of output columns
        return len(w.shape) == 2 and y.shape[-1] >= simd_of(caps).width
    return node.attrs["group"] == 1 and len(x.shape) in (3, 4) and \
        tile_shape(caps, node) is not None


def mark(caps, node, graph) -> bool:
    """Where time comes first (-quantized-convolutions=auto; compiler._qconv_in_float): marks
    a QConv this kernel takes for it, which the float rewrite then leaves integer, and gives
    it its weights as int16 (the same values): the kernel's int32 pairs are then the same bytes
    and replace them in the constant region (pack_constant) instead of joining a second, int8
    copy. Elsewhere the integer kernels keep int8 weights (ResNet-50 int8: 25 MB of weights;
    with the int8 copy beside the pairs, 86 MB of constants, 60 without)."""
    if not takes(caps, node):
        return False
    node.attrs["_pairs"] = 1
    w = node.inputs[1]
    node.inputs[1] = graph.constant(w.const.astype(np.int16), w.name + "_int16")
    return True


def chosen(k) -> bool:
    """The instruction's node was marked for these kernels (mark) or the variant is forced,
    and they take it."""
    return bool(k.node.attrs.get("_pairs") or registry.is_forced(k.node.op, "pairs")) and \
        takes(k.caps, k.node)


def epilogue(k, zp: int) -> dict:
    """{"wide", "ties"} of the requantization (quant.requantize) after these sums: the
    product's high word where every shift allows it, the tie correction where a tie can occur
    (both False for int32 sums)."""
    if k.attrs["out_dtype"] == "int32":
        return {"wide": False, "ties": False}
    shifts = k.const(4)
    bound = qmath.sum_bound(k.const(1), k.const(2), k.in_buf(0).dtype, zp)
    return {"wide": k.attrs["mode"] == "even" and bool(np.all(shifts <= -2)),
            "ties": qmath.ties_possible(bound, k.const(3), shifts)}


def plan(k):
    """{"mr", "nv", "tiles", "window", "wide", "ties"}: the float packed GEMM's register tile
    (the same registers, one int32 vector per accumulator), panels of whole tiles within
    SCRATCH_MAX (a 1x1; one tile, a row's positions, otherwise)."""
    if not chosen(k):
        return None
    mr, nv = tile_shape(k.caps, k.node)
    x, y = k.in_buf(0), k.out_buf()
    k2 = (x.shape[1] * math.prod(k.in_buf(1).shape[2:]) + 1) // 2
    nr = nv * simd_of(k.caps).width
    tiles = panel_tiles(k2, nr, math.ceil(math.prod(y.shape[2:]) / nr), SCRATCH_MAX) \
        if _pointwise(k.node) else 1
    return {"mr": mr, "nv": nv, "tiles": tiles, "window": not _pointwise(k.node),
            **epilogue(k, k.attrs["x_zp"])}


def packed_weights(w: np.ndarray, mr: int) -> np.ndarray:
    """[M, C] int8 as int32 pairs (low half channel 2c, high half 2c + 1; an odd C padded with
    a zero channel) laid out [M/MR][C/2][MR], the last block [C/2][M % MR]."""
    m = w.shape[0]
    w = w.reshape(m, -1).astype(np.int64)
    if w.shape[1] % 2:
        w = np.concatenate([w, np.zeros((m, 1), np.int64)], axis=1)
    pairs = ((w[:, 0::2] & 0xFFFF) | (w[:, 1::2] << 16)).astype(np.uint32).view(np.int32)
    return np.concatenate([pairs[m0:m0 + mr].T.reshape(-1) for m0 in range(0, m, mr)])


# pmaddwd by vector width (int32 lanes): LLVM's generic form of it (sext, mul, the even and
# odd lanes added) is rewritten by the IR optimizer before the x86 backend can match it, and
# became vpmulld and shuffles (2.0x slower than the float kernel on a 64 -> 64 1x1 layer)
PMADD = {4: "llvm.x86.sse2.pmadd.wd", 8: "llvm.x86.avx2.pmadd.wd"}


def store_lanes(k, v, off, lanes: int):
    """The first `lanes` lanes of vector v at out[off...] (all: one store)."""
    b = k.b
    et = v.type.element
    if lanes == v.type.count:
        b.store(v, cg.gep(b, k.out(), off, et), align=1)
        return
    for e in range(lanes):
        b.store(b.extract_element(v, ir.Constant(I32, e)),
                cg.gep(b, k.out(), b.add(off, k.c(e)), et))


def simd_of(caps) -> Simd:
    """The kernel's vectors: AVX-512 targets take AVX2's 8 int32 lanes (their 512-bit pmaddwd
    needs AVX512BW, which caps does not record; a Zen 4 runs two 256-bit ones in the time of
    one 512-bit), with all their registers."""
    simd = Simd.of(caps)
    return replace(simd, width=min(simd.width, 8))


class PairAcc(Acc):
    """MR x NV int32 accumulators carried as phis (Acc's loop), added to by pmaddwd."""

    def __init__(self, vec: Vec, w: int, mr: int, nv: int):
        self.vec, self.mr, self.nv = vec, mr, nv
        vt, ht = ir.VectorType(I32, w), ir.VectorType(I16, 2 * w)
        self.ht = ht
        self.vals = [[cg.const(vt, 0) for _ in range(nv)] for _ in range(mr)]
        self.fn = declare(vec.b.module, PMADD[w], ir.FunctionType(vt, [ht, ht]))

    def madd(self, w_pairs, x_pairs):
        """acc[i][j] += pmaddwd(w_pairs[i], x_pairs[j]) (int32 vectors of int16 pairs)."""
        b = self.vec.b
        xs = [b.bitcast(x, self.ht) for x in x_pairs]
        for i, wv in enumerate(w_pairs):
            wh = b.bitcast(wv, self.ht)
            for j, x in enumerate(xs):
                self.vals[i][j] = b.add(self.vals[i][j], b.call(self.fn, [wh, x]))


class PairsEmitter:
    def __init__(self, k, p):
        self.k, self.b = k, k.b
        self.vec = Vec(k, simd_of(k.caps))
        self.w = self.vec.w
        self.mr, self.nv, self.nt = p["mr"], p["nv"], p["tiles"]
        self.wide, self.ties = p["wide"], p["ties"]
        x, y = k.in_buf(0), k.out_buf()
        self.xdt, self.ydt = x.dtype, y.dtype
        self.n, self.c, self.m = x.shape[0], x.shape[1], y.shape[1]
        self.taps = math.prod(k.in_buf(1).shape[2:])
        self.c2 = (self.c * self.taps + 1) // 2  # int32 pairs per position
        self.npos = math.prod(y.shape[2:])
        self.nr = self.nv * self.w
        # int16 weights (mark): the pairs take their bytes; int8 ones (a forced variant): a table
        self.wp = pack_constant(k, 1, packed_weights(k.const(1), self.mr).view(np.int16),
                                f"[M/{self.mr}][K/2][{self.mr}] int16 pairs") \
            if k.in_buf(1).dtype == np.int16 else \
            k.add_table(packed_weights(k.const(1), self.mr), "pairs")
        buf = cg.alloca_in_entry(self.b, ir.ArrayType(I32, self.nt * self.c2 * self.nr), "pairs")
        buf.align = 64
        buf.type = cg.PTR
        self.buf = buf
        self.q, self.s = channel_params(k, 3), channel_params(k, 4)

    def emit(self):
        k, b = self.k, self.b
        full, rest = divmod(self.npos, self.nr)
        panels, left = divmod(full, self.nt)
        with k.for_range(self.n, name="n") as n:
            if panels == 1:
                self.panel(n, k.c(0), self.nt, None)
            elif panels > 1:
                with k.for_range(panels, name="panel") as pi:
                    self.panel(n, b.mul(pi, k.c(self.nt * self.nr)), self.nt, None)
            if left:
                self.panel(n, k.c(panels * self.nt * self.nr), left, None)
            if rest:
                self.panel(n, k.c(full * self.nr), 1, rest)

    def tiles(self, count, body):
        if count == 1:
            body(self.k.c(0))
        else:
            with self.k.for_range(count, name="t") as t:
                body(t)

    def panel(self, n, p0, count, last):
        self.pack(n, p0, count, last)
        def block(o0, rows):
            self.tiles(count, lambda t: self.tile(n, p0, t, o0, rows, last))
        cg.for_runs(self.b, self.m, self.mr, block, self.k.intp, "mb")

    def _lanes(self, ch, base, last):
        """x[ch][base ...] as 16-bit lanes less the zero point: w of them, or the `last` valid
        ones of a partial tile (zeros past them, read one by one)."""
        k, b, w = self.k, self.b, self.w
        et = cg.llvm_type(self.xdt)
        vt = ir.VectorType(et, w)
        ptr = k.inp(0)
        if last is None:
            v = b.load(cg.gep(b, ptr, b.add(ch, base), et), typ=vt, align=1)
        else:
            v = ir.Constant(vt, [0] * w)
            for e in range(last):
                v = b.insert_element(v, k.load(ptr, b.add(b.add(ch, base), k.c(e)), self.xdt),
                                     ir.Constant(I32, e))
        ht = ir.VectorType(I16, w)
        v = b.sext(v, ht) if cg.is_signed(self.xdt) else b.zext(v, ht)
        zp = self.k.attrs["x_zp"]
        v = b.sub(v, cg.const(ht, zp)) if zp else v
        if last is not None and zp:  # lanes past the plane read zero, not -zp
            v = b.select(ir.Constant(ir.VectorType(cg.I1, w), [e < last for e in range(w)]), v,
                         cg.const(ht, 0))
        return v

    def pack(self, n, p0, count, last):
        """buf[t][cc][0:NR] = pairs (x[2cc][p] - zp, x[2cc + 1][p] - zp) for the positions
        p0 + t*NR ...; an odd C's last pair has a zero second half."""
        k, b, w = self.k, self.b, self.w
        inter = ir.Constant(ir.VectorType(I32, 2 * w),
                            [v for e in range(w) for v in (e, e + w)])
        zero = cg.const(ir.VectorType(I16, w), 0)

        def one(t):
            q0 = b.add(p0, b.mul(t, k.c(self.nr)))
            dst = b.mul(t, k.c(self.c2 * self.nr))
            plane = k.c(self.npos)
            img = b.mul(n, k.c(self.c * self.npos))

            def pairs(cc, odd_last):
                ch0 = b.add(img, b.mul(b.mul(cc, k.c(2)), plane))
                d = b.add(dst, b.mul(cc, k.c(self.nr)))
                for j in range(self.nv):
                    lanes = None if last is None else max(0, min(w, last - j * w))
                    lanes = None if lanes == w else lanes
                    if lanes == 0:
                        self.vec_store(cg.const(ir.VectorType(I32, w), 0), b.add(d, k.c(j * w)))
                        continue
                    base = b.add(q0, k.c(j * w))
                    lo = self._lanes(ch0, base, lanes)
                    hi = zero if odd_last else self._lanes(b.add(ch0, plane), base, lanes)
                    v = b.shuffle_vector(lo, hi, inter)
                    self.vec_store(b.bitcast(v, ir.VectorType(I32, w)), b.add(d, k.c(j * w)))
            with k.for_range(self.c // 2, name="cc") as cc:
                pairs(cc, False)
            if self.c % 2:
                pairs(k.c(self.c // 2), True)
        self.tiles(count, one)

    def vec_store(self, v, off):
        self.b.store(v, cg.gep(self.b, self.buf, off, I32), align=4)

    def tile(self, n, p0, t, o0, rows, last):
        """Output channels o0 .. o0 + rows x the tile t of the panel at p0."""
        k, b, w = self.k, self.b, self.w
        tnv = self.nv if last is None else math.ceil(last / w)
        acc = PairAcc(self.vec, w, rows, tnv)
        xblk = b.mul(t, k.c(self.c2 * self.nr))
        wblk = b.mul(o0, k.c(self.c2))
        vt = ir.VectorType(I32, w)
        with acc.loop(k, self.c2, name="cc") as cc:
            x0 = b.add(xblk, b.mul(cc, k.c(self.nr)))
            xs = [b.load(cg.gep(b, self.buf, b.add(x0, k.c(j * w)), I32), typ=vt, align=4)
                  for j in range(tnv)]
            wrow = b.add(wblk, b.mul(cc, k.c(rows)))
            ws = [self.vec.isplat(k.load(self.wp, b.add(wrow, k.c(i)), np.int32))
                  for i in range(rows)]
            acc.madd(ws, xs)
        yt = cg.llvm_type(self.ydt)
        q0 = b.add(p0, b.mul(t, k.c(self.nr)))
        for i in range(rows):
            oc = b.add(o0, k.c(i))
            bias = self.vec.isplat(k.load(k.inp(2), oc, np.int32))
            q = self.q if self.q is not None else self.vec.isplat(k.load(k.inp(3), oc, np.int32))
            s = self.s if self.s is not None else self.vec.isplat(k.load(k.inp(4), oc, np.int32))
            row = b.add(b.mul(b.add(b.mul(n, k.c(self.m)), oc), k.c(self.npos)), q0)
            for j in range(tnv):
                r = requantize(b, b.add(acc.value(i, j), bias), q, s, k.attrs["mode"],
                               self.wide, self.ties)
                r = b.trunc(clamp(b, r, k.attrs), ir.VectorType(yt, w))
                store_lanes(k, r, b.add(row, k.c(j * w)),
                            w if last is None else min(w, last - j * w))
