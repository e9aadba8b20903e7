"""Inverse trigonometric and hyperbolic functions: atan, asin, acos, asinh, acosh, atanh (Cephes'
single-precision reductions and polynomials, branch-free: every range is computed and the
right one selected). Largest error against float64 over dense sweeps of each domain
(tests/test_mathfn.py): atan 3 ulp (just above tan(pi/8), where (a - 1) / (a + 1) and pi/4 each
round), asin 2, acos 1, asinh 3, acosh 2, atanh 1."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import (NAN, copysign, fabs, fconst, gt, horner, isnan, lt,
                                        select)
from glowpy.codegen.mathfn.exp_log import log, log1p
from glowpy.codegen.mathfn.rounding import sqrt

PIO2, PIO4, PI = 1.5707963267948966, 0.7853981633974483, 3.141592653589793
LN2 = 0.6931471805599453
_ATAN_P = [8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1]
_ASIN_P = [4.2163199048e-2, 2.4181311049e-2, 4.5470025998e-2, 7.4953002686e-2, 1.6666752422e-1]
_ASINH_P = [2.0122003309e-2, -4.2699340972e-2, 7.4847586088e-2, -1.6666288134e-1]
_ACOSH_P = [1.7596881071e-3, -7.5272886713e-3, 2.6454905019e-2, -1.1784741703e-1,
            1.4142135263e0]
_ATANH_P = [1.81740078349e-1, 8.24370301058e-2, 1.46691431730e-1, 1.99782164500e-1,
            3.33337300303e-1]
BIG = 1500.0  # asinh, acosh: past this, log(2 |x|) (x * x would lose the 1 and overflow later)


def _odd(b, x, coeffs):
    """x + x^3 p(x^2)."""
    z = b.fmul(x, x)
    return b.fadd(b.fmul(b.fmul(horner(b, z, coeffs), z), x), x)


def atan(b, x):
    """atan(+-inf) = +-pi/2; the sign of zero kept."""
    a = fabs(b, x)
    far, mid = gt(b, a, 2.414213562373095), gt(b, a, 0.4142135623730950)
    t = select(b, far, b.fdiv(fconst(x, -1.0), a),
               select(b, mid, b.fdiv(b.fsub(a, fconst(x, 1.0)), b.fadd(a, fconst(x, 1.0))), a))
    base = select(b, far, fconst(x, PIO2), select(b, mid, fconst(x, PIO4), fconst(x, 0.0)))
    return copysign(b, b.fadd(base, _odd(b, t, _ATAN_P)), x)


def _asin_abs(b, a, fpu):
    """asin(a) for 0 <= a <= 1: the series below 0.5, else pi/2 - 2 asin(sqrt((1 - a) / 2))."""
    high = gt(b, a, 0.5)
    z = b.fmul(fconst(a, 0.5), b.fsub(fconst(a, 1.0), a))
    s = sqrt(b, select(b, high, z, fconst(a, 0.0)), fpu)
    p = _odd(b, select(b, high, s, a), _ASIN_P)
    return select(b, high, b.fsub(fconst(a, PIO2), b.fadd(p, p)), p)


def asin(b, x, fpu: bool = True):
    """NaN outside [-1, 1]; the sign of zero kept."""
    a = fabs(b, x)
    r = copysign(b, _asin_abs(b, a, fpu), x)
    return select(b, gt(b, a, 1.0), fconst(x, NAN), r)


def acos(b, x, fpu: bool = True):
    """acos(x) = pi/2 - asin(x) in the middle; 2 asin(sqrt((1 -+ x) / 2)) near +-1 (pi minus it
    below -0.5). NaN outside [-1, 1]."""
    a = fabs(b, x)
    edge = gt(b, a, 0.5)
    s = sqrt(b, select(b, edge, b.fmul(fconst(x, 0.5), b.fsub(fconst(x, 1.0), a)),
                       fconst(x, 0.0)), fpu)
    two = b.fmul(fconst(x, 2.0), _asin_abs(b, s, fpu))  # acos(|x|) near 1
    mid = b.fsub(fconst(x, PIO2), copysign(b, _asin_abs(b, a, fpu), x))
    neg = lt(b, x, 0.0)
    r = select(b, edge, select(b, neg, b.fsub(fconst(x, PI), two), two), mid)
    return select(b, gt(b, a, 1.0), fconst(x, NAN), r)


def asinh(b, x, fpu: bool = True):
    a = fabs(b, x)
    small = lt(b, a, 0.5)
    big = gt(b, a, BIG)
    mid = log(b, b.fadd(a, sqrt(b, b.fadd(b.fmul(a, a), fconst(x, 1.0)), fpu)))
    far = b.fadd(log(b, a), fconst(x, LN2))
    r = select(b, small, _odd(b, a, _ASINH_P), select(b, big, far, mid))
    return copysign(b, r, x)


def acosh(b, x, fpu: bool = True):
    """NaN below 1; acosh(inf) = inf."""
    z = b.fsub(x, fconst(x, 1.0))
    near = lt(b, z, 0.5)
    sz = sqrt(b, select(b, near, z, fconst(x, 0.0)), fpu)
    series = b.fmul(horner(b, select(b, near, z, fconst(x, 0.0)), _ACOSH_P), sz)
    mid = log(b, b.fadd(x, sqrt(b, b.fmul(select(b, near, fconst(x, 1.0), z),
                                          b.fadd(x, fconst(x, 1.0))), fpu)))
    far = b.fadd(log(b, x), fconst(x, LN2))
    r = select(b, near, series, select(b, gt(b, x, BIG), far, mid))
    return select(b, lt(b, x, 1.0), fconst(x, NAN), r)


def atanh(b, x):
    """+-inf at +-1, NaN beyond; the sign of zero kept."""
    a = fabs(b, x)
    series = _odd(b, a, _ATANH_P)
    # 0.5 log((1 + a) / (1 - a)) = 0.5 log1p(2a / (1 - a)): no cancellation near 0.5
    wide = b.fmul(fconst(x, 0.5), log1p(b, b.fdiv(b.fadd(a, a), b.fsub(fconst(x, 1.0), a))))
    r = select(b, lt(b, a, 0.5), series, wide)
    r = select(b, gt(b, a, 1.0), fconst(x, NAN), r)
    r = select(b, isnan(b, x), x, r)
    return copysign(b, r, x)
