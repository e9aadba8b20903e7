"""The float32 Reduce* family on the target's vectors (the `vector` variant; integer dtypes,
ReduceLogSumExp, reduced axes that are not one block and scalar targets take reductions.py's
`default`).

The reduced axes, once the size-1 ones are set aside, are one block of the shape: the input is
(outer, r, inner) and the output (outer, inner). With inner = 1 (ReduceMean over H, W as
torchvision's mnasnet and timm pool; ReduceMax over the points of PointNet) each row of r is
swept a vector at a time, the last one masked with the operation's identity, and its lanes
combined at the end of the row; otherwise (ReduceMean over the channels of NCHW, CBAM's
spatial attention) every lane is its own reduction, r vectors `inner` apart, the last vector
of the inner dimension masked. Each IR vector spans up to four registers (Simd.widened), so
four independent running results hide the add's or the compare's latency where the scalar
kernel waits on one: PointNet's ReduceMax over (1, 1024, 2048) took 4.57 M cycles scalar
(2.2 a float; Zen 4, AVX2 code, -instrument-profile). The reductions' steps are the scalar
kernel's (reduce_steps), on vectors."""
from __future__ import annotations

import math

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.elementwise.arith import fmax, fmin
from glowpy.codegen.kernels.reduce.reductions import reduce_steps
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant

IDENTITY = {"ReduceMax": -np.inf, "ReduceMin": np.inf, "ReduceProd": 1.0}  # the others: 0
OPS = ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
       "ReduceL2", "ReduceSumSquare", "ReduceLogSum")


def layout(node) -> tuple[int, int, int] | None:
    """(outer, r, inner) where the reduced axes other than size-1 ones are one block of the
    shape (kept size-1 axes inside it allowed), else None."""
    shape = node.inputs[0].shape
    axes = sorted(a for a in node.opdef.reduced_axes(node) if shape[a] != 1)
    if not axes or 0 in shape:
        return None
    lo, hi = axes[0], axes[-1]
    if any(shape[a] != 1 for a in range(lo, hi + 1) if a not in axes):
        return None
    return math.prod(shape[:lo]), math.prod(shape[lo:hi + 1]), math.prod(shape[hi + 1:])


def plan(k):
    """{} for a float32 reduction of OPS with a layout on a vector target."""
    ok = k.in_buf(0).dtype == np.float32 and k.out_buf().dtype == np.float32 and \
        Simd.of(k.caps).width > 1 and layout(k.node) is not None
    return {} if ok else None


def _rows(k, vec, outer, r):
    """inner = 1: `outer` contiguous rows of r, each combined across the lanes at its end."""
    b, op = k.b, k.instr.op
    init, update, _ = reduce_steps(op, b, np.float32, vec.ty, k.caps)
    _, _, finish = reduce_steps(op, b, np.float32, cg.F32, k.caps)
    fill = IDENTITY.get(op, 0.0)
    combine = {"ReduceMax": lambda p, q: fmax(b, p, q), "ReduceMin": lambda p, q: fmin(b, p, q),
               "ReduceProd": b.fmul}.get(op, b.fadd)

    def step(off, mask, acc):
        return update(acc, vec.load(k.inp(0), off, mask, fill=fill))

    with k.for_range(outer, name="o") as o:
        s = vec.reduce(vec.sweep(b.mul(o, k.c(r)), r, init, step), combine)
        k.store(finish(s, r) if finish else s, k.out(), o)


def _columns(k, vec, outer, r, inner):
    """inner > 1: every lane its own reduction of r elements `inner` apart."""
    b, w, op = k.b, vec.w, k.instr.op
    init, update, finish = reduce_steps(op, b, np.float32, vec.ty, k.caps)
    fill = IDENTITY.get(op, 0.0)
    full, rem = divmod(inner, w)

    def group(src, dst, mask):
        with cg.for_range_carry(b, r, [init], intp=k.intp, name="r") as lp:
            off = b.add(src, b.mul(lp.index, k.c(inner)))
            lp.carry([update(lp.values[0], vec.load(k.inp(0), off, mask, fill=fill))])
        acc = lp.results[0]
        vec.store(finish(acc, r) if finish else acc, k.out(), dst, mask)

    with k.for_range(outer, name="o") as o:
        src, dst = b.mul(o, k.c(r * inner)), b.mul(o, k.c(inner))
        if full:
            with k.for_range(full, name="t") as t:
                at = b.mul(t, k.c(w))
                group(b.add(src, at), b.add(dst, at), None)
        if rem:
            group(b.add(src, k.c(full * w)), b.add(dst, k.c(full * w)),
                  tuple(lane < rem for lane in range(w)))


def _emit(k, params):
    outer, r, inner = layout(k.node)
    vec = Vec(k, Simd.of(k.caps).widened(r if inner == 1 else inner))
    if inner == 1:
        _rows(k, vec, outer, r)
    else:
        _columns(k, vec, outer, r, inner)


for _op in OPS:
    variant(_op, "vector", rank=10, plan=plan)(_emit)
