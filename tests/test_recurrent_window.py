"""lower_recurrent's step window: when Y is read only through Gathers of time steps (directly,
or through the Transpose + Reshape of torch's stacked export) and the final states are not
read, each direction runs only up to the farthest step read. Bundles compiled through the real
path at every runnable vector level and compared with onnxruntime; the optimized graph shows
how many steps (projection rows) each direction got."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import helper

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.passes.pipeline import optimize
from util import check_against_onnxruntime, make_graph_model
from vector_levels import LEVELS, RUNNABLE

TOL = dict(rtol=1e-4, atol=1e-4)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
SEQ, BATCH, ISZ, HID = 7, 3, 6, 10


def model(op="LSTM", direction="bidirectional", steps=(-1,), views=False, read_h=False,
          also_y=False):
    """X -> op -> [Transpose(0, 2, 1, 3), Reshape(0, 0, -1)] -> Gather(axis 0, steps)."""
    ndir = 2 if direction == "bidirectional" else 1
    rng = np.random.default_rng(4)
    g = GATES[op]

    def f(*s):
        return (rng.standard_normal(s) * 0.5).astype(np.float32)
    inits = {"W": f(ndir, g * HID, ISZ), "R": f(ndir, g * HID, HID), "B": f(ndir, 2 * g * HID),
             "steps": np.array(steps, np.int64), "shape": np.array([0, 0, -1], np.int64)}
    nodes = [helper.make_node(op, ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=HID,
                              direction=direction)]
    y = "Y"
    if views:
        nodes += [helper.make_node("Transpose", ["Y"], ["T"], perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["T", "shape"], ["V"])]
        y = "V"
    nodes.append(helper.make_node("Gather", [y, "steps"], ["out"], axis=0))
    outs = ["out"] + (["Y_h"] if read_h else []) + (["Y"] if also_y else [])
    feeds = {"X": f(SEQ, BATCH, ISZ) * 2}
    return make_graph_model(nodes, feeds, outs, inits, opset=14), feeds


def cell_steps(m, tmp_path) -> list[int]:
    """The time steps of each RecurrentCell in the optimized graph."""
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    return [n.inputs[0].shape[0] for n in optimize(load_onnx(path)).nodes
            if n.op == "RecurrentCell"]


CASES = [  # (model arguments, the steps each direction runs)
    (dict(steps=(-1,)), [SEQ, 1]),
    (dict(steps=(SEQ - 1,), views=True), [SEQ, 1]),  # torch's stacked biLSTM classifier
    (dict(steps=(0,), views=True), [1, SEQ]),
    (dict(steps=(4, 2, 2)), [5, SEQ - 2]),
    (dict(steps=[[1, 3], [2, -3]], op="GRU"), [5, SEQ - 1]),
    (dict(steps=(2,), direction="forward", op="RNN"), [3]),
    (dict(steps=(2,), direction="reverse", views=True), [SEQ - 2]),
    # no window: the final states or Y itself are read, or the steps span the sequence
    (dict(steps=(-1,), read_h=True), [SEQ, SEQ]),
    (dict(steps=(-1,), also_y=True, views=True), [SEQ, SEQ]),
    (dict(steps=(0, -1)), [SEQ, SEQ]),
]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[str(c[0]) for c in CASES])
def test_window_runs_only_the_steps_read_and_matches_onnxruntime(i, tmp_path):
    kw, want = CASES[i]
    m, feeds = model(**kw)
    assert cell_steps(m, tmp_path) == want
    check_against_onnxruntime(m, feeds, tmp_path, **TOL, **RUNNABLE[i % len(RUNNABLE)].options)


@pytest.mark.parametrize("level", LEVELS + [None], ids=[lv.name for lv in LEVELS] + ["aarch64"])
def test_window_and_cells_compile_for_every_level(level, tmp_path):
    """Plan only where the host cannot run the level: the windowed biLSTM (widened gate
    vectors, rational gates, register tiles at 4, 8 and 16 lanes and NEON's 4) compiles."""
    m, _ = model(steps=(-1,), views=True)
    path = str(tmp_path / "m.onnx")
    onnx.save(m, path)
    opts = level.options if level is not None else dict(target="aarch64")
    info = glowpy.compile(path, str(tmp_path / "b"), **opts)
    assert os.path.getsize(info.files[".o"]) > 0
