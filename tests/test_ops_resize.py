"""Resize, Upsample and Pad against onnxruntime (and glowpy's numpy references), every
attribute: each test compiles one graph of several nodes, one per attribute combination.

Nearest must pick exactly onnxruntime's pixels, so those outputs are compared exactly (the
inputs are distinct values); linear/cubic/antialias weights are float32 like onnxruntime's but
summed in another order, hence rtol 1e-5."""
import json
import os

import numpy as np
import pytest

import vector_levels
from util import GraphBuilder, check_op, compile_and_run, make_model
from glowpy.errors import ModelError

RNG = np.random.default_rng(7)
X4 = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
ROI4 = np.array([0, 0, 0.1, -0.2, 1, 1, 0.8, 1.1], np.float32)  # partly outside: extrapolates
COORD_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize"]
SCALES = [[1, 1, 2, 3], [1, 1, 0.5, 0.6], [1, 1, 1.7, 0.35], [1, 1, 3.3, 1.5]]
SIZES = [[1, 2, 9, 4], [1, 2, 1, 7], [1, 2, 12, 1], [1, 2, 3, 13]]
EXACT = dict(rtol=0, atol=0)
CLOSE = dict(rtol=1e-5, atol=1e-6)


def f32(v):
    return np.asarray(v, np.float32)


def i64(v):
    return np.asarray(v, np.int64)


def resize(g, x, cm, scales=None, sizes=None, roi=ROI4, opset=19, **attrs):
    roi_in = roi if cm == "tf_crop_and_resize" else (f32([]) if opset < 13 else None)
    if sizes is not None:
        ins = [x, roi_in, f32([]) if opset < 13 else None, i64(sizes)]
    else:
        ins = [x, roi_in, f32(scales)]
    return g.node("Resize", ins, coordinate_transformation_mode=cm, **attrs)


