"""Whole Caffe2 models built from ONNX originals (tests/caffe2_models.py, through glowpy's own
Caffe2 schema): a LeNet-MNIST on mnist8's weights and mlperf_tiny_resnet8. In each model form
(directory, binary .pb pair, text .pbtxt pair) the bundle, linked into a -Wall -Werror harness,
reproduces onnxruntime's output on the ONNX original for every reference input."""
import numpy as np
import onnx
import pytest

import glowpy
from caffe2_models import lenet_mnist, resnet8, write_model
from glowpy.frontend.onnx import InputSpec
from glowpy.runtime import Bundle
from util import assert_close_to_reference, model_path, reference_data, run_onnxruntime

MODELS = {"lenet": (lenet_mnist, "mnist8", "data", "fc3"),
          "resnet8": (resnet8, "mlperf_tiny_resnet8", "input_1", "Identity")}


@pytest.mark.parametrize("form", ["dir", "pb", "pbtxt"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_caffe2_model_matches_onnxruntime(name, form, tmp_path):
    build, onnx_name, input_name, output_name = MODELS[name]
    predict, init = build()
    paths = write_model(predict, init, form, str(tmp_path / name))
    original = onnx.load(model_path(onnx_name))
    x0 = reference_data(onnx_name)[0][0]
    info = glowpy.compile(paths if len(paths) > 1 else paths[0], str(tmp_path / "bundle"),
                          model_inputs=[InputSpec(input_name, np.dtype(np.float32), x0.shape)])
    assert [p["name"] for p in info.inputs] == [input_name]
    bundle = Bundle(str(tmp_path / "bundle"), info.name)
    for k in range(3):
        x = reference_data(onnx_name, k)[0][0]
        expected = run_onnxruntime(original, {original.graph.input[0].name: x})[0]
        got = bundle.run({input_name: x})
        assert_close_to_reference(got[output_name], expected, False, f"{name}/{form}/set{k}")
        if name == "lenet":  # the second output: softmax of the logits
            e = np.exp(expected.astype(np.float64) - expected.max())
            np.testing.assert_allclose(got["softmax"], e / e.sum(), atol=1e-6)
