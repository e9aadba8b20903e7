"""Patch-based execution (glowpy/ir/patch): the first stage computed row band by row band.

Every check compiles through the real path and runs the bundle: the patched outputs must be
bit-identical to the untiled bundle's for integer models (and equal onnxruntime's within the
float tolerance for float ones), the activation region must shrink to the stated figures, and
the memory report must say what was done."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.errors import ModelError
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from test_int8 import run_on_board
from util import GraphBuilder, check_against_onnxruntime, model_path, reference_data

# issue 23: half the tensor-level floor of the untiled plans (int8 VWW 55,296 B, ResNet-8 49,152 B)
HALF_FLOOR = {"mlperf_tiny_vww_int8_qdq": 27648, "mlperf_tiny_resnet8_int8_qdq": 24576}


def _build(name, out, **options):
    report = out + ".json"
    info = glowpy.compile(model_path(name), out, dump_memory_report=report, **options)
    return info, json.load(open(report))


def _run(info, x):
    return Bundle(info.directory, info.name).run({info.inputs[0]["name"]: x})


@pytest.mark.parametrize("name", sorted(HALF_FLOOR))
def test_int8_models_patched_halve_the_floor_bit_identically(name, tmp_path):
    # the unpatched plan of the same kernels: patches keep the integer ones (by default a
    # host runs the convolutions on the float kernels, passes/quant/float_exact.py)
    plain, rep0 = _build(name, str(tmp_path / "plain"), quantized_convolutions="integer")
    patched, rep1 = _build(name, str(tmp_path / "patched"), patch_overhead=10.0)
    act0, act1 = rep0["activations"]["size"], rep1["activations"]["size"]
    assert act1 <= HALF_FLOOR[name] < act0
    patch = rep1["activations"]["patch"]
    assert patch["applied"] and patch["before"] == act0 and patch["after"] == act1
    assert 0 < patch["overhead"] <= 0.10 and patch["bands"] >= 2 and patch["nodes"] >= 3
    assert patch["recomputed_macs"] == 0  # halos are kept, not recomputed
    assert "patch" not in rep0["activations"]
    for i in range(3):
        x = reference_data(name, i)[0][0]
        a, b = _run(plain, x), _run(patched, x)
        for k in a:
            np.testing.assert_array_equal(b[k], a[k], err_msg=f"{name} input {i} output {k}")


def test_kws_stays_at_its_floor(tmp_path):
    _, rep = _build("mlperf_tiny_kws_dscnn_int8_qdq", str(tmp_path / "b"), patch_overhead=10.0)
    assert rep["activations"]["size"] <= 16000


def test_patched_resnet8_on_cortex_m7_is_exact(tmp_path):
    """The patched int8 ResNet-8 on the emulated Cortex-M7 (DSP kernels on band shapes: first
    band with the top padding, one-row bands, the last with the bottom padding) computes the
    integer ops' numpy references bit for bit."""
    name = "mlperf_tiny_resnet8_int8_qdq"
    x = reference_data(name, 0)[0][0]
    g = optimize(load_onnx(model_path(name), warn=lambda m: None))
    want = evaluate(g, {g.inputs[0].name: x})[0]
    d = str(tmp_path / "m7")
    info = glowpy.compile(model_path(name), d, target="arm", mcpu="cortex-m7", float_abi="hard",
                          patch_overhead=10.0)
    assert info.manifest["memory"]["activations"] <= HALF_FLOOR[name]
    run = run_on_board(d, info.manifest, {info.inputs[0]["name"]: x})
    np.testing.assert_array_equal(run["outputs"][0].reshape(want.shape), want)


def _saved(model, tmp_path) -> str:
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    return path


def _stage_model(rng):
    """NHWC input -> Transpose -> Conv 3x3/2 (padded) -> depthwise 3x3 dilated 2 + Relu ->
    MaxPool 3x3/2 pad 1 -> residual Add with a 1x1 branch -> AveragePool 3x3 (padding not
    counted) -> Concat over channels with a Sigmoid branch -> Conv 3x3/2 -> global pool."""
    x = rng.standard_normal((1, 40, 36, 3)).astype(np.float32)
    g = GraphBuilder(x=x)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    t = g.node("Transpose", ["x"], perm=[0, 3, 1, 2], output=False)
    c1 = g.node("Conv", [t, w(8, 3, 3, 3), w(8)], strides=[2, 2], pads=[1, 1, 1, 1], output=False)
    dw = g.node("Conv", [c1, w(8, 1, 3, 3)], group=8, dilations=[2, 2], pads=[2, 2, 2, 2],
                output=False)
    r = g.node("Relu", [dw], output=False)
    mp = g.node("MaxPool", [r], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                output=False)
    pw = g.node("Conv", [mp, w(8, 8, 1, 1)], output=False)
    add = g.node("Add", [mp, pw], output=False)
    ap = g.node("AveragePool", [add], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                count_include_pad=0, output=False)
    sg = g.node("Sigmoid", [ap], output=False)
    cat = g.node("Concat", [ap, sg], axis=1, output=False)
    c2 = g.node("Conv", [cat, w(12, 16, 3, 3)], strides=[2, 2], pads=[0, 1, 1, 0], output=False)
    g.node("GlobalAveragePool", [c2])
    return g.model(), {"x": x}


