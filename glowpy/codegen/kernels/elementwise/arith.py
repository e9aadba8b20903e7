"""Elementwise kernels: one strided loop over the output; `scalar` gives each op's per-element
code, so fused chains (and fused epilogues of Conv/Gemm) reuse it."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.mathfn import half
from glowpy.codegen.mathfn.rational import erf_rational, sigmoid_rational, tanh_rational
from glowpy.codegen.registry import emits
from glowpy.errors import ModelError
from glowpy.ir.ops.elementwise import BINARY, UNARY, VARIADIC


def _fabs(b, x):
    fn = b.module.declare_intrinsic("llvm.fabs", [x.type])
    return b.call(fn, [x])


# ops whose per-element code is a long dependency chain (mathfn's range reductions and
# polynomials): their loops ask for interleaved vector iterations (interleave_for)
LONG_CHAIN = {"Elu", "Selu", "Sigmoid", "Swish", "Tanh", "Exp", "Log", "Erf", "Gelu", "Mish", "Sin",
              "Cos", "Softplus", "Pow", "Atan", "Asin", "Acos", "Asinh", "Acosh", "Atanh"}


def interleave_for(k, ops, fused: bool) -> int:
    """How many vector iterations the loop of `ops`' per-element code should interleave (0: the
    vectorizer's choice). Measured on an AVX2 Zen 3 (benchmarks/op_probe.py, (1,128,1024)):
    one op, 4 (Exp 95 -> 68 us, Erf 243 -> 178, Tanh 189 -> 154; 2 gave 81, 190, 161); the
    exported Erf GELU chain fused, 2 (279 -> 217; 4: 230, its chain keeps x live through the
    Erf). Only with vectors: a scalar target's loop would just grow."""
    if k.caps.float_lanes <= 1 or not LONG_CHAIN & set(ops):
        return 0
    return 2 if fused else 4


def fmax(b, x, y):
    """numpy.maximum: NaN in x propagates, otherwise the larger."""
    return b.select(b.fcmp_ordered(">=", x, y), x, b.select(b.fcmp_unordered("!=", x, x), x, y))


def fmin(b, x, y):
    return b.select(b.fcmp_ordered("<=", x, y), x, b.select(b.fcmp_unordered("!=", x, x), x, y))


def _float_unary(op, b, x, a, caps):
    f = lambda v: cg.const(x.type, v)  # noqa: E731
    if op == "Relu":
        return b.select(b.fcmp_ordered("<", x, f(0)), f(0), x)
    if op == "LeakyRelu":
        return b.select(b.fcmp_ordered("<", x, f(0)), b.fmul(x, f(a["alpha"])), x)
    if op == "Elu":
        return b.select(b.fcmp_ordered("<", x, f(0)), b.fmul(f(a["alpha"]), mathfn.expm1(b, x)), x)
    if op == "Sigmoid":  # the rational form, as onnxruntime's (mathfn/rational.py says why)
        return sigmoid_rational(b, x)
    if op == "Swish":  # opset 24's x * Sigmoid(alpha x) (alpha 1: SiLU)
        xa = x if a["alpha"] == 1.0 else b.fmul(x, f(a["alpha"]))
        return b.fmul(x, sigmoid_rational(b, xa))
    if op == "HardSigmoid":
        y = b.fadd(b.fmul(x, f(a["alpha"])), f(a["beta"]))
        return fmin(b, fmax(b, y, f(0)), f(1))
    if op == "HardSwish":
        y = b.fadd(b.fmul(x, f(1 / 6)), f(0.5))
        return b.fmul(x, fmin(b, fmax(b, y, f(0)), f(1)))
    if op == "Reciprocal":
        return b.fdiv(f(1), x)
    if op == "Neg":
        return b.fneg(x)
    if op == "Abs":
        return _fabs(b, x)
    if op == "Selu":
        neg = b.fmul(f(a["gamma"] * a["alpha"]), mathfn.expm1(b, x))
        return b.select(b.fcmp_ordered(">", x, f(0)), b.fmul(x, f(a["gamma"])), neg)
    if op == "Softsign":
        return b.fdiv(x, b.fadd(f(1), _fabs(b, x)))
    if op == "Gelu":
        if a["approximate"] == "tanh":
            # 0.5 x (1 + tanh(u)) = x sigmoid(2u): the rational sigmoid (1.4e-7 absolute, 0 far
            # below, so Gelu(-40) is -0 where 1 + tanh_rational would leave 2.4e-7) in place of
            # mathfn.tanh's exp and selects; FastGelu and GPT's gelu_new
            u2 = b.fmul(f(2 * (2 / np.pi) ** 0.5),
                        b.fadd(x, b.fmul(f(0.044715), b.fmul(x, b.fmul(x, x)))))
            return b.fmul(x, sigmoid_rational(b, u2))
        if a["approximate"] == "none":
            t = erf_rational(b, b.fmul(x, f(0.5 ** 0.5)))
        else:
            raise ModelError(f"Gelu: approximate='{a['approximate']}' is not supported (none or tanh)")
        return b.fmul(b.fmul(x, f(0.5)), b.fadd(f(1), t))
    if op == "Mish":
        return b.fmul(x, mathfn.tanh(b, mathfn.softplus(b, x)))
    if op == "Sign":  # keeps 0 and NaN, as numpy.sign
        return b.select(b.fcmp_ordered(">", x, f(0)), f(1),
                        b.select(b.fcmp_ordered("<", x, f(0)), f(-1), x))
    if op == "Sqrt":
        return mathfn.sqrt(b, x, caps.fpu)
    if op in ("Asin", "Acos", "Asinh", "Acosh"):  # their reductions take a square root
        return getattr(mathfn, op.lower())(b, x, caps.fpu)
    # Tanh: the rational form, onnxruntime's own (MLAS) approximation (mathfn/rational.py: 4.6
    # ulp, 2.7e-7 absolute); the 1-ulp mathfn.tanh also evaluates an exp and selects.
    # benchmarks/op_probe.py tanh (1,128,1024) on an AVX2 Zen 3: 139 -> 37 us, onnxruntime 49
    fn = {"Tanh": tanh_rational, "Exp": mathfn.exp, "Log": mathfn.log,
          "Erf": mathfn.erf, "Floor": mathfn.floor, "Ceil": mathfn.ceil,
          "Round": mathfn.round_half_even, "Sin": mathfn.sin, "Cos": mathfn.cos,
          "Atan": mathfn.atan, "Atanh": mathfn.atanh}[op]
    return fn(b, x)


