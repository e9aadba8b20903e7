"""Comparison, logic and Where kernels: one broadcasting loop each (elementwise_loop). Bool is one
byte holding 0 or 1; conditions are read as "nonzero"."""
from __future__ import annotations

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits
from glowpy.codegen.kernels.elementwise.arith import elementwise_loop
from glowpy.ir.ops.logical import COMPARE, LOGIC

_PRED = {"Equal": "==", "Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}


def compare(b, op, x, y, dtype):
    """i1 result of `x op y` (ordered for floats: NaN compares false, as numpy)."""
    if cg.is_float(dtype):
        return b.fcmp_ordered(_PRED[op], x, y)
    cmp = b.icmp_signed if cg.is_signed(dtype) else b.icmp_unsigned
    return cmp(_PRED[op], x, y)


def _truth(b, x):
    return b.icmp_unsigned("!=", x, cg.const(x.type, 0))


@emits(*COMPARE)
def emit_compare(k):
    dt = k.in_buf(0).dtype
    elementwise_loop(k, lambda a: k.b.zext(compare(k.b, k.instr.op, a[0], a[1], dt), cg.I8))


@emits(*LOGIC)
def emit_logic(k):
    b = k.b
    fn = {"And": b.and_, "Or": b.or_, "Xor": b.xor}[k.instr.op]
    elementwise_loop(k, lambda a: b.zext(fn(_truth(b, a[0]), _truth(b, a[1])), cg.I8))


@emits("Not")
def emit_not(k):
    b = k.b
    elementwise_loop(k, lambda a: b.zext(b.icmp_unsigned("==", a[0], cg.const(cg.I8, 0)), cg.I8))


@emits("Where")
def emit_where(k):
    b = k.b
    elementwise_loop(k, lambda a: b.select(_truth(b, a[0]), a[1], a[2]))
