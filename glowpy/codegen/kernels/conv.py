"""Sliding-window kernels: Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

Every window op is written as "for each tap, update a run of output positions": the innermost
loop walks the last spatial dim over the range of outputs for which that tap lands inside the
input (computed in Python from the static shapes), so it has no bounds checks and vectorizes."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels import conv_fast, emits, fused, pool_fast
from glowpy.codegen.kernels.elementwise import fmax
from glowpy.errors import ModelError
from glowpy.ir.ops.conv import Window

CONTRACT = ("contract",)
UNROLL_TAPS = 16  # last-dim taps unrolled in Python up to this kernel width


def _flatten_pointwise(win: Window) -> Window:
    """A 1x1, stride-1, unpadded window over N-D is the same as one over the flattened plane."""
    if all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides) and \
            not any(win.pads_begin) and not any(win.pads_end) and len(win.in_size) > 1:
        n = int(np.prod(win.in_size))
        return Window((n,), (n,), (1,), (1,), (1,), (0,), (0,))
    return win


def for_each_tap(k, win: Window, body):
    """Calls body(out_outer_offset, in_outer_offset, tap_index_list, lo, hi, ...) for every
    kernel tap, inside IR loops over the outer output dims and the outer taps whose input row is
    valid. Offsets are element offsets within one (n, c) plane; `body` receives:
      o_row: offset of output row start, i_row: offset of input row start (at input col 0),
      taps: [ir or int] tap indices, k_last: python int or ir value, lo/hi: the valid output
      range along the last dim (ir values), in_col(o): input column for output column o."""
    b = k.b
    nd = len(win.in_size)
    in_st, out_st = cg.contiguous_strides(win.in_size), cg.contiguous_strides(win.out_size)
    last = nd - 1

    def outer(d, o_off, i_off, taps):
        if d == last:
            return inner(o_off, i_off, taps)
        with k.for_range(win.out_size[d], name=f"o{d}") as o:
            with k.for_range(win.kernel[d], name=f"t{d}") as t:
                pos = b.add(b.sub(b.mul(o, k.c(win.strides[d])), k.c(win.pads_begin[d])),
                            b.mul(t, k.c(win.dilations[d])))
                ok = b.and_(b.icmp_signed(">=", pos, k.c(0)),
                            b.icmp_signed("<", pos, k.c(win.in_size[d])))
                with cg.if_then(b, ok):
                    outer(d + 1, b.add(o_off, b.mul(o, k.c(out_st[d]))),
                          b.add(i_off, b.mul(pos, k.c(in_st[d]))), taps + [t])

    def inner(o_off, i_off, taps):
        s, p, dl = win.strides[last], win.pads_begin[last], win.dilations[last]
        if win.kernel[last] <= UNROLL_TAPS:
            for t in range(win.kernel[last]):
                lo, hi = win.valid_range(last, t)
                if lo < hi:
                    body(o_off, i_off, taps + [t], k.c(lo), k.c(hi), t * dl - p)
        else:
            with k.for_range(win.kernel[last], name="tl") as t:
                base = b.sub(b.mul(t, k.c(dl)), k.c(p))  # input col = o*s + base
                lo = cg.floordiv(b, b.sub(k.c(s - 1), base), s)
                hi = b.add(cg.floordiv(b, b.sub(k.c(win.in_size[last] - 1), base), s), k.c(1))
                lo = b.select(b.icmp_signed("<", lo, k.c(0)), k.c(0), lo)
                hi = b.select(b.icmp_signed(">", hi, k.c(win.out_size[last])), k.c(win.out_size[last]), hi)
                body(o_off, i_off, taps + [t], lo, hi, base)

    outer(0, k.c(0), k.c(0), [])


def _in_col(k, o, win, base):
    """Input column of output column o for a tap whose offset is `base` (= t*dl - p)."""
    s = win.strides[-1]
    b = k.b
    col = o if s == 1 else b.mul(o, k.c(s))
    return b.add(col, base if not isinstance(base, int) else k.c(base))


@emits("Conv")
def emit_conv(k):
    if conv_fast.emit(k):  # register-blocked float 1-D/2-D convolution
        return
    b = k.b
    node = k.node
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    win = _flatten_pointwise(node.opdef.window(node))
    g = node.attrs["group"]
    n_, c = x.shape[:2]
    m = w.shape[0]
    cg_, mg = c // g, m // g
    plane_in, plane_out = int(np.prod(win.in_size)), int(np.prod(win.out_size))
    ktaps = int(np.prod(win.kernel))
    f32 = cg.llvm_type(y.dtype)
    bias = k.inp(2)
    with k.for_range(n_, name="n") as n:
        with k.for_range(m, name="oc") as oc:
            gi = b.sdiv(oc, k.c(mg))
            o_plane = b.mul(b.add(b.mul(n, k.c(m)), oc), k.c(plane_out))
            init = k.load(bias, oc, y.dtype) if bias is not None else cg.const(f32, 0)
            fused.init_plane(k, init, o_plane, plane_out)  # bias (+ residual when accumulating)
            with k.for_range(cg_, name="ic") as ic:
                cin = b.add(b.mul(gi, k.c(cg_)), ic)
                i_plane = b.mul(b.add(b.mul(n, k.c(c)), cin), k.c(plane_in))
                w_base = b.mul(b.add(b.mul(oc, k.c(cg_)), ic), k.c(ktaps))

                def body(o_off, i_off, taps, lo, hi, base):
                    widx = cg.linear(b, [t if not isinstance(t, int) else k.c(t) for t in taps],
                                     cg.contiguous_strides(win.kernel), w_base, k.intp)
                    wv = k.load(k.inp(1), widx, w.dtype)
                    o_row = b.add(o_plane, o_off)
                    i_row = b.add(i_plane, i_off)
                    with k.for_range(hi, start=lo, name="ow") as ow:
                        xv = k.load(k.inp(0), b.add(i_row, _in_col(k, ow, win, base)), x.dtype)
                        oi = b.add(o_row, ow)
                        acc = k.load(k.out(), oi, y.dtype)
                        k.store(b.fadd(acc, b.fmul(wv, xv, flags=CONTRACT), flags=CONTRACT), k.out(), oi)

                for_each_tap(k, win, body)
            # the fused epilogue (activation, residual add...) while the plane is in cache; the
            # planner relies on each output plane being written only inside this oc iteration
            fused.epilogue_block(k, [n, oc])


def _pool(k, is_max: bool):
    b = k.b
    node = k.node
    x, y = k.in_buf(0), k.out_buf()
    win = node.opdef.window(node)
    f32 = cg.llvm_type(y.dtype)
    planes = x.shape[0] * x.shape[1]
    plane_in, plane_out = int(np.prod(win.in_size)), int(np.prod(win.out_size))
    floaty = cg.is_float(y.dtype)
    if not floaty and not is_max:
        raise ModelError(f"node '{node.name}' (AveragePool): {y.dtype.name} input is not "
                         "supported (float only)")
    init = cg.const(f32, (-np.inf if is_max else 0.0) if floaty else np.iinfo(y.dtype).min)
    icmp = b.icmp_signed if cg.is_signed(y.dtype) else b.icmp_unsigned

    def imax(v, acc):  # integer MaxPool (uint8/int8 images)
        return b.select(icmp(">", v, acc), v, acc)
    indices = is_max and len(k.instr.outputs) > 1  # MaxPool's Indices output
    col_major = indices and node.attrs["storage_order"] == 1

    def index_of(p, i_plane, xi):
        """Flat input position of element offset xi: row-major is xi itself; storage_order=1
        numbers each (n, c) plane column-major."""
        if col_major:
            rem, acc = b.sub(xi, i_plane), i_plane
            row_st = cg.contiguous_strides(win.in_size)
            col_st = [int(np.prod(win.in_size[:d])) for d in range(len(win.in_size))]
            for rs, cs in zip(row_st, col_st):
                q = b.sdiv(rem, k.c(rs))
                rem = b.srem(rem, k.c(rs))
                acc = b.add(acc, b.mul(q, k.c(cs)))
            xi = acc
        return b.sext(xi, cg.I64) if xi.type != cg.I64 else xi

    def takes(v, acc):  # v becomes the window's first maximum (NaN wins, as in fmax)
        if not floaty:
            return icmp(">", v, acc)
        return b.or_(b.fcmp_ordered(">", v, acc),
                     b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_ordered("ord", acc, acc)))
    with k.for_range(planes, name="p") as p:
        o_plane, i_plane = b.mul(p, k.c(plane_out)), b.mul(p, k.c(plane_in))
        with k.for_range(plane_out, name="z") as z:
            k.store(init, k.out(), b.add(o_plane, z))
            if indices:
                k.store(cg.const(cg.I64, 0), k.out(1), b.add(o_plane, z))

        def body(o_off, i_off, taps, lo, hi, base):
            o_row, i_row = b.add(o_plane, o_off), b.add(i_plane, i_off)
            with k.for_range(hi, start=lo, name="ow") as ow:
                xi = b.add(i_row, _in_col(k, ow, win, base))
                xv = k.load(k.inp(0), xi, x.dtype)
                oi = b.add(o_row, ow)
                acc = k.load(k.out(), oi, y.dtype)
                if indices:
                    t = takes(xv, acc)
                    k.store(b.select(t, xv, acc), k.out(), oi)
                    k.store(b.select(t, index_of(p, i_plane, xi), k.load(k.out(1), oi, np.int64)),
                            k.out(1), oi)
                else:
                    k.store((fmax(b, xv, acc) if floaty else imax(xv, acc)) if is_max
                            else b.fadd(acc, xv), k.out(), oi)

        for_each_tap(k, win, body)
        if not is_max:
            div = node.opdef.divisors(node).astype(np.float32)
            counts = k.add_table(div.reshape(-1), "avgpool_div") if len(set(div.flat)) > 1 else None
            with k.for_range(plane_out, name="z") as z:
                oi = b.add(o_plane, z)
                d = k.load(counts, z, np.float32) if counts is not None else cg.const(f32, float(div.flat[0]))
                k.store(b.fdiv(k.load(k.out(), oi, y.dtype), d), k.out(), oi)


@emits("MaxPool")
def emit_maxpool(k):
    if not pool_fast.emit_maxpool(k):  # vectorized float MaxPool
        _pool(k, True)


@emits("AveragePool")
def emit_avgpool(k):
    if not pool_fast.emit_avgpool(k):  # vectorized float AveragePool
        _pool(k, False)


@emits("GlobalAveragePool", "GlobalMaxPool")
def emit_global_pool(k):
    b = k.b
    x = k.in_buf(0)
    f32 = cg.llvm_type(x.dtype)
    planes, plane = x.shape[0] * x.shape[1], int(np.prod(x.shape[2:]))
    is_max = k.instr.op == "GlobalMaxPool"
    if x.dtype == np.float32 and k.out_buf().dtype == np.float32:
        pool_fast.whole_plane(k, planes, plane, is_max, None if is_max else float(plane))
        return
    acc_p = cg.alloca_in_entry(b, f32, "acc")
    with k.for_range(planes, name="p") as p:
        base = b.mul(p, k.c(plane))
        b.store(cg.const(f32, -np.inf if is_max else 0.0), acc_p)
        with k.for_range(plane, name="z") as z:
            v = k.load(k.inp(0), b.add(base, z), x.dtype)
            acc = b.load(acc_p)
            b.store(fmax(b, v, acc) if is_max else b.fadd(acc, v), acc_p)
        r = b.load(acc_p)
        k.store(r if is_max else b.fdiv(r, cg.const(f32, plane)), k.out(), p)
