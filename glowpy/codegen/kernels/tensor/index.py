"""Axis-scan kernels: ArgMax, ArgMin, TopK, CumSum. Each loops over the [outer, inner] positions
of its `axis_layout` and walks the axis (stride `inner`) inside."""
from __future__ import annotations

from contextlib import contextmanager

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits
from glowpy.codegen.kernels.elementwise.logical import compare
from glowpy.ir.ops.index import axis_layout


@contextmanager
def _rows(k, outer, n, inner):
    """Yields (base input offset of the row, offset of position (o, i) in a [outer, inner] plane,
    o, i) for every row along the axis."""
    b = k.b
    with k.for_range(outer, name="o") as o:
        with k.for_range(inner, name="in") as i:
            yield b.add(b.mul(o, k.c(n * inner)), i), b.add(b.mul(o, k.c(inner)), i), o, i


def _better(b, v, best, dtype, largest: bool, or_equal: bool):
    """Does v replace best? NaN counts as the largest value (numpy's argmax/argmin pick it)."""
    op = (">" if largest else "<") + ("=" if or_equal else "")
    pred = {">": "Greater", ">=": "GreaterOrEqual", "<": "Less", "<=": "LessOrEqual"}[op]
    c = compare(b, pred, v, best, dtype)
    if cg.is_float(dtype):
        v_nan = b.fcmp_unordered("uno", v, v)
        best_nan = b.fcmp_unordered("uno", best, best)
        c = b.or_(b.and_(c, b.not_(best_nan)), b.and_(v_nan, b.not_(best_nan)))
        if or_equal:  # select_last_index: a later NaN replaces an earlier one
            c = b.or_(c, b.and_(v_nan, best_nan))
    return c


@emits("ArgMax", "ArgMin")
def emit_arg(k):
    b = k.b
    x = k.in_buf(0)
    ax = k.node.opdef.axis(k.node)
    outer, n, inner = axis_layout(x.shape, ax)
    ety = cg.llvm_type(x.dtype)
    best_p, idx_p = cg.alloca_in_entry(b, ety, "best"), cg.alloca_in_entry(b, cg.I64, "idx")
    last = bool(k.attrs["select_last_index"])
    with _rows(k, outer, n, inner) as (base, pos, _o, _i):
        b.store(k.load(k.inp(0), base, x.dtype), best_p)
        b.store(cg.const(cg.I64, 0), idx_p)
        with k.for_range(n, start=1, name="j") as j:
            v = k.load(k.inp(0), b.add(base, b.mul(j, k.c(inner))), x.dtype)
            best = b.load(best_p)
            take = _better(b, v, best, x.dtype, k.instr.op == "ArgMax", last)
            b.store(b.select(take, v, best), best_p)
            b.store(b.select(take, b.sext(j, cg.I64) if j.type != cg.I64 else j, b.load(idx_p)), idx_p)
        k.store(b.load(idx_p), k.out(), pos)


@emits("TopK")
def emit_topk(k):
    """Rank sort: an element's rank is the number of elements that precede it (better, or equal
    at a lower index); elements of rank < K are written at their rank. O(n^2) per row, no
    scratch memory, and the order is exactly the reference's."""
    b = k.b
    x = k.in_buf(0)
    ax, kk = k.node.opdef.params(k.node)
    outer, n, inner = axis_layout(x.shape, ax)
    largest = bool(k.attrs["largest"])
    rank_p = cg.alloca_in_entry(b, k.intp, "rank")
    if kk == 0:
        return
    with _rows(k, outer, n, inner) as (base, _pos, o, i):
        out_base = b.add(b.mul(o, k.c(kk * inner)), i)
        with k.for_range(n, name="j") as j:
            vj = k.load(k.inp(0), b.add(base, b.mul(j, k.c(inner))), x.dtype)
            b.store(k.c(0), rank_p)
            with k.for_range(n, name="m") as m:
                vm = k.load(k.inp(0), b.add(base, b.mul(m, k.c(inner))), x.dtype)
                ahead = compare(b, "Greater" if largest else "Less", vm, vj, x.dtype)
                tie = b.and_(compare(b, "Equal", vm, vj, x.dtype), b.icmp_signed("<", m, j))
                b.store(b.add(b.load(rank_p), b.zext(b.or_(ahead, tie), k.intp)), rank_p)
            r = b.load(rank_p)
            with cg.if_then(b, b.icmp_signed("<", r, k.c(kk))):
                dst = b.add(out_base, b.mul(r, k.c(inner)))
                k.store(vj, k.out(0), dst)
                k.store(b.sext(j, cg.I64) if j.type != cg.I64 else j, k.out(1), dst)


@emits("CumSum")
def emit_cumsum(k):
    b = k.b
    x = k.in_buf(0)
    ax = k.node.opdef.axis(k.node)
    outer, n, inner = axis_layout(x.shape, ax)
    ety = cg.llvm_type(x.dtype)
    add = b.fadd if cg.is_float(x.dtype) else b.add
    acc_p = cg.alloca_in_entry(b, ety, "acc")
    rev, excl = bool(k.attrs["reverse"]), bool(k.attrs["exclusive"])
    with _rows(k, outer, n, inner) as (base, _pos, _o, _i):
        b.store(cg.const(ety, 0), acc_p)
        with k.for_range(n, name="j") as j:
            jj = b.sub(k.c(n - 1), j) if rev else j
            off = b.add(base, b.mul(jj, k.c(inner)))
            v, acc = k.load(k.inp(0), off, x.dtype), b.load(acc_p)
            total = add(acc, v)
            b.store(total, acc_p)
            k.store(acc if excl else total, k.out(), off)