@pytest.mark.parametrize("cm", COORD_MODES)
def test_resize_nearest(cm, tmp_path):
    g = GraphBuilder(x=X4)
    for nm in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]:
        for s in SCALES:
            resize(g, "x", cm, scales=s, mode="nearest", nearest_mode=nm, extrapolation_value=-3.0)
        for z in SIZES[:2]:
            resize(g, "x", cm, sizes=z, mode="nearest", nearest_mode=nm)
    check_op(g.model(19), g.feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("level", vector_levels.params())
def test_resize_nearest_integer_factors(level, tmp_path):
    """Nearest upsampling by integer factors along W (kernels/tensor/resize.repeat_run: one
    vector load, f shuffles, f stores), at each x86 vector level: rows of whole vectors, a
    vector and a tail, shorter than a vector; W kept (the table path), 1-wide rows."""
    for w in (16, 21, 3, 1):
        x = RNG.standard_normal((1, 3, 4, w)).astype(np.float32)
        g = GraphBuilder(x=x)
        for s, cm, nm in (([1, 1, 2, 2], "asymmetric", "floor"), ([1, 1, 1, 3], "asymmetric", "floor"),
                          ([1, 1, 2, 2], "half_pixel", "round_prefer_floor"),
                          ([1, 1, 3, 1], "asymmetric", "floor"), ([1, 1, 1, 4], "align_corners", "floor")):
            resize(g, "x", cm, scales=s, mode="nearest", nearest_mode=nm)
        check_op(g.model(19), g.feeds, tmp_path / str(w), **EXACT, **level.options)


@pytest.mark.parametrize("level", vector_levels.params())
def test_resize_blends_rows_at_every_level(level, tmp_path):
    """Linear and cubic 2-D resizes (kernels/tensor/resize.row_pass: the input rows blended
    into a row on the stack, then each output from its taps in it) at each x86 vector level:
    rows of whole vectors, with a tail, shorter than a vector, 1 wide, and past ROW_FLOATS
    (the per-element path)."""
    for w in (16, 21, 3, 1, 4100):
        x = RNG.standard_normal((1, 2, 5 if w < 4100 else 2, w)).astype(np.float32)
        g = GraphBuilder(x=x)
        for s, cm, mode in (([1, 1, 2, 2], "align_corners", "linear"),
                            ([1, 1, 2, 2], "half_pixel", "linear"),
                            ([1, 1, 0.6, 1.5], "pytorch_half_pixel", "linear"),
                            ([1, 1, 1.7, 2], "half_pixel", "cubic")):
            resize(g, "x", cm, scales=s, mode=mode)
        check_op(g.model(19), g.feeds, tmp_path / str(w), **CLOSE, **level.options)


def test_resize_nearest_opset11_tf_half_pixel_for_nn(tmp_path):
    g = GraphBuilder(x=X4)
    for nm in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]:
        resize(g, "x", "tf_half_pixel_for_nn", scales=[1, 1, 1.5, 0.6], opset=11, nearest_mode=nm)
        resize(g, "x", "tf_half_pixel_for_nn", sizes=[1, 2, 11, 3], opset=11, nearest_mode=nm)
    check_op(g.model(11), g.feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("cm", COORD_MODES)
def test_resize_linear(cm, tmp_path):
    x2 = RNG.standard_normal((6, 7)).astype(np.float32)
    x3 = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    x5 = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    nhwc = RNG.standard_normal((2, 5, 7, 3)).astype(np.float32)
    g = GraphBuilder(x=X4, x2=x2, x3=x3, x5=x5, nhwc=nhwc)
    for s in SCALES:
        resize(g, "x", cm, scales=s, mode="linear", extrapolation_value=5.0)
    for z in SIZES:
        resize(g, "x", cm, sizes=z, mode="linear")
    resize(g, "x2", cm, scales=[2.5, 0.5], roi=f32([0.1, 0.2, 0.9, 1.2]), mode="linear")
    resize(g, "x3", cm, scales=[1.5, 2, 0.5], roi=f32([0.1] * 3 + [0.9] * 3), mode="linear")
    resize(g, "x5", cm, scales=[1, 1, 2, 1.5, 0.6], roi=f32([0] * 5 + [1] * 5), mode="linear")
    resize(g, "nhwc", cm, scales=[1, 2, 0.6, 1], roi=f32([0, 0.1, 0.1, 0, 1, 0.9, 0.9, 1]),
           mode="linear")
    check_op(g.model(19), g.feeds, tmp_path, **CLOSE)


@pytest.mark.parametrize("cm", COORD_MODES)
def test_resize_cubic(cm, tmp_path):
    x2 = RNG.standard_normal((6, 7)).astype(np.float32)
    g = GraphBuilder(x=X4, x2=x2)
    for a in [-0.75, -0.5]:
        for ex in [0, 1]:
            for s in [[1, 1, 2.3, 0.6], [1, 1, 0.5, 1.7]]:
                resize(g, "x", cm, scales=s, mode="cubic", cubic_coeff_a=a, exclude_outside=ex,
                       extrapolation_value=-1.0)
    resize(g, "x", cm, sizes=[1, 2, 10, 3], mode="cubic")
    resize(g, "x2", cm, scales=[1.5, 2.5], roi=f32([0.2, 0.1, 0.9, 1.2]), mode="cubic")
    check_op(g.model(19), g.feeds, tmp_path, **CLOSE)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode, tmp_path):
    x = RNG.standard_normal((1, 2, 11, 13)).astype(np.float32)
    g = GraphBuilder(x=x)
    for cm in ["half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"]:
        for ex in [0, 1]:
            for s in [[1, 1, 0.5, 0.6], [1, 1, 0.3, 0.25], [1, 1, 0.7, 2.2]]:
                resize(g, "x", cm, scales=s, mode=mode, antialias=1, exclude_outside=ex,
                       extrapolation_value=2.0)
    check_op(g.model(19), g.feeds, tmp_path, **CLOSE)


