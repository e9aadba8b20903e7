"""Reduction kernels: Softmax, LogSoftmax, ReduceMean, ReduceSum, ReduceMax."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels import emits
from glowpy.codegen.kernels.elementwise import fmax


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
                shift = b.fadd(mx, mathfn.log(b, s))
                with k.for_range(r, name="j") as j:
                    k.store(b.fsub(k.load(k.inp(0), at(j), x.dtype), shift), k.out(), at(j))
            else:
                inv = b.fdiv(cg.const(f, 1.0), s)
                with k.for_range(r, name="j") as j:
                    k.store(b.fmul(k.load(k.out(), at(j), x.dtype), inv), k.out(), at(j))


@emits("ReduceMean", "ReduceSum", "ReduceMax")
def emit_reduce(k):
    b = k.b
    x = k.in_buf(0)
    f = cg.llvm_type(x.dtype)
    axes = k.node.opdef.reduced_axes(k.node)
    xst = cg.contiguous_strides(x.shape)
    kept = [d for d in range(len(x.shape)) if d not in axes]
    kept_shape = [x.shape[d] for d in kept]
    red_shape = [x.shape[d] for d in axes] or [1]
    red_st = [xst[d] for d in axes] or [0]
    is_max = k.instr.op == "ReduceMax"
    floaty = cg.is_float(x.dtype)
    init = cg.const(f, -np.inf if is_max else 0) if floaty else \
        cg.const(f, np.iinfo(x.dtype).min if is_max else 0)
    count = int(np.prod(red_shape))
    acc_p = cg.alloca_in_entry(b, f, "acc")
    with k.strided_loop(kept_shape or [1], [[xst[d] for d in kept] or [0],
                                            cg.contiguous_strides(kept_shape) or [0]], name="o") as (xo, yo):
        b.store(init, acc_p)
        with k.strided_loop(red_shape, [red_st], [xo], name="r") as (xi,):
            v, acc = k.load(k.inp(0), xi, x.dtype), b.load(acc_p)
            if is_max:
                nv = fmax(b, v, acc) if floaty else b.select(b.icmp_signed(">", v, acc), v, acc)
            else:
                nv = b.fadd(acc, v) if floaty else b.add(acc, v)
            b.store(nv, acc_p)
        r = b.load(acc_p)
        if k.instr.op == "ReduceMean":
            r = b.fdiv(r, cg.const(f, count)) if floaty else b.sdiv(r, cg.const(f, count))
        k.store(r, k.out(), yo)
