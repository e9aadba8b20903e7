"""Reduce* variant `vector` (glowpy/codegen/kernels/reduce/vector.py) at each x86 vector level
the host runs, against onnxruntime under guard pages (a masked tail load or store that strays
out of its tensor faults): rows (the reduced block last) and columns (a block with kept axes
after it), tails of every length against the widened vectors, kept size-1 axes inside the
block, every float op it takes; special values through the lane combine. Axes that are not one
block stay with the scalar `default`, which the memory report names."""
import json

import numpy as np
import pytest

from test_kernels_fast import check_guarded
from util import GraphBuilder, compile_and_run
from vector_levels import params

RNG = np.random.default_rng(23)
OPS = ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
       "ReduceSumSquare"]


def _variants(report):
    return [(i["kernel"], i["variant"]["name"]) for i in json.loads(report.read_text())["instructions"]
            if i["kernel"].startswith("Reduce")]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("op", OPS)
def test_rows_and_columns(op, level, tmp_path):
    # 4 x 77 rows: a widened sweep and a 13-float tail at 8 lanes (77 = 64 + 13); 3 x 5 x 37
    # columns over 5 (37 = 32 + 5 lanes left); a 2-D block over (H, W) of 9 x 11; channels of
    # NCHW with a size-1 kept axis after the block
    x = (RNG.standard_normal((4, 77)) + 0.5).astype(np.float32)
    y = RNG.standard_normal((3, 5, 37)).astype(np.float32)
    z = RNG.standard_normal((2, 6, 9, 11)).astype(np.float32)
    g = GraphBuilder(x=x, y=y, z=z)
    g.node(op, ["x"], axes=[1], keepdims=0)
    g.node(op, ["y"], axes=[1], keepdims=1)
    g.node(op, ["z"], axes=[2, 3], keepdims=1)
    g.node(op, ["z"], axes=[1], keepdims=0)
    g.node(op, ["y"], axes=[0, 2], keepdims=1)  # not one block: the scalar kernel
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=11), g.feeds, tmp_path, level, dump_memory_report=str(report))
    assert [v for _, v in _variants(report)] == ["vector"] * 4 + ["default"]


@pytest.mark.parametrize("level", params())
def test_special_values(level, tmp_path):
    """inf and -inf in different lanes of rows and columns, against onnxruntime; NaN propagates
    through the lane combine of ReduceMax and ReduceMin wherever it lies, as numpy's max and the
    scalar kernel do (onnxruntime's ReduceMax returns NaN or ignores it by its position:
    1.32 gave NaN for a NaN at index 0 of a row of 40 and the maximum for one at index 17)."""
    x = RNG.standard_normal((6, 40)).astype(np.float32)
    x[0, 3], x[1, 39], x[2, :] = np.inf, -np.inf, -np.inf
    g = GraphBuilder(x=x)
    for op in ("ReduceMax", "ReduceMin"):
        g.node(op, ["x"], axes=[1])
        g.node(op, ["x"], axes=[0])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=11), g.feeds, tmp_path, level, dump_memory_report=str(report))
    assert {v for _, v in _variants(report)} == {"vector"}
    x[3, 17], x[4, 0], x[5, 39] = np.nan, np.nan, np.nan
    got = compile_and_run(g.model(opset=11), {"x": x}, tmp_path / "nan", **level.options)
    for y, want in zip(got, (np.max(x, 1, keepdims=True), np.max(x, 0, keepdims=True),
                             np.min(x, 1, keepdims=True), np.min(x, 0, keepdims=True))):
        np.testing.assert_array_equal(y, want)