def test_resize_sizes_policy_and_axes(tmp_path):
    g = GraphBuilder(x=X4)
    for pol in ["stretch", "not_larger", "not_smaller"]:
        for mode in ["nearest", "linear"]:
            resize(g, "x", "half_pixel", sizes=[9, 4], mode=mode, keep_aspect_ratio_policy=pol,
                   axes=[2, 3])
            resize(g, "x", "half_pixel", sizes=[11, 3], mode=mode, keep_aspect_ratio_policy=pol,
                   axes=[3, 2])
            if mode == "nearest" or pol == "stretch":  # policies without axes scale N and C too
                resize(g, "x", "half_pixel", sizes=[1, 2, 3, 13], mode=mode,
                       keep_aspect_ratio_policy=pol)
    for mode in ["nearest", "linear", "cubic"]:
        resize(g, "x", "half_pixel", scales=[1.5, 2.5], mode=mode, axes=[-1, 2])
        resize(g, "x", "tf_crop_and_resize", sizes=[4, 6], roi=f32([0.2, 0.1, 0.7, 1.2]), mode=mode,
               axes=[2, 3])
    check_op(g.model(19), g.feeds, tmp_path, **CLOSE)


def test_resize_older_opsets(tmp_path):
    """Resize-10 (X, scales): asymmetric, legacy nearest rounding; Resize-11 with roi/scales
    inputs that must be present (empty) before sizes; Resize-13 with the default modes."""
    g10 = GraphBuilder(x=X4)
    for mode in ["nearest", "linear"]:
        for s in [[1, 1, 2, 3], [1, 1, 0.5, 0.6], [1, 1, 1.7, 0.35]]:
            g10.node("Resize", ["x", f32(s)], mode=mode)
    check_op(g10.model(10), g10.feeds, tmp_path / "r10", **CLOSE)
    g = GraphBuilder(x=X4)
    for mode in ["nearest", "linear", "cubic"]:
        resize(g, "x", "half_pixel", scales=[1, 1, 1.5, 0.6], opset=11, mode=mode)
        resize(g, "x", "align_corners", sizes=[1, 2, 4, 9], opset=11, mode=mode)
    check_op(g.model(11), g.feeds, tmp_path / "r11", **CLOSE)
    g13 = GraphBuilder(x=X4)
    g13.node("Resize", ["x", None, f32([1, 1, 2, 0.5])])
    g13.node("Resize", ["x", f32([]), f32([]), i64([1, 2, 3, 3])], mode="linear")
    check_op(g13.model(13), g13.feeds, tmp_path / "r13", **CLOSE)


@pytest.mark.parametrize("opset", [7, 9])
def test_upsample(opset, tmp_path):
    g = GraphBuilder(x=X4)
    for mode in ["nearest", "linear"]:
        for s in [[1, 1, 2, 3], [1, 1, 1.5, 2.5], [1, 1, 1, 2]]:
            if opset == 7:
                g.node("Upsample", ["x"], mode=mode, scales=[float(v) for v in s])
            else:
                g.node("Upsample", ["x", f32(s)], mode=mode)
    check_op(g.model(opset), g.feeds, tmp_path, **CLOSE)


def test_resize_nearest_other_dtypes_and_ranks(tmp_path):
    """Nearest is a pure gather: any element type, any rank; an unchanged shape is a copy."""
    xi = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    xu = (np.arange(35) % 251).astype(np.uint8).reshape(5, 7)
    x1 = np.arange(9, dtype=np.float32)
    x6 = RNG.standard_normal((2, 1, 2, 3, 2, 3)).astype(np.float32)
    g = GraphBuilder(xi=xi, xu=xu, x1=x1, x6=x6, x=X4)
    g.node("Resize", ["xi", None, f32([1, 2.5, 0.5])], mode="nearest")
    g.node("Resize", ["xu", None, None, i64([3, 11])], mode="nearest", nearest_mode="ceil")
    g.node("Resize", ["x1", None, f32([0.6])], mode="nearest")
    g.node("Resize", ["x6", None, f32([1, 2, 1.5, 1, 0.5, 2])], mode="nearest")
    g.node("Resize", ["x6", None, None, i64([2, 1, 2, 3, 2, 3])], mode="nearest")
    g.node("Resize", ["x", None, None, i64([1, 2, 5, 7])], mode="linear")
    g.node("Resize", ["x", None, f32([1, 1, 1.1, 1.1])], mode="cubic")  # floor(5.5) = 5
    check_op(g.model(19), g.feeds, tmp_path, **EXACT)


