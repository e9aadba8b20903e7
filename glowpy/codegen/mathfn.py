"""Branch-free float32 elementary functions emitted as LLVM IR.

Every function takes an ``ir.IRBuilder`` and ``float`` values (``<N x float>``
vectors work too) and emits straight-line code: arithmetic, fcmp/select,
bitcasts to i32 with integer ops, fptosi/sitofp and intrinsics that always
expand inline (``llvm.fabs``, ``llvm.copysign``, ``llvm.sqrt`` on FPU targets).
No calls, no branches, so a loop calling these vectorizes, and the objects link
into bare-metal firmware without libm: on soft-float targets the only external
symbols are the ``__aeabi_*`` helpers of libgcc/compiler-rt.

Deliberately avoided: ``llvm.floor/ceil/trunc/rint/round/fma/exp/log/pow/
sin/cos`` and ``llvm.minnum/maxnum`` (the latter become fminf/fmaxf calls
on soft-float ARM); ``llvm.sqrt`` is only used by :func:`sqrt` and has an
integer-only alternative for soft-float targets.

No fast-math flags are ever set: the range reductions and the double-float
tricks rely on exact IEEE rounding of every operation (no reassociation and no
FMA contraction).  Rounding mode is assumed to be round-to-nearest-even.

Accuracy: max error vs. the correctly rounded float32 result, measured over
dense sweeps and ~4e7 random inputs per function (tests/test_mathfn.py checks a
subset).  Denormal results may be flushed on targets running flush-to-zero.

    exp, log, log1p, tanh, erf, pow: 1 ulp      expm1, sigmoid, softplus: 2 ulp
    sin, cos: 2 ulp (|result| > 1e-3), 1.1e-7 abs, for |x| <= 8192*pi/2
    floor, ceil, trunc, round_half_even, fmin, fmax, sqrt: exact
"""
from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)

_INF = float("inf")
_NAN = float("nan")
# Adding then subtracting 1.5*2^23 rounds any |v| < 2^22 to an integer (ties to
# even); the integer also sits in the low mantissa bits of the sum.
_MAGIC = 12582912.0
_MAGIC_BITS = 0x4B400000
_LOG2E = 1.4426950408889634
# ln2 split so that n*_LN2_HI is exact for |n| < 2^9 and the parts are positive
# (keeps x - n*ln2 from turning -0.0 into +0.0).
_LN2_HI = 0.693145751953125
_LN2_LO = 1.428606765330187045e-06
_SQRT_HALF_BITS = 0x3F3504F3
_TWO_THIRDS_HI = 0.6666666865348816          # float32(2/3)
_TWO_THIRDS_LO = -1.9868215517249155e-08     # 2/3 - _TWO_THIRDS_HI


# --------------------------------------------------------------------------
# small IR helpers (scalar or vector aware)
# --------------------------------------------------------------------------

def _ity(v):
    t = v.type
    if isinstance(t, ir.VectorType):
        return ir.VectorType(I32, t.count)
    return I32


def _fc(v, c):
    t = v.type
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [float(c)] * t.count)
    return ir.Constant(t, float(c))


def _ic(v, c):
    """i32 constant shaped like v (v may be a float or an int value)."""
    t = v.type
    if isinstance(t, ir.VectorType):
        it = ir.VectorType(I32, t.count)
        return ir.Constant(it, [int(c)] * t.count)
    return ir.Constant(I32, int(c))


def _bits(b, x):
    return b.bitcast(x, _ity(x))


def _float(b, i, like):
    return b.bitcast(i, like.type)


def _intrinsic(b, name, x, nargs):
    ty = x.type
    if isinstance(ty, ir.VectorType):   # llvmlite only names scalar overloads
        name = "%s.v%d%s" % (name, ty.count, ty.element.intrinsic_name)
    else:
        name = "%s.%s" % (name, ty.intrinsic_name)
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ty, [ty] * nargs), name)
    return fn


def fabs(b, x):
    return b.call(_intrinsic(b, "llvm.fabs", x, 1), [x])


def copysign(b, mag, sgn):
    return b.call(_intrinsic(b, "llvm.copysign", mag, 2), [mag, sgn])


def _horner(b, x, coeffs):
    """coeffs[0]*x^(n-1) + ... + coeffs[-1]; plain mul/add (no FMA)."""
    r = _fc(x, coeffs[0])
    for c in coeffs[1:]:
        r = b.fadd(b.fmul(r, x), _fc(x, c))
    return r


