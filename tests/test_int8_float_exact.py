"""Integer convolutions on the float kernels (glowpy/ir/passes/quant/float_exact.py): on vector
targets a QConv whose sums of products stay below 2**24 runs as DequantizeLinear, a float Conv
and QFinish (x86's integer GEMM, pairs and quads, passed over: tests/test_int8_pairs.py). The outputs must
equal the integer kernel's bit for bit (the same model compiled with
-quantized-convolutions=integer) and the integer ops' numpy references, and lie within 1 LSB of
onnxruntime (which rounds its requantization in float); -quantized-convolutions=integer keeps
the integer kernels. Cases: uint8 and int8 inputs with zero points (padding read, and folded
into the bias), a fused Relu, 1x1 with planes that end in a partial vector, strided depthwise
layers whose output planes end in a partial vector (5x5) or are narrower than a vector (2x2), a
3x3 layer Winograd would take (it must not: its transforms round), biases near 2**30 (channels
with a tiny weight scale), and a 1x1 over 2,048 channels whose sums may pass 2**24 (float Convs
over chunks of 512 or 1,024 channels, their sums added as integers). A grouped convolution
whose sums pass 2**24 stays integer."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from int8_check import aarch64_equals_references, plan, same_as_references
from test_int8 import QDQ
from util import make_graph_model, memory_report
from vector_levels import params

# the 1x1 layers go to the float kernels here, not to x86's integer GEMM, pairs or quads
# (tests/test_int8_pairs.py), and the depthwise ones too, not to depthwise_float
# (tests/test_int8_depthwise_float.py)
NO_PAIRS = {"QConv": ("!", {"pairs", "quads", "quads16", "depthwise_float"}),
            "QMatMul": ("!", {"pairs", "quads", "quads16"})}


def conv_model(dtype, rng):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    xs, xz = 0.05, lo + 120
    outs = []

    def x(name="x"):
        return m.dq(name, xs, m.zp(xz))

    def conv(ws, inp="x", big_bias=False, **attrs):
        w, sw = m.weight(ws, 0, rng)
        b = rng.integers(-2000, 2000, ws[0]).astype(np.int32)
        if big_bias:  # as a channel with a tiny weight scale gets: far past 2**24
            b[0] = (1 << 30) - 5
        bias = m.dq(m.c(b), (xs * np.asarray(sw)).astype(np.float32), np.zeros(ws[0], np.int32), 0)
        return m.op("Conv", [x(inp), w, bias], **attrs)

    outs.append(m.q(m.op("Relu", [conv((24, 16, 3, 3), pads=[1, 1, 1, 1])]), 0.05, lo))
    outs.append(m.q(conv((8, 16, 1, 1)), 0.08, lo + 125))
    outs.append(m.q(conv((16, 1, 3, 3), group=16, pads=[0, 0, 1, 1], strides=[2, 2]), 0.04,
                    lo + 3))
    outs.append(m.q(conv((16, 1, 3, 3), inp="s", group=16, pads=[0, 0, 1, 1], strides=[2, 2]),
                    0.04, lo + 3))
    outs.append(m.q(conv((32, 32, 3, 3), inp="z", pads=[1, 1, 1, 1]), 0.3, lo + 100))
    outs.append(m.q(conv((12, 16, 1, 1), big_bias=True), 0.05, lo + 64))
    outs.append(m.q(conv((4, 2048, 1, 1), inp="d"), 2.0, lo + 5))
    feeds = {"x": rng.integers(lo, lo + 256, (1, 16, 10, 10)).astype(dtype),
             "s": rng.integers(lo, lo + 256, (1, 16, 4, 4)).astype(dtype),
             "z": rng.integers(lo, lo + 256, (1, 32, 28, 28)).astype(dtype),
             "d": rng.integers(lo, lo + 256, (1, 2048, 3, 3)).astype(dtype)}
    # weights at the int8 extremes: the 2048-channel sums may reach 2048 * 127 * 255 > 2**24
    m.inits[next(n for n, a in m.inits.items() if a.shape == (4, 2048, 1, 1))][:] = 127
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qconv_on_float_kernels_equals_the_integer_kernel(dtype, level, tmp_path):
    rng = np.random.default_rng(11)
    model, feeds = conv_model(dtype, rng)
    fast, got = same_as_references(model, feeds, tmp_path, [
        dict(kernel_variants=NO_PAIRS, **level.options),
        dict(quantized_convolutions="integer", **level.options)])
    ops = [i["op"] for i in plan(tmp_path)]
    assert ops.count("QFinish") == 7 and "QConv" not in ops, ops
    # the 2048-channel layer in chunks: its zero point folded into the bias (1x1, no padding),
    # a uint8 input reaches 255 x 127 per channel (4 chunks of 512), an int8 one 128 x 127 (2)
    assert ops.count("Conv") == 6 + (4 if dtype == np.uint8 else 2), ops
    assert len(np.unique(got[fast.outputs[5]["name"]][0, 0])) == 1  # the 2**30 bias saturates


def test_qconv_on_float_kernels_under_qemu_aarch64(tmp_path):
    """The same model on NEON (4 lanes), run under qemu-aarch64, equals the references; its
    two depthwise layers by default on depthwise_float (int8 in and out, float tiles)."""
    rng = np.random.default_rng(12)
    model, feeds = conv_model(np.uint8, rng)
    plan = memory_report(model, tmp_path / "plan", target="aarch64")["instructions"]
    kinds = [(i["op"], i["variant"]["name"]) for i in plan]
    assert [op for op, _ in kinds].count("QFinish") == 5
    assert kinds.count(("QConv", "depthwise_float")) == 2, kinds
    aarch64_equals_references(model, feeds, tmp_path)


def test_winograd_leaves_the_exact_sums_direct(tmp_path):
    """Winograd forced through the registry takes a float Conv but not the same shape whose
    integer sums a QFinish reads (its transforms round): one winograd variant, the float
    branch's, and the integer output exact."""
    from vector_levels import LEVELS, plan_only
    level = next(lv for lv in LEVELS if lv.name == "avx2")  # Winograd needs 8 lanes
    rng = np.random.default_rng(13)
    m = QDQ(np.uint8)
    w, sw = m.weight((32, 32, 3, 3), 0, rng)
    outs = [m.q(m.op("Conv", [m.dq("z", 0.05, m.zp(120)), w], pads=[1, 1, 1, 1]), 0.3, 100)]
    # the float branch as tests/test_winograd.py builds it: a 1x1 on a 4x larger plane and a
    # pooling before the 3x3 make room in the activations for the transforms' scratch
    t = m.op("MaxPool", [m.op("Relu", [m.op("Conv", ["f", m.c(
        rng.standard_normal((32, 32, 1, 1)).astype(np.float32))])])], kernel_shape=[4, 4],
        strides=[4, 4])
    outs.append(m.op("Conv", [t, m.c(rng.standard_normal((32, 32, 3, 3)).astype(np.float32))],
                     pads=[1, 1, 1, 1]))
    feeds = {"z": rng.integers(0, 256, (1, 32, 28, 28)).astype(np.uint8),
             "f": rng.standard_normal((1, 32, 112, 112)).astype(np.float32)}
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    forced = {"ConvWinograd": ("winograd", dict(m=2)), **NO_PAIRS}
    plan = memory_report(model, tmp_path / "plan", kernel_variants=forced,
                         **level.options)["instructions"]
    kinds = [(i["op"], i["variant"]["name"]) for i in plan]
    assert [v for _, v in kinds].count("winograd") == 1 and kinds[-1][1] == "winograd", kinds
    assert [o for o, _ in kinds].count("QFinish") == 1, kinds
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), kernel_variants=forced, **level.options)
    if plan_only(level):  # a host without AVX2 checks the plan only (vector_levels)
        return
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    ref = evaluate(optimize(load_onnx(path)), feeds)[0]
    np.testing.assert_array_equal(got[info.outputs[0]["name"]], ref)


