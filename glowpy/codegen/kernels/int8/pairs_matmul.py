"""QMatMul (A [..., K] int8/uint8 times the constant B [N, K]^T) on x86's integer GEMM
(pairs.py): vectors over the output columns, groups of g steps along K (groups.py: int16 pairs,
u8 x s8 quads with VNNI, or quads16 on AVX2's pmaddubsw, the saturating pairs' corrections
added after the dense loop). B is packed [N/NR][K/g][NR] as int32 groups (B[n][gk .. gk + g -
1]); MR x NV int32 accumulators take the multiply-add of a row's group in every lane with NV
vectors of B's groups, and each gets the per-column bias, requantization and clamp and is
stored as int8 (or the int32 sum: MatMulInteger). Column blocks are outermost, so a block of B
stays in L1/L2 across all rows. Pairs pack each block of MR rows on the stack again per column
block (K bytes each against K x NR multiply-adds); quads over a K that is a multiple of 4 read
A's rows in place.

The float path (passes/quant/float_exact.py) ran the QDQ transformers' matrix products at the
FMA's rate: ConvNeXt-T int8 spent 77.5 of 114 ms there, ViT-Tiny 22 of 33 (AVX2 code, Zen 4;
after: docs/performance.md). quads16 against pairs on onnxruntime's QOperator transformers
(per-tensor int8 weights), AVX2 code on a Zen 4: BERT-mini 8.35 -> 7.08 ms, GPT 11.9 -> 9.9,
ViT-Tiny 26.3 -> 23.8."""
from __future__ import annotations

import functools
import math

import numpy as np

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.conv.pointwise_strided import plan_tiles
from glowpy.codegen.kernels import gaps
from glowpy.codegen.kernels.int8.groups import HELD, Quads16, fix_steps, grouping
from glowpy.codegen.kernels.int8.pairs import (GROUP, PairAcc, bias_of, chosen, chosen_kind,
                                               epilogue, simd_of, store_lanes, weights)
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize, runtime_zp
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Vec
from glowpy.codegen.registry import variant

FLIP = -0x7F7F7F80  # 0x80808080: each byte's sign bit
# the registers a grouping's multiply-add holds besides the tile (groups.HELD) count in
# plan_tiles: quads16 on AVX2's 16 registers spilled an accumulator every step at 6 x 2; 5 x 2
# instead (MatMulInteger alone, AVX2 code, Zen 4): 128 x 256 by 8192 columns 2.51 -> 2.46 ms,
# other transformer shapes 0-1.5% faster, none slower; both at 107-110 G multiply-adds/s, the
# 115 that pmaddubsw + pmaddwd on two pipes allow
ROWS_MAX = 8  # rows of a register block at most (AVX2: 6 x 2 accumulators fill the registers)


