"""Reductions and normalizations against onnxruntime and glowpy's numpy references:
ReduceMean/ReduceSum/ReduceMax (axes as attribute and as input, negative axes, keepdims,
noop_with_empty_axes, all axes by default), Softmax and LogSoftmax (the opset < 13 "flatten to
2-D at axis" semantics and the opset 13 single-axis semantics, several axes) and
BatchNormalization (inference, 2-D to 5-D inputs).

Tolerances: sums rtol 1e-5/atol 1e-5; Softmax/LogSoftmax go through exp/log (rtol 1e-5,
atol 1e-6); BatchNormalization rtol 1e-4/atol 1e-5 (folded to one multiply-add in float64)."""
import numpy as np
import pytest

from util import GraphBuilder, check_op
from vector_levels import params

RNG = np.random.default_rng(17)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
SUM_TOL = dict(rtol=1e-5, atol=1e-5)

AXES = [None, [1], [-1], [0, 2], [1, -1], [0, 1, 2, 3], [3, 0]]


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_reduce_axes_attribute(op, tmp_path):
    """Opset 13 for Mean/Max (axes attribute) and opset 11 for Sum (axes attribute)."""
    g = GraphBuilder(x=X)
    for axes in AXES:
        for keep in [0, 1]:
            g.node(op, ["x"], keepdims=keep, **({} if axes is None else {"axes": axes}))
    check_op(g.model(11 if op == "ReduceSum" else 13), g.feeds, tmp_path, **SUM_TOL)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
def test_reduce_axes_input(op, tmp_path):
    """Opset 18 (13 for ReduceSum): axes as an input, noop_with_empty_axes."""
    g = GraphBuilder(x=X)
    for axes in AXES:
        for keep in [0, 1]:
            g.node(op, ["x"] + ([] if axes is None else [np.array(axes, np.int64)]), keepdims=keep)
    g.node(op, ["x"], noop_with_empty_axes=1)
    g.node(op, ["x", np.zeros(0, np.int64)], noop_with_empty_axes=1, keepdims=0)
    g.node(op, ["x", np.zeros(0, np.int64)], noop_with_empty_axes=0, keepdims=0)
    g.node(op, ["x", np.array([2], np.int64)], noop_with_empty_axes=1)
    check_op(g.model(13 if op == "ReduceSum" else 18), g.feeds, tmp_path, **SUM_TOL)


def test_reduce_integer_and_ranks(tmp_path):
    xi = RNG.integers(-100, 100, (3, 4, 5)).astype(np.int32)
    xl = RNG.integers(-2**40, 2**40, (4, 6)).astype(np.int64)
    x1 = RNG.standard_normal(7).astype(np.float32)
    g = GraphBuilder(xi=xi, xl=xl, x1=x1)
    g.node("ReduceSum", ["xi", np.array([1], np.int64)])
    g.node("ReduceMax", ["xi"], axes=[0, 2], keepdims=0)
    g.node("ReduceMax", ["xl"], axes=[1])
    g.node("ReduceSum", ["xl", np.array([0], np.int64)], keepdims=0)
    g.node("ReduceMean", ["x1"], keepdims=0)
    g.node("ReduceMax", ["x1"], axes=[0])
    check_op(g.model(13), g.feeds, tmp_path, **SUM_TOL)


def test_reduce_max_special_values(tmp_path):
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    x[0, :] = -np.inf
    x[1, 2] = np.inf
    g = GraphBuilder(x=x)
    g.node("ReduceMax", ["x"], axes=[1])
    g.node("ReduceMax", ["x"], axes=[0], keepdims=0)
    check_op(g.model(13), g.feeds, tmp_path, rtol=0, atol=0)


SOFT_TOL = dict(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax(op, opset, tmp_path):
    """Default axis (1 before opset 13, -1 from 13) and explicit axes on 2-D, 3-D and 4-D
    inputs; large offsets check the max subtraction."""
    x2 = (RNG.standard_normal((4, 7)) * 3).astype(np.float32)
    x3 = (RNG.standard_normal((2, 5, 3)) * 3 + 500).astype(np.float32)
    g = GraphBuilder(x=X, x2=x2, x3=x3)
    g.node(op, ["x"])
    for ax in [0, 1, 2, 3, -1, -3]:
        g.node(op, ["x"], axis=ax)
    g.node(op, ["x2"])
    g.node(op, ["x2"], axis=0)
    g.node(op, ["x3"])
    g.node(op, ["x3"], axis=1)
    check_op(g.model(opset), g.feeds, tmp_path, **SOFT_TOL)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("level", params())
def test_softmax_vector_lengths(op, level, tmp_path):
    """The float32 vector kernel at 4, 8 and 16 lanes: last-axis rows shorter than a vector,
    whole vectors only and whole vectors plus a masked tail (1, 3, 8, 16, 17, 35, 128, 133),
    non-last axes whose inner dimension is narrower than, equal to and wider than a vector
    (lanes along the inner dimension, the last vector masked); -inf entries, large offsets.
    Rows of 200, 250 and 577 end after the wide vectors (up to four registers) in single
    registers, whole and masked (577: one float after them). A NaN or a +inf in a row makes
    the whole row NaN, as in numpy's max-first reference and onnxruntime."""
    feeds, g = {}, None
    for n in [1, 3, 8, 16, 17, 35, 128, 133, 200, 250, 577]:
        x = (RNG.standard_normal((5, n)) * 4).astype(np.float32)
        x[2] += 300
        if n > 2:
            x[1, n // 2] = -np.inf
            x[3, n - 2] = np.nan
            x[4, n // 3] = np.inf
        feeds[f"r{n}"] = x
    for shape in [(2, 5, 3), (3, 7, 8), (2, 4, 16), (1, 6, 37), (2, 3, 2, 9)]:
        feeds["c" + "_".join(map(str, shape))] = (RNG.standard_normal(shape) * 3).astype(np.float32)
    g = GraphBuilder(**feeds)
    for name in feeds:
        g.node(op, [name], axis=-1 if name[0] == "r" else 1)
    g.node(op, ["c2_3_2_9"], axis=2)  # outer 6, inner 9
    check_op(g.model(13), g.feeds, tmp_path, **SOFT_TOL, **level.options)


@pytest.mark.parametrize("opset", [9, 14, 15])
def test_batchnorm(opset, tmp_path):
    feeds = {"x2": RNG.standard_normal((3, 4)).astype(np.float32),
             "x3": RNG.standard_normal((2, 4, 5)).astype(np.float32),
             "x4": RNG.standard_normal((2, 4, 3, 5)).astype(np.float32),
             "x5": RNG.standard_normal((1, 4, 2, 3, 2)).astype(np.float32)}
    g = GraphBuilder(**feeds)
    for i, name in enumerate(feeds):
        params = [RNG.uniform(0.5, 2, 4).astype(np.float32), RNG.standard_normal(4).astype(np.float32),
                  RNG.standard_normal(4).astype(np.float32), RNG.uniform(0.1, 3, 4).astype(np.float32)]
        g.node("BatchNormalization", [name] + params, **({"epsilon": 1e-3} if i % 2 else {}))
    check_op(g.model(opset), g.feeds, tmp_path)
