"""ONNX ops glowpy writes as compositions of existing ops (glowpy/ir/ops/composite_std.py and
composite_signal.py),
compiled through the real compile -> link -> run path and compared with onnxruntime.
Tolerance: 1e-4 relative + 1e-5 absolute (exp/sigmoid/sqrt approximations differ from MLAS's by
a few ulp; the normalizations sum in a different order); CastLike exactly."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.util import check_against_onnxruntime, make_model

RNG = np.random.default_rng(24)
X = (RNG.standard_normal((2, 3, 4, 5)) * 2).astype(np.float32)


@pytest.mark.parametrize("op,attrs,opset", [
    ("Swish", {}, 24), ("Swish", {"alpha": 0.5}, 24),
    ("Celu", {}, 17), ("Celu", {"alpha": 2.0}, 17),
    ("ThresholdedRelu", {}, 17), ("ThresholdedRelu", {"alpha": 0.3}, 17),
    ("Shrink", {}, 17), ("Shrink", {"bias": 1.5, "lambd": 1.0}, 17),
    ("LpNormalization", {}, 17), ("LpNormalization", {"axis": 1, "p": 1}, 17),
    ("MeanVarianceNormalization", {}, 17), ("MeanVarianceNormalization", {"axes": [1, 3]}, 17),
])
def test_unary_composites(op, attrs, opset, tmp_path):
    check_against_onnxruntime(make_model(op, {"x": X}, attrs=attrs, opset=opset), {"x": X},
                              tmp_path)


@pytest.mark.parametrize("target", [np.int32, np.int64, np.float32])
def test_castlike(target, tmp_path):
    m = make_model("CastLike", {"x": X}, initializers={"t": np.zeros(1, target)}, opset=21)
    check_against_onnxruntime(m, {"x": X}, tmp_path)


@pytest.mark.parametrize("axis,eps", [(-1, 1e-5), (2, 1e-3)])
def test_rms_normalization(axis, eps, tmp_path):
    scale = RNG.standard_normal(X.shape[axis:]).astype(np.float32)
    m = make_model("RMSNormalization", {"x": X}, initializers={"s": scale},
                   attrs={"axis": axis, "epsilon": eps}, opset=23)
    check_against_onnxruntime(m, {"x": X}, tmp_path)


@pytest.mark.parametrize("groups,per_group,opset", [(3, False, 21), (1, False, 21), (6, False, 21),
                                                    (3, True, 18), (2, True, 18)])
def test_group_normalization(groups, per_group, opset, tmp_path):
    x = (RNG.standard_normal((2, 6, 4, 5)) * 3 + 1).astype(np.float32)
    n = groups if per_group else 6
    inits = {"s": RNG.standard_normal(n).astype(np.float32),
             "b": RNG.standard_normal(n).astype(np.float32)}
    m = make_model("GroupNormalization", {"x": x}, initializers=inits,
                   attrs={"num_groups": groups, "epsilon": 1e-3}, opset=opset)
    check_against_onnxruntime(m, {"x": x}, tmp_path)


@pytest.mark.parametrize("op", ["Sinh", "Cosh", "Tan"])
def test_trig_composites(op, tmp_path):
    # normal ranges, with values near 0 (where Sinh's exponentials cancel) and beyond |x| = 0.5
    x = np.concatenate([np.linspace(-4, 4, 161), RNG.uniform(-1e-3, 1e-3, 39)]).astype(np.float32)
    if op == "Tan":
        x = np.clip(x, -1.4, 1.4)  # away from the poles at +-pi/2
    check_against_onnxruntime(make_model(op, {"x": x}), {"x": x}, tmp_path, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic, tmp_path):
    # the window folds to a constant; added to a graph input so the bundle computes something
    x = RNG.standard_normal(10).astype(np.float32)
    m = make_model(op, {}, outputs=["w"], initializers={"n": np.asarray(10, np.int64)},
                   attrs={"periodic": periodic}, opset=17)
    m.graph.node.append(onnx.helper.make_node("Add", ["w", "x"], ["y"]))
    m.graph.input.append(onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [10]))
    del m.graph.output[:]
    m.graph.output.append(onnx.helper.make_empty_tensor_value_info("y"))
    check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_hardmax(axis, tmp_path):
    x = RNG.integers(-3, 3, (3, 4, 5)).astype(np.float32)  # ties: the first maximum wins
    check_against_onnxruntime(make_model("Hardmax", {"x": x}, attrs={"axis": axis}, opset=13),
                              {"x": x}, tmp_path)


@pytest.mark.parametrize("p", [1, 2])
def test_global_lp_pool(p, tmp_path):
    check_against_onnxruntime(make_model("GlobalLpPool", {"x": X}, attrs={"p": p}), {"x": X},
                              tmp_path)


@pytest.mark.parametrize("attrs, opset", [
    ({"p": 2, "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 11),
    ({"p": 1, "kernel_shape": [2, 3]}, 11),
    ({"p": 3, "kernel_shape": [3, 2], "auto_pad": "SAME_UPPER"}, 11),
    ({"p": 2, "kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, 18),
    ({"p": 2, "kernel_shape": [2, 2], "dilations": [2, 1]}, 18),
])
def test_lp_pool(attrs, opset, tmp_path):
    """LpPool as an AveragePool of |x|^p times its window sizes: padding, SAME, ceil_mode's
    short windows, dilations, p = 1, 2, 3."""
    check_against_onnxruntime(make_model("LpPool", {"x": X}, attrs=attrs, opset=opset),
                              {"x": X}, tmp_path)


@pytest.mark.parametrize("time_axis", [0, 1])
def test_reverse_sequence(time_axis, tmp_path):
    """Lengths from 0 to the whole axis, known at run time; int32 data too."""
    x = RNG.standard_normal((6, 4, 3) if time_axis == 0 else (4, 6, 3)).astype(np.float32)
    lens = np.array([6, 0, 3, 1], np.int64)
    attrs = {"time_axis": time_axis, "batch_axis": 1 - time_axis}
    m = make_model("ReverseSequence", {"x": x, "lens": lens}, attrs=attrs, opset=10)
    check_against_onnxruntime(m, {"x": x, "lens": lens}, tmp_path / "f")
    xi = (x * 100).astype(np.int32)
    m = make_model("ReverseSequence", {"x": xi, "lens": lens}, attrs=attrs, opset=10)
    check_against_onnxruntime(m, {"x": xi, "lens": lens}, tmp_path / "i")


@pytest.mark.parametrize("shape, axes", [([2, 5, 2, 8], None), ([6, 3], [1, 3]),
                                         ([1, 7], [-2, -1])])
def test_center_crop_pad(shape, axes, tmp_path):
    """Crops and pads of odd and even differences, on every axis or the named ones."""
    m = make_model("CenterCropPad", {"x": X}, initializers={"s": np.array(shape, np.int64)},
                   attrs={} if axes is None else {"axes": axes}, opset=18)
    check_against_onnxruntime(m, {"x": X}, tmp_path)


@pytest.mark.parametrize("op, attrs, domain, want", [
    ("MeanVarianceNormalization", {"axes": [0, 7]}, "",
     "node 'y' (MeanVarianceNormalization), in its ReduceMean: axis 7 is out of range for rank 4"),
    ("FusedConv", {"kernel_shape": [3, 3], "strides": [0, 1]}, "com.microsoft",
     "node 'y' (com.microsoft.FusedConv), in its Conv: kernel_shape, strides and dilations "
     "must be >= 1"),
])
def test_errors_inside_an_expansion_name_the_models_node(op, attrs, domain, want, capsys,
                                                         tmp_path):
    """A composite's expansion names its nodes '<node>/<tag>'; an error one of them raises is
    the model node's one line, with the inner op named."""
    from onnx import TensorProto, helper
    from hostile import refused
    ins = ["x"] + (["w"] if op == "FusedConv" else [])
    inits = [onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")] \
        if op == "FusedConv" else []
    g = helper.make_graph([helper.make_node(op, ins, ["y"], domain=domain, **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    assert refused(capsys, tmp_path, helper.make_model(g, opset_imports=opsets)) == want
