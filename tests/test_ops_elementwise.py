"""Elementwise ops against onnxruntime and glowpy's numpy references: unary math and
activations with their attributes, broadcasting binary ops, variadic ops, Clip (attribute and
input forms) and Cast.

Tolerances: rtol 1e-4/atol 1e-5 by default; the transcendental functions (exp, log, tanh,
sigmoid, erf, pow, elu) are computed by glowpy's own float32 routines (mathfn, <= 2 ulp; Tanh
the rational form, onnxruntime's own approximation: 2.7e-7 absolute), which
differ from onnxruntime's in the last bits, so they use rtol 1e-5/atol 1e-6 -- tighter than the
default, because they are meant to be that good."""
import numpy as np
import pytest

from util import GraphBuilder, check_op, compile_and_run
from vector_levels import params

RNG = np.random.default_rng(3)
TRANS = dict(rtol=1e-5, atol=1e-6)


def rand(*shape, lo=-4.0, hi=4.0, dtype=np.float32):
    return RNG.uniform(lo, hi, shape).astype(dtype)


SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 88.0, -88.0, 100.0, -100.0],
                   np.float32)

# op -> (input values, attribute variants (each one node), tolerance, opset)
UNARY = {
    "Relu": (rand(3, 4, 5), [{}], {}, 14),
    "LeakyRelu": (rand(3, 4, 5), [{}, {"alpha": 0.3}, {"alpha": -1.5}], {}, 16),
    "Elu": (rand(3, 4, 5), [{}, {"alpha": 0.5}, {"alpha": 2.0}], TRANS, 6),
    "Sigmoid": (np.concatenate([rand(60, lo=-12, hi=12), SPECIAL]), [{}], TRANS, 13),
    "HardSigmoid": (rand(3, 4, 5), [{}, {"alpha": 0.3, "beta": 0.4}, {"alpha": -0.1}], {}, 6),
    "HardSwish": (rand(3, 4, 5, lo=-5, hi=5), [{}], {}, 14),
    "Tanh": (np.concatenate([rand(60, lo=-10, hi=10), SPECIAL]), [{}], TRANS, 13),
    "Exp": (np.concatenate([rand(60, lo=-20, hi=20), SPECIAL]), [{}], TRANS, 13),
    "Log": (np.concatenate([rand(60, lo=1e-3, hi=1e3), np.float32([1e-30, 1, 3e38])]), [{}], TRANS, 13),
    "Sqrt": (rand(3, 4, 5, lo=0, hi=100), [{}], {}, 13),
    "Reciprocal": (np.concatenate([rand(30, lo=0.1, hi=10), rand(30, lo=-10, hi=-0.1)]), [{}], {}, 13),
    "Neg": (rand(3, 4, 5), [{}], {}, 13),
    "Abs": (rand(3, 4, 5), [{}], {}, 13),
    "Erf": (np.concatenate([rand(60, lo=-5, hi=5), SPECIAL]), [{}], TRANS, 13),
    # x times Sigmoid's rational form (1.4e-7 absolute, as x * Sigmoid(x) computes it): up to
    # 1.7e-6 absolute at |x| = 12
    # inverse trigonometric and hyperbolic (mathfn/inverse.py): the domains' edges, +-0, huge
    "Atan": (np.concatenate([rand(60, lo=-10, hi=10), SPECIAL, np.float32([1e30, -1e30, 0.4142])]),
             [{}], TRANS, 7),
    "Asin": (np.concatenate([rand(60, lo=-1, hi=1), np.float32([1, -1, 0, -0.0, 0.5, -0.50001])]),
             [{}], TRANS, 7),
    "Acos": (np.concatenate([rand(60, lo=-1, hi=1), np.float32([1, -1, 0, -0.0, 0.5, -0.50001])]),
             [{}], TRANS, 7),
    "Asinh": (np.concatenate([rand(60, lo=-20, hi=20), SPECIAL, np.float32([1e30, -1e30, 0.49])]),
              [{}], TRANS, 9),
    "Acosh": (np.concatenate([rand(60, lo=1, hi=20), np.float32([1, 1.0001, 1.5, 1500.5, 1e30])]),
              [{}], TRANS, 9),
    "Atanh": (np.concatenate([rand(60, lo=-0.999, hi=0.999), np.float32([0, -0.0, 0.5, -0.4999,
                                                                        1e-30, 0.9999999])]),
              [{}], TRANS, 9),
    "Swish": (np.concatenate([rand(60, lo=-12, hi=12), SPECIAL]),
              [{}, {"alpha": 0.7}, {"alpha": -1.5}], dict(rtol=1e-5, atol=2e-6), 24),
}


