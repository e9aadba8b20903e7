"""int8 window ops overlapping their dying input (glowpy/ir/inplace.py, INT_STREAMING_OPS): a
depthwise QConv, an int8 MaxPool and a QAvgPool may write their output at least one output
plane below the input they consume, sharing the rest of its bytes. Chains of them (odd and even
channel counts, stride 1 and 2, padding, batch 2) compiled through the real path: the plan
really overlaps the pairs that decide the region (offsets in -dump-memory-report), and the
outputs equal the integer ops' numpy references bit for bit (and the no-reuse bundle's, and
onnxruntime within 1 LSB) with the DSP depthwise kernel and the direct one on an emulated
Cortex-M7 and the direct one on the host. The overlaps are slow forms: hosts never take them by
default, microcontrollers only where they save bytes; and the loop-order contract they rely on
names every variant that can run them."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from glowpy.ir.program import align
from glowpy.runtime import Bundle
from test_int8 import QDQ, lsb, run_on_board
from util import compile_and_run, make_graph_model, run_onnxruntime
from vector_levels import LEVELS, RUNNABLE

# (input shape, depthwise strides, pads [top, left, bottom, right], the kernels whose overlap
# the plan uses: with stride 1 every instant of the chain holds two same-size tensors, so the
# region stays below two of them only if all three overlap; otherwise the depthwise instant
# is the peak)
CASES = [((1, 5, 7, 13), [1, 1], [1, 1, 1, 1], {"QConv", "MaxPool", "QAvgPool"}),  # odd C
         ((1, 6, 10, 9), [2, 2], [0, 0, 1, 1], {"QConv"}),  # even C, stride 2, TF "same"
         ((1, 6, 9, 12), [1, 1], [0, 0, 0, 0], {"QConv"}),  # unpadded: the output shrinks
         ((2, 3, 11, 8), [2, 1], [1, 2, 1, 0], {"QConv"})]  # batch 2: blocks are (n, c) planes
IDS = ["c5-s1", "c6-s2", "c6-nopad", "n2-s21"]


def chain_model(shape, strides, pads, rng):
    """QAdd(a, b) -> depthwise 3x3 (+Relu) -> MaxPool 3x3 -> AveragePool 3x3 -> depthwise 3x3
    (the graph output): each of the three middle ops' input dies at it."""
    m = QDQ(np.int8)
    c = shape[1]
    feeds = {n: rng.integers(-128, 128, shape).astype(np.int8) for n in ("a", "b")}
    s = m.op("Add", [m.dq("a", 0.05, m.zp(3)), m.dq("b", 0.04, m.zp(-7))])
    t = m.q(s, 0.07, 5)
    w, sw = m.weight((c, 1, 3, 3), 0, rng)
    d = m.op("Relu", [m.op("Conv", [m.dq(t, 0.07, m.zp(5)), w, m.bias(c, 0.07 * sw, rng)],
                           group=c, strides=strides, pads=pads, kernel_shape=[3, 3])])
    d = m.q(d, 0.06, -100)
    p = m.q(m.op("MaxPool", [m.dq(d, 0.06, m.zp(-100))], kernel_shape=[3, 3], pads=[1] * 4),
            0.06, -100)
    # (the same grid: QAvgPool's exact division by the per-position counts of the padding)
    v = m.q(m.op("AveragePool", [m.dq(p, 0.06, m.zp(-100))], kernel_shape=[3, 3], pads=[1] * 4),
            0.06, -100)
    w2, sw2 = m.weight((c, 1, 3, 3), 0, rng)
    y = m.op("Conv", [m.dq(v, 0.06, m.zp(-100)), w2, m.bias(c, 0.06 * sw2, rng)], group=c,
             pads=[1] * 4, kernel_shape=[3, 3])
    return make_graph_model(m.nodes, feeds, [m.q(y, 0.08, 2)], m.inits, opset=13), feeds


