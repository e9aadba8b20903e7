"""Broadcasts whose contiguous runs are shorter than two vectors, in explicit vectors over the
flat output.

A float elementwise loop is one strided nest (arith.elementwise_loop) whose innermost loop LLVM
vectorizes. Where an operand is broadcast along the innermost dimension and the dimension is
short, that loop has no full vector: StyleGAN2's modulated weights (w0 [1, cout, cin, 3, 3]
times the style [1, 1, cin, 1, 1]) run 9 floats per style value, and LLVM vectorized the loop
over cin instead, with gathers and scatters at stride 9: 3.8 cycles a float, 35% of the model's
time on a Zen 5 (the same Mul without the broadcast: 0.24).

Here the two innermost dims (m rows of n, n short) are one flat run of m x n outputs, walked in
whole vectors of W lanes. Each operand walks them one of four ways: flat (strides (n, 1)), one
value per row (row: (1, 0)), one per column (column: (0, 1)), or one value (splat: (0, 0)).
Lane j of the vector at flat position f takes row (f + j) // n and column (f + j) % n: the
pattern repeats every lcm(W, n) floats, P = lcm(W, n) / W vectors, so the P vectors of a period
are emitted once, each with its compile-time shuffle: a row operand's vector is the few values
its lanes span (one small load) shuffled to W lanes, a column operand's is the n values
(loaded once per outer iteration) shuffled."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.elementwise.arith import scalar
from glowpy.codegen.kernels.elementwise.fused import fused_parts
from glowpy.codegen.kernels.epilogue import immediate
from glowpy.codegen.kernels.vector_epilogue import VECTOR_SAFE
from glowpy.codegen.kernels.vectors import F32, Simd, Vec
from glowpy.codegen.registry import variant
from glowpy.ir.ops.elementwise import BINARY, VARIADIC

# how an operand walks the m x n runs, by its (row, column) strides ((n, 1): flat)
KINDS = {(1, 0): "row", (0, 1): "column", (0, 0): "splat"}


def _parts(k):
    """(ops, operands read, element(get)): the instruction's per-element code (fused.py's for
    FusedElementwise)."""
    if k.instr.op == "FusedElementwise":
        return fused_parts(k)
    op, dtype = k.instr.op, k.out_buf().dtype
    used = [j for j, x in enumerate(k.instr.inputs) if x is not None]
    return [op], used, lambda get: scalar(k.b, op, k.attrs, dtype, [get(j) for j in used], k.caps)


def _layout(k):
    """(ops, operands read, element, loaded operands, runs), runs being (outer shape, outer
    strides per loaded operand and the output, m, n, kinds) or None where the variant does
    not apply: vector targets only, float32 throughout, ops whose code runs on vectors, and an
    innermost run n after collapsing shorter than two vectors (a vector loop with a scalar
    remainder serves longer runs: at most a vector of remainder a run, against two for
    n = 2W - 1). A run of exactly one vector is taken too: CapsNet's routing weights
    [1, 1152, 10, 1] times its predictions [1, 1152, 10, 16] took 3.6 cycles a float in the
    loop (LLVM vectorized the outer loop with gathers, as for StyleGAN2's runs of 9)."""
    ops, used, element = _parts(k)
    out = k.out_buf()
    loaded = [j for j in used if immediate(k, j) is None]
    w = k.caps.float_lanes
    dtypes = [k.in_buf(j).dtype for j in used] + [out.dtype]
    if w <= 1 or any(np.dtype(d) != np.float32 for d in dtypes) or not set(ops) <= VECTOR_SAFE:
        return ops, used, element, loaded, None
    shape, strides = cg.collapse(out.shape, [cg.broadcast_strides(k.in_buf(j).shape, out.shape)
                                             for j in loaded] + [cg.contiguous_strides(out.shape)])
    if len(shape) < 2:
        return ops, used, element, loaded, None
    m, n = shape[-2:]
    kinds = [{**KINDS, (n, 1): "flat"}.get(tuple(st[-2:])) for st in strides]
    if n >= 2 * w or m * n < w or kinds[-1] != "flat" or None in kinds:
        return ops, used, element, loaded, None
    return ops, used, element, loaded, (shape[:-2] or [1], [st[:-2] or [0] for st in strides],
                                        m, n, kinds)


def plan(k):
    """{rows, run, operands} where the runs apply (_layout), else None."""
    runs = _layout(k)[-1]
    if runs is None:
        return None
    _, _, m, n, kinds = runs
    return {"rows": m, "run": n, "operands": kinds[:-1]}


def emit(k, params):
    _, _, element, loaded, runs = _layout(k)

    def compute(vals, ty):
        got = dict(zip(loaded, vals))
        return element(lambda j: got[j] if j in got else cg.const(ty, immediate(k, j).constant))
    run_loop(k, runs, [k.inp(j) for j in loaded] + [k.out()], compute)
    k.epilogue_done = True


for _op in sorted((set(BINARY) | set(VARIADIC)) & VECTOR_SAFE) + ["FusedElementwise"]:
    variant(_op, "runs", rank=10, plan=plan)(emit)


def run_loop(k, runs, ptrs, compute):
    """Emits the runs of _layout's result: ptrs[i] is loaded operand i's base pointer (the
    output's last); compute(values, ty) gives the output vector from the loaded operands'
    vectors (of IR type ty)."""
    outer, ostrides, m, n, kinds = runs
    vec = Vec(k, Simd.of(k.caps))
    w, b = vec.w, k.b
    period = math.lcm(w, n)
    full, rest = divmod(m * n, period)
    intp = k.intp

    def at(base, q, per, extra):
        """base + q * per + extra (q an IR index or an int)."""
        off = base
        if isinstance(q, int):
            extra += q * per
        elif per:
            off = b.add(off, b.mul(q, ir.Constant(intp, per)))
        return b.add(off, ir.Constant(intp, extra)) if extra else off

    with k.strided_loop(outer, ostrides) as base:
        held = {}
        for i, kind in enumerate(kinds[:-1]):
            if kind == "column":
                held[i] = vec.load(ptrs[i], base[i], n=n)
            elif kind == "splat":
                held[i] = vec.load_splat(ptrs[i], base[i])

        def vector(q, f, lanes):
            """The output vector at flat position f of period q, its first `lanes` lanes."""
            mask = None if lanes == w else tuple(j < lanes for j in range(w))
            vals = []
            for i, kind in enumerate(kinds[:-1]):
                if kind == "flat":
                    vals.append(vec.load(ptrs[i], at(base[i], q, period, f), mask))
                elif kind == "splat":
                    vals.append(held[i])
                elif kind == "column":
                    vals.append(_spread(b, held[i], [(f + j) % n for j in range(lanes)], w))
                else:
                    lo, hi = f // n, (f + lanes - 1) // n
                    few = _load(b, vec, ptrs[i], at(base[i], q, period // n, lo), hi - lo + 1)
                    vals.append(_spread(b, few, [(f + j) // n - lo for j in range(lanes)], w))
            vec.store(compute(vals, vec.ty), ptrs[-1], at(base[-1], q, period, f), mask)

        if full:
            with cg.for_range(b, full, intp=intp, name="run", unroll=False) as q:
                for f in range(0, period, w):
                    vector(q, f, w)
        for f in range(0, rest, w):
            vector(full, f, min(w, rest - f))


def _load(b, vec, ptr, off, count):
    """`count` floats at ptr[off] as a vector (one lane: a splat of the whole width)."""
    if count == 1:
        return vec.load_splat(ptr, off)
    return b.load(cg.gep(b, ptr, off, F32), typ=ir.VectorType(F32, count), align=4)


def _spread(b, v, lanes, w):
    """A vector of w lanes: lane j is v's element lanes[j] (the lanes past them repeat the
    last)."""
    idx = lanes + [lanes[-1]] * (w - len(lanes))
    if v.type.count == w and idx == list(range(w)):
        return v
    return b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                            ir.Constant(ir.VectorType(cg.I32, w), idx))
