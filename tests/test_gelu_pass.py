"""recognize_gelu (glowpy/ir/passes/gelu.py): the exported Erf GELU chain becomes one Gelu node
where the chain is only that, and stays as it is where any of its values is read elsewhere or
a constant is not the GELU's; bundles with the chain agree with onnxruntime at every vector
level this host runs."""
import json
import math

import numpy as np
import pytest
from onnx import helper
from util import check_against_onnxruntime, make_graph_model
from vector_levels import RUNNABLE

from glowpy.ir.evaluate import evaluate
from glowpy.ir.graph import Graph
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.gelu import recognize_gelu

F = np.float32
RNG = np.random.default_rng(19)


def chain(g, x, scale="div", order="outer", c1=1.0):
    """x * 0.5 * (1 + erf(x / sqrt(2))) in the exporters' forms."""
    c = lambda v, n: g.constant(np.array(v, F), n)  # noqa: E731
    d = g.add("Div", [x, c(math.sqrt(2), "s")])[0] if scale == "div" else \
        g.add("Mul", [c(1 / math.sqrt(2), "s"), x])[0]
    e = g.add("Erf", [d])[0]
    a = g.add("Add", [c(c1, "one"), e])[0]
    if order == "outer":  # torch: (x * (1 + erf)) * 0.5
        return g.add("Mul", [g.add("Mul", [x, a])[0], c(0.5, "half")])[0]
    return g.add("Mul", [g.add("Mul", [c(0.5, "half"), x])[0], a])[0]  # (0.5 * x) * (1 + erf)


def graph_with(scale, order, c1=1.0, leak=False):
    g = Graph("t")
    x = g.add_input("x", F, (2, 3, 8))
    y = g.add("Relu", [x])[0]
    g.outputs = [chain(g, y, scale, order, c1)]
    if leak:  # the Erf's result read outside the chain too
        g.outputs.append(next(n for n in g.nodes if n.op == "Erf").outputs[0])
    return g


@pytest.mark.parametrize("scale", ["div", "mul"])
@pytest.mark.parametrize("order", ["outer", "inner"])
def test_chain_becomes_one_gelu_with_the_same_numbers(scale, order):
    g = graph_with(scale, order)
    feeds = {"x": RNG.uniform(-5, 5, (2, 3, 8)).astype(F)}
    before = evaluate(g, feeds)
    name = g.outputs[0].name
    g = eliminate_dead_code(recognize_gelu(g))
    assert [n.op for n in g.nodes] == ["Relu", "Gelu"]
    assert g.outputs[0].name == name and g.nodes[1].attrs["approximate"] == "none"
    after = evaluate(g, feeds)
    np.testing.assert_allclose(after[0], before[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kw", [{"c1": 2.0}, {"leak": True}])
def test_chain_kept_when_not_a_gelu_or_read_elsewhere(kw):
    g = graph_with("div", "outer", **kw)
    ops = [n.op for n in g.nodes]
    g = eliminate_dead_code(recognize_gelu(g))
    assert [n.op for n in g.nodes] == ops


def gelu_model(n=5, k=24, m=40):
    """MatMul + bias -> GELU chain -> MatMul: a transformer/ConvNeXt MLP."""
    s = math.sqrt(2)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]), helper.make_node("MatMul", ["g", "w2"], ["y"])]
    inits = {"w1": RNG.standard_normal((k, m)).astype(F) * 0.5, "b1": RNG.standard_normal(m).astype(F),
             "sqrt2": np.array(s, F), "one": np.array(1.0, F), "half": np.array(0.5, F),
             "w2": RNG.standard_normal((m, k)).astype(F) * 0.2}
    x = RNG.standard_normal((n, 7, k)).astype(F)
    return make_graph_model(nodes, {"x": x}, ["y"], inits, opset=13), {"x": x}


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
def test_gelu_chain_bundle_matches_onnxruntime(level, tmp_path):
    model, feeds = gelu_model()
    report = tmp_path / "mem.json"
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-5, atol=1e-5,
                              dump_memory_report=str(report), **level.options)
    ops = [i["op"] for i in json.loads(report.read_text())["instructions"]]
    assert "Gelu" in ops and not any("Erf" in o for o in ops), ops