def _sel(b, cond, a, c):
    return b.select(cond, a, c)


def _lt(b, x, c):
    return b.fcmp_ordered("<", x, _fc(x, c) if isinstance(c, (int, float)) else c)


def _gt(b, x, c):
    return b.fcmp_ordered(">", x, _fc(x, c) if isinstance(c, (int, float)) else c)


def _eq(b, x, c):
    return b.fcmp_ordered("==", x, _fc(x, c) if isinstance(c, (int, float)) else c)


def _isnan(b, x):
    return b.fcmp_unordered("uno", x, x)


def _clamp(b, x, lo, hi):
    """Clamp that lets NaN through (minnum/maxnum would drop it)."""
    x = _sel(b, _gt(b, x, hi), _fc(x, hi), x)
    return _sel(b, _lt(b, x, lo), _fc(x, lo), x)


def _pow2i(b, k, like):
    """2^k as float for integer k in [-126, 127]."""
    e = b.shl(b.add(k, _ic(k, 127)), _ic(k, 23))
    return _float(b, e, like)


def _round_magic(b, v):
    """(round(v) as float, round(v) as i32) for |v| < 2^22."""
    t = b.fadd(v, _fc(v, _MAGIC))
    n = b.fsub(t, _fc(v, _MAGIC))
    ni = b.sub(_bits(b, t), _ic(v, _MAGIC_BITS))
    return n, ni


# double-float building blocks (Dekker / Knuth); exact without FMA

def _two_sum(b, x, y):
    s = b.fadd(x, y)
    bb = b.fsub(s, x)
    err = b.fadd(b.fsub(x, b.fsub(s, bb)), b.fsub(y, bb))
    return s, err


def _fast_two_sum(b, x, y):  # requires |x| >= |y|
    s = b.fadd(x, y)
    return s, b.fsub(y, b.fsub(s, x))


def _split(b, x):
    c = b.fmul(x, _fc(x, 4097.0))
    hi = b.fsub(c, b.fsub(c, x))
    return hi, b.fsub(x, hi)


def _two_prod(b, x, y):
    p = b.fmul(x, y)
    xh, xl = _split(b, x)
    yh, yl = _split(b, y)
    err = b.fadd(b.fadd(b.fadd(b.fsub(b.fmul(xh, yh), p), b.fmul(xh, yl)),
                        b.fmul(xl, yh)), b.fmul(xl, yl))
    return p, err


# --------------------------------------------------------------------------
# exp family
# --------------------------------------------------------------------------

# Cephes expf: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln2/2.
_EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
          4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]


def _exp_reduce(b, x, lo=None):
    n, ni = _round_magic(b, b.fmul(x, _fc(x, _LOG2E)))
    # x - n*HI is exact (Sterbenz); the LO product only rounds at 2^-24 of r.
    r = b.fsub(b.fsub(x, b.fmul(n, _fc(x, _LN2_HI))), b.fmul(n, _fc(x, _LN2_LO)))
    if lo is not None:
        r = b.fadd(r, lo)
    return r, ni


def _exp_core(b, x, lo=None):
    """exp(x [+ lo]) for x in [-104, 89] (or NaN)."""
    r, ni = _exp_reduce(b, x, lo)
    p = b.fadd(b.fadd(b.fmul(_horner(b, r, _EXP_P), b.fmul(r, r)), r), _fc(x, 1.0))
    # Two scale factors: 2^n alone leaves float range for n in {-150..-127, 128}
    # and a single multiply by both halves rounds only once into denormals.
    n1 = b.ashr(ni, _ic(ni, 1))
    n2 = b.sub(ni, n1)
    return b.fmul(b.fmul(p, _pow2i(b, n1, x)), _pow2i(b, n2, x))


def exp(b, x):
    """e^x; overflow -> inf above ~88.72, -> 0 below ~-103.97, nan -> nan."""
    return _exp_core(b, _clamp(b, x, -104.0, 89.0))


def expm1(b, x):
    """e^x - 1 with full relative accuracy near 0 (for elu/selu/softplus)."""
    xc = _clamp(b, x, -25.0, 89.0)   # below -17.4 the result rounds to -1
    r, ni = _exp_reduce(b, xc)
    em = b.fadd(r, b.fmul(b.fmul(r, r), _horner(b, r, _EXP_P)))   # expm1(r)
    # 2^n*(em+1)-1 == 2*(em*s + (s-1/2)) with s = 2^(n-1); s stays finite for
    # n = 128, the final doubling is exact (or overflows correctly).
    s = _pow2i(b, b.sub(ni, _ic(ni, 1)), x)
    res = b.fmul(b.fadd(b.fmul(em, s), b.fsub(s, _fc(x, 0.5))), _fc(x, 2.0))
    # Keeps -0.0 and denormals exact (em*0.5 would drop bits of a denormal).
    return _sel(b, _lt(b, fabs(b, x), 2.0 ** -25), x, res)


