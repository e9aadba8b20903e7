"""Reduction kernels: Softmax, LogSoftmax and the Reduce* family (Mean, Sum, Max, Min, Prod, L1,
L2, SumSquare, LogSum, LogSumExp)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.registry import emits
from glowpy.codegen.kernels.elementwise.arith import fmax, fmin
from glowpy.errors import ModelError
from glowpy.ir.ops.reduce import REDUCE


@emits("Softmax", "LogSoftmax")
def emit_softmax(k):
    b = k.b
    x = k.in_buf(0)
    f = cg.llvm_type(x.dtype)
    outer, r, inner = k.node.opdef.layout(k.node)
    mx_p, sum_p = cg.alloca_in_entry(b, f, "mx"), cg.alloca_in_entry(b, f, "sum")
    log = k.instr.op == "LogSoftmax"
    with k.for_range(outer, name="o") as o:
        with k.for_range(inner, name="i") as i:
            base = b.add(b.mul(o, k.c(r * inner)), i)

            def at(j):
                return b.add(base, b.mul(j, k.c(inner)) if inner != 1 else j)

            b.store(cg.const(f, -np.inf), mx_p)
            with k.for_range(r, name="j") as j:
                b.store(fmax(b, k.load(k.inp(0), at(j), x.dtype), b.load(mx_p)), mx_p)
            mx = b.load(mx_p)
            b.store(cg.const(f, 0), sum_p)
            with k.for_range(r, name="j") as j:
                e = mathfn.exp(b, b.fsub(k.load(k.inp(0), at(j), x.dtype), mx))
                if not log:
                    k.store(e, k.out(), at(j))
                b.store(b.fadd(b.load(sum_p), e), sum_p)
            s = b.load(sum_p)
            if log:
                # (x - max) - log(sum): folding max + log(sum) into one shift first loses the
                # small results to cancellation when the inputs are large
                ls = mathfn.log(b, s)
                with k.for_range(r, name="j") as j:
                    z = b.fsub(k.load(k.inp(0), at(j), x.dtype), mx)
                    k.store(b.fsub(z, ls), k.out(), at(j))
            else:
                inv = b.fdiv(cg.const(f, 1.0), s)
                with k.for_range(r, name="j") as j:
                    k.store(b.fmul(k.load(k.out(), at(j), x.dtype), inv), k.out(), at(j))


def reduce_steps(op, b, dtype, f, caps):
    """(initial value, update(acc, v), finish(acc, count)) of a reduction on a target with
    TargetCaps `caps`."""
    floaty = cg.is_float(dtype)
    add, mul = (b.fadd, b.fmul) if floaty else (b.add, b.mul)
    if op in ("ReduceMax", "ReduceMin"):
        big = op == "ReduceMax"
        if floaty:
            return (cg.const(f, -np.inf if big else np.inf),
                    lambda acc, v: (fmax if big else fmin)(b, v, acc), None)
        info = np.iinfo(np.uint8 if dtype == np.bool_ else dtype)
        hi = 1 if dtype == np.bool_ else info.max
        cmp = b.icmp_signed if cg.is_signed(dtype) else b.icmp_unsigned
        return (cg.const(f, info.min if big else hi),
                lambda acc, v: b.select(cmp(">" if big else "<", v, acc), v, acc), None)
    if not floaty and op in ("ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
        raise ModelError(f"{op}: {np.dtype(dtype).name} input is not supported (float only)")
    if op == "ReduceProd":
        return cg.const(f, 1), mul, None
    if op == "ReduceL1":
        if floaty:
            return cg.const(f, 0), lambda acc, v: b.fadd(acc, mathfn.fabs(b, v)), None
        neg = (lambda v: b.select(b.icmp_signed("<", v, cg.const(f, 0)), b.neg(v), v)) \
            if cg.is_signed(dtype) else (lambda v: v)
        return cg.const(f, 0), lambda acc, v: b.add(acc, neg(v)), None
    if op in ("ReduceL2", "ReduceSumSquare"):
        fin = (lambda r, n: mathfn.sqrt(b, r, caps.fpu)) if op == "ReduceL2" else None
        return cg.const(f, 0), lambda acc, v: add(acc, mul(v, v)), fin
    if op == "ReduceLogSum":
        return cg.const(f, 0), add, lambda r, n: mathfn.log(b, r)
    if op == "ReduceMean":
        return cg.const(f, 0), add, (lambda r, n: b.fdiv(r, cg.const(f, n))) if floaty else \
            (lambda r, n: b.sdiv(r, cg.const(f, n)))
    return cg.const(f, 0), add, None  # ReduceSum


@emits(*REDUCE)
def emit_reduce(k):
    b = k.b
    x = k.in_buf(0)
    f = cg.llvm_type(x.dtype)
    op = k.instr.op
    axes = k.node.opdef.reduced_axes(k.node)
    xst = cg.contiguous_strides(x.shape)
    kept = [d for d in range(len(x.shape)) if d not in axes]
    kept_shape = [x.shape[d] for d in kept]
    red_shape = [x.shape[d] for d in axes] or [1]
    red_st = [xst[d] for d in axes] or [0]
    count = int(np.prod(red_shape))
    acc_p = cg.alloca_in_entry(b, f, "acc")
    with k.strided_loop(kept_shape or [1], [[xst[d] for d in kept] or [0],
                                            cg.contiguous_strides(kept_shape) or [0]], name="o") as (xo, yo):
        if op == "ReduceLogSumExp":  # log(sum(exp(v - max))) + max: no overflow
            b.store(cg.const(f, -np.inf), acc_p)
            with k.strided_loop(red_shape, [red_st], [xo], name="m") as (xi,):
                b.store(fmax(b, k.load(k.inp(0), xi, x.dtype), b.load(acc_p)), acc_p)
            mx = b.load(acc_p)
            finite = b.fcmp_ordered("<", mathfn.fabs(b, mx), cg.const(f, np.inf))
            shift = b.select(finite, mx, cg.const(f, 0))
            init, update = cg.const(f, 0), \
                lambda acc, v: b.fadd(acc, mathfn.exp(b, b.fsub(v, shift)))
            finish = lambda r, n: b.fadd(mathfn.log(b, r), shift)  # noqa: E731
        else:
            init, update, finish = reduce_steps(op, b, x.dtype, f, k.caps)
        b.store(init, acc_p)
        with k.strided_loop(red_shape, [red_st], [xo], name="r") as (xi,):
            b.store(update(b.load(acc_p), k.load(k.inp(0), xi, x.dtype)), acc_p)
        r = b.load(acc_p)
        k.store(finish(r, count) if finish else r, k.out(), yo)