@pytest.mark.parametrize("level", params())
def test_qmatmul_on_float_kernels_equals_the_integer_kernel(level, tmp_path):
    """Matrix products the same way: a QDQ MatMul over 3-D activations with 21 output columns
    (channels along the rows' vectors, then a remainder), per-column weight scales and a
    fused Relu, and MatMulInteger's int32 sums with a zero point (onnxruntime's
    quantize_dynamic writes it): identical to the integer kernel and the references."""
    rng = np.random.default_rng(14)
    m = QDQ(np.uint8)
    w, sw = m.weight((40, 21), 1, rng)
    b = rng.integers(-2000, 2000, 21).astype(np.int32)
    bias = m.dq(m.c(b), (0.04 * np.asarray(sw)).astype(np.float32), np.zeros(21, np.int32), 0)
    outs = [m.q(m.op("Relu", [m.op("Add", [m.op("MatMul", [m.dq("a", 0.04, m.zp(131)), w]),
                                             bias])]), 0.05, 0)]
    # within 7 bits: onnxruntime's AVX2 kernels without VNNI saturate u8 x s8 pairs past them
    wq = rng.integers(-64, 64, (40, 19)).astype(np.int8)
    outs.append(m.op("MatMulInteger", ["a", m.c(wq), m.c(np.array(131, np.uint8))]))
    feeds = {"a": rng.integers(0, 256, (2, 5, 40)).astype(np.uint8)}
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    same_as_references(model, feeds, tmp_path, [
        dict(kernel_variants=NO_PAIRS, **level.options),
        dict(quantized_convolutions="integer", **level.options)])
    ops = [i["op"] for i in plan(tmp_path)]
    assert ops.count("QFinish") == 2, ops


