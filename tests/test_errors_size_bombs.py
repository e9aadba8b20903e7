"""Ops whose output sizes a model's attributes or constants decide (Resize, Upsample, Pad, Slice,
Tile, Expand, ConstantOfShape, Range, ConvTranspose, DepthToSpace, SpaceToDepth, Unsqueeze,
Reshape), or that fold constants into huge ones: absurd values end in one line (exit 1) naming the node, before anything of that size
is allocated and within the hang guard, and leave nothing behind; extreme but legitimate values
(steps past the end, wide edge pads) compile and match onnxruntime."""
import numpy as np
import pytest
from onnx import helper

from hostile import const, model, refused, vi
from util import check_against_onnxruntime

I64_MAX = (1 << 63) - 1
LIMIT = "more than the limit of 4294967296 bytes (the target's address space, or -max-region-size)"


def f32(*v):
    return np.array(v, np.float32)


def i64(*v):
    return np.array(v, np.int64)


def one(op, inits, opset=17, inputs=(("x", [1, 1, 4, 4]),), **attrs):
    """One `op` node 'b' on x (unless inputs=()) and the constants `inits`, in that order."""
    node = helper.make_node(op, ["x"] * bool(inputs) + list(inits), ["y"], name="b", **attrs)
    return model([node], [vi(n, s) for n, s in inputs], [vi("y", None)],
                 [const(k, v) for k, v in inits.items()], opset=opset)


def resize(**inits):
    return model([helper.make_node("Resize", ["x", "", *inits], ["y"], name="b", mode="nearest")],
                 [vi("x", [1, 1, 4, 4])], [vi("y", None)],
                 [const(k, v) for k, v in inits.items()])


