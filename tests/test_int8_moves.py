"""Ops that only move, select or repeat values between QDQ pairs run on the integer values
(glowpy/ir/passes/quant/moves.py, rules.MOVES): gathers from a quantized constant table and
from activations, DepthToSpace, SpaceToDepth, Tile, Expand, ReduceMax, ReduceMin,
GlobalMaxPool, nearest Resize and Pad. One model per integer type holds each of them twice,
onto its input's grid (no instruction but the op) and onto another (the op and a
Requantize); only a linear Resize and a Pad by a value off the grid keep their
DequantizeLinear and QuantizeLinear. Outputs equal onnxruntime's (the linear Resize within
1 LSB), and a quantized table is stored as its bytes."""
from __future__ import annotations

import numpy as np
import pytest

import glowpy
from glowpy.runtime import Bundle
from test_int8 import QDQ, lsb
from util import compile_and_run, make_graph_model, memory_report, run_onnxruntime
from vector_levels import RUNNABLE

RNG = np.random.default_rng(23)
TABLE = (50, 6)
PADS = [0, 0, 1, 2, 0, 0, 2, 1]


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
        "GlobalMaxPool": m.op("GlobalMaxPool", [x()]),
        "Resize_scales": m.op("Resize", [x(), "", m.c(np.array([1, 1, 2, 2], np.float32))],
                              mode="nearest"),
        "Resize_sizes": m.op("Resize", [x(), "", "", i64([1, 4, 9, 13])], mode="nearest",
                             coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        "Pad_zero": m.op("Pad", [x(), i64(PADS)]),
        "Pad_value": m.op("Pad", [x(), i64(PADS), m.c(np.array(0.5, np.float32))]),  # 10 steps
        "Pad_reflect": m.op("Pad", [x(), i64(PADS)], mode="reflect"),
        "Pad_edge": m.op("Pad", [x(), i64(PADS)], mode="edge"),
    }, (xs, xz)


def floats(m, xs, xz):
    """Ops between QDQ pairs that stay float: they mix values (linear Resize), or pad with a
    value off the input's grid."""
    x = m.dq("x", xs, m.zp(xz))
    return [m.op("Resize", [x, "", m.c(np.array([1, 1, 2, 2], np.float32))], mode="linear"),
            m.op("Pad", [x, m.c(np.asarray(PADS, np.int64)), m.c(np.array(0.51, np.float32))])]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_moves_stay_integer(dtype, tmp_path):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    ops, (xs, xz) = cases(m, np.dtype(dtype), lo)
    outs = []
    for name, y in ops.items():
        outs += [m.q(y, xs, xz), m.q(y, 0.07, lo + 90)]
    outs += [m.q(y, xs, xz) for y in floats(m, xs, xz)]
    feeds = {"x": RNG.integers(lo, lo + 256, (1, 4, 6, 8)).astype(dtype)}
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    kernels = sorted(i["op"] for i in memory_report(model, tmp_path / "plan")["instructions"])
    # every op twice (Expand's Slice once, a part of x), and one rescale per op onto the
    # other grid, besides the table's two Gathers, already on other grids than x's
    expected = sorted([op.split("_")[0] for op in ops] * 2 + ["Requantize"] * (len(ops) + 1)
                      + ["Slice"] + ["DequantizeLinear", "Resize", "QuantizeLinear", "Pad",
                                     "QuantizeLinear"])  # (one DequantizeLinear for both)
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
        assert lsb(y, e) <= (1 if p is info.outputs[-2] else 0), p["name"]  # linear Resize
    x = feeds["x"]
    names = [p["name"] for p in info.outputs]
    np.testing.assert_array_equal(got[names[2]], x[:, [2, 0, 1, 2]])  # Gather onto x's grid
    np.testing.assert_array_equal(got[names[12]], np.tile(x, (1, 2, 1, 3)))  # Tile
    np.testing.assert_array_equal(got[names[16]], x.max(axis=3))  # ReduceMax
    np.testing.assert_array_equal(got[names[20]], x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_array_equal(got[names[22]], x.repeat(2, 2).repeat(2, 3))  # nearest x2
    padded = np.pad(x, [(0, 0), (0, 0), (1, 2), (2, 1)], constant_values=120 + lo)
    np.testing.assert_array_equal(got[names[26]], padded)  # Pad with 0: the zero point
    np.testing.assert_array_equal(got[names[28]], padded + 10 * (padded == 120 + lo) *
                                  (np.pad(np.zeros_like(x), [(0, 0), (0, 0), (1, 2), (2, 1)],
                                          constant_values=1)))  # 0.5: 10 steps of 0.05


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("factor", [2, 3])
def test_nearest_upsampling_of_bytes(level, factor, tmp_path):
    """The integers of a nearest Resize by a whole factor go a vector of bytes at a time
    (tensor/resize.repeat_run: 16, 32 or 64 a vector at these levels), rows of 100 values a
    whole vector or more and a tail at each; the output is each value `factor` times."""
    m = QDQ(np.uint8)
    y = m.q(m.op("Resize", [m.dq("x", 0.05, m.zp(3)), "",
                            m.c(np.array([1, 1, factor, factor], np.float32))], mode="nearest"),
            0.05, 3)
    feeds = {"x": RNG.integers(0, 256, (1, 3, 5, 100)).astype(np.uint8)}
    model = make_graph_model(m.nodes, feeds, [y], m.inits, opset=13)
    got = compile_and_run(model, feeds, tmp_path, **level.options)[0]
    np.testing.assert_array_equal(got, feeds["x"].repeat(factor, 2).repeat(factor, 3))