def test_resize_tables_stay_small(tmp_path):
    """The kernel's tap tables are O(sum of output dims): a 256x256 -> 768x768 bicubic resize
    (590k outputs, 16 taps each) needs 2 x 768 x 4 taps of offset and weight, ~49 KB of
    constants, and a small object."""
    x = RNG.standard_normal((1, 1, 256, 256)).astype(np.float32)
    m = make_model("Resize", {"x": x}, attrs={"mode": "cubic"},
                   initializers={"s": f32([1, 1, 3, 3])}, input_names=["x", "", "s"], opset=19)
    got = compile_and_run(m, {"x": x}, tmp_path)[0]
    assert got.shape == (1, 1, 768, 768)
    with open(os.path.join(tmp_path, "bundle", "model.json")) as f:
        constants = json.load(f)["memory"]["constant"]
    assert constants <= 2 * 768 * 4 * 8 + 1024, f"{constants} bytes of constants"
    size = os.path.getsize(os.path.join(tmp_path, "bundle", "model.o"))
    assert size < 16 * 1024, f"object is {size} bytes"


def test_resize_errors(tmp_path):
    g = GraphBuilder(x=X4, s=f32([1, 1, 2, 2]))
    g.node("Resize", ["x", None, "s"], mode="nearest")
    with pytest.raises(ModelError, match="compile time"):
        compile_and_run(g.model(19), g.feeds, tmp_path / "a")
    both = make_model("Resize", {"x": X4}, initializers={"s": f32([1, 1, 2, 2]), "z": i64([1, 2, 3, 3])},
                      input_names=["x", "", "s", "z"], opset=19)
    with pytest.raises(ModelError, match="exactly one of the scales and sizes"):
        compile_and_run(both, {"x": X4}, tmp_path / "b")
    xi = np.zeros((1, 1, 2, 2), np.int32)
    lin = make_model("Resize", {"x": xi}, attrs={"mode": "linear"}, initializers={"s": f32([1, 1, 2, 2])},
                     input_names=["x", "", "s"], opset=19)
    with pytest.raises(ModelError, match="float input"):
        compile_and_run(lin, {"x": xi}, tmp_path / "c")


# -- Pad ---------------------------------------------------------------------------------------

