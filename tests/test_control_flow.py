"""If, Loop and Scan (glowpy/frontend/onnx_control.py): compiled bundles against onnxruntime,
the graph they leave behind (no control-flow node, folded branches), and the refusals."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from glowpy.errors import ModelError
from glowpy.frontend.onnx import load_onnx
from tests.util import check_against_onnxruntime

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "cf", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs],
                          list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _branch(name, nodes, outputs, inits=()):
    return helper.make_graph(nodes, name, [], [helper.make_empty_tensor_value_info(o) for o in outputs],
                             list(inits))


def _load(model, tmp_path):
    p = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, p)
    return load_onnx(p)


def _const(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _shape_check_if(cond_node):
    """x [2,3]: if <cond> then (x * w_outer + t) else (x - 1); both branches name an internal
    tensor 't' and the outer graph names one 't' too (after the If); the then branch holds a
    nested If on a constant that reads the outer 'x'."""
    inner = helper.make_node("If", ["true_c"], ["t_inner"], then_branch=_branch(
        "inner_then", [helper.make_node("Mul", ["x", "two"], ["u"])], ["u"], [_const("two", np.float32(2))]),
        else_branch=_branch("inner_else", [helper.make_node("Neg", ["x"], ["u"])], ["u"]))
    then = _branch("then", [inner, helper.make_node("Mul", ["x", "w"], ["t"]),
                            helper.make_node("Add", ["t", "t_inner"], ["y"])], ["y"],
                   [_const("true_c", np.array(True))])
    other = _branch("else", [helper.make_node("Sub", ["x", "one"], ["t"]),
                             helper.make_node("Identity", ["t"], ["y"])], ["y"],
                    [_const("one", np.float32(1))])
    nodes = cond_node + [helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
                         helper.make_node("Relu", ["r"], ["t"]),
                         helper.make_node("Add", ["t", "x"], ["out"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])], ["out"],
                  [_const("w", np.full((2, 3), 0.5, np.float32))])


@pytest.mark.parametrize("taken", [True, False])
def test_if_constant_condition_inlines_branch(tmp_path, taken):
    # the condition folds: Shape(x)[0] == 2 is known at compile time
    target = 2 if taken else 5
    cond = [helper.make_node("Shape", ["x"], ["s"]),
            helper.make_node("Gather", ["s", "zero"], ["s0"], axis=0),
            helper.make_node("Equal", ["s0", "target"], ["c"])]
    m = _shape_check_if(cond)
    m.graph.initializer.extend([_const("zero", np.int64(0)), _const("target", np.int64(target))])
    g = _load(m, tmp_path)
    assert "If" not in g.op_counts() and "Where" not in g.op_counts()
    assert sorted(set(g.op_counts()) - {"Identity"}) == (["Add", "Mul", "Relu"] if taken
                                                         else ["Add", "Relu", "Sub"])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got, exp = check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-6, atol=1e-6)
    want = np.maximum(x * 0.5 + 2 * x, 0) + x if taken else np.maximum(x - 1, 0) + x
    np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)


def test_if_runtime_condition_selects(tmp_path):
    cond = [helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
            helper.make_node("Greater", ["sum", "zero"], ["c"])]
    m = _shape_check_if(cond)
    m.graph.initializer.append(_const("zero", np.float32(0)))
    g = _load(m, tmp_path)
    assert g.op_counts().get("Where") == 1 and "If" not in g.op_counts()
    rng = np.random.default_rng(1)
    for sign in (1, -1):  # both branches taken at run time
        x = (sign * np.abs(rng.standard_normal((2, 3)))).astype(np.float32)
        check_against_onnxruntime(m, {"x": x}, tmp_path / f"s{sign}", rtol=1e-6, atol=1e-6)


def test_if_runtime_condition_with_different_shapes_is_refused(tmp_path):
    then = _branch("then", [helper.make_node("Identity", ["x"], ["y"])], ["y"])
    other = _branch("else", [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)], ["y"])
    m = _model([helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
                helper.make_node("Greater", ["mx", "zero"], ["c"]),
                helper.make_node("If", ["c"], ["r"], name="post_if", then_branch=then, else_branch=other)],
               [helper.make_tensor_value_info("x", F, [4])], ["r"], [_const("zero", np.float32(0))])
    with pytest.raises(ModelError) as e:
        _load(m, tmp_path)
    msg = str(e.value)
    assert "'post_if'" in msg and "is data-dependent" in msg and "-model-outputs=c,x" in msg
    assert "\n" not in msg


def test_unsupported_ops_inside_subgraphs_are_listed(tmp_path):
    then = _branch("then", [helper.make_node("Frobnicate", ["x"], ["y"])], ["y"])
    other = _branch("else", [helper.make_node("Wobble", ["x"], ["y"])], ["y"])
    m = _model([helper.make_node("Zap", ["x"], ["c"]),
                helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other)],
               [helper.make_tensor_value_info("x", F, [4])], ["r"])
    with pytest.raises(ModelError, match=r"unsupported ops \(3 nodes\): Frobnicate x1 .*Wobble x1 .*Zap x1"):
        _load(m, tmp_path)


def _loop_model(trip, cond_node=None):
    """Loop: carried (acc [2,3], k int64); scan output acc*i per iteration; the body reads the
    outer 'w' and names a tensor 't' as the outer graph does."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F),
         helper.make_node("Mul", ["acc_in", "w"], ["t"]),
         helper.make_node("Add", ["t", "fi"], ["acc_out"]),
         helper.make_node("Add", ["k_in", "i"], ["k_out"]),
         helper.make_node("Mul", ["acc_out", "fi"], ["scan"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc_in", F, None),
                 helper.make_tensor_value_info("k_in", TensorProto.INT64, None)],
        [helper.make_empty_tensor_value_info(o) for o in ("cond_out", "acc_out", "k_out", "scan")])
    nodes = (cond_node or []) + [
        helper.make_node("Loop", ["M", "" if cond_node is None else "c", "x", "k0"],
                         ["acc", "k", "scans"], name="the_loop", body=body),
        helper.make_node("Relu", ["acc"], ["t"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])], ["t", "k", "scans"],
                  [_const("M", np.int64(trip)), _const("k0", np.int64(7)),
                   _const("w", np.float32(0.75))])


