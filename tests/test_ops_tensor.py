"""Data-movement and shape ops against onnxruntime and glowpy's numpy references: Reshape,
Flatten, Transpose, Concat, Split, Slice, Gather, Squeeze, Unsqueeze, Identity, Dropout,
Constant and Shape, in their attribute (older opset) and input forms. Outputs are moved data,
so they must match exactly.

Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout) are tested both as a graph's
only node (input and output placeholders, so lowering inserts a copy) and between computing
nodes (the view aliases its producer's buffer)."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from util import GraphBuilder, check_op, compile_and_run
from glowpy.errors import ModelError

RNG = np.random.default_rng(19)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
EXACT = dict(rtol=0, atol=0)


def i64(v):
    return np.asarray(v, np.int64)


def test_reshape(tmp_path):
    g = GraphBuilder(x=X)
    for shape in [[6, 20], [2, -1], [0, 0, -1], [-1], [0, 3, 2, 10], [1, 2, 1, 60], [120, 1],
                  [2, 0, 5, -1]]:
        g.node("Reshape", ["x", i64(shape)])
    g.node("Reshape", ["x", i64([4, -1, 3])], allowzero=1)
    g.node("Reshape", ["x", i64([2, 3, 20])], allowzero=1)
    check_op(g.model(14), g.feeds, tmp_path, **EXACT)


def test_views_between_computing_nodes(tmp_path):
    """Relu -> view -> Neg: the view's output aliases the Relu's buffer."""
    g = GraphBuilder(x=X)
    r = g.node("Relu", ["x"], output=False)
    views = [g.node("Reshape", [r, i64([6, -1])], output=False),
             g.node("Flatten", [r], axis=2, output=False),
             g.node("Squeeze", [g.node("Unsqueeze", [r, i64([0, 3])], output=False), i64([0])],
                    output=False),
             g.node("Identity", [r], output=False),
             g.node("Dropout", [r], output=False)]
    for v in views:
        g.node("Neg", [v])
    g.node("Reshape", [r, i64([120])])  # a view that is itself a graph output
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


def test_flatten(tmp_path):
    g = GraphBuilder(x=X)
    for axis in [0, 1, 2, 3, 4, -1, -4, -2]:
        g.node("Flatten", ["x"], axis=axis)
    g.node("Flatten", ["x"])
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


def test_transpose(tmp_path):
    x3 = RNG.standard_normal((3, 1, 7)).astype(np.float32)
    xi = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    g = GraphBuilder(x=X, x3=x3, xi=xi)
    g.node("Transpose", ["x"])
    for perm in [[0, 2, 3, 1], [0, 3, 1, 2], [3, 2, 1, 0], [1, 0, 2, 3], [0, 1, 2, 3], [2, 0, 3, 1]]:
        g.node("Transpose", ["x"], perm=perm)
    g.node("Transpose", ["x3"], perm=[2, 0, 1])
    g.node("Transpose", ["xi"], perm=[1, 2, 0])
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


def test_concat(tmp_path):
    a = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    b = RNG.standard_normal((2, 5, 4)).astype(np.float32)
    c = RNG.standard_normal((2, 3, 1)).astype(np.float32)
    v = RNG.standard_normal(3).astype(np.float32)
    g = GraphBuilder(a=a, b=b, c=c, v=v, i=np.arange(6, dtype=np.int64).reshape(2, 3))
    g.node("Concat", ["a", "b"], axis=1)
    g.node("Concat", ["a", "b", "a"], axis=-2)
    g.node("Concat", ["a", "c", RNG.standard_normal((2, 3, 2)).astype(np.float32)], axis=2)
    g.node("Concat", ["a", "c"], axis=-1)
    g.node("Concat", ["a", "a"], axis=0)
    g.node("Concat", ["v", "v", np.float32([9, 8])], axis=0)
    g.node("Concat", ["a"], axis=1)
    g.node("Concat", ["i", i64([[7], [8]])], axis=1)
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


def test_split(tmp_path):
    x = RNG.standard_normal((6, 7)).astype(np.float32)
    g11 = GraphBuilder(x=x)
    g11.node("Split", ["x"], outputs=3)  # equal parts along axis 0
    g11.node("Split", ["x"], outputs=3, axis=1, split=[2, 4, 1])
    g11.node("Split", ["x"], outputs=2, axis=-1, split=[3, 4])
    check_op(g11.model(11), g11.feeds, tmp_path / "opset11", **EXACT)
    g13 = GraphBuilder(x=x)
    g13.node("Split", ["x", i64([1, 5])], outputs=2)
    g13.node("Split", ["x", i64([2, 3, 2])], outputs=3, axis=-1)
    g13.node("Split", ["x"], outputs=2)
    check_op(g13.model(13), g13.feeds, tmp_path / "opset13", **EXACT)
    g18 = GraphBuilder(x=x)
    g18.node("Split", ["x"], outputs=3, num_outputs=3, axis=1)  # uneven: 3, 3, 1
    g18.node("Split", ["x"], outputs=4, num_outputs=4, axis=-1)  # uneven: 2, 2, 2, 1
    g18.node("Split", ["x"], outputs=3, num_outputs=3)  # even: 2, 2, 2
    check_op(g18.model(18), g18.feeds, tmp_path / "opset18", **EXACT)


def test_slice_attribute_form(tmp_path):
    """Slice-1..9: starts, ends, axes attributes; out-of-range ends clamp."""
    g = GraphBuilder(x=X)
    g.node("Slice", ["x"], starts=[1], ends=[3], axes=[2])
    g.node("Slice", ["x"], starts=[0, 1], ends=[1, 1000])
    g.node("Slice", ["x"], starts=[-3, 1], ends=[-1, -1], axes=[3, 1])
    g.node("Slice", ["x"], starts=[-100], ends=[2], axes=[-1])
    check_op(g.model(9), g.feeds, tmp_path, **EXACT)


SLICES = [  # starts, ends, axes, steps
    ([1], [3], [2], None),
    ([0, 1], [1, 1000], None, None),
    ([-3, 1], [-1, -1], [3, 1], None),
    ([0], [5], [-1], [2]),
    ([4], [0], [3], [-1]),
    ([-1], [-1000], [3], [-2]),
    ([1000], [-1000], [2], [-1]),  # the whole dim reversed
    ([1, -1, 3], [2, -4, 0], [0, 2, 3], [1, -1, -2]),
    ([0, 0, 0, 0], [2**62, 2**62, 2**62, 2**62], None, [1, 1, 1, 3]),
    ([-100], [100], [1], None),
    ([1], [3], [-4], [5]),
]


def test_slice_input_form(tmp_path):
    g = GraphBuilder(x=X)
    for starts, ends, axes, steps in SLICES:
        ins = ["x", i64(starts), i64(ends)]
        if axes is not None or steps is not None:
            ins.append(i64(axes) if axes is not None else None)
        if steps is not None:
            ins.append(i64(steps))
        g.node("Slice", ins)
    g.node("Slice", ["x", np.int32([1]), np.int32([3]), np.int32([1])])  # int32 operands
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


def test_gather(tmp_path):
    data = RNG.standard_normal((5, 4, 3)).astype(np.float32)
    g = GraphBuilder(x=data, idx=i64([[4, 0], [-1, 2], [1, -5]]), idx32=np.int32([2, 0, 2, -3]))
    g.node("Gather", ["x", i64([0, 2, 4])])
    g.node("Gather", ["x", i64([-1, -2])], axis=1)
    g.node("Gather", ["x", i64(2)], axis=2)  # scalar index removes the axis
    g.node("Gather", ["x", i64([[0, 1], [3, 3]])], axis=-2)
    g.node("Gather", ["x", "idx"])  # run-time indices, negative ones too
    g.node("Gather", ["x", "idx32"], axis=1)
    g.node("Gather", ["x", "idx32"], axis=-3)
    g.node("Gather", [np.arange(10, dtype=np.int64) * 3, "idx32"])
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset, tmp_path):
    x = RNG.standard_normal((1, 3, 1, 4, 1)).astype(np.float32)
    g = GraphBuilder(x=x)

    def axes_node(op, axes):
        if opset < 13:
            return g.node(op, ["x"], axes=axes)
        return g.node(op, ["x", i64(axes)])
    axes_node("Squeeze", [0])
    axes_node("Squeeze", [0, -1])
    axes_node("Squeeze", [2, 4, 0])
    g.node("Squeeze", ["x"])  # every unit dim
    axes_node("Unsqueeze", [0])
    axes_node("Unsqueeze", [-1])
    axes_node("Unsqueeze", [1, 6])
    axes_node("Unsqueeze", [-2, 3])
    check_op(g.model(opset), g.feeds, tmp_path, **EXACT)


def test_squeeze_of_non_unit_dim_is_refused(tmp_path):
    g = GraphBuilder(x=X)
    g.node("Squeeze", ["x", i64([1])])
    with pytest.raises(ModelError, match="is not 1"):
        compile_and_run(g.model(13), g.feeds, tmp_path)


@pytest.mark.parametrize("opset", [7, 10, 12, 13])
def test_identity_dropout(opset, tmp_path):
    g = GraphBuilder(x=X)
    g.node("Identity", ["x"])
    if opset < 12:
        g.node("Dropout", ["x"], ratio=0.3)
    else:
        g.node("Dropout", ["x", np.float32(0.3)])
        g.node("Dropout", ["x", np.float32(0.5), np.bool_(False)])
    g.node("Dropout", ["x"], outputs=2)  # the mask output: constant in inference
    check_op(g.model(opset), g.feeds, tmp_path, **EXACT)
    if opset == 13:  # without graph optimizations the Dropouts stay: copy and fill kernels
        check_op(g.model(opset), g.feeds, tmp_path / "O0", opt_level=0, **EXACT)


def test_constant(tmp_path):
    t = helper.make_tensor("t", TensorProto.FLOAT, [2, 3], RNG.standard_normal(6).tolist())
    g = GraphBuilder(x=RNG.standard_normal((2, 3)).astype(np.float32))
    c = g.node("Constant", [], value=t)
    g.node("Add", ["x", c])
    g.node("Constant", [], value_float=2.5)
    g.node("Constant", [], value_floats=[1.0, -2.0, 3.5])
    g.node("Constant", [], value_int=7)
    g.node("Constant", [], value_ints=[1, 2, -3])
    f = g.node("Constant", [], value_float=-1.5, output=False)
    g.node("Mul", ["x", f])
    ti = helper.make_tensor("ti", TensorProto.INT32, [3], [4, 5, 6])
    g.node("Constant", [], value=ti)
    check_op(g.model(13), g.feeds, tmp_path, **EXACT)


def test_shape(tmp_path):
    g = GraphBuilder(x=X)
    g.node("Shape", ["x"])
    for start, end in [(1, None), (0, 2), (-2, None), (1, -1), (-3, -1), (-100, 100)]:
        g.node("Shape", ["x"], start=start, **({} if end is None else {"end": end}))
    # shape arithmetic feeding a Reshape (folded at compile time)
    s = g.node("Shape", ["x"], output=False)
    two = g.node("Gather", [s, i64([0, 1])], output=False)
    g.node("Reshape", ["x", g.node("Concat", [two, i64([-1])], axis=0, output=False)])
    check_op(g.model(15), g.feeds, tmp_path, **EXACT)
