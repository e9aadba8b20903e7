"""Winograd F(2x2, 3x3) convolutions (codegen/kernels/winograd.py): chosen on vector targets of
8+ float lanes (AVX2, AVX-512) for 3x3 stride-1 convolutions, checked against onnxruntime
through the real compile-and-run path, with every epilogue form, padding and odd size. Each
test compiles for explicit x86 vector levels (tests/vector_levels.py), never for "the host":
every host runs the SSE2 and AVX2 code, AVX-512 hosts the AVX-512 code too, and the plans
(tiles, scratch) of every level are checked on every host."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import helper

import glowpy
from util import check_against_onnxruntime, make_graph_model, model_path
from vector_levels import LEVELS, params, plan_only

RNG = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_model(n, c, h, w, k, pads, bias=True, residual=False, relu=False):
    """x (4h x 4w) -> 1x1 -> Relu -> 4x4 MaxPool = t -> 3x3 conv [+ t] [-> Relu]. The big
    tensors before the pooling make room in the activations, so the 3x3's scratch costs no
    memory and the planner keeps the Winograd form."""
    inits = {"we": rand(c, c, 1, 1, scale=0.3), "w": rand(k, c, 3, 3, scale=0.2)}
    nodes = [helper.make_node("Conv", ["x", "we"], ["e"]), helper.make_node("Relu", ["e"], ["er"]),
             helper.make_node("MaxPool", ["er"], ["t"], kernel_shape=[4, 4], strides=[4, 4])]
    ins = ["t", "w"]
    if bias:
        inits["b"] = rand(k)
        ins.append("b")
    nodes.append(helper.make_node("Conv", ins, ["y0"], kernel_shape=[3, 3], pads=pads))
    out = "y0"
    if residual:
        ho, wo = h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2
        assert (k, ho, wo) == (c, h, w)
        nodes.append(helper.make_node("Add", ["y0", "t"], ["y1"]))
        out = "y1"
    if relu:
        nodes.append(helper.make_node("Relu", [out], ["y"]))
        out = "y"
    return make_graph_model(nodes, {"x": rand(n, c, 4 * h, 4 * w)}, [out], inits, opset=13)


def kernels(report_path):
    with open(report_path) as f:
        return [i["kernel"] for i in json.load(f)["instructions"]]


CASES = [  # n, c, h, w, k, pads (t, l, b, r), epilogue
    (1, 16, 16, 16, 16, [1, 1, 1, 1], dict(residual=True, relu=True)),
    (1, 32, 14, 14, 24, [1, 1, 1, 1], dict(relu=True)),
    (1, 16, 13, 19, 16, [1, 1, 1, 1], dict(residual=True)),  # odd: partial tiles
    (2, 16, 12, 40, 20, [0, 1, 2, 0], dict()),  # batch 2, asymmetric pads
    (1, 24, 15, 15, 32, [0, 0, 0, 0], dict(bias=False)),  # no padding, no bias
    (1, 64, 28, 28, 64, [1, 1, 1, 1], dict(residual=True, relu=True)),  # several blocks
]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("case", CASES, ids=[f"{c[1]}x{c[2]}x{c[3]}to{c[4]}" for c in CASES])
def test_winograd_matches_onnxruntime(case, level, tmp_path):
    n, c, h, w, k, pads, extra = case
    m = conv_model(n, c, h, w, k, pads, **extra)
    feeds = {"x": rand(n, c, 4 * h, 4 * w)}
    report = str(tmp_path / "memory.json")
    # sums of up to 576 products reaching |y| ~ 75, in another order than onnxruntime's: atol
    # is ~1.5e-6 of the largest output (measured: Winograd 3.4e-5, the direct kernel 7.3e-5)
    check_against_onnxruntime(m, feeds, tmp_path / "b", rtol=1e-4, atol=1e-4,
                              dump_memory_report=report, **level.options)
    # 4-lane SSE keeps the direct kernels (winograd.MIN_LANES)
    assert ("ConvWinograd" in kernels(report)) == (level.lanes >= 8)
    check_against_onnxruntime(m, feeds, tmp_path / "d", rtol=1e-4, atol=1e-4,
                              dump_memory_report=report, winograd=False, **level.options)
    assert "ConvWinograd" not in kernels(report)


IN_PLACE_CASES = [  # one block of MR channels covers K on AVX-512: M overwrites V
    (1, 16, 13, 19, 16, [1, 1, 1, 1], dict(residual=True, relu=True)),  # K = C, partial tiles
    (2, 32, 14, 14, 24, [0, 1, 2, 0], dict(relu=True)),  # K < C, batch 2, asymmetric pads
]


@pytest.mark.parametrize("level", [pytest.param(lv, id=lv.name) for lv in LEVELS[1:]])
@pytest.mark.parametrize("case", IN_PLACE_CASES, ids=[f"{c[1]}to{c[4]}" for c in IN_PLACE_CASES])
def test_winograd_scratch_without_m_matches_onnxruntime(case, level, tmp_path):
    """Blocks of one tile row, as ResNet-8's tight budget gives. AVX-512's 32 registers hold
    a tile of MR >= K channels, so M[xi] overwrites V[xi] and the scratch is V alone; AVX2's 16
    hold at most 13 accumulators (conv_tiling.choose_tile), so M follows V. Both plans are
    checked on every host; the bundle runs against onnxruntime where the host executes it."""
    from glowpy.codegen.kernels.conv import winograd
    n, c, h, w, k, pads, extra = case
    m = conv_model(n, c, h, w, k, pads, **extra)
    feeds = {"x": rand(n, c, 4 * h, 4 * w)}
    report = tmp_path / "memory.json"
    rows = {"ConvWinograd": ("winograd", {"rows": 1})}  # through the kernel registry
    if plan_only(level):
        path = str(tmp_path / "m.onnx")
        import onnx
        onnx.save(m, path)
        glowpy.compile(path, str(tmp_path / "b"), dump_memory_report=str(report),
                       kernel_variants=rows, **level.options)
    else:
        check_against_onnxruntime(m, feeds, tmp_path / "b", rtol=1e-4, atol=1e-4,
                                  dump_memory_report=str(report), kernel_variants=rows,
                                  **level.options)
    with open(report) as f:
        r = json.load(f)
    [ins] = [i for i in r["instructions"] if i["kernel"] == "ConvWinograd"]
    a = ins["in_place"]["winograd"]
    [size] = [b["size"] for b in r["buffers"] if b["name"] == ins["name"] + winograd.SCRATCH]
    assert a["rows"] == 1
    a2 = (a["m"] + 2) ** 2
    if level.lanes == 16:
        assert a["mr"] >= k and size == a2 * c * a["tpad"] * 4
    else:
        assert a["mr"] < k and size == a2 * (c + a["mr"]) * a["tpad"] * 4


@pytest.mark.parametrize("level", [pytest.param(lv, id=lv.name) for lv in LEVELS[1:]])
def test_winograd_off_plans_without_scratch(level, tmp_path):
    """Compiles only (for AVX2 and AVX-512 on every host): the planner's growth limit."""
    from glowpy.ir import planner
    on = glowpy.compile(model_path("mlperf_tiny_resnet8"), str(tmp_path / "on"),
                        dump_memory_report=str(tmp_path / "on.json"), **level.options)
    off = glowpy.compile(model_path("mlperf_tiny_resnet8"), str(tmp_path / "off"),
                         dump_memory_report=str(tmp_path / "off.json"), winograd=False,
                         **level.options)
    assert "ConvWinograd" in kernels(tmp_path / "on.json")
    assert "ConvWinograd" not in kernels(tmp_path / "off.json")
    assert off.memory["activations_scratch"] == 0
    assert on.memory["activations_scratch"] > 0
    # the planner keeps the Winograd form only within planner.TRANSFORM_GROWTH (25%)
    assert off.memory["activations"] <= on.memory["activations"] <= \
        (1 + planner.TRANSFORM_GROWTH) * off.memory["activations"]
    if level.lanes == 16:
        # the 16-channel layers' scratch is V alone (16 x 16 channels x 16 tiles), 12.5% here;
        # AVX2's is V and M (no 16-channel register tile), 17%
        assert on.memory["activations"] <= 1.125 * off.memory["activations"]
    assert on.manifest["options"]["winograd"] is True and off.manifest["options"]["winograd"] is False


