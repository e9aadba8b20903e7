"""Compiling part of a model: -model-outputs and -model-inputs (glowpy/frontend/onnx_cut.py).

A detector whose post-processing is data-dependent (NonZero) is refused with the way around
it, and compiles up to its raw boxes and scores with -model-outputs; a model whose first node
glowpy cannot compile compiles from that node's output with -model-inputs; both match
onnxruntime on the same tensors. The CLI end to end, and each misuse as one usage line."""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowpy
from glowpy.errors import ModelError, UsageError
from util import compile_and_run, run_onnxruntime

RNG = np.random.default_rng(7)


def _detector():
    """x -> Conv -> boxes [1,4,16], scores [1,16] -> NonZero(scores > 0.5) -> Gather boxes."""
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32) * 0.3
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["feat"], pads=[1, 1, 1, 1], name="head"),
        helper.make_node("Reshape", ["feat", "shape"], ["flat"], name="flatten"),
        helper.make_node("Split", ["flat", "split"], ["boxes", "logits"], axis=1, name="split"),
        helper.make_node("Sigmoid", ["logits"], ["scores3"], name="sigmoid"),
        helper.make_node("Squeeze", ["scores3", "one"], ["scores"], name="squeeze"),
        helper.make_node("Greater", ["scores", "thr"], ["keep"], name="threshold"),
        helper.make_node("NonZero", ["keep"], ["idx"], name="nonzero"),
        helper.make_node("Gather", ["boxes", "idx_last"], ["picked"], axis=2, name="pick"),
        helper.make_node("Gather", ["idx", "col"], ["idx_last"], axis=0, name="idx_column"),
    ]
    # (keep the node list topological: the index column before the Gather that uses it)
    nodes[-2], nodes[-1] = nodes[-1], nodes[-2]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([1, 5, 16], np.int64), "shape"),
             numpy_helper.from_array(np.array([4, 1], np.int64), "split"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array(1, np.int64), "col"),
             numpy_helper.from_array(np.float32(0.5), "thr")]
    g = helper.make_graph(nodes, "detector",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("picked", TensorProto.FLOAT, None)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _with_outputs(model, names):
    """The same model with `names` as its outputs (onnxruntime's view of the same tensors)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.output[:]
    m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
    return m


def _save(model, tmp_path, name="m.onnx"):
    p = str(tmp_path / name)
    onnx.save(model, p)
    return p


def test_data_dependent_op_is_refused_with_the_way_around(tmp_path):
    with pytest.raises(ModelError) as e:
        glowpy.compile(_save(_detector(), tmp_path), str(tmp_path / "out"))
    msg = str(e.value)
    assert "nonzero" in msg and "data-dependent" in msg and "-model-outputs" in msg, msg
    assert not os.path.exists(tmp_path / "out")


def test_model_outputs_compiles_up_to_raw_boxes_and_scores(tmp_path):
    model = _detector()
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    want = run_onnxruntime(_with_outputs(model, ["boxes", "scores"]), {"x": x})
    got = compile_and_run(model, {"x": x}, str(tmp_path / "out"),
                          model_outputs=["boxes", "scores"])
    assert [g.shape for g in got] == [(1, 4, 16), (1, 16)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _preprocessed():
    """An op of a custom domain first (glowpy cannot compile it), then a small network."""
    w = RNG.standard_normal((8, 6)).astype(np.float32)
    nodes = [helper.make_node("Decode", ["raw"], ["pixels"], domain="vendor.io", name="decode"),
             helper.make_node("MatMul", ["pixels", "w"], ["h"], name="fc"),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    g = helper.make_graph(
        nodes, "pre", [helper.make_tensor_value_info("raw", TensorProto.UINT8, [2, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [numpy_helper.from_array(w, "w")],
        value_info=[helper.make_tensor_value_info("pixels", TensorProto.FLOAT, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("vendor.io", 1)])
    m.ir_version = 8
    return m


def test_model_inputs_starts_after_an_op_glowpy_cannot_compile(tmp_path):
    model = _preprocessed()
    with pytest.raises(ModelError, match="vendor.io.Decode"):
        glowpy.compile(_save(model, tmp_path), str(tmp_path / "refused"))
    pixels = RNG.standard_normal((2, 8)).astype(np.float32)
    got = compile_and_run(model, {"pixels": pixels}, str(tmp_path / "out"), cut_inputs=["pixels"])
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(got[0], np.maximum(pixels @ w, 0), rtol=1e-5, atol=1e-5)


def test_cut_input_type_from_shape_inference_or_model_input(tmp_path):
    from glowpy.frontend.onnx import InputSpec  # noqa: F401  (the -model-input form)
    from glowpy.cli import parse_model_input
    model = _preprocessed()
    del model.graph.value_info[:]  # no value_info: onnx cannot infer past the vendor op
    with pytest.raises(UsageError, match=r"give them with -model-input=pixels,float"):
        glowpy.compile(_save(model, tmp_path), str(tmp_path / "o1"), cut_inputs=["pixels"])
    pixels = RNG.standard_normal((2, 8)).astype(np.float32)
    got = compile_and_run(model, {"pixels": pixels}, str(tmp_path / "o2"), cut_inputs=["pixels"],
                          model_inputs=[parse_model_input("pixels,float,[2,8]")])
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(got[0], np.maximum(pixels @ w, 0), rtol=1e-5, atol=1e-5)
    # a standard op before the cut: onnx's shape inference gives the type
    m2 = _detector()
    feat = RNG.standard_normal((1, 5, 4, 4)).astype(np.float32)
    want = run_onnxruntime(_with_outputs(m2, ["scores"]), {"x": np.zeros((1, 3, 4, 4), np.float32)})
    got = compile_and_run(m2, {"feat": feat}, str(tmp_path / "o3"), cut_inputs=["feat"],
                          model_outputs=["scores"])
    ref = 1 / (1 + np.exp(-feat.reshape(1, 5, 16)[:, 4]))
    assert want[0].shape == got[0].shape == (1, 16)
    np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("outputs,inputs,message", [
    (["nope"], [], "-model-outputs: 'nope' is no tensor of the model's main graph"),
    (["x"], [], "-model-outputs: 'x' is a graph input of the model's main graph"),
    (["boxes", "boxes"], [], "-model-outputs: 'boxes' is given more than once"),
    ([""], [], "-model-outputs: an empty tensor name"),
    (["scores"], ["boxes"], "-model-inputs: the outputs do not depend on 'boxes'"),
    (["scores"], ["scores"], "-model-inputs and -model-outputs both name 'scores'"),
])
def test_misuse_is_one_usage_line(tmp_path, outputs, inputs, message):
    with pytest.raises(UsageError) as e:
        glowpy.compile(_save(_detector(), tmp_path), str(tmp_path / "out"),
                       model_outputs=outputs, cut_inputs=inputs)
    assert str(e.value).startswith(message), str(e.value)
    assert not os.path.exists(tmp_path / "out")


def test_cli_model_outputs(tmp_path):
    path = _save(_detector(), tmp_path)
    exe = [sys.executable, "-c", "from glowpy.cli import main; main()"]
    r = subprocess.run(exe + [f"-model={path}", f"-emit-bundle={tmp_path}/o",
                              "-model-outputs=boxes,scores"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    header = open(tmp_path / "o" / "m.h").read()
    assert "M_boxes" in header and "M_scores" in header and "picked" not in header
    r = subprocess.run(exe + [f"-model={path}", f"-emit-bundle={tmp_path}/o2",
                              "-model-outputs=nope"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["model-compiler: error: -model-outputs: 'nope' is no tensor "
                                     "of the model's main graph; name tensors that nodes of the "
                                     "main graph compute"]
