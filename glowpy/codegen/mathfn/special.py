"""erf and pow (pow through a double-float log and exp, exact integer-power cases)."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import (INF, LN2_HI, LN2_LO, NAN, TWO_THIRDS_HI, TWO_THIRDS_LO,
                                        bits, copysign, eq, fabs, fast_two_sum, fconst, gt, horner,
                                        iconst, int_type, isnan, lt, select, two_prod)
from glowpy.codegen.mathfn.exp_log import exp_core, exp_scaled, log_reduce
from glowpy.codegen.mathfn.rounding import trunc


# --------------------------------------------------------------------------
# erf
# --------------------------------------------------------------------------

# |x| < 0.875: erf(x) = x + x*Q(x^2) (Q(0) = 2/sqrt(pi) - 1 keeps x exact).
_ERF_Q = [-6.222440861165524e-4, 5.0358762964606285e-3, -2.6793958619236946e-2,
          1.1282524466514587e-1, -3.761255741119385e-1, 1.2837915122509003e-1]
# 0.875 <= |x| <= 4: erf(x) = 1 - exp(-P(x)), P ~ -log(erfc(x)) (minimax,
# weighted by erfc so the error is uniform in ulps of erf).  Past 3.92 erf
# rounds to 1; P(4) = 17.98 still does.
_ERF_P = [-1.9990131841041148e-4, 3.081995528191328e-3, -2.2381028160452843e-2,
          1.0425020009279251e-1, 6.368206739425659e-1, 1.1278893947601318,
          1.4421135711017996e-4]


def erf(b, x):
    """erf(+-inf) = +-1, erf(-0) = -0; 1 ulp over the whole range. Both branches run on
    vectors; the large one's e^-P is exp_scaled (normal results only): 9 vector operations
    fewer, Erf on (1,128,1024) 148 -> 125 us on AVX2 Zen 3 (benchmarks/op_probe.py, two runs,
    onnxruntime 110)."""
    a = fabs(b, x)
    z = b.fmul(a, a)
    small = b.fadd(a, b.fmul(a, horner(b, z, _ERF_Q)))
    t = select(b, gt(b, a, 4.0), fconst(x, 4.0), a)
    p = horner(b, t, _ERF_P)
    large = b.fsub(fconst(x, 1.0), exp_scaled(b, b.fneg(p)))  # -P in [-18, -0.78]
    r = select(b, lt(b, a, 0.875), small, large)
    return copysign(b, r, x)


# --------------------------------------------------------------------------
# pow
# --------------------------------------------------------------------------

def _log_df(b, a):
    """ln(a) as a double-float (hi, lo), ~2^-33 relative, for finite a > 0."""
    m, e = log_reduce(b, a)
    fe = b.sitofp(e, a.type)
    one, two = fconst(a, 1.0), fconst(a, 2.0)
    f = b.fsub(m, one)                                   # exact
    # s = f/(2+f) to ~48 bits: ln(m) = 2*atanh(s) = 2s + 2s^3/3 + ...
    d = b.fadd(two, f)
    dl = b.fadd(b.fsub(two, d), f)
    s = b.fdiv(f, d)
    ph, pl = two_prod(b, s, d)
    sl = b.fdiv(b.fsub(b.fsub(b.fsub(f, ph), pl), b.fmul(s, dl)), d)
    # ln(m) = 2s + (2/3)s^3 + s^5*Q(s^2): |s| <= 0.1716 makes the cubic term up
    # to 1% of the result, so it is formed exactly too; the rest is < 2^-11.
    zh, zl = two_prod(b, s, s)
    th, tl = two_prod(b, s, zh)
    tl = b.fadd(tl, b.fmul(s, zl))
    ch, cl = two_prod(b, th, fconst(a, TWO_THIRDS_HI))
    cl = b.fadd(cl, b.fadd(b.fmul(th, fconst(a, TWO_THIRDS_LO)),
                           b.fmul(tl, fconst(a, TWO_THIRDS_HI))))
    rest = b.fmul(b.fmul(th, zh), horner(b, zh, [2 / 13, 2 / 11, 2 / 9, 2 / 7, 2 / 5]))
    # d(2s + 2s^3/3)/ds = 2 + 2s^2: carries the low part of s.
    sl2 = b.fadd(sl, sl)
    hi, lo1 = fast_two_sum(b, b.fmul(fe, fconst(a, LN2_HI)), b.fadd(s, s))
    hi, lo2 = fast_two_sum(b, hi, ch)
    lo = b.fadd(b.fadd(lo1, lo2),
                b.fadd(b.fadd(b.fmul(fe, fconst(a, LN2_LO)), b.fadd(sl2, b.fmul(sl2, zh))),
                       b.fadd(cl, rest)))
    return fast_two_sum(b, hi, lo)


def _is_int_odd(b, y):
    """(y is integral or inf, y is an odd integer); NaN -> (False, False)."""
    isint = eq(b, trunc(b, y), y)
    # Every float >= 2^24 is even; clamp first so fptosi never sees poison.
    yc = select(b, lt(b, fabs(b, y), 2.0 ** 24), y, fconst(y, 0.0))
    yi = b.fptosi(yc, int_type(y))
    odd = b.icmp_signed("!=", b.and_(yi, iconst(yi, 1)), iconst(yi, 0))
    return isint, b.and_(isint, odd)


def pow(b, x, y):
    """C powf semantics (pow(x,0)=1, pow(1,y)=1 even for nan, ...)."""
    zero, one, inf = fconst(x, 0.0), fconst(x, 1.0), fconst(x, INF)
    ax = fabs(b, x)
    ay = fabs(b, y)
    # |y| >= 2^31 already over/underflows for every |x| != 1; clamping keeps
    # Dekker's split (y*4097) finite.
    yc = select(b, gt(b, ay, 2.0 ** 31), copysign(b, fconst(x, 2.0 ** 31), y), y)
    lh, ll = _log_df(b, ax)
    ph, pl = two_prod(b, yc, lh)
    pl = b.fadd(pl, b.fmul(yc, ll))
    big = gt(b, ph, 89.0)
    small = lt(b, ph, -104.0)
    ph = select(b, big, fconst(x, 89.0), select(b, small, fconst(x, -104.0), ph))
    pl = select(b, b.or_(big, small), zero, pl)
    r = exp_core(b, ph, pl)

    isint, odd = _is_int_odd(b, y)
    neg = b.icmp_signed("<", bits(b, x), iconst(x, 0))   # sign bit, so -0.0 too
    negodd = b.and_(neg, odd)
    r = select(b, negodd, b.fneg(r), r)
    r = select(b, b.and_(lt(b, x, 0.0), b.not_(isint)), fconst(x, NAN), r)
    # x = +-0 or +-inf: 0 or inf depending on sign(y), signed for odd y.
    xz = eq(b, ax, 0.0)
    zi = b.or_(xz, eq(b, ax, INF))
    toinf = b.xor(xz, gt(b, y, 0.0))
    sp = select(b, toinf, inf, zero)
    sp = select(b, negodd, b.fneg(sp), sp)
    r = select(b, zi, sp, r)
    # y = +-inf: 1 if |x| == 1, else 0 or inf.
    yinf = eq(b, ay, INF)
    ysp = select(b, b.xor(lt(b, ax, 1.0), gt(b, y, 0.0)), inf, zero)
    ysp = select(b, eq(b, ax, 1.0), one, ysp)
    r = select(b, yinf, ysp, r)
    r = select(b, b.or_(isnan(b, x), isnan(b, y)), fconst(x, NAN), r)
    return select(b, b.or_(eq(b, y, 0.0), eq(b, x, 1.0)), one, r)
