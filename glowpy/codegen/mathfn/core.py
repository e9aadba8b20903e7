"""What the mathfn modules share: constants of the range reductions, scalar-or-vector IR
helpers (constants, bit casts, compares, selects, Horner), double-float building blocks, and
call_unary."""
from llvmlite import ir

F32 = ir.FloatType()
I32 = ir.IntType(32)

INF = float("inf")
NAN = float("nan")
# Adding then subtracting 1.5*2^23 rounds any |v| < 2^22 to an integer (ties to
# even); the integer also sits in the low mantissa bits of the sum.
_MAGIC = 12582912.0
_MAGIC_BITS = 0x4B400000
LOG2E = 1.4426950408889634
# ln2 split so that n*LN2_HI is exact for |n| < 2^9 and the parts are positive
# (keeps x - n*ln2 from turning -0.0 into +0.0).
LN2_HI = 0.693145751953125
LN2_LO = 1.428606765330187045e-06
SQRT_HALF_BITS = 0x3F3504F3
TWO_THIRDS_HI = 0.6666666865348816          # float32(2/3)
TWO_THIRDS_LO = -1.9868215517249155e-08     # 2/3 - TWO_THIRDS_HI


# --------------------------------------------------------------------------
# small IR helpers (scalar or vector aware)
# --------------------------------------------------------------------------

def int_type(v):
    t = v.type
    if isinstance(t, ir.VectorType):
        return ir.VectorType(I32, t.count)
    return I32


def fconst(v, c):
    t = v.type
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [float(c)] * t.count)
    return ir.Constant(t, float(c))


def iconst(v, c):
    """i32 constant shaped like v (v may be a float or an int value)."""
    t = v.type
    if isinstance(t, ir.VectorType):
        it = ir.VectorType(I32, t.count)
        return ir.Constant(it, [int(c)] * t.count)
    return ir.Constant(I32, int(c))


def bits(b, x):
    return b.bitcast(x, int_type(x))


def from_bits(b, i, like):
    return b.bitcast(i, like.type)


def intrinsic(b, name, x, nargs):
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
    return b.call(intrinsic(b, "llvm.fabs", x, 1), [x])


def copysign(b, mag, sgn):
    return b.call(intrinsic(b, "llvm.copysign", mag, 2), [mag, sgn])


def horner(b, x, coeffs):
    """coeffs[0]*x^(n-1) + ... + coeffs[-1], each step one llvm.fmuladd: a fused multiply-add
    where the target has a fast one (x86 FMA3, NEON, VFPv4/FPv5), a multiply and an add
    elsewhere. Only polynomial steps are fused (one rounding fewer per step, within the ulp
    bounds of mathfn/__init__.py);
    the range reductions keep their separately rounded operations. AVX2 Zen 3, (1,128,1024)
    (benchmarks/op_probe.py, onnxruntime 45-135 us): Tanh 154 -> 130 us, Erf 179 -> 139, Exp
    67 -> 57, the Erf GELU chain 217 -> 179."""
    r = fconst(x, coeffs[0])
    fn = intrinsic(b, "llvm.fmuladd", x, 3)
    for c in coeffs[1:]:
        r = b.call(fn, [r, x, fconst(x, c)])
    return r


def select(b, cond, a, c):
    return b.select(cond, a, c)


def lt(b, x, c):
    return b.fcmp_ordered("<", x, fconst(x, c) if isinstance(c, (int, float)) else c)


def gt(b, x, c):
    return b.fcmp_ordered(">", x, fconst(x, c) if isinstance(c, (int, float)) else c)


def eq(b, x, c):
    return b.fcmp_ordered("==", x, fconst(x, c) if isinstance(c, (int, float)) else c)


def isnan(b, x):
    return b.fcmp_unordered("uno", x, x)


def clamp(b, x, lo, hi):
    """Clamp that lets NaN through (minnum/maxnum would drop it)."""
    x = select(b, gt(b, x, hi), fconst(x, hi), x)
    return select(b, lt(b, x, lo), fconst(x, lo), x)


def pow2i(b, k, like):
    """2^k as float for integer k in [-126, 127]."""
    e = b.shl(b.add(k, iconst(k, 127)), iconst(k, 23))
    return from_bits(b, e, like)


def round_magic(b, v):
    """(round(v) as float, round(v) as i32) for |v| < 2^22."""
    t = b.fadd(v, fconst(v, _MAGIC))
    n = b.fsub(t, fconst(v, _MAGIC))
    ni = b.sub(bits(b, t), iconst(v, _MAGIC_BITS))
    return n, ni


# double-float building blocks (Dekker / Knuth); exact without FMA

def _two_sum(b, x, y):
    s = b.fadd(x, y)
    bb = b.fsub(s, x)
    err = b.fadd(b.fsub(x, b.fsub(s, bb)), b.fsub(y, bb))
    return s, err


def fast_two_sum(b, x, y):  # requires |x| >= |y|
    s = b.fadd(x, y)
    return s, b.fsub(y, b.fsub(s, x))


def _split(b, x):
    c = b.fmul(x, fconst(x, 4097.0))
    hi = b.fsub(c, b.fsub(c, x))
    return hi, b.fsub(x, hi)


def two_prod(b, x, y):
    p = b.fmul(x, y)
    xh, xl = _split(b, x)
    yh, yl = _split(b, y)
    err = b.fadd(b.fadd(b.fadd(b.fsub(b.fmul(xh, yh), p), b.fmul(xh, yl)),
                        b.fmul(xl, yh)), b.fmul(xl, yl))
    return p, err


def call_unary(module, name, fn):
    """Define ``float name(float)`` (internal, inlinable) wrapping fn(b, x)."""
    f = ir.Function(module, ir.FunctionType(F32, [F32]), name)
    f.linkage = "internal"
    f.attributes.add("alwaysinline")
    b = ir.IRBuilder(f.append_basic_block("entry"))
    b.ret(fn(b, f.args[0]))
    return f