def sigmoid(b, x):
    """1/(1+e^-x) evaluated as {1 or e}/(1+e) with e = e^-|x| (never overflows)."""
    e = exp(b, b.fneg(fabs(b, x)))
    num = _sel(b, _lt(b, x, 0.0), e, _fc(x, 1.0))
    return b.fdiv(num, b.fadd(_fc(x, 1.0), e))


# Cephes tanhf: tanh(a) = a + a*z*P(z), z = a^2, for |a| < 0.625.
_TANH_P = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
           1.33314422036e-1, -3.33332819422e-1]


def tanh(b, x):
    """Odd, saturates to +-1; relative accuracy near 0 (polynomial below 0.625)."""
    a = fabs(b, x)
    z = b.fmul(a, a)
    small = b.fadd(a, b.fmul(b.fmul(_horner(b, z, _TANH_P), z), a))
    # 1 - 2/(e^2a + 1): e^2a -> inf saturates to exactly 1.
    e = exp(b, b.fadd(a, a))
    large = b.fsub(_fc(x, 1.0), b.fdiv(_fc(x, 2.0), b.fadd(e, _fc(x, 1.0))))
    r = _sel(b, _lt(b, a, 0.625), small, large)
    return copysign(b, r, x)   # odd function; also gives tanh(-0) = -0


# --------------------------------------------------------------------------
# log family
# --------------------------------------------------------------------------

# Cephes logf: log(1+f) = f - f^2/2 + f^3 * P(f), f in [sqrt(.5)-1, sqrt(2)-1].
_LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1,
          -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
          2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def _log_reduce(b, a):
    """a > 0 finite -> (m, e) with a = m * 2^e, m in [sqrt(.5), sqrt(2))."""
    tiny = _lt(b, a, 2.0 ** -126)
    a = _sel(b, tiny, b.fmul(a, _fc(a, 2.0 ** 23)), a)
    t = b.sub(_bits(b, a), _ic(a, _SQRT_HALF_BITS))
    e = b.ashr(t, _ic(t, 23))
    e = b.sub(e, _sel(b, tiny, _ic(t, 23), _ic(t, 0)))
    m = _float(b, b.add(b.and_(t, _ic(t, 0x7FFFFF)), _ic(t, _SQRT_HALF_BITS)), a)
    return m, e


def _log_finite(b, x, corr=None):
    m, e = _log_reduce(b, x)
    f = b.fsub(m, _fc(x, 1.0))
    fe = b.sitofp(e, x.type)
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(_horner(b, f, _LOG_P), f), z)
    # Cephes' split ln2 = 0.693359375 - 2.12194440e-4 (e*0.693359375 exact).
    y = b.fadd(y, b.fmul(fe, _fc(x, -2.12194440e-4)))
    y = b.fadd(y, b.fmul(z, _fc(x, -0.5)))
    if corr is not None:
        y = b.fadd(y, corr)
    return b.fadd(b.fadd(f, y), b.fmul(fe, _fc(x, 0.693359375)))


def _log_special(b, x, r):
    r = _sel(b, _eq(b, x, _INF), x, r)
    r = _sel(b, _eq(b, x, 0.0), _fc(x, -_INF), r)
    return _sel(b, b.fcmp_unordered("<", x, _fc(x, 0.0)), _fc(x, _NAN), r)


def log(b, x):
    """Natural log; log(0) = -inf, log(<0) = nan, log(inf) = inf."""
    return _log_special(b, x, _log_finite(b, x))


def log1p(b, x):
    """log(1+x): log(u), u = fl(1+x), plus the first-order correction
    (1+x-u)/u for the rounding of u (fdlibm's trick)."""
    one = _fc(x, 1.0)
    u = b.fadd(x, one)
    # 1+x-u exactly: u-1 is exact for x < 1, u-x for x >= 1.
    c = _sel(b, b.fcmp_ordered(">=", x, one),
             b.fsub(one, b.fsub(u, x)), b.fsub(x, b.fsub(u, one)))
    r = _log_special(b, u, _log_finite(b, u, b.fdiv(c, u)))
    return _sel(b, _eq(b, x, 0.0), x, r)           # log1p(-0) = -0


