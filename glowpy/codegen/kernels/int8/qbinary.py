"""QAdd and QMul on the target's vectors (x86, AArch64): the general kernel's arithmetic
(quant.emit_qadd, the op's reference in ir/ops/qops.py) on i32/i64 lanes over runs of the
output along which each operand is contiguous or one broadcast value.

The general kernel's scalar loop stays scalar after LLVM (its 64-bit products and selects):
about 5 cycles per element. Int8 networks spend much of their time there: EfficientNet-B0
quantized by onnxruntime (QDQ, per-channel) has 65 QMul (SiLU's x * sigmoid(x), the
squeeze-excitation scales) taking 6.75 of its 19.2 ms; ResNet-50's 16 residual QAdd 6.7 of
86 ms (Zen 4, AVX2 code, -instrument-profile). Figures after this kernel: docs/performance.md.

A QAdd of 8-bit operands takes, where one exists, a linear form that gives the reference's
output for every pair of operand values (qmath.linear_add, checked on all 65,536 at compile
time): two 32-bit multiplies, two adds and a shift per lane, instead of three requantizations
on 64-bit lanes (TFLite's rounding away from zero alone took ~3 cycles per element).
ResNet-50 int8 (onnxruntime's quantizer; Zen 4, AVX-512 code): its 16 QAdd 3.4 -> 0.50 ms."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.qadd_table import rescaled
from glowpy.codegen.kernels.int8.quant import I32, clamp, clamp_store, requantize
from glowpy.codegen.kernels.vectors import Simd
from glowpy.codegen.registry import variant
from glowpy.ir import qmath


def _runs(k):
    """(split, inner, contiguous, strides): the run is the output's dims from `split` on (inner
    elements), the longest suffix along which each operand is either contiguous (its strides
    the output's) or broadcast (strides 0); contiguous[i] says which; strides are the operands'
    broadcast strides over the output."""
    y = k.out_buf()
    sy = cg.contiguous_strides(y.shape)
    st = [cg.broadcast_strides(k.in_buf(i).shape, y.shape) for i in (0, 1)]
    kinds, split = [None, None], len(y.shape)
    for d in range(len(y.shape) - 1, -1, -1):
        if y.shape[d] > 1:
            now = ["c" if s[d] == sy[d] else "b" if s[d] == 0 else None for s in st]
            if any(kd is None or kinds[i] not in (None, kd) for i, kd in enumerate(now)):
                break
            kinds = now
        split = d
    return split, math.prod(y.shape[split:]), [kd != "b" for kd in kinds], st


def _plan(k):
    """Vector targets, a run of at least one vector; the output's high-word product (`wide`)
    and the tie correction as far as the bounds allow."""
    w = Simd.of(k.caps).width
    if w == 1 or k.attrs["out_dtype"] == "int32":
        return None
    split, inner, _, _ = _runs(k)
    if inner < w:
        return None
    t = k.attrs
    bound = _bound(k)
    lin = qmath.linear_add(k.node) if k.node.op == "QAdd" else None
    return {"wide": t["mode"] == "even" and t["y_s"] <= -2,
            "ties": qmath.ties_possible(bound, t["y_q"], t["y_s"]),
            "linear": lin, "tables": lin is None and _by_tables(k)}


def _by_tables(k) -> bool:
    """A QAdd of 8-bit operands without a linear form: each operand's rescaled value
    (qadd_table.rescaled: 256 int32 per operand) read from a table lane by lane, their sum
    requantized once on 32-bit lanes, instead of three requantizations on 64-bit lanes (AVX2
    has no 64-bit arithmetic shift or multiply: about 3 cycles an element). ConvNeXt-T
    quantized by onnxruntime (QOperator) has 18 QAdd without a linear form (operand scales
    2:1, the output's just under 1: its sums fall on the reference's ties), 0.23 ms each on
    AVX2 code (Zen 4)."""
    if k.node.op != "QAdd" or any(np.dtype(k.in_buf(i).dtype).itemsize != 1 for i in (0, 1)):
        return False
    ta, tb = rescaled(k)
    return bool(np.abs(ta).max() + np.abs(tb).max() < 1 << 31)


def _bound(k) -> int:
    """The largest |accumulator| the operands' types allow (before the output's
    requantization)."""
    t = k.attrs
    devs = []
    for i, n in ((0, "a"), (1, "b")):
        info = np.iinfo(k.in_buf(i).dtype)
        devs.append(max(abs(int(info.min) - t[f"{n}_zp"]), abs(int(info.max) - t[f"{n}_zp"])))
    if k.node.op == "QMul":
        return devs[0] * devs[1]
    return sum(abs(int(qmath.requantize(np.int64(d) << t["left_shift"], t[f"{n}_q"],
                                        t[f"{n}_s"], "away"))) + 1
               for d, n in zip(devs, "ab"))


@variant("QAdd", "vector", rank=5, plan=_plan)
@variant("QMul", "vector", rank=5, plan=_plan)
def emit(k, params):
    b, t = k.b, k.attrs
    y = k.out_buf()
    w = Simd.of(k.caps).width
    ity = ir.VectorType(I32, w)
    split, inner, contig, st = _runs(k)
    sy = cg.contiguous_strides(y.shape)
    dts = [k.in_buf(i).dtype for i in (0, 1)]
    zps = [t["a_zp"], t["b_zp"]]

    lin = params.get("linear")
    tabs = [k.add_table(v.astype(np.int32), f"{n}_rescaled") for v, n in zip(rescaled(k), "ab")] \
        if params.get("tables") else None

    def splat(x):
        return b.shuffle_vector(b.insert_element(ir.Constant(ity, ir.Undefined), x,
                                                 ir.Constant(I32, 0)),
                                ir.Constant(ity, ir.Undefined), ir.Constant(ity, [0] * w))

    # the numbers one instruction differs from another of its shape in (zero points, the
    # multiplier, the linear form's factors) are read at run time (Kernel.runtime_int), once,
    # as a scalar and a vector: such kernels emit the same text and LLVM compiles them once
    # (module._share; a 64-step quantized scan's 254 QMul kernels, 6 shapes). Shifts and
    # whether a value is zero stay in the code (they choose instructions).
    rt = {}
    for name, v in (("a_zp", zps[0]), ("b_zp", zps[1]), ("y_zp", t["y_zp"])) + \
            ((("y_q", t["y_q"]),) if lin is None else tuple(zip(("ma", "mb", "r"), lin[1:]))):
        if v:
            x = k.runtime_int(int(v), name)
            rt[name] = (x, splat(x))

    def num(name, ty):
        """The run-time value `name` as a scalar or a vector like `ty` (0 where it is 0)."""
        if name not in rt:
            return cg.const(ty, 0)
        return rt[name][isinstance(ty, ir.VectorType)]
    t_vec, t_one = ({**t, "y_zp": rt["y_zp"][j]} for j in (1, 0)) if "y_zp" in rt else (t, t)

    def value(i, off, ty):
        """Operand i at off (a scalar or w lanes), widened to i32, less its zero point (by
        tables: its rescaled value, lane by lane)."""
        et = cg.llvm_type(dts[i])
        n = ty.count if isinstance(ty, ir.VectorType) else 1
        lt = et if n == 1 else ir.VectorType(et, n)
        v = b.load(cg.gep(b, k.inp(i), off, et), typ=lt, align=1)
        if tabs is not None:  # indexed by the byte as unsigned (qadd_table.rescaled)
            v = b.zext(v, ty)
            if n == 1:
                return k.load(tabs[i], v, np.int32)
            r = ir.Constant(ty, ir.Undefined)
            for e in range(n):
                x = k.load(tabs[i], b.extract_element(v, ir.Constant(I32, e)), np.int32)
                r = b.insert_element(r, x, ir.Constant(I32, e))
            return r
        v = b.sext(v, ty) if cg.is_signed(dts[i]) else b.zext(v, ty)
        return b.sub(v, num("ab"[i] + "_zp", ty)) if zps[i] else v

    def out_of(da, db):
        """The output before the clamp: one rounding of a linear form (qmath.linear_add) or
        the reference's rescalings and requantization (i64 lanes)."""
        if lin is None:
            return requantize(b, acc_of(da, db), num("y_q", da.type), t["y_s"], t["mode"],
                              params["wide"], params["ties"])
        x = b.add(b.add(b.mul(da, num("ma", da.type)), b.mul(db, num("mb", da.type))),
                  num("r", da.type))
        return b.ashr(x, cg.const(da.type, lin[0]))

    def acc_of(da, db):
        if k.node.op == "QMul":
            return b.mul(da, db)
        if tabs is not None:  # the operands' rescaled values already
            return b.add(da, db)
        sh = cg.const(da.type, t["left_shift"])
        ra = b.trunc(requantize(b, b.shl(da, sh), t["a_q"], t["a_s"], "away"), da.type)
        rb = b.trunc(requantize(b, b.shl(db, sh), t["b_q"], t["b_s"], "away"), db.type)
        return b.add(ra, rb)

    yt = cg.llvm_type(y.dtype)
    outer = y.shape[:split] or (1,)
    strides = [s[:split] or [0] for s in (st[0], st[1], sy)]
    full = inner // w
    with k.strided_loop(outer, strides) as (ia, ib, iy):
        # a broadcast operand: one value for the whole run, splat once
        fixed = [None if contig[i] else value(i, base, I32) for i, base in ((0, ia), (1, ib))]
        splats = [None if f is None else b.shuffle_vector(
            b.insert_element(ir.Constant(ity, ir.Undefined), f, ir.Constant(I32, 0)),
            ir.Constant(ity, ir.Undefined), ir.Constant(ity, [0] * w)) for f in fixed]
        with k.for_range(full, name="v") as v:
            off = b.mul(v, k.c(w))
            da, db = [splats[i] if splats[i] is not None else value(i, b.add(base, off), ity)
                      for i, base in ((0, ia), (1, ib))]
            r = clamp(b, out_of(da, db), t_vec)  # on the requantized width: a scale above 1 may pass 32 bits
            b.store(b.trunc(r, ir.VectorType(yt, w)), cg.gep(b, k.out(), b.add(iy, off), yt),
                    align=1)
        if full * w < inner:
            with k.for_range(inner, start=full * w, name="e") as e:
                da, db = [fixed[i] if fixed[i] is not None else value(i, b.add(base, e), I32)
                          for i, base in ((0, ia), (1, ib))]
                clamp_store(k, out_of(da, db), t_one, k.out(), b.add(iy, e), y.dtype)
