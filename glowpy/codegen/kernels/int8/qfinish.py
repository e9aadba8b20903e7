"""QFinish: the bias and requantization after the exact integer sums of a float Conv or
MatMul (glowpy/ir/passes/quant/float_exact.py), on the target's vectors."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.quant import I32, clamp, finish, requantize
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import emits


@emits("QFinish")
def emit_qfinish(k):
    """The bias and requantization of a QConv / QMatMul after its float form's exact integer
    sums (passes/quant/float_exact.py), on the target's vectors: fptosi (of each chunk's sum,
    added as integers), the bias, the
    fixed-point product, the clamp and a narrow store per vector, or the int32 sum itself for
    an int32 output (ConvInteger, MatMulInteger). Channels along a plane (Conv: axis 1) take
    the channel's values as splats; channels along the last axis (MatMul) take vectors of
    them. Left to LLVM's loop vectorizer the scalar form stayed scalar (the 64-bit products):
    7 us for keyword spotting's 64 x 125 outputs on AVX2 code, about 3 cycles per element;
    on vectors, where the product's high word suffices (32-bit lanes, no 64-bit arithmetic
    shifts, which AVX2 lacks), 3 us, and about 2 without the tie correction where no tie can
    occur (the model 82 -> 72 us)."""
    b = k.b
    y = k.out_buf()
    ax = k.attrs["axis"] % len(y.shape)
    c, inner = y.shape[ax], int(np.prod(y.shape[ax + 1:]))
    outer = int(np.prod(y.shape[:ax]))
    vec = Vec(k, Simd.of(k.caps))
    w = vec.w
    q_c, s_c = channel_params(k, 2), channel_params(k, 3)
    shifts = k.const(3)
    out32 = y.dtype == np.int32
    # the high word of the product suffices (requantize's `wide`): 32-bit lanes throughout,
    # the product's high word a vpmuldq pair on AVX2, not 64-bit arithmetic shifts
    wide = k.attrs["mode"] == "even" and shifts is not None and bool(np.all(shifts <= -2))
    ties = bool(k.attrs["ties"])
    yt = cg.llvm_type(y.dtype)
    sums = [0] + list(range(4, len(k.instr.inputs)))  # X and the further chunks' sums

    def total(load, convert):
        """The sums' integer total (each exact in float32, their total perhaps not)."""
        acc = None
        for i in sums:
            v = convert(load(k.inp(i)))
            acc = v if acc is None else b.add(acc, v)
        return acc

    def ivec(ptr, off):
        return b.load(cg.gep(b, ptr, off, I32), typ=vec.ity, align=4)

    def put(acc, q, s, off):
        """Stores a vector of sums (bias added) at y[off...]."""
        r = acc if out32 else clamp(b, requantize(b, acc, q, s, k.attrs["mode"], wide, ties),
                                    k.attrs)
        b.store(b.trunc(r, ir.VectorType(yt, w)) if r.type != ir.VectorType(yt, w) else r,
                cg.gep(b, k.out(), off, yt), align=1)

    def one(i, bias, q, s):
        acc = b.add(total(lambda p: k.load(p, i, np.float32), lambda v: b.fptosi(v, I32)), bias)
        if out32:
            k.store(acc, k.out(), i)
        else:
            finish(k, acc, q, s, k.out(), i, y.dtype, wide)

    def param(const, idx, ch):
        return const if const is not None else k.load(k.inp(idx), ch, np.int32)

    if inner > 1:  # a plane per channel
        full = inner // w if w > 1 else 0
        with k.for_range(outer * c, name="nc") as nc:
            ch = b.urem(nc, k.c(c))
            bias, q, s = k.load(k.inp(1), ch, np.int32), param(q_c, 2, ch), param(s_c, 3, ch)
            base = b.mul(nc, k.c(inner))
            if full:
                splat = lambda v: v if isinstance(v, int) else vec.isplat(v)  # noqa: E731
                bv, qv, sv = vec.isplat(bias), splat(q), splat(s)
                with k.for_range(full, name="v") as t:
                    off = b.add(base, b.mul(t, k.c(w)))
                    put(b.add(total(lambda p: vec.load(p, off), lambda v: b.fptosi(v, vec.ity)),
                              bv), qv, sv, off)
            if full * w < inner:
                with k.for_range(inner, start=full * w, name="p") as p:
                    one(b.add(base, p), bias, q, s)
        return
    full = c // w if w > 1 else 0  # channels along the rows
    with k.for_range(outer, name="o") as o:
        base = b.mul(o, k.c(c))
        if full:
            with k.for_range(full, name="v") as t:
                c0 = b.mul(t, k.c(w))
                off = b.add(base, c0)
                qv = q_c if q_c is not None else ivec(k.inp(2), c0)
                sv = s_c if s_c is not None else ivec(k.inp(3), c0)
                put(b.add(total(lambda p: vec.load(p, off), lambda v: b.fptosi(v, vec.ity)),
                          ivec(k.inp(1), c0)), qv, sv, off)
        if full * w < c:
            with k.for_range(c, start=full * w, name="ch") as ch:
                one(b.add(base, ch), k.load(k.inp(1), ch, np.int32), param(q_c, 2, ch),
                    param(s_c, 3, ch))
