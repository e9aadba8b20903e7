"""exp, expm1, sigmoid, tanh; log, log1p, softplus (Cephes-style reductions, float32)."""
from __future__ import annotations

from glowpy.codegen.mathfn.core import (_MAGIC, INF, LN2_HI, LN2_LO, LOG2E, NAN,
                                        SQRT_HALF_BITS, bits, clamp, copysign, eq, fabs, fconst,
                                        from_bits, gt, horner, iconst, intrinsic, lt, pow2i,
                                        round_magic, select)


# --------------------------------------------------------------------------
# exp family
# --------------------------------------------------------------------------

# Cephes expf: exp(r) = 1 + r + r^2 * P(r) on |r| <= ln2/2.
_EXP_P = [1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
          4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1]


def _exp_reduce(b, x, lo=None):
    n, ni = round_magic(b, b.fmul(x, fconst(x, LOG2E)))
    # x - n*HI is exact (Sterbenz); the LO product only rounds at 2^-24 of r.
    r = b.fsub(b.fsub(x, b.fmul(n, fconst(x, LN2_HI))), b.fmul(n, fconst(x, LN2_LO)))
    if lo is not None:
        r = b.fadd(r, lo)
    return r, ni


def exp_core(b, x, lo=None):
    """exp(x [+ lo]) for x in [-104, 89] (or NaN)."""
    r, ni = _exp_reduce(b, x, lo)
    p = b.fadd(b.fadd(b.fmul(horner(b, r, _EXP_P), b.fmul(r, r)), r), fconst(x, 1.0))
    # Two scale factors: 2^n alone leaves float range for n in {-150..-127, 128}
    # and a single multiply by both halves rounds only once into denormals.
    n1 = b.ashr(ni, iconst(ni, 1))
    n2 = b.sub(ni, n1)
    return b.fmul(b.fmul(p, pow2i(b, n1, x)), pow2i(b, n2, x))


def exp(b, x):
    """e^x; overflow -> inf above ~88.72, -> 0 below ~-103.97, nan -> nan."""
    return exp_core(b, clamp(b, x, -104.0, 89.0))


def expm1(b, x):
    """e^x - 1 with full relative accuracy near 0 (for elu/selu/softplus)."""
    xc = clamp(b, x, -25.0, 89.0)   # below -17.4 the result rounds to -1
    r, ni = _exp_reduce(b, xc)
    em = b.fadd(r, b.fmul(b.fmul(r, r), horner(b, r, _EXP_P)))   # expm1(r)
    # 2^n*(em+1)-1 == 2*(em*s + (s-1/2)) with s = 2^(n-1); s stays finite for
    # n = 128, the final doubling is exact (or overflows correctly).
    s = pow2i(b, b.sub(ni, iconst(ni, 1)), x)
    res = b.fmul(b.fadd(b.fmul(em, s), b.fsub(s, fconst(x, 0.5))), fconst(x, 2.0))
    # Keeps -0.0 and denormals exact (em*0.5 would drop bits of a denormal).
    return select(b, lt(b, fabs(b, x), 2.0 ** -25), x, res)


def exp_scaled(b, a, scale: int = 0):
    """e^a * 2^scale for a in [-104, 0] (or NaN) whose result is normal: exp_core specialized
    to a non-positive argument. One scale factor (exp_core takes two for its denormal
    results), built from the rounding constant's bits by one shift and one add: the constant
    carries the scale (t = 1.5*2^23 + scale + round(a*log2e), exact in that binade), and the
    shift by 23 wraps 1.5*2^23's bits to 0, leaving (n + scale) << 23. The reduction's
    rounding and two ln2 steps are llvm.fmuladd (exact or equally rounded either way: n*LN2_HI
    and a - n*LN2_HI are exact, and n may be either neighbour of a tie), the polynomial one
    Horner chain, 1 + r*(1 + r*P(r)). 14 vector operations where exp_core takes 25 and the
    previous form (pow2i of n + scale, r*r*P(r) + r + 1) took 17, at the same ulp bounds:
    Erf of (1,32,160,160) on AVX2 code 610 -> 545 us (onnxruntime 541)."""
    fma = intrinsic(b, "llvm.fmuladd", a, 3)
    magic = fconst(a, _MAGIC + scale)
    t = b.call(fma, [a, fconst(a, LOG2E), magic])
    n = b.fsub(t, magic)
    s = b.add(b.shl(bits(b, t), iconst(a, 23)), iconst(a, 127 << 23))  # 2^(n + scale)
    r = b.call(fma, [n, fconst(a, -LN2_HI), a])
    r = b.call(fma, [n, fconst(a, -LN2_LO), r])
    return b.fmul(horner(b, r, _EXP_P + [1.0, 1.0]), from_bits(b, s, a))


def exp_nonpositive(b, a, times_2_64: bool = False):
    """e^a for a <= 0 or NaN (Softmax's x - max, sigmoid's -|x|), to the accuracy of exp: one
    clamp at -104, where e^a rounds to 0, instead of exp's two, and exp_scaled formed as
    e^a * 2^64, normal down to the clamp, brought back by one exact power-of-two multiply
    (a single rounding into denormals). 17 vector operations where exp takes 27.
    times_2_64: e^a * 2^64 itself, for callers whose scale divides out (Softmax)."""
    a = select(b, lt(b, a, -104.0), fconst(a, -104.0), a)  # NaN passes
    e = exp_scaled(b, a, 64)
    return e if times_2_64 else b.fmul(e, fconst(a, 2.0 ** -64))


