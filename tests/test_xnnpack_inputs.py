"""The input rewrites benchmarks/xnnpack.py makes before onnx2tf converts a model (the
converter itself, TensorFlow, is not installed for the tests): each leaves the model computing
the same numbers in onnxruntime, and has the form onnx2tf needs."""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from util import run_onnxruntime

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import xnnpack  # noqa: E402


def _mnist_like():
    """mnist8's two patterns: a weight reshaped by a Reshape node, and a rank-3 bias (C, 1, 1)
    added to a 4-D Conv output."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8 * 9,)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w_flat"),
             numpy_helper.from_array(np.array([8, 1, 3, 3], np.int64), "w_shape"),
             numpy_helper.from_array(rng.standard_normal((8, 1, 1)).astype(np.float32), "bias")]
    nodes = [helper.make_node("Reshape", ["w_flat", "w_shape"], ["w"]),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c", "bias"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", 1, [1, 1, 6, 6])],
                          [helper.make_tensor_value_info("y", 1, [1, 8, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    return m, {"x": rng.standard_normal((1, 1, 6, 6)).astype(np.float32)}


def test_fold_constants_and_explicit_ranks_keep_the_numbers():
    model, feeds = _mnist_like()
    want = run_onnxruntime(model, feeds)[0]
    folded = xnnpack.fold_constants(onnx.load_from_string(model.SerializeToString()))
    assert [n.op_type for n in folded.graph.node] == ["Conv", "Add"]
    assert {i.name: list(i.dims) for i in folded.graph.initializer} == \
        {"w": [8, 1, 3, 3], "bias": [8, 1, 1]}  # the reshape's inputs are gone
    ranked = xnnpack.explicit_ranks(folded, xnnpack.ranks_of(folded, feeds))
    assert {i.name: list(i.dims) for i in ranked.graph.initializer}["bias"] == [1, 8, 1, 1]
    onnx.checker.check_model(ranked)
    got = run_onnxruntime(ranked, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_fold_constants_ir3_lists_initializers_as_inputs():
    """IR 3 (mnist8 as shipped): every initializer is also a graph input. The folded model
    keeps that form (the reshaped weight listed, its dropped operands not), so onnxruntime
    asks for no input but x and computes the same numbers."""
    model, feeds = _mnist_like()
    g = model.graph
    g.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                   for t in g.initializer)
    model.ir_version = 3
    want = run_onnxruntime(model, feeds)[0]
    folded = xnnpack.fold_constants(onnx.load_from_string(model.SerializeToString()))
    assert sorted(i.name for i in folded.graph.input) == ["bias", "w", "x"]
    ranked = xnnpack.explicit_ranks(folded, xnnpack.ranks_of(folded, feeds))
    onnx.checker.check_model(ranked)
    np.testing.assert_allclose(run_onnxruntime(ranked, feeds)[0], want, rtol=0, atol=1e-6)


def test_a_shared_constant_keeps_its_rank():
    """A constant read by another node as well keeps its shape (its other reader may not
    broadcast)."""
    model, feeds = _mnist_like()
    model.graph.node.append(helper.make_node("Identity", ["bias"], ["b_out"]))
    model.graph.output.append(helper.make_tensor_value_info("b_out", 1, [8, 1, 1]))
    ranked = xnnpack.explicit_ranks(model, xnnpack.ranks_of(model, feeds))
    assert {i.name: list(i.dims) for i in ranked.graph.initializer}["bias"] == [8, 1, 1]


def test_layouts_try_onnx_then_channels_last():
    assert xnnpack.layouts(4)[:2] == [(0, 1, 2, 3), (0, 2, 3, 1)]
    assert xnnpack.layouts(3)[:2] == [(0, 1, 2), (0, 2, 1)]
    assert xnnpack.layouts(2) == [(0, 1), (1, 0)]
    x = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    nhwc = x.transpose(xnnpack.layouts(4)[1])
    assert nhwc.shape == (1, 3, 4, 2)
    np.testing.assert_array_equal(nhwc.transpose(np.argsort(xnnpack.layouts(4)[1])), x)
