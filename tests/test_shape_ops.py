"""The integer and index ops of shape arithmetic (Mod, BitShift, Bitwise*, GatherElements,
GatherND, ScatterElements, ScatterND, Trilu, Size, NonZero) against onnxruntime, run-time bounds
of Clip/Max/Min, and a PyTorch-style attention export whose shape arithmetic must fold away."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

from glowpy.errors import ModelError
from glowpy.frontend.onnx import load_onnx
from tests.util import GraphBuilder, check_op

RNG = np.random.default_rng(18)


def _load(model, tmp_path):
    p = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, p)
    return load_onnx(p)


def test_mod_integer_and_float(tmp_path):
    a = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    b = np.array([7, -3, 5, -11], np.int32)  # broadcast divisors of both signs, no zero
    f = (RNG.standard_normal((3, 4)) * 10).astype(np.float32)
    g = GraphBuilder(a=a, b=b, f=f, a8=a.astype(np.int8), a64=a.astype(np.int64))
    g.node("Mod", ["a", "b"])
    g.node("Mod", ["a", "b"], fmod=1)
    g.node("Mod", ["a8", b.astype(np.int8)])
    g.node("Mod", ["a64", b.astype(np.int64)], fmod=1)
    g.node("Mod", ["f", np.array([2.5, -3.0, 0.75, -1.5], np.float32)], fmod=1)
    check_op(g.model(opset=13), g.feeds, tmp_path, rtol=0, atol=1e-6)


def test_mod_float_floor_semantics_from_opset_28(tmp_path):
    f = (RNG.standard_normal((3, 4)) * 10).astype(np.float32)
    g = GraphBuilder(f=f)
    g.node("Mod", ["f", np.array([2.5, -3.0, 0.75, -1.5], np.float32)])  # numpy.mod semantics
    g.node("Mod", ["f", np.array([np.inf, -np.inf, 0.5, 4], np.float32)])
    check_op(g.model(opset=28), g.feeds, tmp_path / "28", rtol=0, atol=1e-6)
    with pytest.raises(ModelError, match=r"fmod=0 is defined for floats from opset 28"):
        _load(g.model(opset=27), tmp_path)


def test_bitshift_and_bitwise(tmp_path):
    x = RNG.integers(0, 256, (2, 5)).astype(np.uint8)
    s = np.array([0, 1, 3, 7, 2], np.uint8)
    i = RNG.integers(-2 ** 20, 2 ** 20, (2, 5)).astype(np.int32)
    j = RNG.integers(-2 ** 20, 2 ** 20, (5,)).astype(np.int32)
    g = GraphBuilder(x=x, i=i, j=j)
    g.node("BitShift", ["x", s], direction="LEFT")
    g.node("BitShift", ["x", s], direction="RIGHT")
    for op in ("BitwiseAnd", "BitwiseOr", "BitwiseXor"):
        g.node(op, ["i", "j"])
    g.node("BitwiseNot", ["i"])
    check_op(g.model(opset=18), g.feeds, tmp_path)


def test_gather_and_scatter_with_run_time_indices(tmp_path):
    data = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    ge = RNG.integers(-4, 4, (3, 2, 5)).astype(np.int64)  # negative indices too
    nd = np.array([[[0, 1], [2, -1]], [[1, 3], [0, 0]], [[2, 2], [1, 0]]], np.int64)  # [3, 2, 2]
    sd = np.array([[1], [-3], [2]], np.int64)  # rows 1, 0, 2 of [3, 4, 5]
    g = GraphBuilder(data=data, ge=ge, nd=nd, sd=sd)
    g.node("GatherElements", ["data", "ge"], axis=1)
    g.node("GatherND", ["data", "nd"], batch_dims=1)
    g.node("GatherND", ["data", "sd"])
    upd = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    for red in ("none", "add", "mul", "max", "min"):
        g.node("ScatterND", ["data", np.array([[1], [0]], np.int64), upd[:2]], reduction=red)
        g.node("ScatterElements", ["data", "ge", upd[:, :2]], axis=1, reduction=red)
    g.node("ScatterElements", ["data", np.array([[[4, -1, 0]]], np.int64),
                               np.ones((1, 1, 3), np.float32)], axis=-1)
    check_op(g.model(opset=18), g.feeds, tmp_path, rtol=1e-6, atol=1e-6)


def test_scatter_nd_with_run_time_indices_and_ints(tmp_path):
    data = RNG.integers(-9, 9, (4, 3)).astype(np.int64)
    idx = np.array([[3, 2], [0, 0], [-1, 1]], np.int64)
    g = GraphBuilder(data=data, idx=idx)
    g.node("ScatterND", ["data", "idx", np.array([5, 6, 7], np.int64)], reduction="add")
    g.node("ScatterND", ["data", "idx", np.array([5, 6, 7], np.int64)])
    check_op(g.model(opset=18), g.feeds, tmp_path)


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(tmp_path, upper):
    x = RNG.standard_normal((2, 4, 6)).astype(np.float32)
    g = GraphBuilder(x=x, xi=x.astype(np.int32))
    g.node("Trilu", ["x"], upper=upper)
    for k in (-2, 1, 3, 9, -9):
        g.node("Trilu", ["x", np.array(k, np.int64)], upper=upper)
    g.node("Trilu", ["xi", np.array(1, np.int64)], upper=upper)
    check_op(g.model(opset=14), g.feeds, tmp_path, rtol=0, atol=0)


def test_size_and_constant_nonzero_fold(tmp_path):
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    g = GraphBuilder(x=x)
    size = g.node("Size", ["x"], output=False)
    mask = np.array([[0, 1, 0], [1, 1, 0]], np.float32)
    nz = g.node("NonZero", [mask], output=False)
    cnt = g.node("Cast", [size], to=onnx.TensorProto.FLOAT, output=False)
    s = g.node("Add", ["x", cnt], output=False)
    # the NonZero coordinates pick the masked elements of x
    g.node("GatherND", [s, g.node("Transpose", [nz], output=False)])
    m = g.model(opset=13)
    assert set(_load(m, tmp_path).op_counts()) == {"Add", "GatherND"}
    check_op(m, g.feeds, tmp_path)


def test_nonzero_of_run_time_data_is_refused(tmp_path):
    g = GraphBuilder(x=np.ones((2, 3), np.float32))
    g.node("NonZero", ["x"])
    with pytest.raises(ModelError, match=r"NonZero\): .*data-dependent.*-model-outputs=x$"):
        _load(g.model(opset=13), tmp_path)


def test_scatter_constant_out_of_range_is_refused(tmp_path):
    g = GraphBuilder(x=np.ones((2, 3), np.float32))
    g.node("ScatterElements", ["x", np.array([[3]], np.int64), np.ones((1, 1), np.float32)], axis=1)
    with pytest.raises(ModelError, match=r"index 3 is out of range for a dimension of size 3"):
        _load(g.model(opset=13), tmp_path)


def test_log_mel_clip_with_run_time_bound(tmp_path):
    """Clip(x, min=ReduceMax(x) - 80) as a log-mel front end writes it, a run-time max, and
    Max/Min with run-time operands."""
    x = (RNG.standard_normal((1, 40, 20)) * 60).astype(np.float32)
    g = GraphBuilder(x=x)
    top = g.node("ReduceMax", ["x"], keepdims=0, output=False)
    floor = g.node("Sub", [top, np.float32(80)], output=False)
    g.node("Clip", ["x", floor])
    lo1 = g.node("Reshape", [floor, np.array([1], np.int64)], output=False)  # shape [1] bound
    hi = g.node("Sub", [top, np.float32(10)], output=False)
    g.node("Clip", ["x", lo1, hi])
    g.node("Clip", ["x", None, hi])
    g.node("Max", ["x", floor, np.float32(-50)])
    g.node("Min", ["x", g.node("ReduceMean", ["x"], axes=[2], keepdims=1, output=False)])
    g.node("Clip", ["x", np.float32(-3), np.float32(3)])  # constant bounds: the Clip kernel
    m = g.model(opset=13)
    ops = _load(m, tmp_path).op_counts()
    # the run-time bounds became Max/Min; a Clip left without bounds copies
    assert ops["Clip"] == 4 and ops["Max"] == 3 and ops["Min"] == 3
    check_op(m, g.feeds, tmp_path, rtol=1e-6, atol=1e-5)


def test_transformer_shape_arithmetic_folds(tmp_path):
    """An attention head split as PyTorch exports it: Shape -> Gather -> Div/Mul/Mod ->
    Unsqueeze -> Concat -> Reshape, a Mod(Constant, Constant) check, a ScatterND mask from
    static shapes, Trilu causal mask. Everything but the tensor math must fold."""
    b, t, d, heads = 2, 6, 16, 4
    x = RNG.standard_normal((b, t, d)).astype(np.float32)
    w = RNG.standard_normal((d, 3 * d)).astype(np.float32) * 0.2
    g = GraphBuilder(x=x)
    shp = g.node("Shape", ["x"], output=False)
    bs = g.node("Gather", [shp, np.array(0, np.int64)], axis=0, output=False)
    sq = g.node("Gather", [shp, np.array(1, np.int64)], axis=0, output=False)
    dim = g.node("Gather", [shp, np.array(2, np.int64)], axis=0, output=False)
    hd = g.node("Div", [dim, np.array(heads, np.int64)], output=False)
    rem = g.node("Mod", [dim, np.array(heads, np.int64)], output=False)  # 0: folds
    hd = g.node("Add", [hd, rem], output=False)
    qkv = g.node("MatMul", ["x", w], output=False)
    q, k, v = g.node("Split", [qkv, np.array([d, d, d], np.int64)], outputs=3, axis=2, output=False)
    unsq = lambda s: g.node("Unsqueeze", [s, np.array([0], np.int64)], output=False)  # noqa: E731
    new_shape = g.node("Concat", [unsq(bs), unsq(sq), np.array([heads], np.int64), unsq(hd)],
                       axis=0, output=False)
    heads_of = lambda z, perm: g.node("Transpose", [g.node("Reshape", [z, new_shape], output=False)],  # noqa: E731
                                      perm=perm, output=False)
    qh, kh, vh = heads_of(q, [0, 2, 1, 3]), heads_of(k, [0, 2, 3, 1]), heads_of(v, [0, 2, 1, 3])
    scale = g.node("Sqrt", [g.node("Cast", [hd], to=onnx.TensorProto.FLOAT, output=False)], output=False)
    scores = g.node("Div", [g.node("MatMul", [qh, kh], output=False), scale], output=False)
    # causal mask: Trilu of a ConstantOfShape([T, T]); a ScatterND zeroes its first row
    tt = g.node("Concat", [unsq(sq), unsq(sq)], axis=0, output=False)
    ones = g.node("ConstantOfShape", [tt], value=helper.make_tensor("v", 1, [1], [1.0]), output=False)
    tri = g.node("Trilu", [ones], upper=0, output=False)
    tri = g.node("ScatterND", [tri, np.array([[0]], np.int64), np.zeros((1, t), np.float32)],
                 reduction="max", output=False)
    neg = g.node("Mul", [g.node("Sub", [np.float32(1), tri], output=False), np.float32(-1e4)], output=False)
    att = g.node("Softmax", [g.node("Add", [scores, neg], output=False)], axis=-1, output=False)
    ctx = g.node("Transpose", [g.node("MatMul", [att, vh], output=False)], perm=[0, 2, 1, 3], output=False)
    out_shape = g.node("Concat", [unsq(bs), unsq(sq), unsq(g.node("Mul", [hd, np.array(heads, np.int64)],
                                                                     output=False))], axis=0, output=False)
    g.node("Reshape", [ctx, out_shape])
    m = g.model(opset=18)
    graph = _load(m, tmp_path)
    ops = graph.op_counts()
    assert ops["Div"] == 1  # scores / sqrt(head_dim); the integer Div folded
    for folded in ("Shape", "Gather", "Mod", "Concat", "Unsqueeze", "Trilu", "ScatterND",
                   "ConstantOfShape", "Cast", "Sqrt"):
        assert folded not in ops, (folded, ops)
    reshapes = [n for n in graph.nodes if n.op == "Reshape"]
    assert len(reshapes) == 4 and all(n.inputs[1].is_const for n in reshapes)
    check_op(m, g.feeds, tmp_path, rtol=1e-4, atol=1e-5)


def test_onehot_eyelike_isnan_isinf(tmp_path):
    idx = np.array([[0, 3, -1], [5, -4, 2]], np.int64)  # 5 is out of range: all off
    x = np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, -2.0]], np.float32)
    g = GraphBuilder(idx=idx, fidx=np.array([1.7, -1.2, 9.0], np.float32), x=x,
                     vals=np.array([-1, 4], np.int64))
    # (indices, depth, values) types onnxruntime implements
    g.node("OneHot", ["idx", np.array(4, np.int64), "vals"])
    g.node("OneHot", ["idx", np.array([4.0], np.float32), np.array([0.5, 2.0], np.float32)], axis=0)
    g.node("OneHot", ["idx", np.array(4, np.int64), "vals"], axis=1)
    g.node("OneHot", ["fidx", np.array(3, np.float32), np.array([0, 1], np.float32)])
    g.node("IsNaN", ["x"])
    g.node("IsInf", ["x"])
    g.node("IsInf", ["x"], detect_negative=0)
    g.node("IsInf", ["x"], detect_positive=0)
    g.node("Add", ["x", g.node("EyeLike", ["x"], k=1, output=False)])
    g.node("EyeLike", ["x"], dtype=onnx.TensorProto.INT32, k=-1)
    m = g.model(opset=13)
    assert "EyeLike" not in _load(m, tmp_path).op_counts()
    check_op(m, g.feeds, tmp_path)
