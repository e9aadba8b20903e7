"""Kernels of GatherElements, GatherND, ScatterElements, ScatterND, MaxUnpool, Trilu and OneHot
(glowpy/ir/ops/scatter.py). Indices are read at run time (constant ones come from the
constant region like any operand); an index outside its dimension gathers 0 and scatters
nothing, so model data never addresses memory outside a buffer. Scatters copy the data, then
apply the updates in index order (what onnxruntime does for repeated indices)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits
from glowpy.codegen.kernels.elementwise.arith import emit_copy, scalar


def _index(k, ptr, off, dtype, dim: int):
    """(index as intp with negatives wrapped, is it inside 0..dim-1)."""
    b = k.b
    iv = k.load(ptr, off, dtype)
    if iv.type.width < k.intp.width:
        iv = b.sext(iv, k.intp)
    elif iv.type.width > k.intp.width:
        iv = b.trunc(iv, k.intp)
    iv = b.select(b.icmp_signed("<", iv, k.c(0)), b.add(iv, k.c(dim)), iv)
    ok = b.and_(b.icmp_signed(">=", iv, k.c(0)), b.icmp_signed("<", iv, k.c(dim)))
    return b.select(ok, iv, k.c(0)), ok


def _update(k, off, new, dtype):
    """out[off] = new, or reduction(out[off], new)."""
    red = k.attrs["reduction"]
    if red != "none":
        op = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}[red]
        new = scalar(k.b, op, {}, dtype, [k.load(k.out(), off, dtype), new], k.caps)
    k.store(new, k.out(), off)


def _zero(dtype):
    return cg.const(cg.llvm_type(dtype), 0)


@emits("GatherElements")
def emit_gather_elements(k):
    b = k.b
    x, idx = k.in_buf(0), k.in_buf(1)
    ax = k.attrs["axis"] % len(x.shape)
    xst, ost = cg.contiguous_strides(x.shape), cg.contiguous_strides(idx.shape)
    with k.loop_nest(idx.shape) as pos:
        o = cg.linear(b, pos, ost, 0, k.intp)
        iv, ok = _index(k, k.inp(1), o, idx.dtype, x.shape[ax])
        src = cg.linear(b, pos[:ax] + [iv] + pos[ax + 1:], xst, 0, k.intp)
        k.store(b.select(ok, k.load(k.inp(0), src, x.dtype), _zero(x.dtype)), k.out(), o)


@emits("ScatterElements", "Scatter")
def emit_scatter_elements(k):
    b = k.b
    x, idx, upd = k.in_buf(0), k.in_buf(1), k.in_buf(2)
    ax = k.attrs["axis"] % len(x.shape)
    emit_copy(k)
    xst, ist = cg.contiguous_strides(x.shape), cg.contiguous_strides(idx.shape)
    with k.loop_nest(idx.shape) as pos:
        o = cg.linear(b, pos, ist, 0, k.intp)
        iv, ok = _index(k, k.inp(1), o, idx.dtype, x.shape[ax])
        with cg.if_then(b, ok):
            _update(k, cg.linear(b, pos[:ax] + [iv] + pos[ax + 1:], xst, 0, k.intp),
                    k.load(k.inp(2), o, upd.dtype), x.dtype)


@emits("MaxUnpool")
def emit_max_unpool(k):
    """Zeros (LLVM makes the loop a memset), then each X element stored at its index in the
    flattened output."""
    b = k.b
    x, idx, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    total = int(np.prod(y.shape, dtype=np.int64))
    with k.for_range(total, name="z") as i:
        k.store(_zero(y.dtype), k.out(), i)
    with k.for_range(int(np.prod(x.shape, dtype=np.int64)), name="e") as i:
        iv, ok = _index(k, k.inp(1), i, idx.dtype, total)
        with cg.if_then(b, ok):
            k.store(k.load(k.inp(0), i, x.dtype), k.out(), iv)


def _nd_rows(k, x, idx, batch: int):
    """Loops over the index tuples of GatherND/ScatterND; yields (tuple number, offset of the
    addressed slice in x, all indices in range, slice length)."""
    b = k.b
    n = idx.shape[-1]
    tuples = int(np.prod(idx.shape[:-1], dtype=np.int64))
    per_batch = tuples // max(int(np.prod(idx.shape[:batch], dtype=np.int64)), 1)
    xst = cg.contiguous_strides(x.shape)
    inner = int(np.prod(x.shape[batch + n:], dtype=np.int64))
    with k.for_range(tuples, name="t") as t:
        base = b.mul(b.udiv(t, k.c(per_batch)), k.c(xst[batch - 1])) \
            if batch else k.c(0)
        ok = ir.Constant(cg.I1, 1)
        for j in range(n):
            iv, ok_j = _index(k, k.inp(1), b.add(b.mul(t, k.c(n)), k.c(j)), idx.dtype, x.shape[batch + j])
            base = b.add(base, b.mul(iv, k.c(xst[batch + j])))
            ok = b.and_(ok, ok_j)
        yield t, base, ok, inner


@emits("GatherND")
def emit_gather_nd(k):
    b = k.b
    x, idx = k.in_buf(0), k.in_buf(1)
    for t, base, ok, inner in _nd_rows(k, x, idx, k.attrs["batch_dims"]):
        with k.for_range(inner, name="e") as e:
            v = k.load(k.inp(0), b.add(base, e), x.dtype)
            k.store(b.select(ok, v, _zero(x.dtype)), k.out(), b.add(b.mul(t, k.c(inner)), e))


@emits("ScatterND")
def emit_scatter_nd(k):
    b = k.b
    x, idx, upd = k.in_buf(0), k.in_buf(1), k.in_buf(2)
    emit_copy(k)
    for t, base, ok, inner in _nd_rows(k, x, idx, 0):
        with cg.if_then(b, ok):
            with k.for_range(inner, name="e") as e:
                _update(k, b.add(base, e), k.load(k.inp(2), b.add(b.mul(t, k.c(inner)), e), upd.dtype),
                        x.dtype)


@emits("Trilu")
def emit_trilu(k):
    b = k.b
    x = k.in_buf(0)
    rows, cols = x.shape[-2:]
    d = max(min(k.node.opdef.diagonal(k.node), cols), -rows)  # beyond: all kept or all zero
    upper = bool(k.attrs["upper"])
    shape = (int(np.prod(x.shape[:-2], dtype=np.int64)), rows, cols)
    with k.loop_nest(shape) as (m, i, j):
        o = cg.linear(b, [m, i, j], cg.contiguous_strides(shape), 0, k.intp)
        diff = b.sub(j, i)  # keep j - i >= d (upper) or <= d (lower)
        keep = b.icmp_signed(">=" if upper else "<=", diff, k.c(d))
        k.store(b.select(keep, k.load(k.inp(0), o, x.dtype), _zero(x.dtype)), k.out(), o)


@emits("OneHot")
def emit_one_hot(k):
    b = k.b
    idx, vals = k.in_buf(0), k.in_buf(2)
    depth, ax = k.node.opdef.layout(k.node)
    pre = int(np.prod(idx.shape[:ax], dtype=np.int64))
    post = int(np.prod(idx.shape[ax:], dtype=np.int64))
    off, on = k.load(k.inp(2), 0, vals.dtype), k.load(k.inp(2), 1, vals.dtype)
    with k.loop_nest((pre, depth, post)) as (o, d, p):
        src = b.add(b.mul(o, k.c(post)), p)
        if cg.is_float(idx.dtype):  # truncated, as numpy's astype; NaN and far values hit nothing
            x = k.load(k.inp(0), src, idx.dtype)
            fits = b.and_(b.fcmp_ordered(">", x, cg.const(x.type, -depth - 1)),
                          b.fcmp_ordered("<", x, cg.const(x.type, depth)))
            iv = b.fptosi(b.select(fits, x, cg.const(x.type, 0)), k.intp)
            iv = b.select(b.icmp_signed("<", iv, k.c(0)), b.add(iv, k.c(depth)), iv)
            iv = b.select(fits, iv, k.c(-1))
        else:
            iv, ok = _index(k, k.inp(0), src, idx.dtype, depth)
            iv = b.select(ok, iv, k.c(-1))
        hot = b.icmp_signed("==", iv, d)
        k.store(b.select(hot, on, off), k.out(), cg.linear(b, [o, d, p], [depth * post, post, 1], 0, k.intp))