def sigmoid(b, x):
    """1/(1+e^-x) evaluated as {1 or e}/(1+e) with e = e^-|x| (never overflows).

    e^-|x| is exp_scaled (one clamp: -|x| <= 0) formed as e * 2^64, normal down to the
    clamp at -104 where e rounds to 0 as a denormal, and brought back by exact power-of-two
    multiplies. 31 vector operations per SiLU vector where exp's general form took 41 (AVX2
    Zen 3): EfficientNet-B0's 49 Sigmoid+Mul loops 15-20% faster, the model 42.2 -> 39.6
    Mcycles per inference (best of 8 alternating runs). Fusing SiLU into the producing Conv's
    epilogue instead measured slower (43.1): inside the unrolled tile code the chain spills
    and competes with the FMAs; its own loop does not."""
    e = exp_nonpositive(b, b.fneg(fabs(b, x)))
    num = select(b, lt(b, x, 0.0), e, fconst(x, 1.0))
    return b.fdiv(num, b.fadd(e, fconst(x, 1.0)))


# Cephes tanhf: tanh(a) = a + a*z*P(z), z = a^2, for |a| < 0.625.
_TANH_P = [-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2,
           1.33314422036e-1, -3.33332819422e-1]


def tanh(b, x):
    """Odd, saturates to +-1; relative accuracy near 0 (polynomial below 0.625)."""
    a = fabs(b, x)
    z = b.fmul(a, a)
    small = b.fadd(a, b.fmul(b.fmul(horner(b, z, _TANH_P), z), a))
    # 1 - 2/(e^2a + 1): e^2a -> inf saturates to exactly 1.
    e = exp(b, b.fadd(a, a))
    large = b.fsub(fconst(x, 1.0), b.fdiv(fconst(x, 2.0), b.fadd(e, fconst(x, 1.0))))
    r = select(b, lt(b, a, 0.625), small, large)
    return copysign(b, r, x)   # odd function; also gives tanh(-0) = -0


# --------------------------------------------------------------------------
# log family
# --------------------------------------------------------------------------

# Cephes logf: log(1+f) = f - f^2/2 + f^3 * P(f), f in [sqrt(.5)-1, sqrt(2)-1].
_LOG_P = [7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1,
          -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
          2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1]


def log_reduce(b, a):
    """a > 0 finite -> (m, e) with a = m * 2^e, m in [sqrt(.5), sqrt(2))."""
    tiny = lt(b, a, 2.0 ** -126)
    a = select(b, tiny, b.fmul(a, fconst(a, 2.0 ** 23)), a)
    t = b.sub(bits(b, a), iconst(a, SQRT_HALF_BITS))
    e = b.ashr(t, iconst(t, 23))
    e = b.sub(e, select(b, tiny, iconst(t, 23), iconst(t, 0)))
    m = from_bits(b, b.add(b.and_(t, iconst(t, 0x7FFFFF)), iconst(t, SQRT_HALF_BITS)), a)
    return m, e


def _log_finite(b, x, corr=None):
    m, e = log_reduce(b, x)
    f = b.fsub(m, fconst(x, 1.0))
    fe = b.sitofp(e, x.type)
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(horner(b, f, _LOG_P), f), z)
    # Cephes' split ln2 = 0.693359375 - 2.12194440e-4 (e*0.693359375 exact).
    y = b.fadd(y, b.fmul(fe, fconst(x, -2.12194440e-4)))
    y = b.fadd(y, b.fmul(z, fconst(x, -0.5)))
    if corr is not None:
        y = b.fadd(y, corr)
    return b.fadd(b.fadd(f, y), b.fmul(fe, fconst(x, 0.693359375)))


def _log_special(b, x, r):
    r = select(b, eq(b, x, INF), x, r)
    r = select(b, eq(b, x, 0.0), fconst(x, -INF), r)
    return select(b, b.fcmp_unordered("<", x, fconst(x, 0.0)), fconst(x, NAN), r)


def log(b, x):
    """Natural log; log(0) = -inf, log(<0) = nan, log(inf) = inf."""
    return _log_special(b, x, _log_finite(b, x))


def log1p(b, x):
    """log(1+x): log(u), u = fl(1+x), plus the first-order correction
    (1+x-u)/u for the rounding of u (fdlibm's trick)."""
    one = fconst(x, 1.0)
    u = b.fadd(x, one)
    # 1+x-u exactly: u-1 is exact for x < 1, u-x for x >= 1.
    c = select(b, b.fcmp_ordered(">=", x, one),
             b.fsub(one, b.fsub(u, x)), b.fsub(x, b.fsub(u, one)))
    r = _log_special(b, u, _log_finite(b, u, b.fdiv(c, u)))
    return select(b, eq(b, x, 0.0), x, r)           # log1p(-0) = -0


def softplus(b, x):
    """log(1+e^x) = max(x,0) + log1p(e^-|x|); exact x for large x."""
    pos = select(b, gt(b, x, 0.0), x, fconst(x, 0.0))
    return b.fadd(pos, log1p(b, exp(b, b.fneg(fabs(b, x)))))