def _int_unary(op, b, x, dtype):
    zero = cg.const(x.type, 0)
    if op == "Relu":
        return b.select(b.icmp_signed("<", x, zero), zero, x) if cg.is_signed(dtype) else x
    if op == "Neg":
        return b.neg(x)
    if op == "Abs":
        return b.select(b.icmp_signed("<", x, zero), b.neg(x), x) if cg.is_signed(dtype) else x
    if op == "Sign":
        one = cg.const(x.type, 1)
        if not cg.is_signed(dtype):
            return b.zext(b.icmp_unsigned("!=", x, zero), x.type)
        return b.select(b.icmp_signed(">", x, zero), one,
                        b.select(b.icmp_signed("<", x, zero), cg.const(x.type, -1), zero))
    raise NotImplementedError(op)


def _exponent(y):
    """The value of a constant exponent (an immediate: scalar or splat), else None."""
    if not isinstance(y, ir.Constant):
        return None
    c = y.constant
    if isinstance(c, list):
        vals = {e.constant for e in c}
        c = vals.pop() if len(vals) == 1 else None
    return float(c) if isinstance(c, (int, float)) else None


def _pow_by(b, x, c, caps):
    """x ** c for the exponents models write as Pow by a constant (0, 1, 2, 3, 4, 0.5, -1) with
    multiplications, a division or a square root instead of the general pow (a log and an exp
    in double-float: Pow(x, 3) on 128x1024 took 552 us, onnxruntime 89, on an AVX2 Zen 3);
    None for other exponents. x*x and 1/x are what powf rounds to; x*x*x and (x*x)^2 round
    twice (within 2 ulp); the special values are powf's (NaN ** 0 = 1, sqrt's -0 and -inf
    fixed below)."""
    f = lambda v: cg.const(x.type, v)  # noqa: E731
    if c == 0:
        return f(1)
    if c == 1:
        return x
    if c in (2, 3, 4):
        sq = b.fmul(x, x)
        return sq if c == 2 else b.fmul(sq, x) if c == 3 else b.fmul(sq, sq)
    if c == -1:
        return b.fdiv(f(1), x)
    if c == 0.5:
        # pow(-0, 0.5) = +0 (sqrt: -0; adding +0 turns -0 into +0 and keeps every other value),
        # pow(-inf, 0.5) = +inf (sqrt: NaN)
        r = b.fadd(mathfn.sqrt(b, x, caps.fpu), f(0))
        return b.select(b.fcmp_ordered("==", x, f(-np.inf)), f(np.inf), r)
    return None


