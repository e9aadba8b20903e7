"""round_half_even, trunc, floor, ceil, fmin, fmax (exact, without libm-call intrinsics) and
sqrt (llvm.sqrt with an FPU, an exact integer version without one)."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import (INF, NAN, bits, copysign, eq, fabs, fconst, from_bits, gt,
                                        iconst, intrinsic, isnan, lt, select)


# --------------------------------------------------------------------------
# rounding, min/max, sqrt
# --------------------------------------------------------------------------

def round_half_even(b, x):
    """rint under the default rounding mode; |x| >= 2^23 (and inf/nan) -> x."""
    a = fabs(b, x)
    r = b.fsub(b.fadd(a, fconst(x, 2.0 ** 23)), fconst(x, 2.0 ** 23))
    r = copysign(b, r, x)
    return select(b, lt(b, a, 2.0 ** 23), r, x)


def trunc(b, x):
    """Round toward zero; keeps the sign (trunc(-0.5) = -0.); |x| >= 2^23 -> x."""
    a = fabs(b, x)
    r = b.fsub(b.fadd(a, fconst(x, 2.0 ** 23)), fconst(x, 2.0 ** 23))
    r = select(b, gt(b, r, a), b.fsub(r, fconst(x, 1.0)), r)
    return select(b, lt(b, a, 2.0 ** 23), copysign(b, r, x), x)


def floor(b, x):
    """Round down; floor(-0.) = -0., |x| >= 2^23, inf, nan -> x."""
    r = round_half_even(b, x)
    r = select(b, gt(b, r, x), b.fsub(r, fconst(x, 1.0)), r)
    return copysign(b, r, x)       # floor keeps the sign of x (floor(-0.) = -0.)


def ceil(b, x):
    """Round up; ceil(-0.5) = -0., |x| >= 2^23, inf, nan -> x."""
    r = round_half_even(b, x)
    r = select(b, lt(b, r, x), b.fadd(r, fconst(x, 1.0)), r)
    return copysign(b, r, x)       # ceil(-0.5) = -0.


def fmin(b, x, y):
    """numpy.minimum: NaN if either is NaN, else (x < y ? x : y)."""
    r = select(b, b.fcmp_ordered("<", x, y), x, y)
    return select(b, isnan(b, x), x, r)


def fmax(b, x, y):
    """numpy.maximum: NaN if either is NaN, else (x > y ? x : y)."""
    r = select(b, b.fcmp_ordered(">", x, y), x, y)
    return select(b, isnan(b, x), x, r)


def sqrt(b, x, fpu: bool):
    """Correctly rounded sqrt; sqrt(-0.) = -0., sqrt(<0) = nan.

    ``llvm.sqrt`` is a single instruction on every FPU target but a ``sqrtf``
    libcall on soft-float ones (-float-abi=soft, Cortex-M0/M3...), so with
    ``fpu`` false (the caller passes TargetCaps.fpu) an integer digit-by-digit
    version is emitted instead (exact, 25 unrolled steps). Everything else in
    this module is FPU-agnostic."""
    if fpu:
        return b.call(intrinsic(b, "llvm.sqrt", x, 1), [x])
    return _sqrt_int(b, x)


def _sqrt_int(b, x):
    tiny = lt(b, x, 2.0 ** -126)
    xs = select(b, tiny, b.fmul(x, fconst(x, 2.0 ** 24)), x)
    ix = bits(b, xs)
    c = lambda v: iconst(ix, v)  # noqa: E731
    m = b.sub(b.lshr(ix, c(23)), c(127))
    m = b.sub(m, select(b, tiny, c(24), c(0)))
    ix = b.or_(b.and_(ix, c(0x7FFFFF)), c(0x800000))
    # odd exponent: fold a factor 2 into the mantissa
    ix = b.shl(ix, b.add(b.and_(m, c(1)), c(1)))
    m = b.ashr(m, c(1))
    q = c(0)
    s = c(0)
    for k in range(24, -1, -1):
        r = c(1 << k)
        t = b.add(s, r)
        take = b.icmp_signed("<=", t, ix)
        s = select(b, take, b.add(t, r), s)
        ix = select(b, take, b.sub(ix, t), ix)
        q = select(b, take, b.add(q, r), q)
        ix = b.shl(ix, c(1))
    # a nonzero remainder can never be an exact tie: round half up == nearest
    q = b.add(q, select(b, b.icmp_signed("!=", ix, c(0)), b.and_(q, c(1)), c(0)))
    res = from_bits(b, b.add(b.add(b.lshr(q, c(1)), c(0x3F000000)), b.shl(m, c(23))), x)
    res = select(b, eq(b, x, INF), x, res)
    res = select(b, eq(b, x, 0.0), x, res)               # keeps -0.0
    return select(b, b.fcmp_unordered("<", x, fconst(x, 0.0)), fconst(x, NAN), res)
