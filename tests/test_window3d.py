"""Pass windows3d_as_2d (glowpy/ir/passes/window3d.py): 3-D float Convs run as one 2-D Conv over
the output depths and 3-D pools of depth 1 as 2-D pools, against onnxruntime through the whole compiler, on the forms video and volume
models use: depth strides, dilations and asymmetric pads, groups (depthwise 3-D), bias, a
kernel of depth 1 ((2+1)-D's spatial convolution), batch 2, SAME padding, BatchNormalization
and Relu after it; the memory report shows the register-tiled 2-D kernels ran."""
import json

import numpy as np
import pytest

from util import GraphBuilder, check_against_onnxruntime, make_graph_model, make_model
from vector_levels import params

RNG = np.random.default_rng(31)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


CASES = [  # (input shape, weight shape, attributes)
    ((1, 4, 6, 9, 10), (8, 4, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1])),
    ((1, 3, 8, 16, 16), (16, 3, 3, 7, 7), dict(strides=[1, 2, 2], pads=[1, 3, 3, 1, 3, 3])),
    ((1, 8, 9, 6, 6), (8, 8, 3, 1, 1), dict(strides=[2, 1, 1], pads=[1, 0, 0, 0, 0, 0])),
    ((1, 8, 10, 5, 7), (8, 8, 2, 3, 3), dict(dilations=[3, 1, 1], pads=[0, 1, 1, 2, 1, 1])),
    ((1, 12, 5, 8, 8), (12, 1, 3, 3, 3), dict(group=12, pads=[1, 1, 1, 1, 1, 1])),
    ((1, 8, 4, 8, 8), (12, 4, 1, 3, 3), dict(group=2, pads=[0, 1, 1, 0, 1, 1])),
    ((2, 5, 4, 6, 6), (7, 5, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2, 2])),
    ((1, 6, 7, 5, 4), (6, 2, 3, 1, 1), dict(group=3, dilations=[2, 1, 1], pads=[2, 0, 0, 1, 0, 0])),
    # depthwise as a sum of depth taps: a channel multiplier of 2, depth dilation, spatial
    # stride, batch 2; a 5-deep window with asymmetric depth pads; depth stride 2 gathers
    ((2, 6, 5, 9, 9), (12, 1, 3, 3, 3), dict(group=6, strides=[1, 2, 2], dilations=[2, 1, 1],
                                             pads=[2, 1, 1, 1, 1, 1])),
    ((1, 5, 6, 7, 7), (5, 1, 5, 3, 3), dict(group=5, pads=[3, 1, 1, 1, 1, 1])),
    ((1, 4, 8, 6, 6), (4, 1, 3, 3, 3), dict(group=4, strides=[2, 1, 1], pads=[1] * 6)),
]


@pytest.mark.parametrize("xs,ws,attrs", CASES, ids=[str(c[0]) + str(c[1]) for c in CASES])
@pytest.mark.parametrize("bias", [False, True])
def test_conv3d(xs, ws, attrs, bias, tmp_path):
    x, w = f32(*xs), f32(*ws, scale=0.2)
    inits = {"w": w} | ({"b": f32(ws[0])} if bias else {})
    m = make_model("Conv", {"x": x}, attrs=dict(kernel_shape=list(ws[2:]), **attrs),
                   initializers=inits)
    report = tmp_path / "m.json"
    check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report))
    convs = [i for i in json.loads(report.read_text())["instructions"] if i["kernel"] == "Conv"]
    assert all(c["variant"]["name"] != "default" for c in convs), convs
    taps = ws[1] == 1 and attrs.get("group") == xs[1] and attrs.get("strides", [1])[0] == 1
    assert len(convs) == (ws[2] if taps else 1), convs  # depthwise: a 2-D Conv per depth tap


