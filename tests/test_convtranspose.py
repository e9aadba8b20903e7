"""ConvTranspose: single-node models compiled, linked and run, compared with onnxruntime (every
attribute: strides, pads, dilations, group, output_padding, output_shape, auto_pad, kernel_shape,
1-D/2-D/3-D, with and without bias) and with the op's numpy reference."""
import numpy as np
import pytest

from util import check_against_onnxruntime, make_model, reference_of

RNG = np.random.default_rng(7)


def _case(x_shape, w_shape, bias=True, **attrs):
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    inits = {"W": w}
    if bias:
        inits["B"] = RNG.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(np.float32)
    return make_model("ConvTranspose", {"X": x}, attrs=attrs, initializers=inits, opset=17), {"X": x}


CASES = {
    "basic": ((1, 2, 5, 5), (2, 3, 3, 3), True, {}),
    "no_bias": ((1, 2, 4, 5), (2, 3, 3, 2), False, {}),
    "stride2_pads": ((2, 3, 4, 4), (3, 2, 3, 3), True, {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    "stride_dilation": ((1, 2, 4, 3), (2, 2, 3, 2), True, {"strides": [3, 2], "dilations": [2, 3]}),
    "output_padding": ((1, 2, 3, 3), (2, 2, 3, 3), True,
                       {"strides": [2, 3], "output_padding": [1, 2], "pads": [1, 1, 0, 1]}),
    "group": ((1, 4, 4, 4), (4, 3, 2, 2), True, {"group": 2, "strides": [2, 2]}),
    "depthwise": ((1, 3, 5, 4), (3, 1, 3, 3), True, {"group": 3, "pads": [1, 1, 1, 1]}),
    "output_shape": ((1, 2, 3, 3), (2, 2, 3, 3), True, {"strides": [2, 2], "output_shape": [8, 7]}),
    "output_shape_odd_pad": ((1, 1, 4, 4), (1, 1, 3, 3), True, {"strides": [2, 2], "output_shape": [8, 8]}),
    "same_upper": ((1, 2, 3, 4), (2, 2, 3, 3), True, {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 2, 3, 4), (2, 2, 4, 3), True, {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "valid": ((1, 2, 3, 3), (2, 2, 2, 2), True, {"strides": [2, 2], "auto_pad": "VALID"}),
    "kernel_shape_attr": ((1, 2, 3, 3), (2, 1, 2, 3), True, {"kernel_shape": [2, 3]}),
    "conv1d": ((2, 3, 7), (3, 4, 3), True, {"strides": [2], "pads": [1, 2]}),
    "conv3d": ((1, 2, 3, 3, 2), (2, 2, 2, 3, 2), True, {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 0, 1]}),
    "wide_kernel": ((1, 1, 2, 20), (1, 2, 1, 18), True, {"strides": [1, 2], "pads": [0, 3, 0, 4]}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_convtranspose_matches_onnxruntime(case, tmp_path):
    x_shape, w_shape, bias, attrs = CASES[case]
    model, feeds = _case(x_shape, w_shape, bias, **attrs)
    got, expected = check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4)
    ref = reference_of(model, feeds)
    np.testing.assert_allclose(ref[0], expected[0], rtol=1e-4, atol=1e-4)


def test_convtranspose_bad_weight_is_model_error(tmp_path):
    from glowpy.errors import ModelError
    import glowpy
    model, _ = _case((1, 3, 4, 4), (2, 2, 3, 3))
    import onnx
    p = tmp_path / "m.onnx"
    onnx.save(model, p)
    with pytest.raises(ModelError, match="weight shape"):
        glowpy.compile(str(p), str(tmp_path / "b"))