def test_loop_with_constant_trip_count_unrolls(tmp_path):
    m = _loop_model(4)
    g = _load(m, tmp_path)
    assert "Loop" not in g.op_counts() and g.op_counts()["Concat"] == 1
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    got, exp = check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-6, atol=1e-6)
    assert got[2].shape == (4, 2, 3) and int(got[1]) == 7 + 0 + 1 + 2 + 3


def test_loop_with_runtime_trip_count_is_refused(tmp_path):
    m = _loop_model(3)
    m.graph.initializer.pop(0)  # M becomes Shape-free run-time data
    m.graph.node.insert(0, helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0))
    m.graph.node.insert(1, helper.make_node("ReduceMax", ["am"], ["M"], keepdims=0))
    with pytest.raises(ModelError, match=r"'the_loop' \(Loop\): its trip count 'M' is data-dependent; "
                                         r"compile the model up to its inputs with -model-outputs=M"):
        _load(m, tmp_path)


def test_loop_too_long_to_unroll_is_refused(tmp_path):
    with pytest.raises(ModelError, match=r"unrolling stopped after 4097 iterations"):
        _load(_loop_model(10 ** 6), tmp_path)


def _scan_model():
    """Scan: one state (running sum [3]), two scan inputs (x [2,5,3] along axis 1 forward, z
    [3,5] along axis 1 reversed); outputs the running sums along axis 0 forward and the
    products along axis 1 reversed."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "xt"], ["s_mid"]),
         helper.make_node("Mul", ["s_mid", "w"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["y1"]),
         helper.make_node("Mul", ["xt", "zt"], ["y2"])],
        "scan_body", [helper.make_tensor_value_info("s_in", F, [2, 3]),
                      helper.make_tensor_value_info("xt", F, [2, 3]),
                      helper.make_tensor_value_info("zt", F, [3])],
        [helper.make_empty_tensor_value_info(o) for o in ("s_out", "y1", "y2")])
    node = helper.make_node("Scan", ["s0", "x", "z"], ["s", "ys1", "ys2"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 1], scan_input_directions=[0, 1],
                            scan_output_axes=[0, -1], scan_output_directions=[0, 1])
    return _model([node], [helper.make_tensor_value_info("s0", F, [2, 3]),
                           helper.make_tensor_value_info("x", F, [2, 5, 3]),
                           helper.make_tensor_value_info("z", F, [3, 5])],
                  ["s", "ys1", "ys2"], [_const("w", np.float32(0.5))])


def test_scan_unrolls_with_axes_and_directions(tmp_path):
    m = _scan_model()
    assert "Scan" not in _load(m, tmp_path).op_counts()
    rng = np.random.default_rng(3)
    feeds = {"s0": rng.standard_normal((2, 3)).astype(np.float32),
             "x": rng.standard_normal((2, 5, 3)).astype(np.float32),
             "z": rng.standard_normal((3, 5)).astype(np.float32)}
    got, _ = check_against_onnxruntime(m, feeds, tmp_path, rtol=1e-6, atol=1e-6)
    assert got[1].shape == (5, 2, 3) and got[2].shape == (2, 3, 5)


def test_nested_loops_that_fold_are_bounded(tmp_path):
    """Loops nested three deep whose bodies fold (no node reaches the graph) would be 4096**3
    translations; the total translation budget refuses them quickly."""
    def body(d, nodes):
        return helper.make_graph(
            nodes, f"b{d}", [helper.make_tensor_value_info(f"i{d}", TensorProto.INT64, []),
                             helper.make_tensor_value_info(f"c{d}", TensorProto.BOOL, []),
                             helper.make_tensor_value_info(f"v{d}", TensorProto.INT64, [])],
            [helper.make_empty_tensor_value_info(o) for o in (f"c{d}", f"w{d}")])
    b3 = body(3, [helper.make_node("Add", ["v3", "i3"], ["w3"])])
    b2 = body(2, [helper.make_node("Loop", ["big", "", "v2"], ["w2"], body=b3)])
    b1 = body(1, [helper.make_node("Loop", ["big", "", "v1"], ["w1"], body=b2)])
    m = _model([helper.make_node("Loop", ["big", "", "zero"], ["out"], body=b1)], [], ["out"],
               [_const("big", np.int64(4096)), _const("zero", np.int64(0))])
    with pytest.raises(ModelError, match=r"unroll to more than 50000 nodes in all"):
        _load(m, tmp_path)