def _binary(op, b, x, y, dtype, caps):
    if cg.is_float(dtype):
        if op == "Pow":
            c = _exponent(y)
            r = None if c is None else _pow_by(b, x, c, caps)
            if r is not None:
                return r
            if isinstance(y.type, ir.IntType):  # Pow-12+: integer exponent of a float base
                y = b.sitofp(y, x.type)
            return mathfn.pow(b, x, y)
        if op == "PRelu":
            return b.select(b.fcmp_ordered("<", x, cg.const(x.type, 0)), b.fmul(x, y), x)
        return {"Add": b.fadd, "Sub": b.fsub, "Mul": b.fmul, "Div": b.fdiv, "Sum": b.fadd,
                "Mean": b.fadd, "Max": lambda p, q: fmax(b, p, q),
                "Min": lambda p, q: fmin(b, p, q)}[op](x, y)
    signed = cg.is_signed(dtype)
    if op in ("Max", "Min"):
        cmp = b.icmp_signed if signed else b.icmp_unsigned
        return b.select(cmp(">" if op == "Max" else "<", x, y), x, y)
    if op == "PRelu":
        return b.select(b.icmp_signed("<", x, cg.const(x.type, 0)), b.mul(x, y), x)
    if op == "Pow":
        raise ModelError(f"Pow of an integer base ({np.dtype(dtype).name}) is not supported; "
                         "Cast the base to float")
    return {"Add": b.add, "Sub": b.sub, "Mul": b.mul, "Sum": b.add, "Mean": b.add,
            "Div": b.sdiv if signed else b.udiv}[op](x, y)


def scalar(b, op, attrs, dtype, args, caps):
    """The value of `op` on one element of each operand, on a target with TargetCaps `caps`."""
    if op in UNARY:
        return _float_unary(op, b, args[0], attrs, caps) if cg.is_float(dtype) else \
            _int_unary(op, b, args[0], dtype)
    if op in BINARY:
        return _binary(op, b, args[0], args[1], dtype, caps)
    if op in VARIADIC:
        acc = args[0]
        for y in args[1:]:
            acc = _binary(op, b, acc, y, dtype, caps)
        if op == "Mean":
            acc = b.fdiv(acc, cg.const(acc.type, len(args))) if cg.is_float(dtype) else \
                b.sdiv(acc, cg.const(acc.type, len(args)))
        return acc
    if op == "Clip":
        x = args[0]
        lo, hi = attrs["_bounds"]
        if cg.is_float(dtype):
            if lo is not None:
                x = b.select(b.fcmp_ordered("<", x, cg.const(x.type, lo)), cg.const(x.type, lo), x)
            if hi is not None:
                x = b.select(b.fcmp_ordered(">", x, cg.const(x.type, hi)), cg.const(x.type, hi), x)
            return x
        cmp = b.icmp_signed if cg.is_signed(dtype) else b.icmp_unsigned
        if lo is not None:
            x = b.select(cmp("<", x, cg.const(x.type, lo)), cg.const(x.type, lo), x)
        if hi is not None:
            x = b.select(cmp(">", x, cg.const(x.type, hi)), cg.const(x.type, hi), x)
        return x
    raise NotImplementedError(op)


