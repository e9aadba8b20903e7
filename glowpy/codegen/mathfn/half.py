"""Conversions between float32 and the 16-bit float storage types (float16, bfloat16), on
the 16-bit patterns with integer operations and selects: exact, round-half-even, and the
same on every target. LLVM's half type would lower to F16C/fcvt where the target has them,
and to __extendhfsf2/__truncsfhf2 library calls where it does not (x86-64 without F16C,
Cortex-M0/M3/M4 soft and single-precision FPUs), which a bundle loaded without a C library
cannot resolve. The integer forms vectorize (about 10 operations per element): they run only
where a bundle's half inputs and outputs meet its float32 computation.

The float16 forms are the branch-free conversions of F. Giesen's "half_to_float_fast5" and
"float_to_half_fast3_rtne"; NaNs come out quiet with their sign, as numpy's do."""
from llvmlite import ir

F32 = ir.FloatType()
I16 = ir.IntType(16)
I32 = ir.IntType(32)


def _c(v):
    return ir.Constant(I32, v & 0xFFFFFFFF)


def float16_to_float(b, h):
    """float32 of a float16 bit pattern (i16)."""
    h = b.zext(h, I32)
    o = b.shl(b.and_(h, _c(0x7FFF)), _c(13))      # exponent and mantissa, float32-aligned
    exp = b.and_(o, _c(0x0F800000))
    o = b.add(o, _c((127 - 15) << 23))          # rebias
    o = b.select(b.icmp_unsigned("==", exp, _c(0x0F800000)), b.add(o, _c((128 - 16) << 23)), o)
    # zero and subnormals: 2^-14 * (1 + m/1024) - 2^-14, exact in float32
    sub = b.fsub(b.bitcast(b.add(o, _c(1 << 23)), F32), b.bitcast(_c(113 << 23), F32))
    o = b.select(b.icmp_unsigned("==", exp, _c(0)), b.bitcast(sub, I32), o)
    o = b.or_(o, b.shl(b.and_(h, _c(0x8000)), _c(16)))
    return b.bitcast(o, F32)


def float_to_float16(b, x):
    """The float16 bit pattern (i16) nearest a float32, ties to even; overflow gives infinity."""
    f = b.bitcast(x, I32)
    sign = b.and_(f, _c(0x80000000))
    a = b.xor(f, sign)
    big = b.select(b.icmp_unsigned(">", a, _c(0x7F800000)), _c(0x7E00), _c(0x7C00))
    # below 2^-14 (a float16 subnormal or zero): adding 0.5 lets the FPU round the mantissa
    # into the low bits
    denorm = b.sub(b.bitcast(b.fadd(b.bitcast(a, F32), ir.Constant(F32, 0.5)), I32), _c(126 << 23))
    odd = b.and_(b.lshr(a, _c(13)), _c(1))
    normal = b.lshr(b.add(b.add(a, _c(((15 - 127) << 23) + 0xFFF)), odd), _c(13))
    o = b.select(b.icmp_unsigned(">=", a, _c((127 + 16) << 23)), big,
                 b.select(b.icmp_unsigned("<", a, _c(113 << 23)), denorm, normal))
    return b.trunc(b.or_(o, b.lshr(sign, _c(16))), I16)


def bfloat16_to_float(b, h):
    """float32 of a bfloat16 bit pattern (i16): its upper half."""
    return b.bitcast(b.shl(b.zext(h, I32), _c(16)), F32)


def float_to_bfloat16(b, x):
    """The bfloat16 bit pattern (i16) nearest a float32, ties to even; NaNs made quiet."""
    f = b.bitcast(x, I32)
    odd = b.and_(b.lshr(f, _c(16)), _c(1))
    rounded = b.lshr(b.add(b.add(f, _c(0x7FFF)), odd), _c(16))
    nan = b.or_(b.lshr(f, _c(16)), _c(0x40))
    return b.trunc(b.select(b.fcmp_unordered("uno", x, x), nan, rounded), I16)


WIDEN = {"float16": float16_to_float, "bfloat16": bfloat16_to_float}
NARROW = {"float16": float_to_float16, "bfloat16": float_to_bfloat16}
