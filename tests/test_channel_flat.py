"""Channel-vectorized convolution tiles across row ends (conv/channel.py, params "flat"): on
small planes whose rows are shorter than a good tile (7-wide rows on 4- and 8-lane targets) the
tile runs over the flattened output plane. Checked against onnxruntime on every vector level
this host runs, with the plan each width takes: 4 and 8 lanes tile long reductions on 7x7
planes flat, AVX-512's 7-pixel row tiles already fill its registers."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper

from util import check_against_onnxruntime
from vector_levels import RUNNABLE

RNG = np.random.default_rng(11)

# name: (C, M, input H, W, kernel, stride, pad). 3x3_7x7_deep: 1.8 MB of weights, past L2, so
# the channel blocks run outermost (each block's weights streamed once, tiles.tiles_outermost)
# with the flat tiles inside them; 100 channels: a partial last block
CASES = {"3x3_7x7": (128, 64, 7, 7, 3, 1, 1), "3x3_s2_14x14": (128, 40, 14, 14, 3, 2, 1),
         "1x1_s2_14x14": (1024, 64, 14, 14, 1, 2, 0), "3x3_7x7_short": (64, 64, 7, 7, 3, 1, 1),
         "3x3_7x7_deep": (512, 100, 7, 7, 3, 1, 1)}
# where the flat plane scores FLAT_GAIN above the rows; a reduction of 576 takes the same 12
# accumulators on 4 and 8 lanes as a long one (channel_plan.MAX_CHAN_ACC), so it tiles flat too
FLAT = {4: {"3x3_7x7", "3x3_s2_14x14", "1x1_s2_14x14", "3x3_7x7_short", "3x3_7x7_deep"},
        8: {"3x3_7x7", "1x1_s2_14x14", "3x3_7x7_short", "3x3_7x7_deep"}, 16: set()}
# 7-wide rows fill 4-lane vectors: the strided 1x1 is pointwise_strided's there (SSE2, 1024 ->
# 64 at 14x14 -> 7x7: 241 us against 269 us flat channel tiles, same run)
OTHER = {(4, "1x1_s2_14x14"): "pointwise_strided"}


def _model(c, m, h, w, k, s, p):
    """Relu(Conv(Relu(x)) + r) with r = Exp of a second input: the Conv accumulates onto the
    residual's buffer (lowering's in-place residual), then the Relu epilogue."""
    wt = (RNG.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    nodes = [helper.make_node("Relu", ["x"], ["xr"]), helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Conv", ["xr", "w", "b"], ["c"], kernel_shape=[k, k], strides=[s, s],
                              pads=[p] * 4),
             helper.make_node("Add", ["c", "e"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "flat", [helper.make_tensor_value_info("x", 1, [1, c, h, w]),
                                          helper.make_tensor_value_info("r", 1, [1, m, ho, wo])],
                          [helper.make_empty_tensor_value_info("y")],
                          [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = {"x": RNG.standard_normal((1, c, h, w)).astype(np.float32),
             "r": RNG.standard_normal((1, m, ho, wo)).astype(np.float32) * 0.5}
    return model, feeds


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_flat_channel_tiles_match_onnxruntime(case, level, tmp_path):
    model, feeds = _model(*CASES[case])
    report = tmp_path / "mem.json"
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report), **level.options)
    with open(report) as f:
        [conv] = [i for i in json.load(f)["instructions"] if i["kernel"] == "Conv"]
    other = OTHER.get((level.lanes, case))
    assert conv["variant"]["name"] == (other or "channel_vectorized")
    if other is None:
        assert conv["variant"]["params"].get("flat", False) == (case in FLAT[level.lanes])