def softplus(b, x):
    """log(1+e^x) = max(x,0) + log1p(e^-|x|); exact x for large x."""
    pos = _sel(b, _gt(b, x, 0.0), x, _fc(x, 0.0))
    return b.fadd(pos, log1p(b, exp(b, b.fneg(fabs(b, x)))))


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
    """erf(+-inf) = +-1, erf(-0) = -0; 1 ulp over the whole range."""
    a = fabs(b, x)
    z = b.fmul(a, a)
    small = b.fadd(a, b.fmul(a, _horner(b, z, _ERF_Q)))
    t = _sel(b, _gt(b, a, 4.0), _fc(x, 4.0), a)
    p = _horner(b, t, _ERF_P)
    large = b.fsub(_fc(x, 1.0), _exp_core(b, b.fneg(p)))
    r = _sel(b, _lt(b, a, 0.875), small, large)
    return copysign(b, r, x)


# --------------------------------------------------------------------------
# pow
# --------------------------------------------------------------------------

def _log_df(b, a):
    """ln(a) as a double-float (hi, lo), ~2^-33 relative, for finite a > 0."""
    m, e = _log_reduce(b, a)
    fe = b.sitofp(e, a.type)
    one, two = _fc(a, 1.0), _fc(a, 2.0)
    f = b.fsub(m, one)                                   # exact
    # s = f/(2+f) to ~48 bits: ln(m) = 2*atanh(s) = 2s + 2s^3/3 + ...
    d = b.fadd(two, f)
    dl = b.fadd(b.fsub(two, d), f)
    s = b.fdiv(f, d)
    ph, pl = _two_prod(b, s, d)
    sl = b.fdiv(b.fsub(b.fsub(b.fsub(f, ph), pl), b.fmul(s, dl)), d)
    # ln(m) = 2s + (2/3)s^3 + s^5*Q(s^2): |s| <= 0.1716 makes the cubic term up
    # to 1% of the result, so it is formed exactly too; the rest is < 2^-11.
    zh, zl = _two_prod(b, s, s)
    th, tl = _two_prod(b, s, zh)
    tl = b.fadd(tl, b.fmul(s, zl))
    ch, cl = _two_prod(b, th, _fc(a, _TWO_THIRDS_HI))
    cl = b.fadd(cl, b.fadd(b.fmul(th, _fc(a, _TWO_THIRDS_LO)),
                           b.fmul(tl, _fc(a, _TWO_THIRDS_HI))))
    rest = b.fmul(b.fmul(th, zh), _horner(b, zh, [2 / 13, 2 / 11, 2 / 9, 2 / 7, 2 / 5]))
    # d(2s + 2s^3/3)/ds = 2 + 2s^2: carries the low part of s.
    sl2 = b.fadd(sl, sl)
    hi, lo1 = _fast_two_sum(b, b.fmul(fe, _fc(a, _LN2_HI)), b.fadd(s, s))
    hi, lo2 = _fast_two_sum(b, hi, ch)
    lo = b.fadd(b.fadd(lo1, lo2),
                b.fadd(b.fadd(b.fmul(fe, _fc(a, _LN2_LO)), b.fadd(sl2, b.fmul(sl2, zh))),
                       b.fadd(cl, rest)))
    return _fast_two_sum(b, hi, lo)


def _is_int_odd(b, y):
    """(y is integral or inf, y is an odd integer); NaN -> (False, False)."""
    isint = _eq(b, trunc(b, y), y)
    # Every float >= 2^24 is even; clamp first so fptosi never sees poison.
    yc = _sel(b, _lt(b, fabs(b, y), 2.0 ** 24), y, _fc(y, 0.0))
    yi = b.fptosi(yc, _ity(y))
    odd = b.icmp_signed("!=", b.and_(yi, _ic(yi, 1)), _ic(yi, 0))
    return isint, b.and_(isint, odd)


