"""Channel-vectorized row tiles with the reduction in chunks of input channels (conv/
channel_chunks.py, params "kc"): deep strided 3x3s and long Conv1ds, whose block of weights
does not fit L1, and convolutions whose input planes collide in L1's sets (4 KiB apart).
Checked against onnxruntime on every vector level this host runs, with the plan each width
takes, and with chunking forced on every level, so that the partial sums' segments (part of
a row, whole short rows, a last chunk of fewer channels, a
last block of fewer channels, a residual and Relu after them) run wherever the suite runs."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from glowpy.codegen.kernels.conv.channel_chunks import MIN_STEPS
from glowpy.compiler import Options, compile_model
from util import check_against_onnxruntime
from vector_levels import RUNNABLE

RNG = np.random.default_rng(12)

# name: (C, M, input spatial dims, kernel, stride, pad). 3x3_s2_56: 28-wide rows, a segment
# per row; 3x3_s2_28: 14-wide rows, several rows a segment, 40 channels (a partial block);
# conv1d_k3_s2: one 499-wide row cut into segments, the interior ones in a loop (an input of
# 2.05 MB: past 4 L2 sizes of 512 KiB, channel_last.GROW_L2, it would be read channels-last);
# 3x3_200ch: a last chunk of fewer channels
CASES = {"3x3_s2_56": (128, 32, (56, 56), 3, 2, 1), "3x3_s2_28": (256, 40, (28, 28), 3, 2, 1),
         "conv1d_k3_s2": (512, 24, (1000,), 3, 2, 0), "3x3_200ch": (200, 16, (40, 40), 3, 2, 1)}
# where chunking pays: past L1 on a 32 KiB L1 (the family's figure for a named x86-64 level),
# at least MIN_STEPS per chunk (AVX-512's 32- and 48-channel blocks of a 3x3/2 would get 90 and
# 63); and where the planes collide in L1 (collision_chunk): 56x56 planes (12,544 bytes) put
# 128 channels' lines in 16 of the 64 sets, chunks of 64 on the levels the size rule leaves
CHUNKED = {4: {"3x3_s2_56", "3x3_s2_28", "conv1d_k3_s2", "3x3_200ch"},
           8: {"3x3_s2_56", "3x3_s2_28", "3x3_200ch"}, 16: {"3x3_s2_56", "3x3_200ch"}}


def _model(c, m, spatial, k, s, p, d=1, residual=True):
    """Relu(Conv(Relu(x)) + Exp(r)): the Conv accumulates onto the residual's buffer; without
    the residual, LeakyRelu(Conv(x)) (dilation d)."""
    nd = len(spatial)
    wt = (RNG.standard_normal((m, c) + (k,) * nd) / np.sqrt(c * k ** nd)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    out = tuple((q + 2 * p - d * (k - 1) - 1) // s + 1 for q in spatial)
    conv = dict(kernel_shape=[k] * nd, strides=[s] * nd, dilations=[d] * nd, pads=[p] * 2 * nd)
    ins = [helper.make_tensor_value_info("x", 1, [1, c, *spatial])]
    feeds = {"x": RNG.standard_normal((1, c, *spatial)).astype(np.float32)}
    if residual:
        nodes = [helper.make_node("Relu", ["x"], ["xr"]), helper.make_node("Exp", ["r"], ["e"]),
                 helper.make_node("Conv", ["xr", "w", "b"], ["c"], **conv),
                 helper.make_node("Add", ["c", "e"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
        ins.append(helper.make_tensor_value_info("r", 1, [1, m, *out]))
        feeds["r"] = RNG.standard_normal((1, m, *out)).astype(np.float32) * 0.5
    else:
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **conv),
                 helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)]
    g = helper.make_graph(nodes, "chunks", ins, [helper.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, feeds


def _convs(report):
    """The Conv instructions' variants (AVX-512 splits 40 channels into three instructions)."""
    with open(report) as f:
        return [i["variant"] for i in json.load(f)["instructions"] if i["kernel"] == "Conv"]