CASES = {
    "resize_sizes": (lambda: model([helper.make_node("Resize", ["x", "", "", "s"], ["y"], name="b")],
                                   [vi("x", [1, 1, 4, 4])], [vi("y", None)],
                                   [const("s", i64(1, 1, 1 << 40, 1 << 40))]),
                     f"node 'b' (Resize): output 0 float32[1, 1, 1099511627776, 1099511627776] "
                     f"needs 4835703278458516698824704 bytes, {LIMIT}"),
    "resize_scales_huge": (lambda: resize(s=f32(1, 1, 1e9, 1e9)),
                           f"node 'b' (Resize): output 0 float32[1, 1, 4000000000, 4000000000] "
                           f"needs 64000000000000000000 bytes, {LIMIT}"),
    "resize_scales_float32_overflow": (
        lambda: resize(s=f32(1, 1, 3.4e38, 3.4e38)),
        "node 'b' (Resize): scales [1.0, 1.0, 3.3999999521443642e+38, 3.3999999521443642e+38] "
        "times the input's dims [1, 1, 4, 4] overflow float32"),
    # the tap table grows with the input: 2^23 -> 1 was 2^24 taps built in Python (~90 s)
    "resize_antialias_downscale": (
        lambda: model([helper.make_node("Resize", ["x", "", "", "s"], ["y"], name="b",
                                        mode="linear", antialias=1)],
                      [vi("x", [1, 1, 1, 1 << 23])], [vi("y", None)], [const("s", i64(1, 1, 1, 1))],
                      opset=18),
        "node 'b' (Resize): the antialiased downscale of dim 3 from 8388608 to 1 needs 16777217 "
        "filter taps, more than 4194304; downscale in steps"),
    "upsample_float32_overflow": (
        lambda: one("Upsample", {"s": f32(1, 1, 3.4e38, 1)}, opset=9, mode="nearest"),
        "node 'b' (Upsample): scales [1.0, 1.0, 3.3999999521443642e+38, 1.0] times the input's "
        "dims [1, 1, 4, 4] overflow float32"),
    "upsample_inf_attribute": (
        lambda: one("Upsample", {}, opset=7, mode="nearest", scales=[1.0, 1.0, 2.0, float("inf")]),
        "node 'b' (Upsample): scales [1.0, 1.0, 2.0, inf] must be positive finite numbers"),
    "pad_huge": (lambda: one("Pad", {"p": i64(0, 0, I64_MAX, 0, 0, 0, 0, 0)}, mode="edge"),
                 f"node 'b' (Pad): output 0 float32[1, 1, 9223372036854775811, 4] needs "
                 f"147573952589676412976 bytes, {LIMIT}"),
    "pad_negative_past_the_input": (
        lambda: one("Pad", {"p": i64(0, 0, -(1 << 40), 0, 0, 0, 0, 0)}),
        "node 'b' (Pad): inferred a negative dimension [1, 1, -1099511627772, 4]; check its "
        "inputs and attributes"),
    "slice_step_zero": (lambda: one("Slice", {"a": i64(0), "e": i64(4), "ax": i64(3), "st": i64(0)}),
                        "node 'b' (Slice): step 0 on axis 3"),
    "tile_huge": (lambda: one("Tile", {"r": i64(1, 1, I64_MAX, 1)}),
                  f"node 'b' (Tile): output 0 float32[1, 1, 36893488147419103228, 4] needs "
                  f"590295810358705651648 bytes, {LIMIT}"),
    "tile_negative": (lambda: one("Tile", {"r": i64(1, 1, -1, 1)}),
                      "node 'b' (Tile): repeats [1, 1, -1, 1] must have one non-negative value "
                      "per dim of [1, 1, 4, 4]"),
    "expand_huge": (lambda: one("Expand", {"s": i64(1 << 20, 1 << 20, 4, 4)}),
                    f"node 'b' (Expand): output 0 float32[1048576, 1048576, 4, 4] needs "
                    f"70368744177664 bytes, {LIMIT}"),
    "expand_rank": (lambda: one("Expand", {"s": np.ones(40, np.int64)}),
                    "node 'b' (Expand): output 0 has 40 dimensions; at most 32 are supported"),
    "constant_of_shape_huge": (lambda: one("ConstantOfShape", {"s": i64(1 << 32, 1 << 32, 1 << 32)},
                                           inputs=()),
                               "node 'b' (ConstantOfShape): output 0 float32[4294967296, "
                               "4294967296, 4294967296] needs 316912650057057350374175801344 "
                               f"bytes, {LIMIT}"),
    "constant_of_shape_rank": (lambda: one("ConstantOfShape", {"s": np.ones(200000, np.int64)},
                                           inputs=()),
                               "node 'b' (ConstantOfShape): output 0 has 200000 dimensions; at "
                               "most 32 are supported"),
    "unsqueeze_rank": (lambda: one("Unsqueeze", {"a": np.arange(100000, dtype=np.int64)}),
                       "node 'b' (Unsqueeze): output 0 has 100004 dimensions; at most 32 are "
                       "supported"),
    "range_huge_count": (lambda: one("Range", {"a": np.float32(0), "l": np.float32(1),
                                               "d": np.float32(1e-30)}, inputs=()),
                         "node 'b' (Range): output 0 float32[999999996828923198460697509888] needs "
                         f"3999999987315692793842790039552 bytes, {LIMIT}"),
    "range_zero_delta": (lambda: one("Range", {"a": np.int64(0), "l": np.int64(5), "d": np.int64(0)},
                                     inputs=()),
                         "node 'b' (Range): delta is 0"),
    "range_int64_count": (lambda: one("Range", {"a": np.int64(0), "l": np.int64(I64_MAX),
                                                "d": np.int64(1)}, inputs=()),
                          "node 'b' (Range): output 0 int64[9223372036854775808] needs "
                          f"73786976294838206464 bytes, {LIMIT}"),
    "conv_transpose_strides": (
        lambda: one("ConvTranspose", {"w": np.ones((1, 1, 2, 2), np.float32)},
                    strides=[I64_MAX, 1]),
        "node 'b' (ConvTranspose): output 0 float32[1, 1, 27670116110564327423, 5] needs "
        f"553402322211286548460 bytes, {LIMIT}"),
    "conv_transpose_output_shape": (
        lambda: one("ConvTranspose", {"w": np.ones((1, 1, 2, 2), np.float32)},
                    output_shape=[1 << 30, 1 << 30]),
        "node 'b' (ConvTranspose): output 0 float32[1, 1, 1073741824, 1073741824] needs "
        f"4611686018427387904 bytes, {LIMIT}"),
    "conv_transpose_output_padding": (
        lambda: one("ConvTranspose", {"w": np.ones((1, 1, 2, 2), np.float32)}, strides=[2, 2],
                    output_padding=[1 << 30, 0]),
        "node 'b' (ConvTranspose): output_padding [1073741824, 0] must be smaller than the "
        "stride or the dilation"),
    "depth_to_space_blocksize": (lambda: one("DepthToSpace", {}, blocksize=I64_MAX),
                                 "node 'b' (DepthToSpace): channels 1 are not a multiple of "
                                 "blocksize^2 = 85070591730234615847396907784232501249"),
    "space_to_depth_blocksize": (lambda: one("SpaceToDepth", {}, blocksize=1 << 31),
                                 "node 'b' (SpaceToDepth): spatial dims 4x4 are not multiples of "
                                 "blocksize 2147483648"),
    # under the size limit, but folded into the bundle's weights: 1.2 GB of memory and 1.8 GB
    # of files for 256 MiB from a 100-byte model; 4 GiB would have exhausted both
    "constant_of_shape_folded_expansion": (
        lambda: one("ConstantOfShape", {"s": i64(1 << 25)}, inputs=()),
        "node 'b' (ConstantOfShape): its outputs would be a 134217728-byte constant computed from "
        "8 bytes of constant inputs; constants are stored in the bundle's weights, and glowpy "
        "folds none over 67108864 bytes that is more than 64 times its inputs"),
    "tile_of_a_constant_folded_expansion": (
        lambda: model([helper.make_node("Tile", ["c", "r"], ["y"], name="b")], [], [vi("y", None)],
                      [const("c", np.ones((4, 4), np.float32)), const("r", i64(1 << 12, 1 << 11))]),
        "node 'b' (Tile): its outputs would be a 536870912-byte constant computed from 80 bytes "
        "of constant inputs; constants are stored in the bundle's weights, and glowpy folds none "
        "over 67108864 bytes that is more than 64 times its inputs"),
    "lp_pool_kernel": (lambda: one("LpPool", {}, kernel_shape=[1 << 40, 2], p=1 << 40),
                       "node 'b' (LpPool): kernel_shape [1099511627776, 2] (dilations [1, 1]) "
                       "spans more than twice the input [4, 4] along spatial dim 0"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_size_bomb_is_one_line(capsys, tmp_path, case):
    build, expect = CASES[case]
    assert refused(capsys, tmp_path, build()) == expect
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_initializer_and_input_rank(capsys, tmp_path):
    m = model([helper.make_node("Add", ["x", "c"], ["y"], name="b")], [vi("x", [1, 1, 4, 4])],
              [vi("y", None)], [const("c", np.ones([1] * 40, np.float32))])
    assert refused(capsys, tmp_path, m) == ("initializer 'c' has 40 dimensions; at most 32 are "
                                            "supported")
    m = model([helper.make_node("Relu", ["x"], ["y"], name="b")], [vi("x", [1] * 33)],
              [vi("y", None)])
    assert refused(capsys, tmp_path, m).endswith(" has 33 dimensions; at most 32 are supported")


RNG = np.random.default_rng(3)


@pytest.mark.parametrize("name, m", [
    ("slice_steps_past_the_end", one("Slice", {"a": i64(0, 3), "e": i64(I64_MAX, -I64_MAX),
                                               "ax": i64(3, 2), "st": i64(1 << 62, -I64_MAX)})),
    ("slice_int64_extremes", one("Slice", {"a": i64(-(1 << 63)), "e": i64(I64_MAX),
                                           "ax": i64(3)})),
    ("pad_wide_edge", one("Pad", {"p": i64(0, 0, 3000, 0, 0, 0, 3000, 0)}, mode="edge")),
    ("pad_wrap_past_the_input", one("Pad", {"p": i64(0, 0, 9, 10, 0, 0, 10, 9)}, opset=19,
                                    mode="wrap")),
    ("resize_down_to_one", model([helper.make_node("Resize", ["x", "", "", "s"], ["y"],
                                                   mode="linear")],
                                 [vi("x", [1, 1, 4, 1 << 16])], [vi("y", None)],
                                 [const("s", i64(1, 1, 2, 1))])),
])
def test_extreme_but_legitimate_values_match_onnxruntime(tmp_path, name, m):
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = RNG.standard_normal(shape).astype(np.float32)
    check_against_onnxruntime(m, {"x": x}, tmp_path)


def test_rank_limit_leaves_ordinary_ranks_alone(tmp_path):
    # 8 dims (the most ONNX models use) through Unsqueeze, Expand and Reshape
    x = RNG.standard_normal([2, 3]).astype(np.float32)
    m = model([helper.make_node("Unsqueeze", ["x", "a"], ["u"]),
               helper.make_node("Expand", ["u", "s"], ["e"]),
               helper.make_node("Reshape", ["e", "r"], ["y"])],
              [vi("x", [2, 3])], [vi("y", None)],
              [const("a", i64(0, 1, 2, 3, 4, 5)), const("s", i64(1, 1, 1, 1, 2, 1, 2, 3)),
               const("r", i64(2, 1, 2, 1, 3, 1, 1, 1))])
    check_against_onnxruntime(m, {"x": x}, tmp_path)
