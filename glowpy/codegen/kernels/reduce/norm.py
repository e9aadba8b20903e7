"""Normalization kernels: LRN, LayerNormalization, InstanceNormalization.

Moments are computed in two passes over each row (mean, then the mean of squared deviations),
which keeps float32 accuracy without a wider accumulator."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.registry import emits
from glowpy.ir.ops.registry import norm_axis


def _moments(k, ptr, base, count, f, sum_p):
    """(mean, variance) of the float32 elements ptr[base : base+count]."""
    b = k.b
    b.store(cg.const(f, 0), sum_p)
    with k.for_range(count, name="m") as j:
        b.store(b.fadd(b.load(sum_p), k.load(ptr, b.add(base, j), np.float32)), sum_p)
    mean = b.fdiv(b.load(sum_p), cg.const(f, count))
    b.store(cg.const(f, 0), sum_p)
    with k.for_range(count, name="v") as j:
        d = b.fsub(k.load(ptr, b.add(base, j), np.float32), mean)
        b.store(b.fadd(b.load(sum_p), b.fmul(d, d)), sum_p)
    return mean, b.fdiv(b.load(sum_p), cg.const(f, count))


def _inv_std(k, var, eps, f):
    b = k.b
    return b.fdiv(cg.const(f, 1.0), mathfn.sqrt(b, b.fadd(var, cg.const(f, eps)), k.caps.fpu))


@emits("LayerNormalization")
def emit_layernorm(k):
    b = k.b
    node = k.node
    x = k.in_buf(0)
    f = cg.llvm_type(x.dtype)
    rows, d = node.opdef.layout(node)
    norm_shape = x.shape[norm_axis(node.attrs["axis"], len(x.shape), node):]
    eps = float(node.attrs["epsilon"])
    sum_p = cg.alloca_in_entry(b, f, "sum")
    scale, bias = k.in_buf(1), k.in_buf(2)
    strides = [cg.contiguous_strides(norm_shape), cg.broadcast_strides(scale.shape, norm_shape)]
    if bias is not None:
        strides.append(cg.broadcast_strides(bias.shape, norm_shape))
    n_out = len(k.instr.outputs)
    with k.for_range(rows, name="r") as r:
        base = b.mul(r, k.c(d))
        mean, var = _moments(k, k.inp(0), base, d, f, sum_p)
        inv = _inv_std(k, var, eps, f)
        if n_out > 1:
            k.store(mean, k.out(1), r)
        if n_out > 2:
            k.store(inv, k.out(2), r)
        with k.strided_loop(norm_shape, strides, name="e") as offs:
            xi = b.add(base, offs[0])
            y = b.fmul(b.fmul(b.fsub(k.load(k.inp(0), xi, x.dtype), mean), inv),
                       k.load(k.inp(1), offs[1], x.dtype))
            if bias is not None:
                y = b.fadd(y, k.load(k.inp(2), offs[2], x.dtype))
            k.store(y, k.out(), xi)


@emits("InstanceNormalization")
def emit_instancenorm(k):
    b = k.b
    node = k.node
    x = k.in_buf(0)
    f = cg.llvm_type(x.dtype)
    n_, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:]))
    eps = float(node.attrs["epsilon"])
    sum_p = cg.alloca_in_entry(b, f, "sum")
    with k.for_range(n_ * c, name="p") as p:
        ch = b.srem(p, k.c(c))
        base = b.mul(p, k.c(plane))
        mean, var = _moments(k, k.inp(0), base, plane, f, sum_p)
        mul = b.fmul(_inv_std(k, var, eps, f), k.load(k.inp(1), ch, x.dtype))
        add = b.fsub(k.load(k.inp(2), ch, x.dtype), b.fmul(mean, mul))
        with k.for_range(plane, name="z") as z:
            i = b.add(base, z)
            k.store(b.fadd(b.fmul(k.load(k.inp(0), i, x.dtype), mul), add), k.out(), i)


@emits("LRN")
def emit_lrn(k):
    """Pass 1 accumulates the windowed sum of squares into the output; pass 2 turns it into
    x * (bias + alpha/size * sum)^-beta."""
    b = k.b
    node = k.node
    x = k.in_buf(0)
    f = cg.llvm_type(x.dtype)
    n_, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:]))
    before, after = node.opdef.window(node)
    a = node.attrs
    coef, bias, beta = float(a["alpha"]) / float(a["size"]), float(a["bias"]), float(a["beta"])
    with k.for_range(n_, name="n") as n:
        with k.for_range(c, name="c") as ch:
            o_base = b.mul(b.add(b.mul(n, k.c(c)), ch), k.c(plane))
            with k.for_range(plane, name="z") as z:
                k.store(cg.const(f, 0), k.out(), b.add(o_base, z))
            lo = b.sub(ch, k.c(before))
            lo = b.select(b.icmp_signed("<", lo, k.c(0)), k.c(0), lo)
            hi = b.add(ch, k.c(after + 1))
            hi = b.select(b.icmp_signed(">", hi, k.c(c)), k.c(c), hi)
            with k.for_range(hi, start=lo, name="w") as c2:
                i_base = b.mul(b.add(b.mul(n, k.c(c)), c2), k.c(plane))
                with k.for_range(plane, name="z") as z:
                    v = k.load(k.inp(0), b.add(i_base, z), x.dtype)
                    oi = b.add(o_base, z)
                    k.store(b.fadd(k.load(k.out(), oi, x.dtype), b.fmul(v, v)), k.out(), oi)
            with k.for_range(plane, name="z") as z:
                oi = b.add(o_base, z)
                acc = k.load(k.out(), oi, x.dtype)
                base = b.fadd(cg.const(f, bias), b.fmul(cg.const(f, coef), acc))
                scale = mathfn.pow(b, base, cg.const(f, -beta))
                k.store(b.fmul(k.load(k.inp(0), oi, x.dtype), scale), k.out(), oi)
