"""GridSample's kernel (glowpy/ir/ops/grid.py holds the op and its numpy reference, step for
step the arithmetic here): per block of output positions, the grid's coordinates become each
position's tap offsets and weights once, in a table that every channel's plane is then sampled
through (emit_grid_sample). onnxruntime computes the coordinates again for every channel.

Model data never addresses memory outside X: a coordinate is first held to +-2**22 (NaN to
-2**22), where floor and the tap arithmetic are exact and the conversion to an integer is
defined. Every tap index is then either checked (zeros padding: 0 outside) or clamped onto the
input (border, reflection)."""
from __future__ import annotations

import itertools

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn as mf
from glowpy.codegen.registry import emits
from glowpy.ir.ops.grid import CUBIC_A, SAFE, Sampling, borders

F32 = ir.FloatType()


def _f(v):
    return ir.Constant(F32, float(np.float32(v)))


def _reflect(b, x, lo: float, hi: float):
    """grid.reflect on one float."""
    rng = float(np.float32(hi - lo))
    if rng == 0:
        return _f(lo)
    below, above = b.fcmp_ordered("<", x, _f(lo)), b.fcmp_ordered(">", x, _f(hi))
    dx = b.select(below, b.fsub(_f(lo), x), b.select(above, b.fsub(x, _f(hi)), _f(0)))
    n = mf.floor(b, b.fdiv(dx, _f(rng)))
    r = b.fsub(dx, b.fmul(n, _f(rng)))
    half = b.fmul(n, _f(0.5))
    odd = b.fcmp_ordered("!=", mf.floor(b, half), half)
    from_lo, from_hi = b.fadd(_f(lo), r), b.fsub(_f(hi), r)
    return b.select(below, b.select(odd, from_hi, from_lo),
                    b.select(above, b.select(odd, from_lo, from_hi), x))


def _clamp_int(k, i, size: int):
    b = k.b
    i = b.select(b.icmp_signed("<", i, k.c(0)), k.c(0), i)
    return b.select(b.icmp_signed(">", i, k.c(size - 1)), k.c(size - 1), i)


def _tap(k, s: Sampling, d: int, xi):
    """(index, valid or None) of the tap at integer-valued float xi along dim d
    (grid._tap_index)."""
    b, size = k.b, s.dims[d]
    if s.padding == "reflection":
        xi = _reflect(b, xi, *borders(size, s.align))
    i = b.fptosi(xi, k.intp)  # |xi| < 2**22 + 3
    if s.padding == "zeros":
        ok = b.and_(b.icmp_signed(">=", i, k.c(0)), b.icmp_signed("<", i, k.c(size)))
        return b.select(ok, i, k.c(0)), ok
    return _clamp_int(k, i, size), None  # border: the clamp; reflection: already inside


def _cubic(b, t):
    """grid.cubic_weights at fraction t >= 0, operation for operation."""
    a = float(CUBIC_A)
    one, two = _f(1), _f(2)

    def outer(u):  # ((a u - 5a) u + 8a) u - 4a
        v = b.fsub(b.fmul(_f(a), u), _f(5 * a))
        return b.fsub(b.fmul(b.fadd(b.fmul(v, u), _f(8 * a)), u), _f(4 * a))

    def inner(u):  # ((a + 2) u - (a + 3)) u u + 1
        v = b.fsub(b.fmul(_f(a + 2), u), _f(a + 3))
        return b.fadd(b.fmul(b.fmul(v, u), u), one)
    return [outer(b.fadd(t, one)), inner(t), inner(b.fsub(one, t)), outer(b.fsub(two, t))]


def _dim_taps(k, s: Sampling, d: int, g):
    """[(index, valid or None, weight or None)] along dim d for the normalized coordinate g
    (grid.dim_taps)."""
    b, size = k.b, s.dims[d]
    if s.align:
        x = b.fmul(b.fmul(b.fadd(g, _f(1)), _f(0.5)), _f(size - 1))
    else:
        x = b.fmul(b.fsub(b.fmul(b.fadd(g, _f(1)), _f(size)), _f(1)), _f(0.5))
    x = b.select(b.fcmp_ordered(">", x, _f(float(SAFE))), _f(float(SAFE)), x)
    x = b.select(b.fcmp_unordered("<", x, _f(-float(SAFE))), _f(-float(SAFE)), x)  # NaN too
    if s.mode == "nearest":
        x = mf.round_half_even(b, x)
    lo, hi = borders(size, s.align)
    if s.mode != "cubic" and s.padding != "zeros":
        out = b.or_(b.fcmp_ordered("<", x, _f(lo)), b.fcmp_ordered(">", x, _f(hi)))
        if s.padding == "border":
            inside = b.select(b.fcmp_ordered("<", x, _f(0)), _f(0), x)
            inside = b.select(b.fcmp_ordered(">", inside, _f(size - 1)), _f(size - 1), inside)
        else:
            inside = _reflect(b, x, lo, hi)
        x = b.select(out, inside, x)
    if s.mode == "nearest":
        return [_tap(k, s, d, x) + (None,)]
    x0 = mf.floor(b, x)
    if s.mode == "linear":
        ws, first = [b.fsub(b.fadd(x0, _f(1)), x), b.fsub(x, x0)], 0
    else:
        ws, first = _cubic(b, b.fsub(x, x0)), -1
    return [_tap(k, s, d, b.fadd(x0, _f(first + j))) + (w,) for j, w in enumerate(ws)]


