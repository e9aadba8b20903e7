"""DeformConv (opset 19, glowpy/ir/ops/deform.py: GridSample and MatMul) against onnxruntime
and glowpy's numpy reference (rtol 1e-5, atol 1e-5: float32 sums in another order): strides,
dilations, pads, groups, offset groups, the DCNv2 mask, no bias, a dim of size 1, offsets far
outside the input; NaN and infinite offsets against the reference (onnxruntime's results for
them differ by version); what is refused."""
import zlib

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from hostile import refused
from util import compile_and_run, reference_of, run_onnxruntime

RNG = np.random.default_rng(19)


@pytest.fixture(autouse=True)
def _data_of_its_own(request):
    """Each test draws its data from a seed of its own name, whatever order pytest-xdist runs
    the tests in."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def deform_model(n=1, c=4, hw=(7, 9), oc=6, k=(3, 3), s=(1, 1), d=(1, 1), p=(1, 1, 1, 1),
                 group=1, og=1, bias=True, mask=True, scale=2.0):
    """A DeformConv with W (and B) as initializers and X, offset (and mask) fed: (model, feeds)."""
    out = [(hw[i] + p[i] + p[i + 2] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(2)]
    feeds = {"x": RNG.standard_normal((n, c, *hw)).astype(np.float32),
             "off": (RNG.standard_normal((n, og * k[0] * k[1] * 2, *out)) * scale)
             .astype(np.float32)}
    inits = [numpy_helper.from_array(RNG.standard_normal((oc, c // group, *k))
                                     .astype(np.float32), "w")]
    ins = ["x", "w", "off"]
    if bias:
        inits.append(numpy_helper.from_array(RNG.standard_normal(oc).astype(np.float32), "b"))
    if bias or mask:
        ins.append("b" if bias else "")
    if mask:
        feeds["m"] = RNG.random((n, og * k[0] * k[1], *out)).astype(np.float32)
        ins.append("m")
    node = helper.make_node("DeformConv", ins, ["y"], kernel_shape=list(k), strides=list(s),
                            dilations=list(d), pads=list(p), group=group, offset_group=og)
    g = helper.make_graph([node], "deform", [helper.make_tensor_value_info(
        name, TensorProto.FLOAT, a.shape) for name, a in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]), feeds


CASES = {"basic": {}, "strides": {"s": (2, 2)}, "dilations": {"d": (2, 1)},
         "groups": {"group": 2, "og": 2}, "offset_groups_no_mask": {"og": 4, "mask": False},
         "no_bias": {"bias": False}, "no_pads": {"p": (0, 0, 0, 0), "k": (2, 3)},
         "height_1": {"hw": (1, 5), "k": (1, 3), "p": (0, 1, 0, 1)},
         "batch_far_offsets": {"n": 2, "scale": 10.0}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_deform_conv_matches_onnxruntime(case, tmp_path):
    model, feeds = deform_model(**CASES[case])
    got = compile_and_run(model, feeds, tmp_path)[0]
    want = run_onnxruntime(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(reference_of(model, feeds)[0], want, rtol=1e-5, atol=1e-5)


def test_deform_conv_non_finite_offsets_sample_zero(tmp_path):
    """NaN, infinite and 1e30 offsets: those taps sample 0 (GridSample's zeros padding), the
    bundle equals the reference, and the outputs stay finite."""
    model, feeds = deform_model(mask=False)
    off = feeds["off"]
    off[0, 0, 0, :4] = [np.nan, np.inf, -np.inf, 1e30]
    off[0, 3, 2, :3] = [np.nan, -1e30, 3e38]
    got = compile_and_run(model, feeds, tmp_path)[0]
    ref = reference_of(model, feeds)[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, fix", [
    ({"w": (6, 4, 3, 3, 3)}, "the 2-D form"),
    ({"off": (1, 16, 7, 9)}, "offset is [1, 16, 7, 9]; it must be [1, 18, 7, 9]"),
    ({"attrs": {"offset_group": 3}}, "offset_group 3 for X's 4 channels"),
])
def test_bad_deform_conv_is_refused(change, fix, capsys, tmp_path):
    shapes = {"x": (1, 4, 7, 9), "w": (6, 4, 3, 3), "off": (1, 18, 7, 9)}
    shapes.update({k: v for k, v in change.items() if k != "attrs"})
    attrs = {"pads": [1] * 4, **change.get("attrs", {})}
    g = helper.make_graph(
        [helper.make_node("DeformConv", ["x", "w", "off"], ["y"], **attrs)], "bad",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    msg = refused(capsys, tmp_path, helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)]))
    assert msg.startswith("node 'y' (DeformConv): ") and fix in msg, msg
