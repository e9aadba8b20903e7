"""Accuracy of glowpy.codegen.mathfn.rational (the Tanh and Sigmoid ops, Gelu's erf) against float64, as
scalar code, as LLVM's vectorized loop on the host and as explicit <4 x float> and <8 x float>
vectors (the same emitter for every width); the Tanh, Sigmoid and SiLU ops against onnxruntime
at every runnable vector level."""
import ctypes
import math

import numpy as np
import pytest
from llvmlite import ir
import llvmlite.binding as llvm

from glowpy.codegen.mathfn.rational import erf_rational, sigmoid_rational, tanh_rational
from test_mathfn import F32, PF, add_loop, host_tm, optimize, same, signed_sweep
from util import GraphBuilder, check_against_onnxruntime, check_op
from vector_levels import params

f32 = np.float32
FNS = {"tanh": tanh_rational, "sigmoid": sigmoid_rational, "erf": erf_rational}
# the stated bounds (mathfn/rational.py's docstring)
TANH_ABS, TANH_ULP = 3e-7, 5
SIGMOID_ABS = 1.5e-7
ERF_ABS, ERF_ULP = 3.5e-7, 6


def _compile(widths):
    """{(name, width): f(in, out, n)}: width 1 is a scalar loop (vectorized by LLVM), wider
    ones call the emitter on <width x float> values, n / width times."""
    mod = ir.Module("rational")
    for name, fn in FNS.items():
        add_loop(mod, f"{name}_1", fn, 1)
        for w in widths:
            V = ir.VectorType(F32, w)
            f = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PF, PF]), f"{name}_{w}")
            b = ir.IRBuilder(f.append_basic_block())
            b.store(fn(b, b.load(f.args[0], typ=V, align=4)), f.args[1], align=4)
            b.ret_void()
    tm = host_tm()
    ee = llvm.create_mcjit_compiler(optimize(mod, tm), tm)
    ee.finalize_object()
    out = {}
    for name in FNS:
        loop = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
            ee.get_function_address(f"{name}_1"))
        out[name, 1] = loop
        for w in widths:
            out[name, w] = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(
                ee.get_function_address(f"{name}_{w}"))
    out["_keep"] = (ee, mod)
    return out


@pytest.fixture(scope="module")
def fns():
    return _compile((4, 8))


def run(fns, name, x, width=1):
    x = np.ascontiguousarray(x, f32)
    y = np.empty_like(x)
    if width == 1:
        fns[name, 1](x.ctypes.data, y.ctypes.data, x.size)
        return y
    assert x.size % width == 0
    for i in range(0, x.size, width):
        fns[name, width](x[i:].ctypes.data, y[i:].ctypes.data)
    return y


def inputs():
    rng = np.random.default_rng(0)
    return np.concatenate([np.linspace(-20, 20, 400000, dtype=f32),
                           (rng.standard_normal(400000) * 4).astype(f32),
                           signed_sweep(1e-30, 30.0, 200000)])


def test_tanh_within_stated_bounds(fns):
    x = inputs()
    ref = np.tanh(x.astype(np.float64))
    got = run(fns, "tanh", x)
    err = np.abs(got - ref)
    assert err.max() <= TANH_ABS, err.max()
    ulp = np.spacing(np.abs(ref).astype(f32)).astype(np.float64)
    assert (err / ulp).max() <= TANH_ULP, (err / ulp).max()
    # signed zeros kept, NaN passes, the infinities saturate like the clamp (2 ulp below 1:
    # the rational form's value at the clamp point)
    same(run(fns, "tanh", [0.0, -0.0, np.inf, -np.inf, 30.0, np.nan]),
         [0.0, -0.0, 0.99999976, -0.99999976, 0.99999976, np.nan])
    assert np.array_equal(run(fns, "tanh", -x), -got)  # odd


def test_sigmoid_within_stated_bound(fns):
    x = inputs()
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    got = run(fns, "sigmoid", x)
    err = np.abs(got - ref)
    assert err.max() <= SIGMOID_ABS, err.max()
    # the tails: 0 below -16.6 (so x * sigmoid(x) tends to -0), 1 - 1.2e-7 at the top; NaN
    # passes
    same(run(fns, "sigmoid", [0.0, -16.0, -16.7, -1e4, -np.inf, np.inf, 1e4, np.nan]),
         [0.5, got_at(fns, -16.0), 0.0, 0.0, 0.0, 0.99999988, 0.99999988, np.nan])
    silu = x.astype(np.float64) * got  # SiLU: within the bound times |x|, 0 in the negative tail
    assert np.all(np.abs(silu - x * ref) <= SIGMOID_ABS * np.abs(x) + 1e-12)
    assert not silu[x < -16.6].any()


