"""Time or bytes first (planner.build's `memory_first`, -activation-memory): the in-place 1x1
convolution (ConvPointwiseInPlace) saves an activation buffer but is slower than the ordinary
kernel, so hosts never take it and microcontrollers keep the smallest plan. Every plan is
checked in a real bundle: the kernels the memory report names, the region sizes, and (on the
levels this host runs) the outputs against onnxruntime."""
from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import helper, numpy_helper

import glowpy
from glowpy.errors import UsageError
from util import check_against_onnxruntime
from vector_levels import LEVELS, RUNNABLE

C, H, W = 48, 5, 5  # a DS-CNN-like chain of pointwise layers on a small plane


def _chain(layers=3):
    rng = np.random.default_rng(7)
    nodes, inits, prev = [helper.make_node("Exp", ["x"], ["e"])], [], "e"
    for i in range(layers):
        w = (rng.standard_normal((C, C, 1, 1)) / np.sqrt(C)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        inits.append(numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), f"b{i}"))
        out = "y" if i == layers - 1 else f"r{i}"
        nodes += [helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [out])]
        prev = out
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", 1, [1, C, H, W])],
                          [helper.make_empty_tensor_value_info("y")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = np.random.default_rng(8).standard_normal((1, C, H, W)).astype(np.float32) * 0.5
    return m, {"x": x}


def _plan(tmp_path, tag, **options):
    """(kernels of the instructions, activation bytes) of a compiled bundle."""
    m, _ = _chain()
    path = tmp_path / "chain.onnx"
    if not path.exists():
        import onnx
        onnx.save(m, str(path))
    report = tmp_path / f"{tag}.json"
    info = glowpy.compile(str(path), str(tmp_path / tag), dump_memory_report=str(report),
                          **options)
    with open(report) as f:
        kernels = [i["kernel"] for i in json.load(f)["instructions"]]
    return kernels, info.memory["activations"]


PLANE = C * H * W * 4


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_hosts_put_time_first(level, tmp_path):
    """x86 at every vector width: no slow in-place kernel by default; -activation-memory=min
    takes it on the same target and saves a whole plane."""
    fast, fast_bytes = _plan(tmp_path, "auto", **level.options)
    small, small_bytes = _plan(tmp_path, "min", activation_memory="min", **level.options)
    assert "ConvPointwiseInPlace" not in fast
    assert small.count("ConvPointwiseInPlace") >= 1
    assert fast_bytes >= 2 * PLANE  # input and output of a layer live together
    assert small_bytes <= fast_bytes - PLANE // 2


@pytest.mark.parametrize("mcpu", ["cortex-m7", "cortex-m55"])
def test_microcontrollers_put_bytes_first(mcpu, tmp_path):
    """M-profile cores keep the smallest plan by default (the same as -activation-memory=min);
    -activation-memory=fast gives it up for speed there too."""
    arm = dict(target="arm", mcpu=mcpu, float_abi="hard")
    auto, auto_bytes = _plan(tmp_path, "auto", **arm)
    small, small_bytes = _plan(tmp_path, "min", activation_memory="min", **arm)
    fast, fast_bytes = _plan(tmp_path, "fast", activation_memory="fast", **arm)
    assert auto.count("ConvPointwiseInPlace") >= 1 and auto == small
    assert auto_bytes == small_bytes < fast_bytes
    assert "ConvPointwiseInPlace" not in fast


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("mode", ["auto", "min"])
def test_both_plans_match_onnxruntime(level, mode, tmp_path):
    m, feeds = _chain()
    check_against_onnxruntime(m, feeds, tmp_path, rtol=1e-4, atol=1e-5, activation_memory=mode,
                              **level.options)


def test_unknown_priority_is_a_usage_error(tmp_path):
    m, _ = _chain(1)
    import onnx
    onnx.save(m, str(tmp_path / "m.onnx"))
    with pytest.raises(UsageError, match="-activation-memory=small: expected auto, min, fast"):
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"), activation_memory="small")