def pow(b, x, y):
    """C powf semantics (pow(x,0)=1, pow(1,y)=1 even for nan, ...)."""
    zero, one, inf = _fc(x, 0.0), _fc(x, 1.0), _fc(x, _INF)
    ax = fabs(b, x)
    ay = fabs(b, y)
    # |y| >= 2^31 already over/underflows for every |x| != 1; clamping keeps
    # Dekker's split (y*4097) finite.
    yc = _sel(b, _gt(b, ay, 2.0 ** 31), copysign(b, _fc(x, 2.0 ** 31), y), y)
    lh, ll = _log_df(b, ax)
    ph, pl = _two_prod(b, yc, lh)
    pl = b.fadd(pl, b.fmul(yc, ll))
    big = _gt(b, ph, 89.0)
    small = _lt(b, ph, -104.0)
    ph = _sel(b, big, _fc(x, 89.0), _sel(b, small, _fc(x, -104.0), ph))
    pl = _sel(b, b.or_(big, small), zero, pl)
    r = _exp_core(b, ph, pl)

    isint, odd = _is_int_odd(b, y)
    neg = b.icmp_signed("<", _bits(b, x), _ic(x, 0))   # sign bit, so -0.0 too
    negodd = b.and_(neg, odd)
    r = _sel(b, negodd, b.fneg(r), r)
    r = _sel(b, b.and_(_lt(b, x, 0.0), b.not_(isint)), _fc(x, _NAN), r)
    # x = +-0 or +-inf: 0 or inf depending on sign(y), signed for odd y.
    xz = _eq(b, ax, 0.0)
    zi = b.or_(xz, _eq(b, ax, _INF))
    toinf = b.xor(xz, _gt(b, y, 0.0))
    sp = _sel(b, toinf, inf, zero)
    sp = _sel(b, negodd, b.fneg(sp), sp)
    r = _sel(b, zi, sp, r)
    # y = +-inf: 1 if |x| == 1, else 0 or inf.
    yinf = _eq(b, ay, _INF)
    ysp = _sel(b, b.xor(_lt(b, ax, 1.0), _gt(b, y, 0.0)), inf, zero)
    ysp = _sel(b, _eq(b, ax, 1.0), one, ysp)
    r = _sel(b, yinf, ysp, r)
    r = _sel(b, b.or_(_isnan(b, x), _isnan(b, y)), _fc(x, _NAN), r)
    return _sel(b, b.or_(_eq(b, y, 0.0), _eq(b, x, 1.0)), one, r)


# --------------------------------------------------------------------------
# rounding, min/max, sqrt
# --------------------------------------------------------------------------

def round_half_even(b, x):
    """rint under the default rounding mode; |x| >= 2^23 (and inf/nan) -> x."""
    a = fabs(b, x)
    r = b.fsub(b.fadd(a, _fc(x, 2.0 ** 23)), _fc(x, 2.0 ** 23))
    r = copysign(b, r, x)
    return _sel(b, _lt(b, a, 2.0 ** 23), r, x)


def trunc(b, x):
    """Round toward zero; keeps the sign (trunc(-0.5) = -0.); |x| >= 2^23 -> x."""
    a = fabs(b, x)
    r = b.fsub(b.fadd(a, _fc(x, 2.0 ** 23)), _fc(x, 2.0 ** 23))
    r = _sel(b, _gt(b, r, a), b.fsub(r, _fc(x, 1.0)), r)
    return _sel(b, _lt(b, a, 2.0 ** 23), copysign(b, r, x), x)


def floor(b, x):
    """Round down; floor(-0.) = -0., |x| >= 2^23, inf, nan -> x."""
    r = round_half_even(b, x)
    r = _sel(b, _gt(b, r, x), b.fsub(r, _fc(x, 1.0)), r)
    return copysign(b, r, x)       # floor keeps the sign of x (floor(-0.) = -0.)


def ceil(b, x):
    """Round up; ceil(-0.5) = -0., |x| >= 2^23, inf, nan -> x."""
    r = round_half_even(b, x)
    r = _sel(b, _lt(b, r, x), b.fadd(r, _fc(x, 1.0)), r)
    return copysign(b, r, x)       # ceil(-0.5) = -0.


def fmin(b, x, y):
    """numpy.minimum: NaN if either is NaN, else (x < y ? x : y)."""
    r = _sel(b, b.fcmp_ordered("<", x, y), x, y)
    return _sel(b, _isnan(b, x), x, r)


def fmax(b, x, y):
    """numpy.maximum: NaN if either is NaN, else (x > y ? x : y)."""
    r = _sel(b, b.fcmp_ordered(">", x, y), x, y)
    return _sel(b, _isnan(b, x), x, r)


