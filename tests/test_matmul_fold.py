"""MatMul of a batched A by one B as one (batch * M) x K product (gemm/vector.py fold_batch):
the plan folds where B is past half of L2 and A is small (ConvNeXt's last stage), not where
each batch entry's A slice is what stays in cache (its first stage); folded bundles, with
epilogue operands indexed by the output's leading dims, agree with onnxruntime at every
vector level this host runs."""
import json

import numpy as np
import onnx
import pytest
from onnx import helper
from util import check_against_onnxruntime, compile_and_run, make_graph_model
from vector_levels import LEVELS, RUNNABLE

import glowpy

F = np.float32
RNG = np.random.default_rng(5)


def mlp(lead, k, n, residual=True):
    """x [lead..., K] @ W [K, N] + bias, + a residual of the output's shape, Relu."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y0"])]
    inits = {"w": (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(F), "b": RNG.standard_normal(n).astype(F)}
    feeds = {"x": RNG.standard_normal(lead + (k,)).astype(F)}
    if residual:
        feeds["r"] = RNG.standard_normal(lead + (n,)).astype(F)
        nodes.append(helper.make_node("Add", ["y0", "r"], ["y1"]))
    nodes.append(helper.make_node("Relu", ["y1" if residual else "y0"], ["y"]))
    return make_graph_model(nodes, feeds, ["y"], inits, opset=13), feeds


def matmul_variant(report):
    rows = json.loads(report.read_text())["instructions"]
    return next(r["variant"] for r in rows if r["op"].startswith("MatMul"))


@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv.lanes > 1], ids=str)
@pytest.mark.parametrize("lead, k, n, fold", [((1, 7, 7), 768, 3072, True), ((1, 7, 7), 3072, 768, True),
                                              ((1, 56, 56), 96, 384, False), ((4, 7), 3072, 768, True),
                                              ((1, 14, 14), 384, 1536, None)])
def test_plan_folds_where_b_streams_per_batch_entry(level, lead, k, n, fold, tmp_path):
    model, feeds = mlp(lead, k, n, residual=False)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    glowpy.compile(str(path), str(tmp_path / "b"), dump_memory_report=str(tmp_path / "r.json"),
                   **level.options)
    v = matmul_variant(tmp_path / "r.json")
    if fold is None:  # ConvNeXt's third stage: folded where a wider tile leaves fewer panels
        fold = level.lanes >= 8
    assert v["name"] == "vector" and v["params"].get("fold", False) == fold, v


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("lead", [(2, 3, 5), (1, 4, 9)])
def test_folded_matmul_matches_onnxruntime(level, lead, tmp_path):
    model, feeds = mlp(lead, 40, 37)
    got, _ = check_against_onnxruntime(model, feeds, tmp_path / "fold", rtol=1e-5, atol=1e-5,
                                       kernel_variants={"MatMul": ("vector", {"fold": True})},
                                       dump_memory_report=str(tmp_path / "r.json"), **level.options)
    assert matmul_variant(tmp_path / "r.json")["params"] == {"fold": True}
    apart = compile_and_run(model, feeds, tmp_path / "apart",
                            kernel_variants={"MatMul": ("vector", {})}, **level.options)
    np.testing.assert_allclose(got[0], apart[0], rtol=1e-6, atol=1e-6)