def plan(k, name: str = "pairs"):
    """{"group", "mr", "nv", "wide", "ties"} for a QMatMul marked by pairs.mark (or forced)."""
    if not chosen(k, name):
        return None
    a, y = k.in_buf(0), k.out_buf()
    mr, nv = plan_tiles(math.prod(a.shape[:-1]), -(-a.shape[-1] // GROUP[name]), y.shape[-1],
                        simd_of(k.caps), HELD.get(name, 0))
    return {"group": name, "mr": min(mr, ROWS_MAX), "nv": nv, **epilogue(k, k.attrs["a_zp"])}


@variant("QMatMul", "quads", rank=25, plan=functools.partial(plan, name="quads"))
@variant("QMatMul", "quads16", rank=23, plan=functools.partial(plan, name="quads16"))
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
    # quads over whole groups read A's rows in place (int8: the sign bits flipped once
    # broadcast, as Quads.lanes does) instead of packing them again for every column block:
    # a 128 x 256 by 256 x 8192 MatMulInteger as quads16 (AVX2 code, Zen 4) 2.70 -> 2.54 ms
    direct = g == 4 and kk % 4 == 0
    flip = direct and cg.is_signed(a.dtype)
    rows_in = k.inp(0)
    order = Quads16.order(k.node) if isinstance(grp, Quads16) and direct else None
    if order is not None and _scratch(k) is None:
        order = None  # no copy of A to read in that order (pairs_matmul.place)
    wk = k.const(1).reshape(n, kk)
    if order is not None:
        wk = wk[:, order]
        rows_in = _reorder_rows(k, order, rows, kk)
    wp = weights(k, grp, nr, wk)
    bias_p = bias_of(k, grp)
    fixes = _lane_fixes(k, grp, w, wk)
    buf = None
    if not direct:
        buf = cg.alloca_in_entry(b, ir.ArrayType(I32, mr * k2), "rows")
        buf.type = cg.PTR
    out32 = t["out_dtype"] == "int32"
    q_c, s_c = (None, None) if out32 else (channel_params(k, 3), channel_params(k, 4))
    if q_c is not None:  # one multiplier for every column: read at run time, like zt
        q_c = vec.isplat(k.runtime_int(q_c, "y_q"))
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
            if direct:  # the rows' quads are A's own bytes: broadcast from there
                base, src = b.mul(r0, k.c(k2)), rows_in
            else:
                pack(r0, count)
                base, src = k.c(0), buf

            def word(i, q):
                """Row i's group q, on every lane."""
                v = b.load(cg.gep(b, src, b.add(base, b.add(k.c(i * k2), q)), I32), typ=I32)
                return vec.isplat(b.xor(v, k.c(FLIP, I32)) if flip else v)
            acc = PairAcc(vec, grp, count, tnv)
            wblk = b.mul(c0, k.c(k2))
            with acc.loop(k, k2, name="kp") as kp:
                wrow = b.add(wblk, b.mul(kp, k.c(cols)))
                xs = [_vload(b, k, wp, b.add(wrow, k.c(j * w)), min(w, cols - j * w), w)
                      for j in range(tnv)]
                acc.madd([word(i, kp) for i in range(count)], xs, act_rows=True)
            if fixes:
                for j in range(tnv):
                    _correct(k, grp, fixes, acc, j, b.add(b.udiv(c0, k.c(w)), k.c(j)), word)
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


SCRATCH = "_ordered_rows"


def _scratch(k):
    """The instruction's copy of A in the packed K order (place), or None."""
    outs = k.instr.outputs
    return outs[1] if len(outs) == 2 and outs[1].name.endswith(SCRATCH) else None


def _reorder_rows(k, order, rows: int, kk: int):
    """A's rows copied into the scratch output with their K bytes in `order`
    (groups.Quads16.order: the pairs pmaddubsw adds that saturate least), a byte at a time
    through a table of the order: rows x K byte moves once a call, against rows x K x N
    multiply-adds, so that the corrections, a vector step for every block of w columns and
    quad where one column saturates, come fewer: onnxruntime's per-channel quantizer's
    1024 x 1024 weights had 24% of those blocks corrected in the model's order, 14% in this
    one (1024 x 256: 22% -> 4%)."""
    b = k.b
    table = k.add_table(order.astype(np.int32), "quads16 K order")
    dst = k.out(1)
    et = cg.llvm_type(k.in_buf(0).dtype)
    with k.for_range(rows, name="rr") as r:
        base = b.mul(r, k.c(kk))
        with k.for_range(kk, name="rk") as j:
            src = b.add(base, b.sext(k.load(table, j, np.int32), k.intp))
            b.store(b.load(cg.gep(b, k.inp(0), src, et), typ=et), cg.gep(b, dst, b.add(base, j), et))
    return dst


def place(prog, caps, grow: bool = False) -> None:
    """catalog.post_planning: a copy of A (rows x K bytes) for each QMatMul that quads16 runs
    with its K in pair_order's order, in a gap of the activation region, or past its end where
    time comes first (grow: the copies share that area, each living during its instruction
    only); without one the kernel reads A in the model's order."""
    def wants(ins):
        node = ins.node
        if ins.op != "QMatMul" or len(ins.outputs) != 1 or node is None or \
                chosen_kind(caps, node) != "quads16" or ins.inputs[0].shape[-1] % 4 or \
                Quads16.order(node) is None:
            return None
        return ins.inputs[0].nbytes, SCRATCH, ins.inputs[0].dtype.name, 64
    gaps.place(prog, wants, grow=(lambda ins: True) if grow else None)


def _lane_fixes(k, grp, w: int, wk):
    """quads16's correction steps (groups.Quads16.lane_corrections) of the [N, K] weights wk
    as (offsets, entries) tables, or None (another grouping, or no pair saturates)."""
    if not isinstance(grp, Quads16):
        return None
    fixes = Quads16.lane_corrections(wk, w)
    return fixes and (k.add_table(fixes[0], "quads16 correction offsets"),
                      k.add_table(fixes[1], "quads16 corrections (quad, a word a lane)"))


def _correct(k, grp, fixes, acc, j: int, vi, word):
    """Accumulator column j (the output columns' vector vi): its correction steps, each a
    multiply-add of the block's rows' quad (word(i, q): row i's on every lane) by the vector
    of the columns' corrections, after the dense reduction (the quads the vector's columns
    need none of are skipped)."""
    b, w = k.b, acc.vec.w

    def step(q, at):
        fix = b.load(cg.gep(b, fixes[1], at, I32), typ=ir.VectorType(I32, w), align=4)
        for i in range(acc.mr):
            acc.vals[i][j] = grp.madd(b, acc.vals[i][j], word(i, q), fix)
    fix_steps(k, fixes, vi, w + 1, acc, step)