@pytest.mark.parametrize("op", list(UNARY))
def test_unary(op, tmp_path):
    x, variants, tol, opset = UNARY[op]
    g = GraphBuilder(x=x)
    for attrs in variants:
        g.node(op, ["x"], **attrs)
    check_op(g.model(opset), g.feeds, tmp_path, **tol)


def test_unary_integer(tmp_path):
    """Neg and Abs on signed integers (onnxruntime), Relu on int32 (numpy: onnxruntime has no
    integer Relu kernel)."""
    xi = RNG.integers(-100, 100, (4, 5)).astype(np.int32)
    xl = RNG.integers(-100, 100, (7,)).astype(np.int64)
    g = GraphBuilder(xi=xi, xl=xl)
    for op in ["Neg", "Abs"]:
        g.node(op, ["xi"])
        g.node(op, ["xl"])
    check_op(g.model(14), g.feeds, tmp_path / "ort")
    relu = GraphBuilder(xi=xi)
    relu.node("Relu", ["xi"])
    got = compile_and_run(relu.model(14), relu.feeds, tmp_path / "relu")[0]
    np.testing.assert_array_equal(got, np.maximum(xi, 0))


# (shape of A, shape of B): same shape, trailing vector, middle broadcast both ways, scalar
BROADCAST = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 1), (2, 1, 4)),
             ((1,), (2, 3)), ((), (2, 3)), ((2, 3, 4), (1, 3, 1))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
def test_binary_broadcast(op, tmp_path):
    feeds, g = {}, None
    pairs = []
    for i, (sa, sb) in enumerate(BROADCAST):
        a = rand(*sa)
        b = rand(*sb, lo=0.5, hi=3) * np.where(rand(*sb) < 0, -1, 1).astype(np.float32)
        feeds[f"a{i}"], feeds[f"b{i}"] = a, b
        pairs.append((f"a{i}", f"b{i}"))
    g = GraphBuilder(**feeds)
    for a, b in pairs:
        g.node(op, [a, b])
    # constant operands: a scalar and a vector, on either side
    g.node(op, ["a0", np.float32(1.75)])
    g.node(op, [rand(4, lo=1, hi=2), "a1"])
    check_op(g.model(14), g.feeds, tmp_path)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_binary_integer(dtype, tmp_path):
    """Integer Add/Sub/Mul/Div (division truncates toward zero) and Max/Min."""
    a = RNG.integers(-50, 50, (3, 4)).astype(dtype)
    b = RNG.integers(1, 9, (4,)).astype(dtype) * np.array([1, -1, 1, -1], dtype)
    g = GraphBuilder(a=a, b=b)
    for op in ["Add", "Sub", "Mul", "Div", "Max", "Min"]:
        g.node(op, ["a", "b"])
    check_op(g.model(14), g.feeds, tmp_path)


def test_pow(tmp_path):
    base = rand(3, 4, lo=0.1, hi=5)
    neg = rand(3, 4, lo=-3, hi=3)
    g = GraphBuilder(base=base, e=rand(3, 4, lo=-2.5, hi=2.5), neg=neg)
    g.node("Pow", ["base", "e"])  # positive base, fractional exponents
    g.node("Pow", ["neg", np.float32(2.0)])  # negative base, integral exponents
    g.node("Pow", ["neg", np.float32(3.0)])
    g.node("Pow", ["neg", np.float32(-1.0)])
    g.node("Pow", ["base", np.float32(0.5)])
    g.node("Pow", ["base", np.array([0.0, 1.0, -2.0, 1.5], np.float32)])  # broadcast
    g.node("Pow", ["neg", np.array(2, np.int64)])  # integer exponent type (opset 12+)
    g.node("Pow", ["neg", np.array([3], np.int32)])
    check_op(g.model(15), g.feeds, tmp_path, **TRANS)


POW_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-20, -1e-20, 1e20, -1e20,
                        1e-30, 3e38, -2.5], np.float32)


