"""QAdd on the M-profile cores (TargetCaps.dsp) by tables: each operand's rescaled value,
requantize((x - zp) << left_shift, q, s, "away"), depends on one byte only, so it is computed
at compile time for all 256 bytes (qmath, the op's own reference arithmetic) and the kernel
adds two table entries and requantizes the sum, with the short form (requant_fast) where the
largest sum of the two tables proves that no rounding tie can occur.

The general kernel (quant.emit_qadd) spends about 55 instructions per element on the
Cortex-M7 (two 64-bit saturating doubling multiplies and their rounding, then the output's);
this one about a dozen (ResNet-8's three residual adds: 1.91M instructions before). The
tables cost 2 KiB of constants per QAdd; the x86/AArch64 hosts keep the vectorizable general
kernel."""
from __future__ import annotations

import numpy as np
from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8 import requant_fast
from glowpy.codegen.kernels.int8.quant import finish
from glowpy.codegen.registry import variant
from glowpy.ir import qmath


def _table(dtype, zp: int, left: int, q: int, s: int) -> np.ndarray:
    """The rescaled value of every byte, indexed by the byte as unsigned (0..255)."""
    vals = np.arange(256, dtype=np.int64)
    if np.dtype(dtype) == np.int8:
        vals = np.where(vals >= 128, vals - 256, vals)
    return qmath.requantize((vals - zp) << left, q, s, "away").astype(np.int64)


def rescaled(k):
    """The two operands' rescaled-value tables (int64)."""
    t = k.attrs
    return [_table(k.in_buf(i).dtype, t[f"{n}_zp"], t["left_shift"], t[f"{n}_q"], t[f"{n}_s"])
            for i, n in ((0, "a"), (1, "b"))]


def _short(k, ta, tb):
    """requant_fast's plan for sums of the two tables, or None."""
    return requant_fast.plan(k, np.abs(ta).max() + np.abs(tb).max(), k.attrs["y_q"],
                             k.attrs["y_s"])


def _plan(k):
    """{"short": bool} for QAdd with 8-bit operands on DSP cores; None otherwise."""
    if k.node.op != "QAdd" or not k.caps.dsp or k.attrs["out_dtype"] == "int32":
        return None
    if any(np.dtype(k.in_buf(i).dtype) not in (np.int8, np.uint8) for i in (0, 1)):
        return None
    ta, tb = rescaled(k)
    if np.abs(ta).max() + np.abs(tb).max() >= 1 << 31:
        return None
    return {"short": _short(k, ta, tb) is not None}


@variant("QAdd", "table", rank=10, plan=_plan)
def emit(k, params):
    b = k.b
    a_, b_, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    t = k.attrs
    ta, tb = rescaled(k)
    tabs = [k.add_table(v.astype(np.int32), f"{n}_rescaled") for v, n in ((ta, "a"), (tb, "b"))]
    sa = cg.broadcast_strides(a_.shape, y.shape)
    sb = cg.broadcast_strides(b_.shape, y.shape)
    short = _short(k, ta, tb) if params["short"] else None
    if short is not None:
        short.prepare(k, None, None)
    with k.strided_loop(y.shape, [sa, sb, cg.contiguous_strides(y.shape)]) as (ia, ib, iy):
        ra = k.load(tabs[0], b.zext(k.load(k.inp(0), ia, np.uint8), k.intp), np.int32)
        rb = k.load(tabs[1], b.zext(k.load(k.inp(1), ib, np.uint8), k.intp), np.int32)
        acc = b.add(ra, rb)
        if short is not None:
            short.store(k, acc, short.channel(k, None), k.out(), iy, y.dtype)
        else:
            finish(k, acc, t["y_q"], t["y_s"], k.out(), iy, y.dtype)