TABLE = 2048  # tap entries per block of positions: 16 KiB of offsets and weights on the stack
TABLE_SMALL = 64  # where RAM is the budget (TargetCaps.memory_first): 512 bytes


@emits("GridSample")
def emit_grid_sample(k):
    """Per block of output positions: each position's taps (offset in the plane, -1 outside
    with zeros padding, and weight) into a stack table, then each channel's plane sampled
    through it. Computed per position and applied to all channels at once (positions outer),
    the taps of 64 channels' planes 48 KiB apart all fell in the same L1 sets: a 64 x 96 x 128
    flow warp took 7.5 ms, now 1.17 (onnxruntime 1.39; AVX2 code 1.43, Zen 4). The channel
    loop stays scalar: a vector of positions gathered per tap (llvm.masked.gather) was no
    faster with AVX-512 and 10% slower with AVX2 on that warp."""
    b = k.b
    x, g, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    if y.nbytes == 0:
        return
    s = Sampling(k.node)
    nb, c, nd = x.shape[0], x.shape[1], len(s.dims)
    space, points = int(np.prod(s.dims)), int(np.prod(g.shape[1:-1]))
    ety = cg.llvm_type(y.dtype)
    zero = cg.const(ety, 0)
    if space == 0:  # an empty input: every tap outside
        with k.for_range(int(np.prod(y.shape)), name="z") as i:
            k.store(zero, k.out(), i)
        return
    strides = cg.contiguous_strides(s.dims)
    ncombo = {"nearest": 1, "linear": 2, "cubic": 4}[s.mode] ** nd
    blk = max(1, min(points, (TABLE_SMALL if k.caps.memory_first else TABLE) // ncombo))
    ot = ir.IntType(32) if space < 2 ** 31 else ir.IntType(64)
    offs = cg.alloca_in_entry(b, ir.ArrayType(ot, ncombo * blk), "taps")
    wts = cg.alloca_in_entry(b, ir.ArrayType(F32, ncombo * blk), "weights") \
        if s.mode != "nearest" else None
    for t in (offs, wts):
        if t is not None:
            t.type = cg.PTR  # an untyped pointer, as the arguments are (llvmlite's view only)
    zeros = s.padding == "zeros"
    with k.for_range(nb, name="n") as n:
        with k.for_range(-(-points // blk), name="blk") as bi:
            p0 = b.mul(bi, k.c(blk))
            left = b.sub(k.c(points), p0)
            cnt = b.select(b.icmp_signed("<", left, k.c(blk)), left, k.c(blk))
            with k.for_range(cnt, name="j") as j:
                at = b.mul(b.add(b.mul(n, k.c(points)), b.add(p0, j)), k.c(nd))
                per_dim = [_dim_taps(k, s, d, k.load(k.inp(1), b.add(at, k.c(nd - 1 - d)),
                                                     np.float32)) for d in range(nd)]
                for ci, combo in enumerate(itertools.product(*per_dim)):
                    off, ok, w = k.c(0), None, None
                    for (i, valid, wd), st in zip(combo, strides):
                        off = b.add(off, b.mul(i, k.c(st)))
                        ok = valid if ok is None else (ok if valid is None else b.and_(ok, valid))
                        w = wd if w is None else b.fmul(w, wd)
                    if ok is not None:
                        off = b.select(ok, off, k.c(-1))
                    slot = b.add(j, k.c(ci * blk))
                    cg.store(b, b.trunc(off, ot) if ot.width < k.intp.width else off, offs, slot)
                    if w is not None:
                        cg.store(b, w, wts, slot)
            with k.for_range(c, name="c") as ch:
                plane = b.mul(b.add(b.mul(n, k.c(c)), ch), k.c(space))
                dst = b.add(b.mul(b.add(b.mul(n, k.c(c)), ch), k.c(points)), p0)
                with k.for_range(cnt, name="e") as e:
                    acc = None
                    for ci in range(ncombo):
                        slot = b.add(e, k.c(ci * blk))
                        off = cg.load(b, offs, slot, ot)
                        if ot.width < k.intp.width:
                            off = b.sext(off, k.intp)
                        if zeros:
                            outside = b.icmp_signed("<", off, k.c(0))
                            off = b.select(outside, k.c(0), off)
                        v = k.load(k.inp(0), b.add(plane, off), x.dtype)
                        if zeros:
                            v = b.select(outside, zero, v)
                        if wts is not None:
                            v = b.fmul(cg.load(b, wts, slot, F32), v)
                        acc = v if acc is None else b.fadd(acc, v)
                    k.store(acc, k.out(), b.add(dst, e))
