"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool: the generic kernels (any rank and
dtype, MaxPool's indices output), behind the vectorized float ones (pool/vector.py)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.elementwise.arith import fmax
from glowpy.codegen.kernels.window import for_each_tap, in_col
from glowpy.codegen.registry import variant
from glowpy.errors import ModelError


def _reduce(k, is_max: bool, dtype):
    """(first value, step(v, acc)) of a window's maximum (fmax's NaN rule on floats, the
    integer maximum of a QDQ model's integers) or sum; an integer sum is refused."""
    b = k.b
    ty = cg.llvm_type(dtype)
    if not cg.is_float(dtype):
        if not is_max:
            raise ModelError(f"node '{k.node.name}' ({k.node.op}): {np.dtype(dtype).name} input "
                             "is not supported (float only)")
        icmp = b.icmp_signed if cg.is_signed(dtype) else b.icmp_unsigned
        return cg.const(ty, np.iinfo(dtype).min), lambda v, acc: b.select(icmp(">", v, acc), v, acc)
    if is_max:
        return cg.const(ty, -np.inf), lambda v, acc: fmax(b, v, acc)
    return cg.const(ty, 0.0), lambda v, acc: b.fadd(acc, v)


def _pool(k, is_max: bool):
    b = k.b
    node = k.node
    x, y = k.in_buf(0), k.out_buf()
    win = node.opdef.window(node)
    f32 = cg.llvm_type(y.dtype)
    planes = x.shape[0] * x.shape[1]
    plane_in, plane_out = int(np.prod(win.in_size)), int(np.prod(win.out_size))
    floaty = cg.is_float(y.dtype)
    init, step = _reduce(k, is_max, y.dtype)
    icmp = b.icmp_signed if cg.is_signed(y.dtype) else b.icmp_unsigned
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
                xi = b.add(i_row, in_col(k, ow, win, base))
                xv = k.load(k.inp(0), xi, x.dtype)
                oi = b.add(o_row, ow)
                acc = k.load(k.out(), oi, y.dtype)
                if indices:
                    t = takes(xv, acc)
                    k.store(b.select(t, xv, acc), k.out(), oi)
                    k.store(b.select(t, index_of(p, i_plane, xi), k.load(k.out(1), oi, np.int64)),
                            k.out(1), oi)
                else:
                    k.store(step(xv, acc), k.out(), oi)

        for_each_tap(k, win, body)
        if not is_max:
            div = node.opdef.divisors(node).astype(np.float32)
            counts = k.add_table(div.reshape(-1), "avgpool_div") if len(set(div.flat)) > 1 else None
            with k.for_range(plane_out, name="z") as z:
                oi = b.add(o_plane, z)
                d = k.load(counts, z, np.float32) if counts is not None else cg.const(f32, float(div.flat[0]))
                k.store(b.fdiv(k.load(k.out(), oi, y.dtype), d), k.out(), oi)


@variant("MaxPool", "direct", rank=0)
def emit_maxpool(k, params=None):
    _pool(k, True)


@variant("AveragePool", "direct", rank=0)
def emit_avgpool(k, params=None):
    _pool(k, False)


@variant("GlobalAveragePool", "direct", rank=0)
@variant("GlobalMaxPool", "direct", rank=0)
def emit_global_pool(k, params=None):
    b = k.b
    x = k.in_buf(0)
    f32 = cg.llvm_type(x.dtype)
    planes, plane = x.shape[0] * x.shape[1], int(np.prod(x.shape[2:]))
    is_max = k.instr.op == "GlobalMaxPool"
    init, step = _reduce(k, is_max, x.dtype)  # (integers: a QDQ model's, quant/moves.py)
    acc_p = cg.alloca_in_entry(b, f32, "acc")
    with k.for_range(planes, name="p") as p:
        base = b.mul(p, k.c(plane))
        b.store(init, acc_p)
        with k.for_range(plane, name="z") as z:
            v = k.load(k.inp(0), b.add(base, z), x.dtype)
            b.store(step(v, b.load(acc_p)), acc_p)
        r = b.load(acc_p)
        k.store(r if is_max else b.fdiv(r, cg.const(f32, plane)), k.out(), p)