@pytest.mark.parametrize("level", params())
def test_pow_small_constant(level, tmp_path):
    """Pow by 0, 1, 2, 3, 4, 0.5 and -1 (multiplications, a division, a square root instead of
    the general pow) as its own instruction, with a float and an integer exponent, in a fused
    elementwise chain and as a MatMul epilogue; lengths that leave vector tails at 4, 8 and 16
    lanes; signed zeros, infinities, NaN, overflow. Within 1e-6 relative of onnxruntime (x*x*x
    and (x*x)^2 round twice), and the zeros' signs as onnxruntime's (powf(-0, 0.5) = +0)."""
    x = np.concatenate([rand(53, lo=-6, hi=6), POW_SPECIAL])  # 67 elements
    quarters = lambda *shape: np.round(rand(*shape) * 4) / 4  # noqa: E731  (exact MatMul sums)
    g = GraphBuilder(x=x, m=quarters(3, 16))
    for c in [0.0, 1.0, 2.0, 3.0, 4.0, 0.5, -1.0]:
        g.node("Pow", ["x", np.float32(c)])
    g.node("Pow", ["x", np.array(3, np.int64)])
    g.node("Pow", ["x", np.array(-1, np.int32)])
    a = g.node("Add", ["x", np.float32(0.25)], output=False)
    g.node("Mul", [g.node("Pow", [a, np.float32(3.0)], output=False), np.float32(0.5)])
    g.node("Pow", [g.node("MatMul", ["m", quarters(16, 37)], output=False), np.float32(2.0)])
    got, expected = check_op(g.model(15), g.feeds, tmp_path, rtol=1e-6, atol=1e-37, **level.options)
    for i, (r, e) in enumerate(zip(got, expected)):
        np.testing.assert_array_equal(np.signbit(r[r == 0]), np.signbit(e[e == 0]), err_msg=f"output {i}")


@pytest.mark.parametrize("level", params())
def test_long_chains_interleaved(level, tmp_path):
    """The loops of mathfn ops interleave 4 (one op) or 2 (a fused chain) vector iterations:
    lengths below one vector, below one interleaved group, and groups plus a vector tail plus
    an element tail at 4, 8 and 16 lanes; the Erf GELU chain as exported (Div, Erf, Add, Mul,
    Mul: one fused kernel) and single Exp, Tanh, Erf, Softplus, Atan, Asinh."""
    for n in [3, 29, 1037]:
        x = np.concatenate([rand(n - 3, lo=-6, hi=6), np.float32([0.0, -30.0, 30.0])])
        g = GraphBuilder(x=x)
        d = g.node("Div", ["x", np.float32(np.sqrt(2))], output=False)
        a = g.node("Add", [g.node("Erf", [d], output=False), np.float32(1.0)], output=False)
        g.node("Mul", [g.node("Mul", ["x", a], output=False), np.float32(0.5)])
        for op in ["Exp", "Tanh", "Erf", "Softplus", "Atan", "Asinh"]:
            g.node(op, ["x"])
        check_op(g.model(13), g.feeds, tmp_path / str(n), **TRANS, **level.options)


@pytest.mark.parametrize("opset", [9, 16])
def test_prelu(opset, tmp_path):
    x = rand(2, 3, 4, 5)
    g = GraphBuilder(x=x, s=rand(3, 1, 1))
    g.node("PRelu", ["x", "s"])  # per channel, runtime slope
    g.node("PRelu", ["x", rand(3, 1, 1)])
    g.node("PRelu", ["x", np.float32([0.25])])
    g.node("PRelu", ["x", rand(5)])
    g.node("PRelu", ["x", rand(2, 3, 4, 5)])
    check_op(g.model(opset), g.feeds, tmp_path)


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
def test_variadic(op, tmp_path):
    g = GraphBuilder(a=rand(2, 3, 4), b=rand(2, 3, 4), c=rand(3, 1), d=rand(4))
    g.node(op, ["a"])
    g.node(op, ["a", "b"])
    g.node(op, ["a", "c", "d"])
    g.node(op, ["c", "d"])  # broadcast of two smaller shapes: (3, 4)
    g.node(op, ["a", "b", "c", "d", rand(1, 3, 1)])
    check_op(g.model(13), g.feeds, tmp_path)


def test_clip_attribute_form(tmp_path):
    """Clip-6: min and max attributes (defaults: the float range)."""
    g = GraphBuilder(x=rand(4, 5))
    g.node("Clip", ["x"], min=-1.0, max=2.0)
    g.node("Clip", ["x"], min=0.5)
    g.node("Clip", ["x"], max=-0.5)
    g.node("Clip", ["x"])
    check_op(g.model(6), g.feeds, tmp_path)


