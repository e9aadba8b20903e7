"""ConvTranspose: single-node models compiled, linked and run, compared with onnxruntime (every
attribute: strides, pads, dilations, group, output_padding, output_shape, auto_pad, kernel_shape,
1-D/2-D/3-D, with and without bias) and with the op's numpy reference, along each of its three
paths (glowpy/ir/passes/convtranspose.py): on a host the rewrites (stride 1 as a Conv, strided
as a 1x1 product + Col2Im, or, where those columns pass COL_GROWTH, a Conv per output phase
interleaved by DepthToSpace and cropped), with -activation-memory=min the scatter kernel for strided ones,
at -O0 the scatter kernel for all. Col2Im itself against onnxruntime."""
import json

import numpy as np
import pytest

from util import check_against_onnxruntime, make_model, reference_of

PATHS = {"host": {}, "memory_first": {"activation_memory": "min"}, "O0": {"opt_level": 0}}

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
    "tiles_exactly": ((2, 4, 5, 6), (4, 3, 2, 2), True, {"strides": [2, 2]}),
    "tiles_exactly_1d": ((1, 3, 7), (3, 5, 3), False, {"strides": [3]}),
    "pads_past_kernel": ((1, 2, 6, 6), (2, 2, 3, 3), True, {"pads": [3, 1, 2, 0]}),
    # columns past COL_GROWTH: one Conv per output phase (convtranspose._as_phase_conv)
    "phase_9x9s2": ((1, 4, 6, 7), (4, 2, 9, 9), True,
                    {"strides": [2, 2], "pads": [4, 4, 4, 4], "output_padding": [1, 1]}),  # FSRCNN
    "phase_9x9s3": ((2, 3, 5, 4), (3, 1, 9, 9), False,
                    {"strides": [3, 3], "pads": [4, 4, 4, 4], "output_padding": [2, 2]}),
    "phase_5x5s2": ((1, 3, 6, 5), (3, 4, 5, 5), True,
                    {"strides": [2, 2], "pads": [2, 2, 1, 1], "output_padding": [1, 1]}),
    "phase_7x5s23": ((1, 2, 4, 5), (2, 3, 7, 5), True, {"strides": [2, 3], "pads": [3, 1, 2, 2]}),
    "phase_output_shape": ((1, 2, 4, 4), (2, 2, 9, 9), True,
                           {"strides": [2, 2], "output_shape": [11, 12]}),
}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_convtranspose_matches_onnxruntime(case, path, tmp_path):
    x_shape, w_shape, bias, attrs = CASES[case]
    model, feeds = _case(x_shape, w_shape, bias, **attrs)
    got, expected = check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                                              **PATHS[path])
    if path == "host":
        ref = reference_of(model, feeds)
        np.testing.assert_allclose(ref[0], expected[0], rtol=1e-4, atol=1e-4)


def _kernels(case, tmp_path, **options):
    import glowpy
    import onnx
    x_shape, w_shape, bias, attrs = CASES[case]
    model, _ = _case(x_shape, w_shape, bias, **attrs)
    onnx.save(model, tmp_path / "m.onnx")
    report = tmp_path / "r.json"
    glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"), dump_memory_report=str(report),
                   **options)
    return [i["kernel"] for i in json.loads(report.read_text())["instructions"]]


@pytest.mark.parametrize("case, host, memory_first", [
    ("basic", ["Conv"], ["Conv"]),  # stride 1: a Conv everywhere
    ("depthwise", ["Conv"], ["Conv"]),  # grouped, padded
    ("stride2_pads", ["Conv", "Col2Im", "Add"], ["ConvTranspose"]),
    ("no_bias", ["Conv"], ["Conv"]),
    ("output_shape", ["Conv", "Col2Im", "Add"], ["ConvTranspose"]),
    ("group", ["ConvTranspose"], ["ConvTranspose"]),  # strided and grouped: the scatter kernel
    ("wide_kernel", ["Conv", "Transpose", "Slice"], ["ConvTranspose"]),  # columns 7x: phases
    ("phase_9x9s2", ["Conv", "DepthToSpace"], ["ConvTranspose"]),  # rows the crop keeps only
    ("phase_output_shape", ["Conv", "DepthToSpace", "Slice"], ["ConvTranspose"]),
    ("tiles_exactly", ["Conv", "Col2Im"], ["ConvTranspose"]),  # 2x2/2: the bias in the product
    ("pads_past_kernel", ["ConvTranspose"], ["ConvTranspose"]),  # no Conv pads that equal it
])
def test_paths(case, host, memory_first, tmp_path):
    """Which instructions each path compiles to (the Reshape between product and Col2Im is a
    view and costs no instruction)."""
    assert _kernels(case, tmp_path) == host
    assert _kernels(case, tmp_path, activation_memory="min") == memory_first


COL2IM = [  # (channels, image, block, strides, dilations, pads)
    (2, (5, 6), (2, 3), (1, 1), (1, 1), (0, 0, 0, 0)),
    (3, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, (10, 7), (2, 2), (2, 3), (2, 1), (1, 0, 2, 1)),
    (4, (11,), (3,), (2,), (1,), (1, 0)),
]


@pytest.mark.parametrize("c, image, block, strides, dilations, pads", COL2IM)
def test_col2im_matches_onnxruntime(c, image, block, strides, dilations, pads, tmp_path):
    n = len(image)
    grid = [(i + pads[d] + pads[n + d] - dl * (k - 1) - 1) // s + 1
            for d, (i, k, s, dl) in enumerate(zip(image, block, strides, dilations))]
    x = RNG.standard_normal((2, c * int(np.prod(block)), int(np.prod(grid)))).astype(np.float32)
    model = make_model("Col2Im", {"x": x}, attrs=dict(strides=list(strides), pads=list(pads),
                                                     dilations=list(dilations)),
                       initializers={"img": np.array(image, np.int64),
                                     "blk": np.array(block, np.int64)}, opset=18)
    got, expected = check_against_onnxruntime(model, {"x": x}, tmp_path, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(reference_of(model, {"x": x})[0], expected[0], rtol=1e-5,
                               atol=1e-5)


def test_col2im_bad_grid_is_model_error(tmp_path):
    from glowpy.errors import ModelError
    import glowpy
    import onnx
    x = np.zeros((1, 8, 5), np.float32)  # 2x2 blocks over 4x4 at stride 2 make 4, not 5
    model = make_model("Col2Im", {"x": x}, attrs=dict(strides=[2, 2]),
                       initializers={"img": np.array([4, 4], np.int64),
                                     "blk": np.array([2, 2], np.int64)}, opset=18)
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=r"Col2Im.*must be \[N, C\*4, 4\]"):
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"))


def test_convtranspose_bad_weight_is_model_error(tmp_path):
    from glowpy.errors import ModelError
    import glowpy
    model, _ = _case((1, 3, 4, 4), (2, 2, 3, 3))
    import onnx
    p = tmp_path / "m.onnx"
    onnx.save(model, p)
    with pytest.raises(ModelError, match="weight shape"):
        glowpy.compile(str(p), str(tmp_path / "b"))
