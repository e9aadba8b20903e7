"""Half-precision models (float16, bfloat16): computed in float32, half at the bundle's inputs
and outputs and where the model casts (glowpy/frontend/onnx_half.py); the conversions
(codegen/mathfn/half.py) bit-exact against numpy and ml_dtypes."""
import json
import os
import sys
import zlib

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper

from test_cross import check_bare_metal_object, run_on_aarch64
from util import GraphBuilder, compile_and_run, run_onnxruntime

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from zoo.half import ZOO_FP16, errors as half_errors  # noqa: E402

HALVES = {"float16": (np.float16, T.FLOAT16), "bfloat16": (ml_dtypes.bfloat16, T.BFLOAT16)}
rng = np.random.default_rng(16)


@pytest.fixture(autouse=True)
def _data_of_its_own(request):
    """Each test draws its data from a seed of its own name, whatever order pytest-xdist runs
    the tests in."""
    global rng
    rng = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def cast_model(src: int, dst: int, n: int):
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=dst)], "cast",
                          [helper.make_tensor_value_info("x", src, [n])],
                          [helper.make_tensor_value_info("y", dst, [n])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])


@pytest.mark.parametrize("half", sorted(HALVES))
def test_every_half_pattern_widens_exactly(half, tmp_path):
    """All 65,536 bit patterns, float32 out: the same bits as numpy's (ml_dtypes') astype;
    NaNs stay NaN."""
    dt, et = HALVES[half]
    x = np.arange(1 << 16, dtype=np.uint16).view(dt)
    got = compile_and_run(cast_model(et, T.FLOAT, x.size), {"x": x}, tmp_path)[0]
    want = x.astype(np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


@pytest.mark.parametrize("half", sorted(HALVES))
def test_float_rounds_to_half_as_numpy_does(half, tmp_path):
    """float32 -> half, round half to even: every half value, every midpoint between two
    neighbours (the ties) and one float32 ulp either side of it, overflow to infinity,
    subnormals, NaN and infinities, and 300,000 random values and bit patterns; the bits
    equal numpy's (ml_dtypes'), NaNs keep their sign."""
    dt, et = HALVES[half]
    exact = np.arange(1 << 16, dtype=np.uint16).view(dt).astype(np.float32)
    finite = np.unique(exact[np.isfinite(exact)].astype(np.float64))
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    m = mids.view(np.uint32)
    x = np.concatenate([
        exact, mids, (m + 1).view(np.float32), (m - 1).view(np.float32),
        np.array([1e-45, -1e-45, 1e-40, 3e38, -3e38, np.inf, -np.inf, np.nan, -np.nan, 65504,
                  65519.99, 65520, 65536, -0.0, 2 ** -25, 1.5 * 2 ** -24, 2 ** -26], np.float32),
        rng.standard_normal(100_000).astype(np.float32) * np.float32(1000),
        rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)])
    got = compile_and_run(cast_model(T.FLOAT, et, x.size), {"x": x}, tmp_path)[0]
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(dt)
    gb, wb = got.view(np.uint16), want.view(np.uint16)
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(gb[~nan], wb[~nan])
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(gb[nan] >> 15, wb[nan] >> 15)


def float16_cnn():
    """Conv, BatchNormalization, Relu, MaxPool, depthwise Conv, SiLU, global pooling, Gemm and
    Softmax, every weight and both ends float16."""
    h = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float16)  # noqa: E731
    g = GraphBuilder(x=h(1, 3, 32, 32))
    y = g.node("Conv", ["x", h(16, 3, 3, 3, scale=0.3), h(16, scale=0.1)], pads=[1] * 4,
               output=False)
    y = g.node("BatchNormalization", [y, (1 + h(16, scale=0.1)).astype(np.float16),
                                      h(16, scale=0.1), h(16, scale=0.1),
                                      (1 + abs(h(16, scale=0.1))).astype(np.float16)],
               output=False)
    y = g.node("MaxPool", [g.node("Relu", [y], output=False)], kernel_shape=[2, 2],
               strides=[2, 2], output=False)
    y = g.node("Conv", [y, h(16, 1, 3, 3, scale=0.3)], pads=[1] * 4, group=16, output=False)
    y = g.node("Mul", [y, g.node("Sigmoid", [y], output=False)])
    y = g.node("Flatten", [g.node("GlobalAveragePool", [y], output=False)], output=False)
    g.node("Softmax", [g.node("Gemm", [y, h(10, 16, scale=0.3), h(10)], transB=1,
                              output=False)])
    return g


