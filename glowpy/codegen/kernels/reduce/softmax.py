"""Softmax and LogSoftmax of float32 on the target's vectors (the `vector` variant; other
dtypes take the scalar `default` in reductions.py).

Three passes over each softmax group, each on whole vectors: the maximum, exp(x - max) with
its sum (Softmax stores the exponentials into the output on the way), then the output scaled
by 1/sum (Softmax) or x - max - log(sum) (LogSoftmax). The lanes run along the reduced axis
when it is the last one (one row at a time, the sums and maxima reduced across the lanes at
the end of the row) and along the inner dimension otherwise (the reduced axis is then a
stride; every lane is its own softmax, the last vector of the inner dimension masked). Each
IR vector spans up to four registers (Simd.widened); a row's remainder after them runs on
single registers, the last one masked. The scalar kernel took 411 us for (1,4,128,128) over
the last axis on an AVX2 Zen 3, this one 53, onnxruntime 40 (benchmarks/op_probe.py).

Softmax keeps its exponentials scaled by 2^64 (exp_nonpositive's times_2_64: normal down to
the clamp, one multiply fewer per vector; the scale divides out with the sum), the maximum is
one vmaxps (a NaN reaches every output through the sum), and the tail no longer takes a wide
vector. AVX2 code on a Zen 4 against onnxruntime's AVX2 kernels, (1,6,577,577): 892 -> 838
us (onnxruntime 775); (1,3,197,197): 59.6 -> 53.6 (55.7); (1,12,128,128): 94.8 -> 89.1 (91.2).
LogSoftmax's sum takes the scaled exponentials too: (1,6,577,577) 930 -> 886 us (onnxruntime
800). Rows that come from memory, (1,8,850,850), stay level at 2.5 ms: the passes wait on
loads. Prefetching the next row during the exp pass gained 3-4% on rows of 577 and lost 4%
on rows of 850; not kept."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant


def plan(k):
    """{} for float32 (Vec's lanes are float32)."""
    return {} if k.in_buf(0).dtype == np.float32 else None


def _finisher(vec, mx, s, log):
    """The output as a function of the value the last pass loads (the input for LogSoftmax,
    the stored exponential for Softmax), given the group's max and sum of exponentials (the
    exponentials and their sum scaled by 2^64: exp_nonpositive's times_2_64)."""
    b = vec.b
    if log:
        # (x - max) - log(sum): folding max + log(sum) into one shift first loses the small
        # results to cancellation when the inputs are large; the sum is unscaled first (an
        # exact multiply: log(sum * 2^64) - 64 log 2 would round at the scale of 44)
        ls = mathfn.log(b, b.fmul(s, cg.const(s.type, 2.0 ** -64)))
        return lambda x: b.fsub(b.fsub(x, mx), ls)
    inv = b.fdiv(cg.const(s.type, 1.0), s)
    return lambda e: b.fmul(e, inv)


def _max(b, v, acc):
    """The larger of v and acc, one vmaxps: a NaN in v is skipped here, but it reaches the
    group's sum through exp (NaN - max is NaN), and a NaN sum makes every output NaN, as
    numpy's max-first reference does."""
    return b.select(b.fcmp_ordered(">", v, acc), v, acc)


def _sweep(vecs, base, count, init, step, op):
    """op over the lanes of step(vec, offset, mask, acc) swept over `count` elements from
    `base`: vecs[0] (several registers wide) over the whole wide vectors, vecs[1] (one
    register) over the rest, its last vector masked. The tail then costs at most a register
    per element pass, not a wide vector: a row of 577 floats on AVX-512 code took a 64-lane
    vector for its last element."""
    wide, narrow = vecs
    b = wide.b
    full = count - count % wide.w
    acc = wide.reduce(wide.sweep(base, full, init(wide), lambda o, m, a: step(wide, o, m, a)), op)
    if full < count:
        tail = narrow.sweep(b.add(base, wide.k.c(full)), count - full, init(narrow),
                            lambda o, m, a: step(narrow, o, m, a))
        acc = op(acc, narrow.reduce(tail, op))
    return acc


def _rows(k, vecs, outer, r, log):
    """Softmax over the last axis: `outer` contiguous rows of r."""
    b = k.b
    x, y = k.inp(0), k.out()
    pick = lambda p, q: _max(b, p, q)  # noqa: E731

    def vmax(v, off, mask, acc):
        return _max(b, v.load(x, off, mask, fill=-np.inf), acc)

    with k.for_range(outer, name="o") as o:
        base = b.mul(o, k.c(r))
        mx = _sweep(vecs, base, r, lambda v: cg.const(v.ty, -np.inf), vmax, pick)

        def vsum(v, off, mask, acc):
            e = mathfn.exp_nonpositive(b, b.fsub(v.load(x, off, mask), v.splat(mx)), times_2_64=True)
            if not log:
                v.store(e, y, off, mask)
            return b.fadd(acc, v.keep(e, mask))

        s = _sweep(vecs, base, r, lambda v: v.zero(), vsum, b.fadd)

        def out(v, off, mask, acc):
            fin = _finisher(v, v.splat(mx), v.splat(s), log)
            v.store(fin(v.load(x if log else y, off, mask)), y, off, mask)
            return acc

        _sweep(vecs, base, r, lambda v: v.zero(), out, b.fadd)


def _columns(k, vec, outer, r, inner, log):
    """Softmax over a non-last axis: every lane is one softmax group, r elements `inner` apart;
    the lanes cover the inner dimension a vector at a time (the last one masked)."""
    b, w = k.b, vec.w
    full, rem = divmod(inner, w)
    x, y = k.inp(0), k.out()

    def group(base, mask):
        with cg.for_range_carry(b, r, [cg.const(vec.ty, -np.inf)], intp=k.intp, name="m") as lp:
            off = b.add(base, b.mul(lp.index, k.c(inner)))
            lp.carry([_max(b, vec.load(x, off, mask), lp.values[0])])
        mx = lp.results[0]
        with cg.for_range_carry(b, r, [vec.zero()], intp=k.intp, name="s") as lp:
            off = b.add(base, b.mul(lp.index, k.c(inner)))
            e = mathfn.exp_nonpositive(b, b.fsub(vec.load(x, off, mask), mx), times_2_64=True)
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
    simd = Simd.of(k.caps)
    log = k.instr.op == "LogSoftmax"
    if inner == 1:
        _rows(k, (Vec(k, simd.widened(r)), Vec(k, simd)), outer, r, log)
    else:
        _columns(k, Vec(k, simd.widened(inner)), outer, r, inner, log)