@pytest.mark.parametrize("level", params())
def test_away_rounding_on_float_kernels(level, tmp_path):
    """TFLite's rounding (-quantization-rounding=away: the doubling high multiply, then the
    rounding shift, on 64-bit lanes): the float path equals the integer kernels and the integer
    ops' numpy references bit for bit."""
    model, feeds = conv_model(np.int8, np.random.default_rng(15))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    outs = []
    for kind in ("float", "integer"):
        info = glowpy.compile(path, str(tmp_path / kind), quantization_rounding="away",
                              quantized_convolutions=kind, kernel_variants=NO_PAIRS,
                              **level.options)
        outs.append(Bundle(str(tmp_path / kind), info.name).run(feeds))
    g = load_onnx(path)
    g.quant_rounding = "away"  # what -quantization-rounding=away sets (passes/quant/patterns.py)
    refs = evaluate(optimize(g), feeds)
    assert len(outs[0]) == len(refs) == 7
    for (name, y), r in zip(outs[0].items(), refs):
        np.testing.assert_array_equal(y, outs[1][name], err_msg=name)
        np.testing.assert_array_equal(y, r, err_msg=f"{name}: vs reference")


@pytest.mark.parametrize("level", params())
def test_sums_past_2_24_in_chunks(level, tmp_path):
    """MatMulInteger over 600 columns with weights at the int8 extremes (sums up to
    600 x 127 x 255 > 2**24): two float MatMuls over 304 and 296 columns, their sums added as
    integers; a depthwise 24x24 layer (576 taps x 127 x 255 > 2**24 in one group) stays on the
    integer kernel. Both equal the integer kernels and the references bit for bit."""
    rng = np.random.default_rng(16)
    m = QDQ(np.uint8)
    wq = np.where(rng.random((600, 19)) < 0.5, -127, 127).astype(np.int8)
    outs = [m.op("MatMulInteger", ["a", m.c(wq), m.c(np.array(131, np.uint8))])]
    w = np.full((3, 1, 24, 24), 127, np.int8)
    wd = m.dq(m.c(w), np.full(3, 0.001, np.float32), np.zeros(3, np.int8), 0)
    outs.append(m.q(m.op("Conv", [m.dq("d", 0.05, m.zp(0)), wd], group=3), 2.0, 7))
    feeds = {"a": rng.integers(0, 256, (2, 3, 600)).astype(np.uint8),
             "d": rng.integers(0, 256, (1, 3, 26, 25)).astype(np.uint8)}
    feeds["a"][0, 0] = np.where(wq[:, 0] > 0, 255, 0)  # one sum near its bound: about 9.7e6
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    fast, got = same_as_references(model, feeds, tmp_path, [
        dict(kernel_variants=NO_PAIRS, **level.options),
        dict(quantized_convolutions="integer", **level.options)], ort_lsb=None)
    ops = [i["op"] for i in plan(tmp_path)]
    assert ops.count("MatMul") == 2 and ops.count("QFinish") == 1 and \
        ops.count("QConv") == 1, ops
    big = np.abs(got[fast.outputs[0]["name"]].astype(np.int64))
    assert big.max() > 1 << 23  # sums of the size that needed the chunks
