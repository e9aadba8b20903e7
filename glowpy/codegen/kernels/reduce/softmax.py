"""Softmax and LogSoftmax of float32 on the target's vectors (the `vector` variant; other
dtypes take the scalar `default` in reductions.py).

Three passes over each softmax group, each on whole vectors: the maximum, exp(x - max) with
its sum (Softmax stores the exponentials into the output on the way), then the output scaled
by 1/sum (Softmax) or x - max - log(sum) (LogSoftmax). The lanes run along the reduced axis
when it is the last one (one row at a time, the sums and maxima reduced across the lanes at
the end of the row, the row's last vector masked) and along the inner dimension otherwise (the
reduced axis is then a stride; every lane is its own softmax, the last vector of the inner
dimension masked); each IR vector spans up to four registers (Simd.widened). The scalar
kernel took 411 us for (1,4,128,128) over the last axis on an AVX2 Zen 3, this one 53,
onnxruntime 40 (benchmarks/op_probe.py)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels.elementwise.arith import fmax
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant


def plan(k):
    """{} for float32 (Vec's lanes are float32)."""
    return {} if k.in_buf(0).dtype == np.float32 else None


def _finisher(vec, mx, s, log):
    """The output as a function of the value the last pass loads (the input for LogSoftmax,
    the stored exponential for Softmax), given the group's max and sum of exponentials."""
    b = vec.b
    if log:
        # (x - max) - log(sum): folding max + log(sum) into one shift first loses the small
        # results to cancellation when the inputs are large
        ls = mathfn.log(b, s)
        return lambda x: b.fsub(b.fsub(x, mx), ls)
    inv = b.fdiv(cg.const(s.type, 1.0), s)
    return lambda e: b.fmul(e, inv)


def _rows(k, vec, outer, r, log):
    """Softmax over the last axis: `outer` contiguous rows of r."""
    b = k.b
    x, y = k.inp(0), k.out()

    def vmax(off, mask, acc):
        return fmax(b, vec.load(x, off, mask, fill=-np.inf), acc)

    with k.for_range(outer, name="o") as o:
        base = b.mul(o, k.c(r))
        mx = vec.reduce(vec.sweep(base, r, cg.const(vec.ty, -np.inf), vmax), lambda p, q: fmax(b, p, q))
        mxv = vec.splat(mx)

        def vsum(off, mask, acc):
            e = mathfn.exp_nonpositive(b, b.fsub(vec.load(x, off, mask), mxv))
            if not log:
                vec.store(e, y, off, mask)
            return b.fadd(acc, vec.keep(e, mask))

        s = vec.splat(vec.reduce(vec.sweep(base, r, vec.zero(), vsum), b.fadd))
        fin = _finisher(vec, mxv, s, log)

        def out(off, mask, acc):
            vec.store(fin(vec.load(x if log else y, off, mask)), y, off, mask)
            return acc

        vec.sweep(base, r, vec.zero(), out)


def _columns(k, vec, outer, r, inner, log):
    """Softmax over a non-last axis: every lane is one softmax group, r elements `inner` apart;
    the lanes cover the inner dimension a vector at a time (the last one masked)."""
    b, w = k.b, vec.w
    full, rem = divmod(inner, w)
    x, y = k.inp(0), k.out()

    def group(base, mask):
        with cg.for_range_carry(b, r, [cg.const(vec.ty, -np.inf)], intp=k.intp, name="m") as lp:
            off = b.add(base, b.mul(lp.index, k.c(inner)))
            lp.carry([fmax(b, vec.load(x, off, mask), lp.values[0])])
        mx = lp.results[0]
        with cg.for_range_carry(b, r, [vec.zero()], intp=k.intp, name="s") as lp:
            off = b.add(base, b.mul(lp.index, k.c(inner)))
            e = mathfn.exp_nonpositive(b, b.fsub(vec.load(x, off, mask), mx))
            if not log:
                vec.store(e, y, off, mask)
            lp.carry([b.fadd(lp.values[0], e)])
        s = lp.results[0]  # masked-off lanes hold exp(0 - 0) sums: never stored
        fin = _finisher(vec, mx, s, log)
        with k.for_range(r, name="j") as j:
            off = b.add(base, b.mul(j, k.c(inner)))
            vec.store(fin(vec.load(x if log else y, off, mask)), y, off, mask)

    with k.for_range(outer, name="o") as o:
        base = b.mul(o, k.c(r * inner))
        if full:
            with k.for_range(full, name="t") as t:
                group(b.add(base, b.mul(t, k.c(w))), None)
        if rem:
            group(b.add(base, k.c(full * w)), tuple(lane < rem for lane in range(w)))


@variant("Softmax", "vector", rank=10, plan=plan)
@variant("LogSoftmax", "vector", rank=10, plan=plan)
def emit_softmax_vector(k, params):
    outer, r, inner = k.node.opdef.layout(k.node)
    vec = Vec(k, Simd.of(k.caps).widened(r if inner == 1 else inner))
    log = k.instr.op == "LogSoftmax"
    if inner == 1:
        _rows(k, vec, outer, r, log)
    else:
        _columns(k, vec, outer, r, inner, log)
