"""Axis-scan kernels: ArgMax, ArgMin, TopK, CumSum (and CumProd). Each loops over the [outer, inner] positions
of its `axis_layout` and walks the axis (stride `inner`) inside."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits, variant
from glowpy.codegen.kernels.elementwise.logical import compare
from glowpy.codegen.kernels.vectors import Simd, Vec
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


def plan_arg_rows(k):
    """{} for a float32 ArgMax / ArgMin along the innermost axis, rows of a vector or more, on
    a vector target; the rows run along the lanes (the scalar walk's chain of a compare and
    two selects per element took 1.1 ms for Hardmax's ArgMax over 256 rows of 1000 on the
    Zen 4, AVX-512 code, onnxruntime 86 us)."""
    x, simd = k.in_buf(0), Simd.of(k.caps)
    _, n, inner = axis_layout(x.shape, k.node.opdef.axis(k.node))
    return {} if x.dtype == np.float32 and simd.width > 1 and inner == 1 and n >= simd.width \
        else None


@variant("ArgMax", "vector", rank=10, plan=plan_arg_rows)
@variant("ArgMin", "vector", rank=10, plan=plan_arg_rows)
def emit_arg_rows(k, params):
    """Per row, each lane keeps the best value of its column of vectors and that value's
    index (the row's first vector, then the rest in a loop, the last one masked); the lanes
    are then merged (_first_best), ties going to the lower index (the higher with
    select_last_index), NaN the largest as in the scalar walk."""
    b, x = k.b, k.in_buf(0)
    outer, n, _ = axis_layout(x.shape, k.node.opdef.axis(k.node))
    largest, last = k.instr.op == "ArgMax", bool(k.attrs["select_last_index"])
    vec = Vec(k, Simd.of(k.caps).widened(n // 2))  # several registers only for long rows
    w = vec.w
    ity = ir.VectorType(cg.I32, w)
    full, rem = divmod(n, w)

    def better(v, best, or_equal):
        return _better(b, v, best, x.dtype, largest, or_equal)

    with k.for_range(outer, name="o") as o:
        row = b.mul(o, k.c(n))

        def step(t, mask, acc):
            """acc with the vector from element t of the row (an IR index) merged in."""
            v = vec.load(k.inp(0), b.add(row, t), mask)
            take = better(v, acc[0], last)
            if mask is not None:
                take = b.and_(take, ir.Constant(ir.VectorType(cg.I1, w), list(mask)))
            t32 = b.trunc(t, cg.I32) if t.type != cg.I32 else t
            lane0 = b.insert_element(ir.Constant(ity, ir.Undefined), t32, ir.Constant(cg.I32, 0))
            idx = b.add(b.shuffle_vector(lane0, ir.Constant(ity, ir.Undefined),
                                         ir.Constant(ity, [0] * w)), ir.Constant(ity, list(range(w))))
            return [b.select(take, v, acc[0]), b.select(take, idx, acc[1])]
        first = [vec.load(k.inp(0), row), ir.Constant(ity, list(range(w)))]
        with cg.for_range_carry(b, full, first, start=1, intp=k.intp, name="v") as lp:
            lp.carry(step(b.mul(lp.index, k.c(w)), None, lp.values))
        acc = lp.results
        if rem:
            acc = step(k.c(full * w), tuple(lane < rem for lane in range(w)), acc)
        k.store(b.sext(_first_best(b, vec, acc, largest, last), cg.I64), k.out(), o)


def _lanes(b, v, op, w):
    """op over the lanes of vector v, in every lane (rotating halving shuffles). Not
    Vec.reduce (lane 0 only) and a splat: built that way, _first_best came out wrong for about
    a quarter of 4096 random rows of 21 compiled for -mcpu znver4 (right for x86-64-v4), where
    this form is right for znver4, znver3, skylake-avx512, icelake-server and haswell."""
    h = w // 2
    while h:
        idx = ir.Constant(ir.VectorType(cg.I32, w), [(lane + h) % w for lane in range(w)])
        v = op(v, b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), idx))
        h //= 2
    return v


def _first_best(b, vec, acc, largest: bool, last: bool):
    """The index the lanes' (best value, its index) pairs give the row: the lanes holding NaN
    if any (NaN is the largest for both ops, as in _better), else those equal to the lanes'
    max (min), and among them the lowest index (the highest with select_last_index)."""
    v, idx = acc
    w = vec.w
    nan = b.fcmp_unordered("uno", v, v)
    worst = cg.const(v.type, -np.inf if largest else np.inf)
    keyed = b.select(nan, worst, v)
    pick = ">" if largest else "<"
    best = _lanes(b, keyed, lambda p, q: b.select(b.fcmp_ordered(pick, p, q), p, q), w)
    any_nan = b.icmp_unsigned("!=", b.bitcast(nan, ir.IntType(w)), ir.Constant(ir.IntType(w), 0))
    match = b.select(any_nan, nan, b.fcmp_ordered("==", keyed, best))
    ity = idx.type
    none = ir.Constant(ity, [-1 if last else 2 ** 31 - 1] * w)
    cand = b.select(match, idx, none)
    sel = (lambda p, q: b.select(b.icmp_signed(">", p, q), p, q)) if last else \
        (lambda p, q: b.select(b.icmp_signed("<", p, q), p, q))
    return b.extract_element(_lanes(b, cand, sel, w), ir.Constant(cg.I32, 0))


def _before(b, va, ia, vb, ib, dtype, largest: bool):
    """Does (value va, index ia) come before (vb, ib) in TopK's output? The reference's order:
    by value (descending for `largest`), ties by the lower index, NaN after every number
    (numpy's stable argsort of -x or x)."""
    key = compare(b, "Greater" if largest else "Less", va, vb, dtype)
    lower = b.icmp_signed("<", ia, ib)
    tie = b.and_(compare(b, "Equal", va, vb, dtype), lower)
    ahead = b.or_(key, tie)
    if not cg.is_float(dtype):
        return ahead
    a_nan, b_nan = b.fcmp_unordered("uno", va, va), b.fcmp_unordered("uno", vb, vb)
    return b.or_(b.and_(b.not_(a_nan), b.or_(b_nan, ahead)), b.and_(b.and_(a_nan, b_nan), lower))


@emits("TopK")
def emit_topk(k):
    """A heap of the K best so far per row, kept in the row's own output slots with the worst
    at the root: each further element that comes before the root replaces it and sinks
    (O(n log K)); then the heap is sorted in place, worst to the last slot first. The order is
    the reference's (_before). The rank sort it replaced was O(n^2): a detector's top 300 of
    8,400 anchors took 16.6 ms against onnxruntime's 25 us (Zen 4, AVX2 code). Sift loops run
    a fixed log2(K) + 1 levels, a flag ending the walk early (no open-ended loops)."""
    b = k.b
    x = k.in_buf(0)
    ax, kk = k.node.opdef.params(k.node)
    outer, n, inner = axis_layout(x.shape, ax)
    largest = bool(k.attrs["largest"])
    if kk == 0:
        return
    levels = kk.bit_length()
    pos_p = cg.alloca_in_entry(b, k.intp, "heap_pos")
    done_p = cg.alloca_in_entry(b, cg.I1, "heap_done")
    vals, idxs = k.out(0), k.out(1)

    # float32 rows keep one 64-bit rank key per heap slot (in the index output) in place of
    # the index: the value's order as an unsigned integer above the complemented index, so the
    # reference's order (_before: by value, ties by the lower index, NaN after every number)
    # is one unsigned compare; the indices are recovered from the keys at the end. AVX2 code
    # on a Zen 4: the top 300 of 8,400 71 -> 27 us (onnxruntime 27), the top 5 of 64 rows of
    # 1,000 63 -> 34 us (onnxruntime 54), old and new alternating
    keyed = x.dtype == np.float32 and n < 2 ** 32

    def as_i64(j):
        return b.sext(j, cg.I64) if j.type != cg.I64 else j

    def key(v, j):
        bits = b.bitcast(b.fadd(v, cg.const(cg.F32, 0.0)), cg.I32)  # (-0 as +0: they tie)
        order = b.select(b.icmp_signed("<", bits, ir.Constant(cg.I32, 0)), b.not_(bits),
                         b.xor(bits, ir.Constant(cg.I32, -2 ** 31)))
        rank = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(cg.I32, 0),
                        order if largest else b.not_(order))
        low = b.sub(ir.Constant(cg.I64, 2 ** 32 - 1), as_i64(j))
        return b.or_(b.shl(b.zext(rank, cg.I64), ir.Constant(cg.I64, 32)), low)

    def entry(v, j):
        return (v, key(v, j)) if keyed else (v, as_i64(j))

    with _rows(k, outer, n, inner) as (base, _pos, o, i):
        out_base = b.add(b.mul(o, k.c(kk * inner)), i)
        slot = lambda r: b.add(out_base, b.mul(r, k.c(inner)))  # noqa: E731

        def get(r):
            return k.load(vals, slot(r), x.dtype), k.load(idxs, slot(r), "int64")

        def put(r, v, ix):
            k.store(v, vals, slot(r))
            k.store(ix, idxs, slot(r))

        def before(a, c):
            if keyed:
                return b.icmp_unsigned(">", a[1], c[1])
            return _before(b, a[0], a[1], c[0], c[1], x.dtype, largest)

        def walk(start, step):
            """step(pos) -> (continue?, next pos), over at most `levels` levels."""
            b.store(start, pos_p)
            b.store(cg.const(cg.I1, 0), done_p)
            with k.for_range(levels, name="lv"):
                with cg.if_then(b, b.not_(b.load(done_p))):
                    go, nxt = step(b.load(pos_p))
                    b.store(nxt, pos_p)
                    b.store(b.not_(go), done_p)

        def sift_down(size):
            def step(p):
                left = b.add(b.mul(p, k.c(2)), k.c(1))
                has = b.icmp_signed("<", left, size)
                left = b.select(has, left, k.c(0))  # (no slot past the heap is read)
                right = b.add(left, k.c(1))
                right = b.select(b.and_(has, b.icmp_signed("<", right, size)), right, left)
                lv, rv = get(left), get(right)
                worse_right = before(lv, rv)  # the child nearer the root's rank moves up
                c = b.select(worse_right, right, left)
                cv = (b.select(worse_right, rv[0], lv[0]), b.select(worse_right, rv[1], lv[1]))
                pv = get(p)
                swap = b.and_(has, before(pv, cv))
                with cg.if_then(b, swap):
                    put(p, *cv)
                    put(c, *pv)
                return swap, c
            walk(k.c(0), step)

        def sift_up(start):
            def step(c):
                q = b.udiv(b.sub(b.select(b.icmp_signed(">", c, k.c(0)), c, k.c(1)), k.c(1)), k.c(2))
                cv, qv = get(c), get(q)
                swap = b.and_(b.icmp_signed(">", c, k.c(0)), before(qv, cv))
                with cg.if_then(b, swap):
                    put(q, *cv)
                    put(c, *qv)
                return swap, q
            walk(start, step)

        with k.for_range(kk, name="j") as j:
            put(j, *entry(k.load(k.inp(0), b.add(base, b.mul(j, k.c(inner))), x.dtype), j))
            sift_up(j)

        def offer(j):
            e = entry(k.load(k.inp(0), b.add(base, b.mul(j, k.c(inner))), x.dtype), j)
            with cg.if_then(b, before(e, get(k.c(0)))):
                put(k.c(0), *e)
                sift_down(k.c(kk))

        rest = kk
        vec = Vec(k, Simd.of(k.caps))
        if vec.w > 1 and inner == 1 and x.dtype == np.float32 and n - kk >= vec.w:
            # whole vectors of the row first: most elements of a long row lose to the root (the
            # K-th best so far), and a vector none of whose lanes beats its value is skipped
            # with one compare; one that has a lane (or a NaN root, which every number beats)
            # offers its elements one by one. AVX2 code on a Zen 4: the top 5 of 64 rows of
            # 1,000 135 -> 47 us (onnxruntime 54); the top 300 of 8,400 66 -> 59 us, where
            # the heap's own sifts remain (the rank keys above: 27 us, onnxruntime 27)
            count = (n - kk) // vec.w
            with k.for_range(count, name="jv") as t:
                j0 = b.add(k.c(kk), b.mul(t, k.c(vec.w)))
                r = get(k.c(0))[0]
                hit = b.fcmp_ordered(">" if largest else "<", vec.load(k.inp(0), b.add(base, j0)),
                                     vec.splat(r))
                hit = b.icmp_unsigned("!=", b.bitcast(hit, ir.IntType(vec.w)),
                                      ir.Constant(ir.IntType(vec.w), 0))
                with cg.if_then(b, b.or_(hit, b.fcmp_unordered("uno", r, r))):
                    with k.for_range(b.add(j0, k.c(vec.w)), start=j0, name="jl") as j:
                        offer(j)
            rest = kk + count * vec.w
        if n > rest:
            with k.for_range(n, start=rest, name="j") as j:
                offer(j)
        if kk > 1:
            with k.for_range(kk - 1, name="t") as t:
                last = b.sub(k.c(kk - 1), t)
                root, tail = get(k.c(0)), get(last)
                put(k.c(0), *tail)
                put(last, *root)
                sift_down(last)
        if keyed:
            with k.for_range(kk, name="t") as t:
                low = b.and_(get(t)[1], ir.Constant(cg.I64, 2 ** 32 - 1))
                k.store(b.sub(ir.Constant(cg.I64, 2 ** 32 - 1), low), idxs, slot(t))


@emits("CumSum", "CumProd")
def emit_cumsum(k):
    b = k.b
    x = k.in_buf(0)
    ax = k.node.opdef.axis(k.node)
    outer, n, inner = axis_layout(x.shape, ax)
    ety = cg.llvm_type(x.dtype)
    prod = k.node.op == "CumProd"
    fl = cg.is_float(x.dtype)
    add = (b.fmul if fl else b.mul) if prod else (b.fadd if fl else b.add)
    acc_p = cg.alloca_in_entry(b, ety, "acc")
    rev, excl = bool(k.attrs["reverse"]), bool(k.attrs["exclusive"])
    with _rows(k, outer, n, inner) as (base, _pos, _o, _i):
        b.store(cg.const(ety, 1 if prod else 0), acc_p)
        with k.for_range(n, name="j") as j:
            jj = b.sub(k.c(n - 1), j) if rev else j
            off = b.add(base, b.mul(jj, k.c(inner)))
            v, acc = k.load(k.inp(0), off, x.dtype), b.load(acc_p)
            total = add(acc, v)
            b.store(total, acc_p)
            k.store(acc if excl else total, k.out(), off)
