"""Ops that only move, select or repeat values between QDQ pairs run on the integer values
(glowpy/ir/passes/quant/rules.MOVES; MaxPool, ReduceMax and ReduceMin by
patterns.Folder.fold_MaxPool): gathers from a quantized constant table and from activations,
DepthToSpace, SpaceToDepth, Tile, Expand, ReduceMax, ReduceMin. One model per integer type
holds each of them twice, onto its input's grid (no instruction but the op) and onto another
(the op and a Requantize); no DequantizeLinear or QuantizeLinear is left, outputs equal
onnxruntime's, and a quantized table is stored as its bytes."""
from __future__ import annotations

import numpy as np
import pytest

import glowpy
from glowpy.runtime import Bundle
from test_int8 import QDQ, lsb
from util import make_graph_model, memory_report, run_onnxruntime

RNG = np.random.default_rng(23)
TABLE = (50, 6)


def cases(m, dt, lo):
    """name -> float output of the op between a DequantizeLinear and (later) a Quantize."""
    xs, xz = 0.05, lo + 120

    def x():
        return m.dq("x", xs, m.zp(xz))
    table = m.dq(m.c(RNG.integers(lo, lo + 256, TABLE).astype(dt)), 0.02, m.zp(lo + 7))
    i64 = lambda a: m.c(np.asarray(a, np.int64))  # noqa: E731
    return {
        "Gather_table": m.op("Gather", [table, i64(RNG.integers(0, TABLE[0], (3, 4)))], axis=0),
        "Gather": m.op("Gather", [x(), i64([2, 0, 1, 2])], axis=1),
        "GatherElements": m.op("GatherElements", [x(), i64(RNG.integers(0, 4, (1, 4, 6, 8)))],
                               axis=1),
        "GatherND": m.op("GatherND", [x(), i64([[0, 1], [0, 3]])]),
        "DepthToSpace": m.op("DepthToSpace", [x()], blocksize=2, mode="CRD"),
        "SpaceToDepth": m.op("SpaceToDepth", [x()], blocksize=2),
        "Tile": m.op("Tile", [x(), i64([1, 2, 1, 3])]),
        "Expand": m.op("Expand", [m.dq(m.q(m.op("Slice", [x(), i64([0]), i64([1]), i64([2])]),
                                           xs, xz), xs, m.zp(xz)), i64([1, 4, 6, 8])]),
        "ReduceMax": m.op("ReduceMax", [x()], axes=[3], keepdims=0),
        "ReduceMin": m.op("ReduceMin", [x()], axes=[1, 2], keepdims=1),
    }, (xs, xz)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_moves_stay_integer(dtype, tmp_path):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    ops, (xs, xz) = cases(m, np.dtype(dtype), lo)
    outs = []
    for name, y in ops.items():
        outs += [m.q(y, xs, xz), m.q(y, 0.07, lo + 90)]
    feeds = {"x": RNG.integers(lo, lo + 256, (1, 4, 6, 8)).astype(dtype)}
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    kernels = sorted(i["op"] for i in memory_report(model, tmp_path / "plan")["instructions"])
    # every op twice (Expand's Slice once, a part of x), and one rescale per op onto the
    # other grid, besides the table's two Gathers, already on other grids than x's
    expected = sorted([op.split("_")[0] for op in ops] * 2 + ["Requantize"] * (len(ops) + 1)
                      + ["Slice"])
    assert kernels == expected, kernels
    import onnx
    # the table alone: its bytes and the 3 x 4 indices are the weights, not 50 x 6 floats
    table_only = make_graph_model(m.nodes, feeds, outs[:1], m.inits, opset=13)
    onnx.save(table_only, tmp_path / "t.onnx")
    info = glowpy.compile(str(tmp_path / "t.onnx"), str(tmp_path / "t"))
    assert (tmp_path / "t" / f"{info.name}.weights.bin").stat().st_size < 4 * TABLE[0] * TABLE[1]
    onnx.save(model, tmp_path / "m.onnx")
    info = glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"))
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    for p, e in zip(info.outputs, run_onnxruntime(model, feeds)):
        y = got[p["name"]]
        assert y.dtype == e.dtype and y.shape == e.shape, p["name"]
        assert lsb(y, e) == 0, p["name"]
    x = feeds["x"]
    names = [p["name"] for p in info.outputs]
    np.testing.assert_array_equal(got[names[2]], x[:, [2, 0, 1, 2]])  # Gather onto x's grid
    np.testing.assert_array_equal(got[names[12]], np.tile(x, (1, 2, 1, 3)))  # Tile
    np.testing.assert_array_equal(got[names[16]], x.max(axis=3))  # ReduceMax