def test_float16_cnn_matches_onnxruntime(tmp_path):
    """A float16 network: the bundle's input and outputs are float16 (header, manifest and
    values) and agree with onnxruntime's within float16's rounding (rtol 1e-2, atol 2e-3:
    onnxruntime rounds every op's result to float16, the bundle only its outputs)."""
    g = float16_cnn()
    m = g.model(17)
    got = compile_and_run(m, g.feeds, tmp_path)
    want = run_onnxruntime(m, g.feeds)
    assert [w.dtype for w in want] == [np.float16] * 2
    for a, b in zip(got, want):
        assert a.dtype == np.float16
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-2,
                                   atol=2e-3)
    with open(tmp_path / "bundle" / "model.json") as f:
        manifest = json.load(f)
    assert [p["dtype"] for p in manifest["inputs"] + manifest["outputs"]] == ["float16"] * 3
    header = open(tmp_path / "bundle" / "model.h").read()
    assert header.count("Type: float16<") == 3, header


def test_mixed_precision_rounds_where_the_model_casts(tmp_path):
    """float32 at both ends, float16 inside (onnxconverter's keep_io_types form): the model's
    Casts to float16 round as the model says (x - float(half(x)) is the exact rounding error,
    bit for bit), the layers between them compute in float32, and the whole agrees with
    onnxruntime within float16's rounding."""
    x = (rng.standard_normal((4, 64)) * 3).astype(np.float32)
    g = GraphBuilder(x=x)
    xh = g.node("Cast", ["x"], to=T.FLOAT16, output=False)
    g.node("Sub", ["x", g.node("Cast", [xh], to=T.FLOAT, output=False)])
    y = g.node("MatMul", [xh, (rng.standard_normal((64, 32)) * 0.2).astype(np.float16)],
               output=False)
    y = g.node("Relu", [g.node("Add", [y, rng.standard_normal(32).astype(np.float16)],
                               output=False)], output=False)
    y = g.node("LayerNormalization", [y, np.ones(32, np.float16), np.zeros(32, np.float16)],
               axis=-1, output=False)
    g.node("Cast", [y], to=T.FLOAT)
    m = g.model(17)
    got = compile_and_run(m, g.feeds, tmp_path)
    want = run_onnxruntime(m, g.feeds)
    err = x - x.astype(np.float16).astype(np.float32)
    assert np.count_nonzero(err) > 200
    np.testing.assert_array_equal(got[0], err)
    assert got[1].dtype == np.float32
    np.testing.assert_allclose(got[1], want[1], rtol=1e-2, atol=1e-2)