def test_conv3d_batchnorm_relu(tmp_path):
    """BatchNormalization folds into the 3-D weights before the rewrite; Relu after it."""
    g = GraphBuilder(x=f32(1, 6, 5, 10, 10))
    y = g.node("Conv", ["x", f32(10, 6, 3, 3, 3, scale=0.2)], pads=[1] * 6)
    y = g.node("BatchNormalization", [y, np.abs(f32(10)) + 0.5, f32(10), f32(10, scale=0.1),
                                      np.abs(f32(10)) + 0.5])
    g.node("Relu", [y])
    check_against_onnxruntime(g.model(opset=13), g.feeds, tmp_path, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel, rewritten", [((21, 1, 1), True), ((21, 1, 2), False)])
def test_deep_window(kernel, rewritten, tmp_path):
    """A 21-deep window on 10 depths would gather 21 copies of the input (MAX_COPIES is 8): a
    21 x 1 x 2 window keeps the generic kernel, without the copy; a 21 x 1 x 1 one (temporal)
    is a 2-D Conv over the input viewed as (N, C, D, H x W), with no copy at all."""
    x, w = f32(1, 2, 10, 3, 3), f32(3, 2, *kernel, scale=0.2)
    m = make_model("Conv", {"x": x}, attrs=dict(kernel_shape=list(kernel),
                                                 pads=[10, 0, 0, 10, 0, 0]), initializers={"w": w})
    report = tmp_path / "m.json"
    check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report))
    [conv] = json.loads(report.read_text())["instructions"]
    assert conv["op"] == "Conv" and (conv["variant"]["name"] != "direct") == rewritten, conv


def test_temporal_window_is_only_views(tmp_path):
    """R(2+1)D's 3 x 1 x 1 temporal convolution: one 2-D Conv instruction, no Gather, Pad or
    Transpose."""
    x = f32(1, 16, 8, 7, 9)
    m = make_model("Conv", {"x": x}, attrs=dict(kernel_shape=[3, 1, 1], pads=[1, 0, 0, 1, 0, 0]),
                   initializers={"w": f32(24, 16, 3, 1, 1, scale=0.2), "b": f32(24)})
    report = tmp_path / "m.json"
    check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report))
    assert [i["kernel"] for i in json.loads(report.read_text())["instructions"]] == ["Conv"]


POOLS = [  # (op, input shape, attributes): depth 1 is rewritten, the others are not
    ("MaxPool", (1, 6, 4, 13, 13), dict(kernel_shape=[1, 3, 3], strides=[1, 2, 2],
                                        pads=[0, 1, 1, 0, 1, 1]), True),
    ("AveragePool", (2, 5, 3, 9, 10), dict(kernel_shape=[1, 3, 2], pads=[0, 1, 0, 0, 1, 1],
                                           count_include_pad=0, ceil_mode=1, strides=[1, 2, 2]), True),
    ("MaxPool", (1, 4, 6, 8, 8), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 2]), False),
    ("AveragePool", (1, 4, 6, 8, 8), dict(kernel_shape=[1, 3, 3], strides=[2, 1, 1]), False),
]


@pytest.mark.parametrize("op,xs,attrs,rewritten", POOLS, ids=[f"{p[0]}{p[1]}" for p in POOLS])
def test_pool3d(op, xs, attrs, rewritten, tmp_path):
    x = f32(*xs)
    report = tmp_path / "m.json"
    check_against_onnxruntime(make_model(op, {"x": x}, attrs=attrs), {"x": x}, tmp_path,
                              rtol=1e-5, atol=1e-6, dump_memory_report=str(report))
    [pool] = [i for i in json.loads(report.read_text())["instructions"] if i["op"] == op]
    assert (pool["name"].endswith("_2d")) == rewritten, pool