@pytest.mark.parametrize("opset", [11, 13])
def test_clip_input_form(opset, tmp_path):
    """Clip-11/13: optional min and max inputs, either one alone, and integer data (13)."""
    g = GraphBuilder(x=rand(4, 5))
    g.node("Clip", ["x", np.float32(-1.0), np.float32(2.0)])
    g.node("Clip", ["x", np.float32(0.5)])
    g.node("Clip", ["x", None, np.float32(-0.5)])
    g.node("Clip", ["x"])
    g.node("Clip", ["x", np.float32(1.0), np.float32(1.0)])
    if opset >= 13:
        g.feeds["xi"] = RNG.integers(-20, 20, (3, 4)).astype(np.int32)
        g.node("Clip", ["xi", np.int32(-5), np.int32(7)])
        g.node("Clip", ["xi", None, np.int32(0)])
    check_op(g.model(opset), g.feeds, tmp_path)


CASTS = [(np.float32, np.int32), (np.float32, np.int64), (np.float32, np.int8), (np.float32, np.uint8),
         (np.float32, np.bool_), (np.int32, np.float32), (np.int64, np.float32), (np.int8, np.float32),
         (np.uint8, np.float32), (np.bool_, np.float32), (np.int64, np.int32), (np.int32, np.int64),
         (np.int32, np.bool_), (np.bool_, np.int64), (np.uint8, np.int32), (np.int32, np.uint8),
         (np.float32, np.float32)]


def test_cast(tmp_path):
    from onnx import helper
    fx = np.concatenate([rand(20, lo=-100, hi=100), np.float32([0, -0.0, 0.5, -0.5, 0.99, 127.9])])
    ux = np.concatenate([rand(20, lo=0, hi=250), np.float32([0, 0.5, 255.4])])
    srcs = {np.dtype(np.float32): fx, np.dtype(np.int32): RNG.integers(-1000, 1000, 12).astype(np.int32),
            np.dtype(np.int64): RNG.integers(-2**40, 2**40, 12).astype(np.int64),
            np.dtype(np.int8): RNG.integers(-128, 128, 12).astype(np.int8),
            np.dtype(np.uint8): RNG.integers(0, 256, 12).astype(np.uint8),
            np.dtype(np.bool_): RNG.integers(0, 2, 12).astype(np.bool_)}
    feeds = {f"x_{d.name}": a for d, a in srcs.items()}
    feeds["ux"] = ux
    g = GraphBuilder(**feeds)
    for src, dst in CASTS:
        src, dst = np.dtype(src), np.dtype(dst)
        name = "ux" if (src, dst) == (np.float32, np.uint8) else f"x_{src.name}"
        if (src, dst) == (np.int64, np.int32):  # in range: wrap-around is implementation-defined
            g.feeds["x_small"] = RNG.integers(-2**31, 2**31, 12).astype(np.int64)
            name = "x_small"
        if (src, dst) == (np.int32, np.uint8):
            g.feeds["x_u8"] = RNG.integers(0, 256, 12).astype(np.int32)
            name = "x_u8"
        if (src, dst) == (np.float32, np.int8):
            g.feeds["x_i8"] = rand(12, lo=-128, hi=127)
            name = "x_i8"
        g.node("Cast", [name], to=helper.np_dtype_to_tensor_dtype(dst))
    check_op(g.model(13), g.feeds, tmp_path)


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("ws, attrs", [((16, 8, 1, 1), {}),  # pixel-vectorized
                                       ((48, 32, 3, 3), dict(pads=[1, 1, 1, 1]))])  # channel
def test_swish_fused_into_conv(ws, attrs, level, tmp_path):
    """Opset 24's Swish after a Conv is an epilogue step like Sigmoid (on the accumulator
    vectors of both Conv tilings), alpha 1 and not; checked against onnxruntime."""
    g = GraphBuilder(x=rand(1, ws[1], 9, 9, lo=-1, hi=1))
    for alpha in (1.0, 0.7):
        y = g.node("Conv", ["x", rand(*ws, lo=-0.3, hi=0.3), rand(ws[0], lo=-1, hi=1)],
                   output=False, **attrs)
        g.node("Swish", [y], alpha=alpha)
    check_op(g.model(24), g.feeds, tmp_path, rtol=1e-4, atol=1e-5, **level.options)
