"""QMatMul (A [..., K] int8/uint8 times the constant B [N, K]^T) on x86's int16 pair GEMM
(pairs.py): vectors over the output columns, pairs along K. B is packed [N/NR][K/2][NR] as
int32 pairs (B[n][2k], B[n][2k + 1]); per block of MR rows the rows' pairs (a[2k] - zp,
a[2k + 1] - zp) are packed on the stack (neighbouring bytes of a row: one widening load per
vector), MR x NV int32 accumulators take pmaddwd of a row's pair in every lane with NV vectors
of B's pairs, and each gets the per-column bias, requantization and clamp and is stored as
int8 (or the int32 sum: MatMulInteger). Column blocks are outermost, so a block of B stays in
L1/L2 across all rows; the rows are packed again per column block (K bytes each against
K x NR multiply-adds). The float path (passes/quant/float_exact.py) ran the QDQ transformers'
matrix products at the FMA's rate: ConvNeXt-T int8 spent 77.5 of 114 ms there, ViT-Tiny 22 of
33 (AVX2 code, Zen 4; after: docs/performance.md)."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import pack_constant
from glowpy.codegen.kernels.conv.pointwise_strided import plan_tiles
from glowpy.codegen.kernels.int8.pairs import (I16, PairAcc, chosen, epilogue, packed_weights,
                                               simd_of, store_lanes)
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Vec
from glowpy.codegen.registry import variant

ROWS_MAX = 8  # rows of a register block at most (AVX2: 6 x 2 accumulators fill the registers)


def plan(k):
    """{"mr", "nv", "wide", "ties"} for a QMatMul marked by pairs.mark (or forced)."""
    if not chosen(k):
        return None
    a, y = k.in_buf(0), k.out_buf()
    mr, nv = plan_tiles(math.prod(a.shape[:-1]), (a.shape[-1] + 1) // 2, y.shape[-1],
                        simd_of(k.caps))
    return {"mr": min(mr, ROWS_MAX), "nv": nv, **epilogue(k, k.attrs["a_zp"])}


@variant("QMatMul", "pairs", rank=20, plan=plan)
def emit(k, p):
    b, t = k.b, k.attrs
    vec = Vec(k, simd_of(k.caps))
    w = vec.w
    a, y = k.in_buf(0), k.out_buf()
    kk, n = a.shape[-1], y.shape[-1]
    rows, k2 = math.prod(a.shape[:-1]), (a.shape[-1] + 1) // 2
    mr, nv = p["mr"], p["nv"]
    nr = nv * w
    vt, ht = ir.VectorType(I32, w), ir.VectorType(I16, 2 * w)
    wts = packed_weights(k.const(1), nr)
    wp = pack_constant(k, 1, wts.view(np.int16), f"[N/{nr}][K/2][{nr}] int16 pairs") \
        if k.in_buf(1).dtype == np.int16 else k.add_table(wts, "pairs")
    buf = cg.alloca_in_entry(b, ir.ArrayType(I32, mr * k2), "rows")
    buf.type = cg.PTR
    out32 = t["out_dtype"] == "int32"
    q_c, s_c = (None, None) if out32 else (channel_params(k, 3), channel_params(k, 4))
    et, yt = cg.llvm_type(a.dtype), cg.llvm_type(y.dtype)

    def pack(r0, count):
        """buf[i][k2] = the pairs of row r0 + i, less the zero point (an odd K: a zero half)."""
        for i in range(count):
            src = b.mul(b.add(r0, k.c(i)), k.c(kk))
            full = kk // (2 * w)
            if full:
                with k.for_range(full, name="kv") as v:
                    off = b.mul(v, k.c(2 * w))
                    x = b.load(cg.gep(b, k.inp(0), b.add(src, off), et),
                               typ=ir.VectorType(et, 2 * w), align=1)
                    x = b.sext(x, ht) if cg.is_signed(a.dtype) else b.zext(x, ht)
                    x = b.sub(x, cg.const(ht, t["a_zp"])) if t["a_zp"] else x
                    at = b.add(k.c(i * k2), b.mul(v, k.c(w)))
                    b.store(b.bitcast(x, vt), cg.gep(b, buf, at, I32), align=4)
            for j in range(full * w, k2):  # the rest, pair by pair
                halves = []
                for e in (2 * j, 2 * j + 1):
                    if e >= kk:
                        halves.append(ir.Constant(I32, 0))
                        continue
                    v = k.load(k.inp(0), b.add(src, k.c(e)), a.dtype)
                    v = b.sext(v, I32) if cg.is_signed(a.dtype) else b.zext(v, I32)
                    halves.append(b.sub(v, ir.Constant(I32, t["a_zp"])))
                pair = b.or_(b.and_(halves[0], ir.Constant(I32, 0xFFFF)),
                             b.shl(halves[1], ir.Constant(I32, 16)))
                b.store(pair, cg.gep(b, buf, k.c(i * k2 + j), I32))

    def column(c0, cols):
        """Columns c0 .. c0 + cols (cols <= NR; a partial block's last vector lane by lane)."""
        tnv = math.ceil(cols / w)

        def rowblock(r0, count):
            pack(r0, count)
            acc = PairAcc(vec, w, count, tnv)
            wblk = b.mul(c0, k.c(k2))
            with acc.loop(k, k2, name="kp") as kp:
                wrow = b.add(wblk, b.mul(kp, k.c(cols)))
                xs = [_vload(b, k, wp, b.add(wrow, k.c(j * w)), min(w, cols - j * w), w)
                      for j in range(tnv)]
                ws = [vec.isplat(b.load(cg.gep(b, buf, b.add(k.c(i * k2), kp), I32), typ=I32))
                      for i in range(count)]
                acc.madd(ws, xs)
            for j in range(tnv):
                n0 = b.add(c0, k.c(j * w))
                lanes = min(w, cols - j * w)
                bias = _vload(b, k, k.inp(2), n0, lanes, w)
                q, s = q_c, s_c
                if not out32:  # per-column tables where the columns' values differ
                    q = q if q is not None else _vload(b, k, k.inp(3), n0, lanes, w)
                    s = s if s is not None else _vload(b, k, k.inp(4), n0, lanes, w)
                for i in range(count):
                    r = b.add(acc.value(i, j), bias)
                    if not out32:
                        r = requantize(b, r, q, s, t["mode"], p["wide"], p["ties"])
                        r = b.trunc(clamp(b, r, t), ir.VectorType(yt, w))
                    store_lanes(k, r, b.add(b.mul(b.add(r0, k.c(i)), k.c(n)), n0), lanes)
        cg.for_runs(b, rows, mr, rowblock, k.intp, "rb")
    cg.for_runs(b, n, nr, column, k.intp, "cb")


def _vload(b, k, ptr, off, lanes: int, w: int):
    """w int32 from ptr[off...] (the first `lanes` of them; zeros past them)."""
    vt = ir.VectorType(I32, w)
    if lanes == w:
        return b.load(cg.gep(b, ptr, off, I32), typ=vt, align=4)
    v = ir.Constant(vt, [0] * w)
    for e in range(lanes):
        v = b.insert_element(v, b.load(cg.gep(b, ptr, b.add(off, k.c(e)), I32), typ=I32),
                             ir.Constant(I32, e))
    return v
