"""Products by a packed B whose A outgrows the L2 run their rows in chunks, each over all the
column panels (gemm/blocking.py row_chunk): the plan chunks a NeRF-sized MLP layer at every
x86 level and leaves batch-sized products alone; chunked bundles (chunks that do not divide
the rows, chunks with a partial row block, a folded batched MatMul, Gemm with transA, alpha and
beta * C) agree with onnxruntime and equal the unchunked bundle bit for bit at every level
this host runs."""
import json

import numpy as np
import pytest
from onnx import helper
from util import check_against_onnxruntime, compile_and_run, make_graph_model
from vector_levels import LEVELS, RUNNABLE

import glowpy

F = np.float32
RNG = np.random.default_rng(11)


def gemm(m, k, n, trans_a=False, c=False, alpha=1.0, beta=1.0):
    """Relu(alpha * A x W^T + beta * C) with W constant (nn.Linear's Gemm)."""
    a = RNG.standard_normal((k, m) if trans_a else (m, k)).astype(F)
    inits = {"w": (RNG.standard_normal((n, k)) / np.sqrt(k)).astype(F)}
    ins = ["a", "w"]
    if c:
        inits["c"] = RNG.standard_normal(n).astype(F)
        ins.append("c")
    nodes = [helper.make_node("Gemm", ins, ["h"], transA=int(trans_a), transB=1, alpha=alpha, beta=beta),
             helper.make_node("Relu", ["h"], ["y"])]
    return make_graph_model(nodes, {"a": a}, ["y"], inits, opset=13), {"a": a}


def batched_matmul(lead, k, n):
    x = RNG.standard_normal(lead + (k,)).astype(F)
    w = (RNG.standard_normal((k, n)) / np.sqrt(k)).astype(F)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    return make_graph_model(nodes, {"x": x}, ["y"], {"w": w}, opset=13), {"x": x}


def variant(report, op):
    rows = json.loads(report.read_text())["instructions"]
    return next(r["variant"] for r in rows if r["op"].startswith(op))


@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv.lanes > 1], ids=str)
@pytest.mark.parametrize("m, k, n, chunked", [(16384, 256, 256, True), (4096, 512, 128, True),
                                             (128, 256, 256, False), (16384, 256, 8, False)])
def test_plan_chunks_rows_past_the_l2(level, m, k, n, chunked, tmp_path):
    """A of 16 MB or 8 MB by several panels: chunks of at most a quarter of the 512 KiB L2 the
    x86 levels assume; 128 rows (128 KB) or a single panel (nothing re-read): none."""
    model, _ = gemm(m, k, n)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    glowpy.compile(str(path), str(tmp_path / "b"), dump_memory_report=str(tmp_path / "r.json"),
                   **level.options)
    v = variant(tmp_path / "r.json", "Gemm")
    assert v["name"] == "vector"
    if chunked:
        assert 0 < v["params"]["rows"] < m and v["params"]["rows"] * 4 * k <= (512 << 10) // 4, v
    else:
        assert "rows" not in v["params"], v


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("m, rows, trans_a, c", [(37, 12, False, False), (53, 7, True, True),
                                                 (40, 40 - 3, False, True)])
def test_chunked_gemm_matches_onnxruntime(level, m, rows, trans_a, c, tmp_path):
    model, feeds = gemm(m, 45, 37, trans_a, c, alpha=0.75, beta=1.5)
    got, _ = check_against_onnxruntime(model, feeds, tmp_path / "chunks", rtol=1e-5, atol=1e-5,
                                       kernel_variants={"Gemm": ("vector", {"rows": rows})},
                                       dump_memory_report=str(tmp_path / "r.json"), **level.options)
    assert variant(tmp_path / "r.json", "Gemm")["params"] == {"rows": rows}
    whole = compile_and_run(model, feeds, tmp_path / "whole",
                            kernel_variants={"Gemm": ("vector", {})}, **level.options)
    np.testing.assert_array_equal(got[0], whole[0])


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
def test_chunked_folded_matmul_matches_onnxruntime(level, tmp_path):
    model, feeds = batched_matmul((3, 5, 7), 33, 41)
    forced = {"fold": True, "rows": 16}
    got, _ = check_against_onnxruntime(model, feeds, tmp_path / "chunks", rtol=1e-5, atol=1e-5,
                                       kernel_variants={"MatMul": ("vector", forced)},
                                       dump_memory_report=str(tmp_path / "r.json"), **level.options)
    assert variant(tmp_path / "r.json", "MatMul")["params"] == forced
    whole = compile_and_run(model, feeds, tmp_path / "whole",
                            kernel_variants={"MatMul": ("vector", {"fold": True})}, **level.options)
    np.testing.assert_array_equal(got[0], whole[0])
