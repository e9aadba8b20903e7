"""QMatMul (A [..., K] int8/uint8 times the constant B [N, K]^T) on x86's integer GEMM
(pairs.py): vectors over the output columns, groups of g steps along K (groups.py: int16 pairs,
or u8 x s8 quads with VNNI). B is packed [N/NR][K/g][NR] as int32 groups (B[n][gk .. gk + g -
1]); per block of MR rows the rows' groups are packed on the stack (neighbouring bytes of a
row: one load per vector), MR x NV int32 accumulators take the multiply-add of a row's group in
every lane with NV vectors of B's groups, and each gets the per-column bias, requantization and
clamp and is stored as int8 (or the int32 sum: MatMulInteger). Column blocks are outermost, so a block of B stays in
L1/L2 across all rows; the rows are packed again per column block (K bytes each against
K x NR multiply-adds). The float path (passes/quant/float_exact.py) ran the QDQ transformers'
matrix products at the FMA's rate: ConvNeXt-T int8 spent 77.5 of 114 ms there, ViT-Tiny 22 of
33 (AVX2 code, Zen 4; after: docs/performance.md)."""
from __future__ import annotations

import functools
import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.conv.pointwise_strided import plan_tiles
from glowpy.codegen.kernels.int8.groups import grouping
from glowpy.codegen.kernels.int8.pairs import (GROUP, PairAcc, bias_of, chosen, epilogue,
                                               simd_of, store_lanes, weights)
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize, runtime_zp
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Vec
from glowpy.codegen.registry import variant

ROWS_MAX = 8  # rows of a register block at most (AVX2: 6 x 2 accumulators fill the registers)


def plan(k, name: str = "pairs"):
    """{"group", "mr", "nv", "wide", "ties"} for a QMatMul marked by pairs.mark (or forced)."""
    if not chosen(k, name):
        return None
    a, y = k.in_buf(0), k.out_buf()
    mr, nv = plan_tiles(math.prod(a.shape[:-1]), -(-a.shape[-1] // GROUP[name]), y.shape[-1],
                        simd_of(k.caps))
    return {"group": name, "mr": min(mr, ROWS_MAX), "nv": nv, **epilogue(k, k.attrs["a_zp"])}


@variant("QMatMul", "quads", rank=25, plan=functools.partial(plan, name="quads"))
@variant("QMatMul", "pairs", rank=20, plan=plan)
def emit(k, p):
    b, t = k.b, k.attrs
    vec = Vec(k, simd_of(k.caps))
    zt = t if t["out_dtype"] == "int32" else runtime_zp(k, vec.isplat)  # its table first
    w = vec.w
    a, y = k.in_buf(0), k.out_buf()
    grp = grouping(p["group"], k.caps, a.dtype, t["a_zp"])
    g = grp.g
    kk, n = a.shape[-1], y.shape[-1]
    rows, k2 = math.prod(a.shape[:-1]), grp.steps(a.shape[-1])
    mr, nv = p["mr"], p["nv"]
    nr = nv * w
    vt = ir.VectorType(I32, w)
    wp = weights(k, grp, nr)
    bias_p = bias_of(k, grp)
    buf = cg.alloca_in_entry(b, ir.ArrayType(I32, mr * k2), "rows")
    buf.type = cg.PTR
    out32 = t["out_dtype"] == "int32"
    q_c, s_c = (None, None) if out32 else (channel_params(k, 3), channel_params(k, 4))
    et, yt = cg.llvm_type(a.dtype), cg.llvm_type(y.dtype)

    def pack(r0, count):
        """buf[i][k2] = the groups of row r0 + i as the grouping stores them (a K that is no
        multiple of g: pad steps at the end)."""
        for i in range(count):
            src = b.mul(b.add(r0, k.c(i)), k.c(kk))
            full = kk // (g * w)
            if full:
                with k.for_range(full, name="kv") as v:
                    x = b.load(cg.gep(b, k.inp(0), b.add(src, b.mul(v, k.c(g * w))), et),
                               typ=ir.VectorType(et, g * w), align=1)
                    at = b.add(k.c(i * k2), b.mul(v, k.c(w)))
                    b.store(b.bitcast(grp.lanes(b, x), vt), cg.gep(b, buf, at, I32), align=4)
            for j in range(full * w, k2):  # the rest, group by group
                word = grp.word(b, [k.load(k.inp(0), b.add(src, k.c(e)), a.dtype)
                                    if e < kk else None for e in range(g * j, g * j + g)])
                b.store(word, cg.gep(b, buf, k.c(i * k2 + j), I32))

    def column(c0, cols):
        """Columns c0 .. c0 + cols (cols <= NR; a partial block's last vector lane by lane)."""
        tnv = math.ceil(cols / w)

        def rowblock(r0, count):
            pack(r0, count)
            acc = PairAcc(vec, grp, count, tnv)
            wblk = b.mul(c0, k.c(k2))
            with acc.loop(k, k2, name="kp") as kp:
                wrow = b.add(wblk, b.mul(kp, k.c(cols)))
                xs = [_vload(b, k, wp, b.add(wrow, k.c(j * w)), min(w, cols - j * w), w)
                      for j in range(tnv)]
                ws = [vec.isplat(b.load(cg.gep(b, buf, b.add(k.c(i * k2), kp), I32), typ=I32))
                      for i in range(count)]
                acc.madd(ws, xs, act_rows=True)
            for j in range(tnv):
                n0 = b.add(c0, k.c(j * w))
                lanes = min(w, cols - j * w)
                bias = _vload(b, k, bias_p, n0, lanes, w)
                q, s = q_c, s_c
                if not out32:  # per-column tables where the columns' values differ
                    q = q if q is not None else _vload(b, k, k.inp(3), n0, lanes, w)
                    s = s if s is not None else _vload(b, k, k.inp(4), n0, lanes, w)
                for i in range(count):
                    r = b.add(acc.value(i, j), bias)
                    if not out32:
                        r = requantize(b, r, q, s, t["mode"], p["wide"], p["ties"])
                        r = b.trunc(clamp(b, r, zt), ir.VectorType(yt, w))
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