def _checked_plans(model, feeds, level, tmp_path):
    """The Conv variants of the model compiled for `level`, its outputs checked against
    onnxruntime on the way."""
    report = tmp_path / "mem.json"
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report), **level.options)
    return _convs(report)


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_chunked_channel_tiles_match_onnxruntime(case, level, tmp_path):
    for variant in _checked_plans(*_model(*CASES[case]), level, tmp_path):
        assert variant["name"] == "channel_vectorized"
        assert ("kc" in variant["params"]) == (case in CHUNKED[level.lanes])
        if "kc" in variant["params"]:
            c, kernel = CASES[case][0], CASES[case][3] ** len(CASES[case][2])
            assert c > variant["params"]["kc"] and variant["params"]["kc"] * kernel >= MIN_STEPS


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("case", ["3x3_s2_28", "conv1d_k3_s2", "3x3_200ch"])
def test_forced_chunks_match_onnxruntime(case, level, tmp_path):
    """Chunks of 7 channels (the last one shorter) forced on the tile this level plans."""
    model, feeds = _model(*CASES[case])
    report = tmp_path / "plan.json"
    onnx_path = tmp_path / "m.onnx"
    onnx.save(model, onnx_path)
    compile_model(str(onnx_path), str(tmp_path / "plan"),
                  Options(dump_memory_report=str(report), **level.options))
    params = {k: v for k, v in _convs(report)[0]["params"].items() if k != "nhwc"} | {"kc": 7}
    report2 = tmp_path / "mem.json"
    check_against_onnxruntime(model, feeds, tmp_path / "forced", rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report2),
                              kernel_variants={"Conv": ("channel_vectorized", params)},
                              **level.options)
    assert all(v["params"]["kc"] == 7 for v in _convs(report2))


# planes a multiple of 4 KiB apart (channel_chunks.collision_chunk), Conv + LeakyRelu:
# name: (C, M, input spatial dims, kernel, dilation, pad). Each channel's plane lies in one L1
# set at every offset, so every level takes 4 channels a chunk (half the 8 ways), however few
# steps that leaves a chunk (k3: 12); the k3 layer would be pixel-vectorized otherwise. The
# Conv1ds and the 256-wide rows run their edge tiles unchunked and the interior in segments
# (the last one shorter); the 64-wide rows go in segments of whole rows
COLLIDING = {"conv1d_16ch_4096_k11_d5": (16, 16, (4096,), 11, 5, 25),
             "conv1d_32ch_2048_k3": (32, 24, (2048,), 3, 1, 1),
             "5x5_16ch_64x64": (16, 20, (64, 64), 5, 1, 2),
             "5x5_16ch_32x256": (16, 16, (32, 256), 5, 1, 2)}


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("case", list(COLLIDING))
def test_colliding_planes_are_chunked_and_match_onnxruntime(case, level, tmp_path):
    c, m, spatial, k, d, p = COLLIDING[case]
    (variant,) = _checked_plans(*_model(c, m, spatial, k, 1, p, d, residual=False), level, tmp_path)
    assert variant["name"] == "channel_vectorized" and variant["params"]["kc"] == 4, variant


# CapsNet's primary capsules with 32 output channels: 9x9 / 2 over 256 channels, 20x20 -> 6x6
STREAMED = (256, 32, (20, 20), 9, 2, 0)


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
def test_streamed_blocks_match_onnxruntime(level, tmp_path):
    """The layer below against onnxruntime at each level this host runs, whichever chunks the
    level takes (SSE2 and AVX2: L1 chunks, their blocks being narrower)."""
    variants = _checked_plans(*_model(*STREAMED, residual=False), level, tmp_path)
    assert [v["name"] for v in variants] == ["channel_vectorized"]
    assert "kc" in variants[0]["params"], variants


def test_streamed_blocks_are_chunked_for_l2(tmp_path):
    """On AVX-512 (compiled for x86-64-v4 on any host, not run) the layer's one block of 32
    channels holds 2.65 MB of weights, past 3/4 of the family's 512 KiB L2, read by six rows of
    tiles, and no chunk of a kernel row's taps within L1 has MIN_STEPS steps: the reduction
    goes in chunks of a quarter of the L2 (channel_chunks.stream_chunk: 12 channels, 972
    steps) and the input gets no channels-last copy."""
    from glowpy.codegen.kernels.conv.channel_chunks import stream_chunk
    from glowpy.codegen.kernels.tiles import Shape
    from glowpy.codegen.target import resolve_target
    from vector_levels import LEVELS
    [level] = [lv for lv in LEVELS if lv.lanes == 16]
    model, _ = _model(*STREAMED, residual=False)
    onnx.save(model, tmp_path / "m.onnx")
    report = tmp_path / "plan.json"
    compile_model(str(tmp_path / "m.onnx"), str(tmp_path / "plan"),
                  Options(dump_memory_report=str(report), **level.options))
    [p] = [v["params"] for v in _convs(report)]
    caps = resolve_target(target="x86_64", mcpu=level.cpu).caps
    s = Shape(1, 256, 32, 1, 20, 20, 6, 6, 9, 9, 2, 2, 1, 1, 0, 0, 2)
    assert "nhwc" not in p and "flat" not in p, p
    assert p["kc"] == stream_chunk(caps, s, p["nvo"] * 16, p["npx"]) == 12, p