PADS4 = [[0, 1, 2, 3, 0, 0, 1, 2], [1, 0, -1, 2, 0, 1, 2, -2], [0, 0, 0, 0, 0, 0, 0, 0],
         [0, 0, 4, 6, 0, 0, 4, 6]]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad(mode, tmp_path):
    """Opset 19 input form: positive, negative (cropping), zero and large pads."""
    g = GraphBuilder(x=X4)
    for p in PADS4:
        if mode == "reflect" and (max(p) > 4 or p[0] or p[4]):
            continue  # reflect pads must be smaller than the (cropped) dim, and N is 1
        g.node("Pad", ["x", i64(p)], mode=mode)
    if mode == "reflect":
        g.node("Pad", ["x", i64([0, 0, -1, 2, 0, 1, 2, -2])], mode=mode)
    if mode == "constant":
        g.node("Pad", ["x", i64(PADS4[0]), f32(2.5)], mode=mode)
        g.node("Pad", ["x", i64(PADS4[1]), f32([-1.5])], mode=mode)
    check_op(g.model(19), g.feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_rows_with_a_shifted_interior(mode, tmp_path):
    """Rows of 40 and 23: the interior of each padded row is a plain shifted copy, looped on
    its own (resize.shifted_run), the borders through the table; the unit check below finds
    that run exactly."""
    from glowpy.codegen.kernels.tensor.resize import shifted_run
    from glowpy.ir.ops.taps import table
    assert shifted_run(table(np.r_[np.arange(3, 0, -1), np.arange(40), np.arange(38, 35, -1)])) \
        == (3, 43, -3)
    assert shifted_run(table(np.r_[[0, 0], np.arange(10)])) is None  # under MIN_RUN
    x = np.random.default_rng(4).standard_normal((2, 3, 23, 40)).astype(np.float32)
    xi = np.arange(5 * 30, dtype=np.int32).reshape(5, 30)
    g = GraphBuilder(x=x, xi=xi)
    g.node("Pad", ["x", i64([0, 0, 3, 3, 0, 0, 3, 2])], mode=mode)
    g.node("Pad", ["x", i64([0, 1, 1, 17, 0, 0, 5, 0])], mode=mode)
    g.node("Pad", ["xi", i64([1, 4, 2, 9])], mode=mode)
    check_op(g.model(19), g.feeds, tmp_path, **EXACT)


def test_pad_axes_and_dtypes(tmp_path):
    """Opset 18 `axes` input (negative too), integer data with an integer pad value."""
    xi = np.arange(3 * 4, dtype=np.int64).reshape(3, 4)
    xb = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    g = GraphBuilder(x=X4, xi=xi, xb=xb)
    g.node("Pad", ["x", i64([2, 1, 0, 3]), f32(9.0), i64([-1, 2])], mode="constant")
    g.node("Pad", ["x", i64([1, 2, 3, 1]), None, i64([3, 1])], mode="edge")
    g.node("Pad", ["x", i64([2, 3]), None, i64([2])], mode="reflect")
    g.node("Pad", ["xi", i64([1, 2, 0, 1]), np.array(-7, np.int64)], mode="constant")
    g.node("Pad", ["xb", i64([0, 1, 2, 1, 0, 3]), np.array(200, np.uint8)])
    g.node("Pad", ["xb", i64([1, 1, 1, 0, 2, 2])], mode="wrap")
    check_op(g.model(19), g.feeds, tmp_path, **EXACT)


@pytest.mark.parametrize("opset", [2, 11, 13])
def test_pad_older_opsets(opset, tmp_path):
    """Pad-2 (pads and value attributes) and Pad-11/13 (pads, optional constant_value input)."""
    g = GraphBuilder(x=X4)
    for mode in ["constant", "reflect", "edge"]:
        pads = [0, 0, 1, 2, 0, 1, 3, 1]
        if opset == 2:
            g.node("Pad", ["x"], mode=mode, pads=pads, **({"value": 1.25} if mode == "constant" else {}))
        else:
            g.node("Pad", ["x", i64(pads)] + ([f32(1.25)] if mode == "constant" else []), mode=mode)
    if opset == 2:
        g.node("Pad", ["x"], pads=[0, 0, 1, 1, 0, 0, 1, 1])  # default mode and value
    else:
        g.node("Pad", ["x", i64([0, 0, 1, 1, 0, 0, 1, 1])])
    check_op(g.model(opset), g.feeds, tmp_path, **EXACT)


def test_pad_feeds_conv_and_chain(tmp_path):
    """Pads inside a graph: reflect pad -> Conv (not mergeable), zero pad -> MaxPool, and a
    pad of a pad."""
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    g = GraphBuilder(x=X4)
    p = g.node("Pad", ["x", i64([0, 0, 1, 1, 0, 0, 1, 1])], mode="reflect", output=False)
    g.node("Conv", [p, w])
    q = g.node("Pad", ["x", i64([0, 0, 1, 2, 0, 0, 1, 0])], output=False)
    g.node("MaxPool", [q], kernel_shape=[2, 2])
    r = g.node("Pad", ["x", i64([0, 0, 2, 0, 0, 0, 0, 1])], mode="edge", output=False)
    g.node("Pad", [r, i64([0, 0, -1, 1, 0, 0, 1, -1]), f32(4.0)])
    check_op(g.model(19), g.feeds, tmp_path, rtol=1e-5, atol=1e-5)