def test_erf_within_stated_bounds(fns):
    """Gelu's erf: within its bounds, exactly +-1 from the clamp point (3.9) on, so Gelu is x
    and -0 in its tails; signed zeros kept, NaN passes, odd."""
    x = inputs()
    ref = np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)).astype(np.float64)
    got = run(fns, "erf", x)
    err = np.abs(got - ref)
    assert err.max() <= ERF_ABS, err.max()
    ulp = np.spacing(np.abs(ref).astype(f32)).astype(np.float64)
    assert (err / ulp).max() <= ERF_ULP, (err / ulp).max()
    same(run(fns, "erf", [0.0, -0.0, 3.9, 4.0, -30.0, np.inf, -np.inf, np.nan]),
         [0.0, -0.0, 1.0, 1.0, -1.0, 1.0, -1.0, np.nan])
    assert np.array_equal(run(fns, "erf", -x), -got)  # odd


def got_at(fns, v):
    return float(run(fns, "sigmoid", [v])[0])


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("name", list(FNS))
def test_vector_widths_agree_with_the_scalar_loop(fns, name, width):
    x = inputs()[:width * 20000]
    np.testing.assert_array_equal(run(fns, name, x, width), run(fns, name, x))


@pytest.mark.parametrize("level", params())
def test_tanh_op_matches_onnxruntime(level, tmp_path):
    """The Tanh op is the rational form at every vector level: within its stated absolute
    bound of onnxruntime (whose MLAS Tanh is the same approximation), over a dense sweep with
    vector and element tails, and the saturated ends. (Gelu's tanh form keeps mathfn.tanh:
    there 1 + tanh cancels, and the rational form's saturation 2 ulp short of -1 would leave
    Gelu(-40) at -4.8e-6 instead of -0.)"""
    x = np.concatenate([np.linspace(-12, 12, 4001, dtype=f32), f32([0.0, -0.0, 1e-30, 40, -40])])
    g = GraphBuilder(x=x)
    g.node("Tanh", ["x"])
    check_op(g.model(13), g.feeds, tmp_path, rtol=1e-6, atol=TANH_ABS, **level.options)


@pytest.mark.parametrize("level", params())
def test_sigmoid_and_silu_match_onnxruntime(level, tmp_path):
    """The Sigmoid op (the rational form) and SiLU (x * Sigmoid(x), EfficientNet's and YOLO's
    activation, fused into one loop) at every vector level: within 2e-7 of onnxruntime over a
    dense sweep with vector and element tails, the saturated ends and large negative inputs,
    where x * sigmoid(x) must stay near -0. (atol 3e-6: onnxruntime's logistic stays near
    1.2e-7 down to x = -18, so its SiLU reaches -2.9e-6 there, where the bundle's is -0 and
    the float64 value -3e-7.)"""
    x = np.concatenate([np.linspace(-30, 30, 6001, dtype=f32),
                        f32([0.0, -0.0, 1e-30, 40, -40, -1e3, 1e3])])
    for silu in (False, True):
        g = GraphBuilder(x=x)
        s = g.node("Sigmoid", ["x"], output=not silu)
        if silu:
            g.node("Mul", ["x", s])
        check_op(g.model(13), g.feeds, tmp_path / f"silu{silu}", rtol=1e-6, atol=3e-6,
                 **level.options)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("level", params())
def test_gelu_op_through_the_rational_forms(level, approximate, tmp_path):
    """Gelu (opset 20) at every vector level: "none" through the rational erf, within half its
    bound times |x| of float64, exactly x from 3.9 * sqrt(2) up and -0 below -3.9 * sqrt(2);
    "tanh" as x * sigmoid(2u) through the rational sigmoid, within its bound times |x|, -0 where
    2u < -16.6. Both over a dense sweep with vector and element tails, within 1e-5 of
    onnxruntime (whose erf and tanh are approximations of the same kind)."""
    x = np.concatenate([np.linspace(-12, 12, 6001, dtype=f32), f32([0.0, -0.0, 1e-30, 40, -40])])
    g = GraphBuilder(x=x)
    g.node("Gelu", ["x"], approximate=approximate)
    [got], _ = check_against_onnxruntime(g.model(20), g.feeds, tmp_path, rtol=1e-5, atol=1e-5,
                                         **level.options)
    x64 = x.astype(np.float64)
    if approximate == "none":
        ref = 0.5 * x64 * (1 + np.frompyfunc(math.erf, 1, 1)(x64 / math.sqrt(2)).astype(np.float64))
        bound, low, high = 0.5 * ERF_ABS, -3.9 * math.sqrt(2), 3.9 * math.sqrt(2)
    else:
        u = math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)
        ref = 0.5 * x64 * (1 + np.tanh(u))
        bound, low, high = SIGMOID_ABS, -6.05, np.inf  # 2u(-6.05) = -16.65
    assert np.all(np.abs(got - ref) <= bound * np.abs(x64) + 2 * np.spacing(np.abs(ref).astype(f32)))
    same(got[x < low - 1e-3], np.full((x < low - 1e-3).sum(), -0.0))
    same(got[x > high + 1e-3], x[x > high + 1e-3])