def test_half_tensors_everywhere_a_model_puts_them(tmp_path):
    """A float16 input read by a Cast and by other ops (and passed straight out), CastLike to a
    float16 initializer, ConstantOfShape with a float16 value, an If whose branches read outer
    tensors and return float16, a float16 output another node also reads, a float16
    initializer as an output, a Cast to float16 inside a branch: each output's type and values
    as onnxruntime's (rtol 2e-3)."""
    x = rng.standard_normal((3, 8)).astype(np.float16)
    w = rng.standard_normal((3, 8)).astype(np.float16)
    g = GraphBuilder(x=x, f=rng.standard_normal((3, 8)).astype(np.float32),
                     c=np.array(True))
    g.node("Cast", ["x"], to=T.FLOAT)
    s = g.node("Add", ["x", w])                                     # output, and read below
    g.node("CastLike", ["f", g.const(np.float16(2.5))])
    g.node("Mul", [s, g.node("ConstantOfShape", [np.array([3, 8], np.int64)],
                             value=helper.make_tensor("v", T.FLOAT16, [1], [1.5]),
                             output=False)])

    then = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "then", [],
                             [helper.make_tensor_value_info("b", T.FLOAT16, [3, 8])])
    # the other branch casts an outer float32 tensor to float16 and computes on it
    other = helper.make_graph([helper.make_node("Cast", ["f"], ["fh"], to=T.FLOAT16),
                               helper.make_node("Abs", ["fh"], ["b"])], "else", [],
                              [helper.make_tensor_value_info("b", T.FLOAT16, [3, 8])])
    g.node("If", ["c"], then_branch=then, else_branch=other)
    g.node("Identity", ["x"])
    g.outputs.append(g.const(np.full((2,), 0.1, np.float16)))
    m = g.model(17)
    for cond in (True, False):
        feeds = dict(g.feeds, c=np.array(cond))
        got = compile_and_run(m, feeds, tmp_path / str(cond))
        want = run_onnxruntime(m, feeds)
        assert [a.dtype for a in got] == [b.dtype for b in want]
        assert [a.dtype.name for a in got] == ["float32", "float16", "float16", "float16",
                                               "float16", "float16", "float16"]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=2e-3)


def bfloat16_mlp():
    """MatMul, Relu and Mul by a constant in bfloat16, and the float32 computation of it."""
    bf = ml_dtypes.bfloat16
    x = rng.standard_normal((5, 48)).astype(bf)
    w = (rng.standard_normal((48, 24)) * 0.2).astype(bf)
    k = np.array(0.75, bf)
    g = GraphBuilder(x=x)
    g.node("Mul", [g.node("Relu", [g.node("MatMul", ["x", w], output=False)], output=False), k])
    m = g.model(18)
    m.graph.output[0].type.tensor_type.elem_type = T.BFLOAT16  # onnx infers no bfloat16 MatMul
    f = lambda a: a.astype(np.float32)  # noqa: E731
    return m, g.feeds, np.maximum(f(x) @ f(w), 0) * f(k)


def test_bfloat16_model_matches_float32_math_rounded(tmp_path):
    """bfloat16 weights and ends: the outputs are the float32 computation rounded once to
    bfloat16 (within one bfloat16 ulp, 2^-7 relative, for the summation order)."""
    m, feeds, want = bfloat16_mlp()
    got = compile_and_run(m, feeds, tmp_path)[0]
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2 ** -7, atol=1e-6)


