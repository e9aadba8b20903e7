"""patchify_to_pointwise (glowpy/ir/passes/patchify.py): a Conv whose square kernel equals its
stride, unpadded, becomes SpaceToDepth + 1x1 Conv with the same numbers; overlapping, padded,
grouped or indivisible windows are left alone; bundles agree with onnxruntime at every vector
level this host runs."""
import json

import numpy as np
import pytest
from onnx import helper
from util import check_against_onnxruntime, make_graph_model
from vector_levels import RUNNABLE

from glowpy.ir.evaluate import evaluate
from glowpy.ir.graph import Graph
from glowpy.ir.passes.patchify import patchify_to_pointwise

F = np.float32
RNG = np.random.default_rng(4)


def conv_graph(c, hw, m, k, stride, pads=0, group=1):
    g = Graph("t")
    x = g.add_input("x", F, (1, c, hw, hw))
    w = g.constant(RNG.standard_normal((m, c // group, k, k)).astype(F), "w")
    b = g.constant(RNG.standard_normal(m).astype(F), "b")
    y = g.add("Conv", [x, w, b], {"kernel_shape": [k, k], "strides": [stride, stride],
                                  "pads": [pads] * 4, "group": group})[0]
    g.outputs = [g.add("Relu", [y])[0]]
    return g


@pytest.mark.parametrize("c, hw, m, k", [(3, 16, 8, 4), (6, 10, 12, 2), (2, 9, 5, 3)])
def test_patch_conv_becomes_space_to_depth_and_pointwise(c, hw, m, k):
    g = conv_graph(c, hw, m, k, k)
    feeds = {"x": RNG.standard_normal((1, c, hw, hw)).astype(F)}
    before = evaluate(g, feeds)
    g = patchify_to_pointwise(g)
    assert [n.op for n in g.nodes] == ["SpaceToDepth", "Conv", "Relu"]
    conv = g.nodes[1]
    assert conv.inputs[1].shape == (m, c * k * k, 1, 1) and conv.attrs["strides"] == [1, 1]
    np.testing.assert_allclose(evaluate(g, feeds)[0], before[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [dict(stride=2), dict(stride=4, pads=1), dict(stride=4, group=2),
                                dict(stride=4, hw=18)])
def test_other_windows_are_left_alone(kw):
    hw = kw.pop("hw", 16)
    g = conv_graph(4, hw, 8, 4, **kw)
    g = patchify_to_pointwise(g)
    assert [n.op for n in g.nodes] == ["Conv", "Relu"]


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("c, hw, m, k", [(3, 32, 24, 4), (16, 14, 40, 2), (3, 32, 19, 8)])
def test_patch_conv_bundle_matches_onnxruntime(level, c, hw, m, k, tmp_path):
    x = RNG.standard_normal((1, c, hw, hw)).astype(F)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k], strides=[k, k]),
             helper.make_node("Relu", ["y"], ["z"])]
    inits = {"w": (RNG.standard_normal((m, c, k, k)) * 0.2).astype(F), "b": RNG.standard_normal(m).astype(F)}
    model = make_graph_model(nodes, {"x": x}, ["z"], inits, opset=13)
    report = tmp_path / "r.json"
    check_against_onnxruntime(model, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5,
                              dump_memory_report=str(report), **level.options)
    ops = [i["op"] for i in json.loads(report.read_text())["instructions"]]
    assert ops[0] == "SpaceToDepth" and ops[1].startswith("Conv"), ops