@pytest.mark.parametrize("target", [dict(target="thumbv7em-none-eabihf", mcpu="cortex-m7",
                                         float_abi="hard"), dict(target="aarch64-linux-gnu")])
def test_narrow_vector_targets_keep_direct_convolutions(target, tmp_path):
    """Scalar FPUs and 4-lane NEON: the transforms would cost more than they save."""
    report = str(tmp_path / "m.json")
    glowpy.compile(model_path("mlperf_tiny_resnet8"), str(tmp_path / "b"),
                   dump_memory_report=report, **target)
    assert "ConvWinograd" not in kernels(report)
    assert any(k.startswith("Conv") for k in kernels(report))


def test_cli_winograd_flag(tmp_path):
    import typer

    from glowpy.cli import app, run
    cmd = typer.main.get_command(app)
    out = str(tmp_path / "b")
    assert run([f"-model={model_path('mlperf_tiny_resnet8')}", f"-emit-bundle={out}",
                "-winograd=false", f"-dump-memory-report={tmp_path / 'm.json'}"],
               "model-compiler", cmd) == 0
    assert "ConvWinograd" not in kernels(tmp_path / "m.json")
    assert run([f"-model={model_path('mlperf_tiny_resnet8')}", f"-emit-bundle={out}2",
                "-winograd=maybe"], "model-compiler", cmd) == 2
    assert not os.path.exists(out + "2")