def test_half_bundles_on_aarch64(tmp_path):
    """The float16 network and the bfloat16 MLP compiled for AArch64, linked into the C runner
    and run under qemu-aarch64: the same agreement as on the host."""
    g = float16_cnn()
    m = g.model(17)
    info, got = run_on_aarch64(m, g.feeds, str(tmp_path / "f16"))
    for p, out, want in zip(info.outputs, got, run_onnxruntime(m, g.feeds)):
        assert p["dtype"] == "float16"
        np.testing.assert_allclose(out.reshape(want.shape), want.astype(np.float32), rtol=1e-2,
                                   atol=2e-3, err_msg=p["name"])
    m, feeds, want = bfloat16_mlp()
    info, got = run_on_aarch64(m, feeds, str(tmp_path / "bf16"))
    assert info.outputs[0]["dtype"] == "bfloat16"
    np.testing.assert_allclose(got[0].reshape(want.shape), want, rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("abi", ["hard", "soft"])
def test_float16_cortex_m7_object_needs_no_half_helpers(abi, tmp_path):
    """Cortex-M7 objects of the float16 network reference no half-precision conversion
    helper (__extendhfsf2, __truncsfhf2, __gnu_h2f_ieee, __aeabi_h2f...): the conversions are
    integer code."""
    import glowpy
    path = tmp_path / "m.onnx"
    onnx.save(float16_cnn().model(17), path)
    glowpy.compile(str(path), str(tmp_path / "b"), target="arm", mcpu="cortex-m7",
                   float_abi=abi)
    undefined = check_bare_metal_object(os.path.join(tmp_path, "b", "m.o"), abi == "soft")
    assert not [s for s in undefined if "hf" in s or "h2f" in s or "f2h" in s], undefined


def test_model_input_float16_makes_a_half_placeholder(tmp_path):
    """-model-input=x,float16,[...] on a float32 model: the placeholder holds float16 and the
    bundle widens it; the float32 output equals onnxruntime's on the same (rounded) input."""
    from glowpy.frontend.onnx import InputSpec
    x = rng.standard_normal((2, 16)).astype(np.float32)
    g = GraphBuilder(x=x)
    g.node("Tanh", [g.node("MatMul", ["x", rng.standard_normal((16, 4)).astype(np.float32)],
                           output=False)])
    m = g.model(17)
    xh = x.astype(np.float16)
    got = compile_and_run(m, {"x": xh}, tmp_path,
                          model_inputs=[InputSpec("x", np.dtype(np.float16), (2, 16))])[0]
    with open(tmp_path / "bundle" / "model.json") as f:
        manifest = json.load(f)
    assert [p["dtype"] for p in manifest["inputs"]] == ["float16"]
    assert got.dtype == np.float32
    want = run_onnxruntime(m, {"x": xh.astype(np.float32)})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(ZOO_FP16))
def test_zoo_models_converted_to_float16_match_onnxruntime(name, tmp_path):
    """Zoo networks (convolutions; Resize and Concat; attention with LayerNormalization and
    GELU) made float16 the way users make them (benchmarks/zoo/half.py: onnxconverter-common's
    convert_float_to_float16, with float16 or float32 inputs and outputs): the outputs' types
    are the model's and their values onnxruntime's within zoo.half.TOLERANCE * max|onnxruntime|
    (4e-3, 8 float16 ulps there: onnxruntime rounds some ops' results to float16, the bundle only
    where the model casts)."""
    model, feeds = ZOO_FP16[name]()
    want = run_onnxruntime(model, feeds)
    got = compile_and_run(model, feeds, tmp_path)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert {w.dtype for w in want} == {np.dtype(np.float32 if "io32" in name else np.float16)}
    for i, (err, tol) in enumerate(half_errors(got, want)):
        assert err <= tol, f"{name} output {i}: max error {err:.3g} > tolerance {tol:.3g}"


def test_image_classifier_runs_a_float16_model(tmp_path):
    """image-classifier on MNIST converted to float16: the pixels go in as float16, the digits
    come out right, with onnxruntime's scores on the float16 model (rtol 1e-2)."""
    from PIL import Image
    from zoo.half import to_float16
    from test_image_classifier import DIGITS, ROOT, classify, parse
    from util import model_path
    m, _ = to_float16(onnx.load(model_path("mnist8")), {}, keep_io_types=False)
    path = tmp_path / "mnist16.onnx"
    onnx.save(m, path)
    r = classify(*DIGITS, f"-model={path}", "-image-mode=0to255", "-topk=2")
    assert r.returncode == 0, r.stderr
    got = parse(r.stdout)
    for image, digit in DIGITS.items():
        px = np.asarray(Image.open(os.path.join(ROOT, image)).convert("L"), np.float16)
        ref = run_onnxruntime(m, {"Input3": px.reshape(1, 1, 28, 28)})[0].ravel()
        assert [k for k, _ in got[image]] == list(np.argsort(-ref)[:2]) and got[image][0][0] == digit
        np.testing.assert_allclose([s for _, s in got[image]], ref[[k for k, _ in got[image]]],
                                   rtol=1e-2, atol=1e-2)