def check_overlaps(report: dict) -> dict:
    """Where the plan puts the output of a depthwise QConv, MaxPool or QAvgPool over its dying
    input, lowering granted it, and the output starts at least one output plane (rounded up
    to the 64-byte grid) below the input. Returns the bytes shared per kernel."""
    bufs = report["buffers"]
    shared = {}
    for ins in report["instructions"][:-1]:  # the last writes the graph output (a placeholder)
        if ins["kernel"] not in ("QConv", "MaxPool", "QAvgPool"):
            continue
        [o] = [b for b in bufs if (b["producer"] or {}).get("index") == ins["index"]]
        [x] = [b for b in bufs if b["last_use"]["index"] == ins["index"] and b is not o]
        plane = o["size"] // (o["shape"][0] * o["shape"][1])
        both = min(o["offset"] + o["size"], x["offset"] + x["size"]) - max(o["offset"],
                                                                         x["offset"])
        shared[ins["kernel"]] = max(both, 0)
        if both > 0:
            assert ins.get("overlaps_input"), ins
            assert o["offset"] - x["offset"] <= -align(plane), (ins["name"], o, x)
    assert list(shared) == ["QConv", "MaxPool", "QAvgPool"], shared
    return shared


def compile_checked(model, feeds, tmp_path, variants, **options):
    """Compiles `model`, checks the depthwise instructions' variants and the overlaps; returns
    (info, the exact outputs, the onnxruntime outputs, the overlapped bytes per kernel)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    g = optimize(load_onnx(path))
    exact = evaluate(g, feeds)
    report = tmp_path / "m.json"
    info = glowpy.compile(path, str(tmp_path / "b"), dump_memory_report=str(report), **options)
    rep = json.loads(report.read_text())
    chosen = [i["variant"]["name"] for i in rep["instructions"] if i["kernel"] == "QConv"]
    assert chosen == variants, chosen
    return info, exact, run_onnxruntime(model, feeds), check_overlaps(rep)


def assert_outputs(got, exact, ort):
    for gv, want, e in zip(got, exact, ort):
        gv = np.asarray(gv).reshape(want.shape)
        np.testing.assert_array_equal(gv, want)
        assert lsb(gv, e) <= 1


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("variant", ["depthwise_dsp", "direct"])
def test_overlapping_int8_window_ops_are_exact_on_cortex_m7(case, variant, tmp_path):
    from test_cross import BOARDS
    model, feeds = chain_model(*case[:3], np.random.default_rng(11))
    # the DSP kernel is the one chosen by default; the direct one where it is passed over
    forced = {"QConv": "!depthwise_dsp"} if variant == "direct" else {}
    info, exact, ort, overlap = compile_checked(
        model, feeds, tmp_path, [variant] * 2, target="arm", mcpu=BOARDS["mps2-an500"][0],
        float_abi="hard", kernel_variants=forced)
    assert {k for k, v in overlap.items() if v > 0} >= case[3], overlap
    run = run_on_board(str(tmp_path / "b"), info.manifest, feeds, "mps2-an500")
    assert_outputs(run["outputs"], exact, ort)


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("variant", ["direct", "depthwise_float"])
def test_overlapping_int8_window_ops_are_exact_on_the_host(case, level, variant, tmp_path):
    """depthwise_float forced: it converts the next input plane ahead, which the overlap must
    leave intact."""
    model, feeds = chain_model(*case[:3], np.random.default_rng(12))
    # -activation-memory=min: hosts put speed first and never overlap integer kernels
    forced = {"QConv": variant} if variant != "direct" else {}
    info, exact, ort, overlap = compile_checked(model, feeds, tmp_path, [variant] * 2,
                                                activation_memory="min", kernel_variants=forced,
                                                **level.options)
    assert {k for k, v in overlap.items() if v > 0} >= case[3], overlap
    pools = {i["kernel"]: i["variant"]["name"] for i in
             json.loads((tmp_path / "m.json").read_text())["instructions"]
             if i["kernel"] in ("MaxPool", "QAvgPool")}
    assert pools == {"MaxPool": "int8_vector", "QAvgPool": "vector"}, pools
    res = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    got = [res[p["name"]] for p in info.outputs]
    assert_outputs(got, exact, ort)
    plain = compile_and_run(model, feeds, tmp_path / "noreuse", reuse_activation_memory=False,
                            **level.options)
    for gv, pv in zip(got, plain):
        np.testing.assert_array_equal(gv, pv)


def _overlapping(report: dict) -> list[str]:
    return [i["kernel"] for i in report["instructions"] if i.get("overlaps_input")]


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_hosts_put_speed_first(level, tmp_path):
    """An integer kernel overlapping its input is slower (noalias lost): hosts never take it
    by default (plan only; the integer kernels, which hosts run by default only where the float
    ones cannot hold the sums exactly)."""
    model, _ = chain_model(*CASES[0][:3], np.random.default_rng(13))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    report = tmp_path / "m.json"
    info = glowpy.compile(path, str(tmp_path / "b"), dump_memory_report=str(report),
                          quantized_convolutions="integer", **level.options)
    assert _overlapping(json.loads(report.read_text())) == []
    assert info.memory["activations"] == 1024  # two 455-byte tensors at every window op


def test_microcontrollers_overlap_only_where_it_saves_bytes(tmp_path):
    """VWW int8 on the M7: its depthwise layers may overlap their input, but the peak is a
    pointwise layer, so the plan gives every overlap back (planner._relax) at the same size."""
    from util import model_path
    report = tmp_path / "m.json"
    info = glowpy.compile(model_path("mlperf_tiny_vww_int8_qdq"), str(tmp_path / "b"),
                          target="arm", mcpu="cortex-m7", float_abi="hard",
                          dump_memory_report=str(report))
    assert _overlapping(json.loads(report.read_text())) == []
    assert info.memory["activations"] == 55296


def test_every_integer_streaming_variant_is_in_the_contract(tmp_path):
    """The overlap relies on the loop order of each variant that can run these instructions
    (docs/CONTRIBUTING.md, kernel contracts): a new variant fails here until its order is
    checked and written down. quads, winograd, quads16, pairs, im2col and pointwise_dsp refuse
    grouped convolutions, depthwise_float (vector targets only) streams plane by plane, as do
    the int8 pools' vector variants (int8/pool.py, vector targets only); MaxPool's float
    vector variant refuses integer input."""
    from glowpy.codegen import registry
    from glowpy.codegen.kernels import catalog  # noqa: F401 - registers the variants
    from glowpy.errors import ModelError
    from test_cross import BOARDS
    names = {op: [v.name for v in registry.variants(op)] for op in ("QConv", "MaxPool", "QAvgPool")}
    assert names == {"QConv": ["quads", "winograd", "quads16", "pairs", "depthwise_float",
                               "depthwise_dsp", "im2col", "pointwise_dsp", "direct"],
                     "MaxPool": ["int8_vector", "vector", "direct"],
                     "QAvgPool": ["vector", "default"]}, names
    model, _ = chain_model(*CASES[0][:3], np.random.default_rng(14))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    for op, name in (("QConv", "quads"), ("QConv", "winograd"), ("QConv", "quads16"),
                     ("QConv", "pairs"), ("QConv", "im2col"), ("QConv", "pointwise_dsp"),
                     ("MaxPool", "vector"), ("MaxPool", "int8_vector"), ("QAvgPool", "vector")):
        with pytest.raises(ModelError, match="does not apply"):
            glowpy.compile(path, str(tmp_path / name), target="arm",
                           mcpu=BOARDS["mps2-an500"][0], float_abi="hard",
                           kernel_variants={op: name})


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
def test_int32_sums_overlap_by_their_own_plane_size(level, tmp_path):
    """A grouped ConvInteger (QConv with int32 sums) over a dying uint8 MaxPool output: the
    output planes are four times the input planes, so the slack is the whole output less what
    the input blocks free (D = 7 * (81 - 324) - 324, rounded down to -2048), not one plane."""
    from onnx import helper
    rng = np.random.default_rng(15)
    c = 8
    feeds = {"x": rng.integers(0, 256, (1, c, 9, 9)).astype(np.uint8)}
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
             helper.make_node("ConvInteger", ["p", "w", "xz"], ["s"], group=c, pads=[1] * 4),
             helper.make_node("Cast", ["s"], ["y"], to=onnx.TensorProto.FLOAT)]
    inits = {"w": rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8), "xz": np.uint8(7)}
    model = make_graph_model(nodes, feeds, ["y"], inits, opset=13)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    report = tmp_path / "m.json"
    info = glowpy.compile(path, str(tmp_path / "b"), dump_memory_report=str(report),
                          activation_memory="min", **level.options)
    rep = json.loads(report.read_text())
    assert _overlapping(rep) == ["QConv"]
    off = {b["name"]: (b["offset"], b["size"]) for b in rep["buffers"]}
    (xo, xs), (so, ss) = off["p"], off["s"]
    assert (xs, ss) == (648, 2592) and so - xo == -2048  # overlapping by 544 bytes
    assert rep["activations"]["size"] < align(xs) + ss
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)["y"]
    np.testing.assert_array_equal(got, evaluate(optimize(load_onnx(path)), feeds)[0])
    plain = compile_and_run(model, feeds, tmp_path / "noreuse", reuse_activation_memory=False,
                            **level.options)
    np.testing.assert_array_equal(got, plain[0])