def convert(b, x, src, dst):
    """Cast one element between dtypes as numpy's astype does (float->int truncates)."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src.name in half.WIDEN or dst.name in half.WIDEN:  # through float32
        if src == dst:
            return x
        if src.name in half.WIDEN:
            x, src = half.WIDEN[src.name](b, x), np.dtype(np.float32)
        if dst.name in half.NARROW:
            return half.NARROW[dst.name](b, convert(b, x, src, np.float32))
        return convert(b, x, src, dst)
    st, dt = cg.llvm_type(src), cg.llvm_type(dst)
    if dst == np.bool_:
        return b.zext(b.fcmp_unordered("!=", x, cg.const(st, 0)) if cg.is_float(src)
                      else b.icmp_unsigned("!=", x, cg.const(st, 0)), dt)
    if src.kind == "f" and dst.kind == "f":
        return x if st == dt else (b.fpext(x, dt) if dt == cg.F64 else b.fptrunc(x, dt))
    if src.kind == "f":
        return b.fptosi(x, dt) if dst.kind == "i" else b.fptoui(x, dt)
    if dst.kind == "f":
        return b.sitofp(x, dt) if src.kind == "i" else b.uitofp(x, dt)
    if dt.width == st.width:
        return x
    if dt.width < st.width:
        return b.trunc(x, dt)
    return b.sext(x, dt) if src.kind == "i" else b.zext(x, dt)


def elementwise_loop(k, fn):
    """out[i] = fn([in_j[broadcast(i)]]) over the output shape; single-element constants become
    immediates."""
    out = k.out_buf()
    ops = [(j, x) for j, x in enumerate(k.instr.inputs) if x is not None]
    loaded = [(j, x) for j, x in ops if x.value.const is None or x.value.const.size > 1]
    strides = [cg.broadcast_strides(x.shape, out.shape) for _, x in loaded]
    with k.strided_loop(out.shape, strides + [cg.contiguous_strides(out.shape)],
                        interleave=interleave_for(k, [k.instr.op], False)) as offs:
        vals = {j: k.load(k.inp(j), o, x.dtype) for (j, x), o in zip(loaded, offs)}
        args = [vals[j] if j in vals else cg.const(cg.llvm_type(x.dtype), x.value.const.item())
                for j, x in ops]
        k.store(fn(args), k.out(), offs[-1])


@emits(*UNARY, *BINARY, *VARIADIC)
def emit_elementwise(k):
    dtype = k.out_buf().dtype
    if k.instr.op == "Pow" and not cg.is_float(dtype):
        ydt = k.in_buf(1).dtype
        elementwise_loop(k, lambda args: int_pow(k.b, args[0], args[1], dtype, ydt))
        return
    elementwise_loop(k, lambda args: scalar(k.b, k.instr.op, k.attrs, dtype, args, k.caps))


def _ipow(b, x, e):
    """x ** e for integers, e >= 0: square-and-multiply over every bit of the i64 e (wraps on
    overflow like C); e < 0 gives what trunc(x ** e) is: 1 for 1, +-1 for -1, else 0."""
    one, t = cg.const(x.type, 1), x.type
    r, base = one, x
    for bit in range(63):
        on = b.trunc(b.lshr(e, cg.const(cg.I64, bit)), cg.I1)
        r = b.select(on, b.mul(r, base), r)
        base = b.mul(base, base)
    odd = b.trunc(e, cg.I1)
    neg = b.select(b.icmp_signed("==", x, one), one,
                   b.select(b.icmp_signed("==", x, cg.const(t, -1)),
                            b.select(odd, cg.const(t, -1), one), cg.const(t, 0)))
    return b.select(b.icmp_signed("<", e, cg.const(cg.I64, 0)), neg, r)


def int_pow(b, x, y, dtype, ydtype):
    """Pow of an integer base (the result has the base's type). An integer exponent, or a float
    one holding an integer, is exact; otherwise float32 pow, truncated as numpy's astype does
    (a result within a few ulps of an integer counts as that integer)."""
    if not cg.is_float(ydtype):
        return _ipow(b, x, convert(b, y, ydtype, np.int64))
    xf = convert(b, x, dtype, np.float32)
    p = mathfn.pow(b, xf, y)
    near = mathfn.round_half_even(b, p)
    close = b.fcmp_ordered("<=", _fabs(b, b.fsub(p, near)),
                           b.fmul(_fabs(b, near), cg.const(cg.F32, 2.0 ** -20)))
    viaf = convert(b, b.select(close, near, p), np.float32, dtype)
    whole = b.fcmp_ordered("==", mathfn.floor(b, y), y)
    small = b.fcmp_ordered("<", _fabs(b, y), cg.const(cg.F32, 2.0 ** 62))
    exact = _ipow(b, x, b.fptosi(b.select(small, y, cg.const(cg.F32, 0)), cg.I64))
    return b.select(b.and_(whole, small), exact, viaf)


@emits("Clip")
def emit_clip(k):
    lo, hi = k.node.opdef.bounds(k.node)
    attrs = dict(k.attrs, _bounds=(None if lo is None else lo.item(), None if hi is None else hi.item()))
    dtype = k.out_buf().dtype
    x = k.in_buf(0)
    with k.strided_loop(x.shape, [cg.contiguous_strides(x.shape)] * 2) as (i, o):
        clipped = scalar(k.b, "Clip", attrs, dtype, [k.load(k.inp(0), i, dtype)], k.caps)
        k.store(clipped, k.out(), o)


@emits("Cast")
def emit_cast(k):
    src, dst = k.in_buf(0).dtype, k.out_buf().dtype
    shape = k.out_buf().shape
    with k.strided_loop(shape, [cg.contiguous_strides(shape)] * 2) as (i, o):
        k.store(convert(k.b, k.load(k.inp(0), i, src), src, dst), k.out(), o)


@emits("Copy", "BitCast")
def emit_copy(k):
    src, dst = k.in_buf(0), k.out_buf()
    nbytes = ir.Constant(k.intp, dst.nbytes)
    k.b.call(k.module.declare_intrinsic("llvm.memcpy", [cg.PTR, cg.PTR, k.intp]),
             [k.out(), k.inp(0), nbytes, ir.Constant(cg.I1, 0)])
