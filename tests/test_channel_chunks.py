"""Channel-vectorized row tiles with the reduction in chunks of input channels (conv/
channel_chunks.py, params "kc"): deep strided 3x3s and long Conv1ds, whose block of weights
does not fit L1. Checked against onnxruntime on every vector level this host runs, with the
plan each width takes, and with chunking forced on every level, so that the
partial sums' segments (part of a row, whole short rows, a last chunk of fewer channels, a
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
# conv1d_k3_s2: one 599-wide row cut into segments, the interior ones in a loop;
# 3x3_200ch: a last chunk of fewer channels
CASES = {"3x3_s2_56": (128, 32, (56, 56), 3, 2, 1), "3x3_s2_28": (256, 40, (28, 28), 3, 2, 1),
         "conv1d_k3_s2": (512, 24, (1200,), 3, 2, 0), "3x3_200ch": (200, 16, (40, 40), 3, 2, 1)}
# where chunking pays: past L1 on a 32 KiB L1 (the family's figure for a named x86-64 level),
# at least MIN_STEPS per chunk (AVX-512's 32- and 48-channel blocks of a 3x3/2 would get 90 and 63)
CHUNKED = {4: {"3x3_s2_28", "conv1d_k3_s2", "3x3_200ch"}, 8: {"3x3_s2_56", "3x3_s2_28", "3x3_200ch"},
           16: {"3x3_200ch"}}


def _model(c, m, spatial, k, s, p):
    """Relu(Conv(Relu(x)) + Exp(r)): the Conv accumulates onto the residual's buffer."""
    nd = len(spatial)
    wt = (RNG.standard_normal((m, c) + (k,) * nd) / np.sqrt(c * k ** nd)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    out = tuple((d + 2 * p - k) // s + 1 for d in spatial)
    nodes = [helper.make_node("Relu", ["x"], ["xr"]), helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Conv", ["xr", "w", "b"], ["c"], kernel_shape=[k] * nd,
                              strides=[s] * nd, pads=[p] * 2 * nd),
             helper.make_node("Add", ["c", "e"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "chunks",
                          [helper.make_tensor_value_info("x", 1, [1, c, *spatial]),
                           helper.make_tensor_value_info("r", 1, [1, m, *out])],
                          [helper.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = {"x": RNG.standard_normal((1, c, *spatial)).astype(np.float32),
             "r": RNG.standard_normal((1, m, *out)).astype(np.float32) * 0.5}
    return model, feeds


def _convs(report):
    """The Conv instructions' variants (AVX-512 splits 40 channels into three instructions)."""
    with open(report) as f:
        return [i["variant"] for i in json.load(f)["instructions"] if i["kernel"] == "Conv"]


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_chunked_channel_tiles_match_onnxruntime(case, level, tmp_path):
    model, feeds = _model(*CASES[case])
    report = tmp_path / "mem.json"
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report), **level.options)
    for variant in _convs(report):
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
