"""Normalization kernels: LRN, LayerNormalization, InstanceNormalization.

Moments are computed in two passes over each row (mean, then the mean of squared deviations),
which keeps float32 accuracy without a wider accumulator; both passes, and LayerNormalization's
normalizing pass where scale and bias hold a value per normalized element, run on the target's
vectors of up to four registers (Simd.widened; LayerNormalization of (1,128,256): 64.6 us
scalar, 7.8 vectorized, onnxruntime 25 on an AVX2 Zen 3; benchmarks/op_probe.py)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import emits
from glowpy.ir.ops.registry import norm_axis


def _moments(k, vec, ptr, base, count):
    """(mean, variance) of the float32 elements ptr[base : base+count] (base: an IR index), on
    the target's vectors (the last one masked), the lanes summed at the end of each pass."""
    b = k.b
    f = cg.F32
    total = vec.sweep(base, count, vec.zero(), lambda off, mask, acc: b.fadd(acc, vec.load(ptr, off, mask)))
    mean = b.fdiv(vec.reduce(total, b.fadd), cg.const(f, count))
    mv = vec.splat(mean)

    def dev2(off, mask, acc):
        d = vec.keep(b.fsub(vec.load(ptr, off, mask), mv), mask)
        return b.fadd(acc, b.fmul(d, d))

    return mean, b.fdiv(vec.reduce(vec.sweep(base, count, vec.zero(), dev2), b.fadd), cg.const(f, count))


def _inv_std(k, var, eps, f):
    b = k.b
    return b.fdiv(cg.const(f, 1.0), mathfn.sqrt(b, b.fadd(var, cg.const(f, eps)), k.caps.fpu))


@emits("LayerNormalization")
def emit_layernorm(k):
    b = k.b
    node = k.node
    x = k.in_buf(0)
    rows, d = node.opdef.layout(node)
    norm_shape = x.shape[norm_axis(node.attrs["axis"], len(x.shape), node):]
    eps = float(node.attrs["epsilon"])
    scale, bias = k.in_buf(1), k.in_buf(2)
    params = [p for p in (scale, bias) if p is not None]
    strides = [cg.contiguous_strides(norm_shape)] + \
        [cg.broadcast_strides(p.shape, norm_shape) for p in params]
    # the vector pass wants one scale (bias) value per normalized element, contiguous
    whole = all(st == strides[0] for st in strides[1:])
    vec = Vec(k, Simd.of(k.caps).widened(d))
    n_out = len(k.instr.outputs)
    with k.for_range(rows, name="r") as r:
        base = b.mul(r, k.c(d))
        mean, var = _moments(k, vec, k.inp(0), base, d)
        inv = _inv_std(k, var, eps, cg.F32)
        if n_out > 1:
            k.store(mean, k.out(1), r)
        if n_out > 2:
            k.store(inv, k.out(2), r)
        if whole:
            mv, iv = vec.splat(mean), vec.splat(inv)

            def norm(off, mask, acc):
                j = b.sub(off, base)  # the position within the row: scale's and bias's offset
                y = b.fmul(b.fmul(b.fsub(vec.load(k.inp(0), off, mask), mv), iv),
                           vec.load(k.inp(1), j, mask))
                if bias is not None:
                    y = b.fadd(y, vec.load(k.inp(2), j, mask))
                vec.store(y, k.out(), off, mask)
                return acc

            vec.sweep(base, d, vec.zero(), norm)
        else:
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
    vec = Vec(k, Simd.of(k.caps).widened(plane))
    with k.for_range(n_ * c, name="p") as p:
        ch = b.srem(p, k.c(c))
        base = b.mul(p, k.c(plane))
        mean, var = _moments(k, vec, k.inp(0), base, plane)
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