def test_every_streamable_op_matches_onnxruntime_patched(tmp_path):
    model, feeds = _stage_model(np.random.default_rng(7))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    rep0 = tmp_path / "plain.json"
    glowpy.compile(path, str(tmp_path / "plain"), dump_memory_report=str(rep0))
    report = tmp_path / "patched.json"
    check_against_onnxruntime(model, feeds, str(tmp_path / "b"), rtol=1e-4, atol=1e-5,
                              patch_overhead=1000.0, dump_memory_report=str(report))
    patch = json.loads(report.read_text())["activations"]["patch"]
    assert patch["applied"] and patch["after"] < patch["before"]
    assert patch["before"] == json.loads(rep0.read_text())["activations"]["size"]
    assert patch["nodes"] >= 5  # Transpose, Conv, depthwise + Relu, MaxPool, Conv + Add


@pytest.mark.parametrize("bands", [2, 7, 40])
def test_every_stage_of_every_length_computes_the_same(bands, tmp_path):
    """Each prefix that is a stage, rewritten into `bands` bands, evaluated with the ops'
    numpy references: the cut and the outputs are the untiled graph's (the stages past the
    chooser's pick, Concat over channels, Sigmoid and the stride-2 Conv with uneven padding
    included)."""
    from glowpy.ir.patch.rewrite import Stage, rewrite
    model, feeds = _stage_model(np.random.default_rng(7))
    g = optimize(load_onnx(_saved(model, tmp_path), warn=lambda m: None))
    want = evaluate(g, feeds)
    ends = [e for e in range(1, len(g.nodes)) if Stage.find(g, e) is not None]
    assert len(ends) >= 7
    for end in ends:
        st = Stage.find(g, end)
        g2, what = rewrite(st, bands)
        assert what["bands"] == bands and what["nodes"] == end and what["recomputed_macs"] == 0
        got = evaluate(g2, feeds)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=f"stage end {end}")


def test_max_activations_meets_a_budget_or_refuses(tmp_path):
    name = "mlperf_tiny_vww_mobilenetv1_025"
    x = reference_data(name, 0)[0][0]
    want = reference_data(name, 0)[1][0]
    _, rep0 = _build(name, str(tmp_path / "plain"))
    budget = 80 * 1024
    assert rep0["activations"]["size"] > budget
    info, rep = _build(name, str(tmp_path / "b"), max_activations=budget)
    assert rep["activations"]["size"] <= budget
    assert rep["activations"]["patch"]["budget"] == budget
    got = list(_run(info, x).values())[0]
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-5)
    # a budget the untiled plan meets changes nothing
    _, rep2 = _build(name, str(tmp_path / "c"), max_activations=rep0["activations"]["size"])
    assert rep2["activations"]["size"] == rep0["activations"]["size"]
    assert not rep2["activations"]["patch"]["applied"]
    with pytest.raises(ModelError, match=r"smallest activation region this model reaches is "
                                         r"\d+ bytes"):
        glowpy.compile(model_path(name), str(tmp_path / "d"), max_activations=16 * 1024)
    assert not (tmp_path / "d").exists()


def test_max_activations_refusal_is_one_error_line(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, "-c", "from glowpy.cli import main; main()", "-model=" + model_path(
        "mlperf_tiny_vww_int8_qdq"), f"-emit-bundle={out}", "-max-activations=4K"],
        capture_output=True, text=True, timeout=600)
    assert res.returncode == 1, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "-max-activations=4096" in errors[0], res.stderr
    m = int(errors[0].split("reaches is ")[1].split(" bytes")[0])
    assert 4096 < m <= HALF_FLOOR["mlperf_tiny_vww_int8_qdq"]
    assert not out.exists()
    bad = subprocess.run([sys.executable, "-c", "from glowpy.cli import main; main()", "-model=" + model_path(
        "mlperf_tiny_vww_int8_qdq"), f"-emit-bundle={out}", "-max-activations=lots"],
        capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "error: -max-activations=lots" in bad.stderr


def test_report_page_shows_the_tiling(tmp_path):
    """-dump-report: the regions table gives the untiled size, the stage, the bands and the
    overhead (the figures -dump-memory-report has)."""
    page = tmp_path / "r.html"
    mem = tmp_path / "m.json"
    glowpy.compile(model_path("mlperf_tiny_resnet8_int8_qdq"), str(tmp_path / "b"),
                   patch_overhead=10.0, dump_report=str(page), dump_memory_report=str(mem))
    p = json.loads(mem.read_text())["activations"]["patch"]
    html = page.read_text()
    assert f'data-key="patch-before">{p["before"]:,}<' in html
    assert f'in {p["bands"]} row bands' in html and f'first {p["nodes"]} nodes' in html
    assert f"{p['recomputed_macs']:,} MACs recomputed" in html
    assert f'>{100 * p["overhead"]:.1f}% overhead<' in html


@pytest.mark.parametrize("name", ["mnist8", "ulfd_slim320"])
def test_shared_float_models_patched_match_untiled(name, tmp_path):
    """Models the patch pass was not written for (mnist8: 28 x 28 Conv/MaxPool; the face
    detector: 240 x 320 with strided and depthwise layers) stream their first stage and keep
    their outputs (float: the kernels' summation order only)."""
    plain, rep0 = _build(name, str(tmp_path / "plain"))
    patched, rep1 = _build(name, str(tmp_path / "patched"), patch_overhead=1000.0)
    assert rep1["activations"]["size"] < rep0["activations"]["size"] / 2
    assert rep1["activations"]["patch"]["applied"]
    feeds = {i["name"]: x for i, x in zip(plain.inputs, reference_data(name, 0)[0])}
    a = Bundle(plain.directory, plain.name).run(feeds)
    b = Bundle(patched.directory, patched.name).run(feeds)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6 * float(np.abs(a[k]).max()))