def sqrt(b, x, fpu: bool):
    """Correctly rounded sqrt; sqrt(-0.) = -0., sqrt(<0) = nan.

    ``llvm.sqrt`` is a single instruction on every FPU target but a ``sqrtf``
    libcall on soft-float ones (-float-abi=soft, Cortex-M0/M3...), so with
    ``fpu`` false (the caller passes TargetCaps.fpu) an integer digit-by-digit
    version is emitted instead (exact, 25 unrolled steps). Everything else in
    this module is FPU-agnostic."""
    if fpu:
        return b.call(_intrinsic(b, "llvm.sqrt", x, 1), [x])
    return _sqrt_int(b, x)


def _sqrt_int(b, x):
    tiny = _lt(b, x, 2.0 ** -126)
    xs = _sel(b, tiny, b.fmul(x, _fc(x, 2.0 ** 24)), x)
    ix = _bits(b, xs)
    c = lambda v: _ic(ix, v)  # noqa: E731
    m = b.sub(b.lshr(ix, c(23)), c(127))
    m = b.sub(m, _sel(b, tiny, c(24), c(0)))
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
        s = _sel(b, take, b.add(t, r), s)
        ix = _sel(b, take, b.sub(ix, t), ix)
        q = _sel(b, take, b.add(q, r), q)
        ix = b.shl(ix, c(1))
    # a nonzero remainder can never be an exact tie: round half up == nearest
    q = b.add(q, _sel(b, b.icmp_signed("!=", ix, c(0)), b.and_(q, c(1)), c(0)))
    res = _float(b, b.add(b.add(b.lshr(q, c(1)), c(0x3F000000)), b.shl(m, c(23))), x)
    res = _sel(b, _eq(b, x, _INF), x, res)
    res = _sel(b, _eq(b, x, 0.0), x, res)               # keeps -0.0
    return _sel(b, b.fcmp_unordered("<", x, _fc(x, 0.0)), _fc(x, _NAN), res)


# --------------------------------------------------------------------------
# sin / cos
# --------------------------------------------------------------------------

# Cody-Waite reduction by pi/2 in four parts; the first three have <= 11
# significant bits so j*part is exact for |j| < 2^13, i.e. |x| <= 8192*pi/2
# ~ 12867: there the error is <= 2 ulp (|result| > 1e-3) and <= 1.1e-7
# absolute.  Beyond, accuracy degrades gradually (abs error ~1e-6 at 1e5,
# ~3e-2 at 1e6); past ~2^22 the result is meaningless but stays in [-1, 1].
_PIO2 = [1.5703125, 4.837512969970703e-4, 7.549533620476723e-8,
         2.5633440682570896e-12]
_SIN_P = [-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1]   # Cephes sinf
_COS_P = [2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2]


def _sincos(b, x, quadrant_offset):
    j, ji = _round_magic(b, b.fmul(x, _fc(x, 0.6366197723675814)))
    r = x
    for part in _PIO2:
        r = b.fsub(r, b.fmul(j, _fc(x, part)))
    # |r| <= pi/4 (+ulps) wherever the reduction is valid; for huge |x| this
    # only keeps the (meaningless) result within [-1, 1].
    r = _clamp(b, r, -0.8, 0.8)
    z = b.fmul(r, r)
    ps = b.fadd(r, b.fmul(b.fmul(z, r), _horner(b, z, _SIN_P)))
    pc = b.fadd(b.fsub(_fc(x, 1.0), b.fmul(z, _fc(x, 0.5))),
                b.fmul(b.fmul(z, z), _horner(b, z, _COS_P)))
    q = b.add(ji, _ic(ji, quadrant_offset))
    res = _sel(b, b.icmp_signed("!=", b.and_(q, _ic(q, 1)), _ic(q, 0)), pc, ps)
    sign = b.shl(b.and_(q, _ic(q, 2)), _ic(q, 30))
    return _float(b, b.xor(_bits(b, res), sign), x)


def sin(b, x):
    """See _PIO2 for the accurate range; sin(+-inf) = nan."""
    r = _sincos(b, x, 0)
    return _sel(b, _eq(b, x, 0.0), x, r)      # sin(-0) = -0


def cos(b, x):
    """See _PIO2 for the accurate range; cos(+-inf) = nan."""
    return _sincos(b, x, 1)


def call_unary(module, name, fn):
    """Define ``float name(float)`` (internal, inlinable) wrapping fn(b, x)."""
    f = ir.Function(module, ir.FunctionType(F32, [F32]), name)
    f.linkage = "internal"
    f.attributes.add("alwaysinline")
    b = ir.IRBuilder(f.append_basic_block("entry"))
    b.ret(fn(b, f.args[0]))
    return f
