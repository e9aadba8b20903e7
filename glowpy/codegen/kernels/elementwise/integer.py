"""Kernels of Mod, BitShift, the Bitwise ops, IsNaN and IsInf (glowpy/ir/ops/integer.py): one broadcasting
loop each. Division by zero, INT_MIN % -1 and over-wide shifts are guarded so that they give
what the op references give (0) instead of a trap or undefined behaviour."""
from __future__ import annotations

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits
from glowpy.codegen.kernels.elementwise.arith import elementwise_loop
from glowpy.ir.ops.integer import BITWISE


def _int_mod(b, x, y, signed: bool, fmod: bool):
    zero, one = cg.const(x.type, 0), cg.const(x.type, 1)
    bad = b.icmp_unsigned("==", y, zero)
    if signed:  # INT_MIN % -1 overflows srem; its remainder is 0 anyway
        bad = b.or_(bad, b.icmp_signed("==", y, cg.const(x.type, -1)))
    r = (b.srem if signed else b.urem)(x, b.select(bad, one, y))
    if signed and not fmod:  # Python's %: a nonzero remainder takes the divisor's sign
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
        r = b.select(fix, b.add(r, y), r)
    return b.select(bad, zero, r)


def _float_mod(b, x, y, fmod: bool):
    """C fmod without libm: in double, x - trunc(x / y) * y is exact for float operands
    whenever the quotient's truncation is (|x / y| < 2**52; beyond, the quotient is integral);
    an infinite y leaves x. fmod=0 then moves a nonzero remainder to the divisor's sign (and
    gives a zero the divisor's sign), as numpy.mod."""
    fabs = b.module.declare_intrinsic("llvm.fabs", [cg.F64])
    xd, yd = b.fpext(x, cg.F64), b.fpext(y, cg.F64)
    q = b.fdiv(xd, yd)
    small = b.fcmp_ordered("<", b.call(fabs, [q]), cg.const(cg.F64, 2.0 ** 52))
    t = b.select(small, b.sitofp(b.fptosi(b.select(small, q, cg.const(cg.F64, 0)), cg.I64), cg.F64), q)
    r = b.fsub(xd, b.fmul(t, yd))
    r = b.select(b.fcmp_ordered("==", b.call(fabs, [yd]), cg.const(cg.F64, float("inf"))), xd, r)
    if not fmod:
        zero = cg.const(cg.F64, 0)
        flip = b.and_(b.fcmp_ordered("!=", r, zero),
                      b.icmp_unsigned("!=", b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", yd, zero)))
        r = b.select(flip, b.fadd(r, yd), r)
        signed_zero = b.select(b.fcmp_ordered("<", yd, zero), cg.const(cg.F64, -0.0), zero)
        r = b.select(b.fcmp_ordered("==", r, zero), signed_zero, r)
    return b.fptrunc(r, x.type)


@emits("Mod")
def emit_mod(k):
    dt = k.out_buf().dtype
    fmod = bool(k.attrs["fmod"])
    if cg.is_float(dt):
        elementwise_loop(k, lambda a: _float_mod(k.b, a[0], a[1], fmod))
    else:
        elementwise_loop(k, lambda a: _int_mod(k.b, a[0], a[1], cg.is_signed(dt), fmod))


@emits("BitShift")
def emit_bitshift(k):
    b = k.b
    dt = k.out_buf().dtype
    bits = dt.itemsize * 8
    left = k.attrs["direction"] == "LEFT"
    signed = cg.is_signed(dt)
    fn = b.shl if left else (b.ashr if signed else b.lshr)

    def one(a):
        x, s = a
        zero = cg.const(x.type, 0)
        big = b.icmp_unsigned(">=", s, cg.const(s.type, bits))  # negative amounts too
        fill = b.select(b.icmp_signed("<", x, zero), cg.const(x.type, -1), zero) \
            if signed and not left else zero
        return b.select(big, fill, fn(x, b.select(big, cg.const(s.type, 0), s)))
    elementwise_loop(k, one)


@emits(*BITWISE)
def emit_bitwise(k):
    b = k.b
    fn = {"BitwiseAnd": b.and_, "BitwiseOr": b.or_, "BitwiseXor": b.xor}[k.instr.op]
    elementwise_loop(k, lambda a: fn(a[0], a[1]))


@emits("BitwiseNot")
def emit_bitwise_not(k):
    elementwise_loop(k, lambda a: k.b.not_(a[0]))


@emits("IsNaN", "IsInf")
def emit_float_test(k):
    b = k.b

    def one(a):
        x = a[0]
        if k.instr.op == "IsNaN":
            hit = b.fcmp_unordered("uno", x, x)
        else:
            inf = cg.const(x.type, float("inf"))
            hit = ir.Constant(cg.I1, 0)
            if k.attrs["detect_positive"]:
                hit = b.or_(hit, b.fcmp_ordered("==", x, inf))
            if k.attrs["detect_negative"]:
                hit = b.or_(hit, b.fcmp_ordered("==", x, b.fneg(inf)))
        return b.zext(hit, cg.I8)
    elementwise_loop(k, one)