def test_chained_convs_stay_depth_major(tmp_path):
    """Two 3x3x3 Convs with a Relu and a Clip between them (a 3-D U-Net's block): the first
    Conv's output stays in depth-major order for the second (its Transpose back and the second's
    Transpose forward cancel across the activation, which fuses into the first Conv); the
    activation read by a pool too keeps the channel-major tensor it needs."""
    g = GraphBuilder(x=f32(1, 3, 6, 10, 9))
    hidden = dict(output=False)
    y = g.node("Conv", ["x", f32(8, 3, 3, 3, 3, scale=0.3)], pads=[1] * 6, **hidden)
    y = g.node("Conv", [g.node("Relu", [y], **hidden), f32(8, 8, 3, 3, 3, scale=0.2), f32(8)],
               pads=[1] * 6, **hidden)
    y = g.node("Clip", [y, np.float32(0), np.float32(6)], **hidden)
    z = g.node("Conv", [y, f32(4, 8, 3, 3, 3, scale=0.2)], pads=[1] * 6, **hidden)
    g.node("MaxPool", [y], kernel_shape=[2, 2, 2], strides=[2, 2, 2])
    g.node("Add", [z, np.float32(1)])
    report = tmp_path / "m.json"
    check_against_onnxruntime(g.model(opset=13), g.feeds, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report))
    ops = [i["op"] for i in json.loads(report.read_text())["instructions"]]
    # x turned depth-major once; the first Conv's output never turned back; the second's turned
    # back once (the pool reads it) and forward again for the third Conv (Clip stays with the
    # second: it has two readers); the third's output turned back
    assert ops.count("Transpose") == 4, ops
    assert "Conv+Relu" in ops, ops


QCASES = {  # integer 3-D Convs (QDQ, folded into QConv): input shape, weight shape, attributes
    # a temporal window (views only), a window of depth 1 at spatial stride 2, depth padding
    # (ungrouped: blocks of the zero point), grouped with depth padding and stride (a Pad with
    # the zero point), depthwise (the grouped form: requantized taps cannot be summed)
    "t": ((1, 6, 5, 9, 10), (8, 6, 3, 1, 1), dict(pads=[1, 0, 0, 1, 0, 0])),
    "s": ((1, 3, 4, 13, 12), (8, 3, 1, 3, 3), dict(strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])),
    "p": ((1, 5, 6, 7, 8), (7, 5, 3, 3, 3), dict(pads=[1] * 6)),
    "g": ((1, 8, 5, 6, 6), (6, 4, 3, 3, 3), dict(group=2, strides=[2, 1, 1],
                                                 pads=[2, 1, 1, 1, 1, 1])),
    "d": ((1, 6, 5, 7, 7), (6, 1, 3, 3, 3), dict(group=6, pads=[1] * 6)),
}


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_integer_conv3d(dtype, level, tmp_path):
    """3-D QConvs (QLinearConv and QDQ Convs of video and volume int8 models) as 2-D QConvs on
    the integer kernels: bit for bit the -O0 build (the 3-D QConv on the scalar integer
    kernel, padded with the input's zero point in depth too) and the references, within 1 LSB
    of onnxruntime; every QConv instruction is a rewritten 2-D one on a kernel of its own."""
    from int8_check import byte_feeds, plan, same_as_references
    from test_int8 import QDQ
    rng = np.random.default_rng(5)
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    outs = []
    for name, (xs, ws, attrs) in QCASES.items():
        w, sw = m.weight(ws, 0, rng)
        y = m.op("Conv", [m.dq(name, 0.05, m.zp(lo + 120)), w, m.bias(ws[0], 0.05 * sw, rng)],
                 kernel_shape=list(ws[2:]), **attrs)
        relu = name == "p"
        outs.append(m.q(m.op("Relu", [y]) if relu else y, 0.3, lo + (0 if relu else 100)))
    feeds = byte_feeds({n: c[0] for n, c in QCASES.items()}, dtype, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    _, got = same_as_references(model, feeds, tmp_path, [level.options, dict(opt_level=0)])
    # (each an integer kernel's, or float Conv + QFinish where float32 holds the sums exactly)
    convs = [(i["op"], i["name"], i["variant"]["name"]) for i in plan(tmp_path)
             if i["op"] in ("QConv", "QFinish")]
    assert len(convs) == len(QCASES) and all(
        "_2d" in name and kernel != "direct" for _, name, kernel in convs), convs
    for y in got.values():  # a spread of values, not a clamp
        assert len(np.unique(y)) > 20
