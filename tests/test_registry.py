"""The kernel registry (glowpy/codegen/registry.py): ranked variants per op, one selection
point, forcing through the compile option / -kernel-variant, the choice in the memory report.

Every variant of the float ops is forced on a graph it applies to and checked against
onnxruntime, for each x86 vector level the host runs (tests/vector_levels.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from util import GraphBuilder, check_against_onnxruntime, make_model
from vector_levels import params

RNG = np.random.default_rng(5)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def conv_model(group=1):
    c = 8
    return make_model("Conv", {"x": f32(1, c, 12, 12)}, 1, dict(pads=[1, 1, 1, 1], group=group),
                      {"w": f32(16 if group == 1 else c, c // group, 3, 3, scale=0.3), "b": f32(16 if group == 1 else c)})


def graph(op):
    g = GraphBuilder(x=f32(1, 3, 9, 11), a=f32(4, 24))
    if op in ("MaxPool", "AveragePool"):
        g.node(op, ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    elif op == "GlobalAveragePool":
        g.node(op, ["x"])
    elif op == "Gemm":
        g.node("Gemm", ["a", f32(24, 10), f32(10)])
    elif op == "MatMul":
        g.node("MatMul", ["a", f32(24, 10)])
    return g.model(opset=13), g.feeds


CASES = [("Conv", "depthwise", lambda: conv_model(group=8)),
         ("Conv", "depthwise_phase", lambda: make_model(
             "Conv", {"x": f32(1, 8, 12, 12)}, 1, dict(pads=[1, 1, 1, 1], group=8, strides=[2, 2]),
             {"w": f32(8, 1, 3, 3), "b": f32(8)})),
         ("Conv", "pointwise_strided", lambda: make_model(
             "Conv", {"x": f32(1, 8, 12, 18)}, 1, dict(strides=[2, 2]), {"w": f32(16, 8, 1, 1), "b": f32(16)})),
         ("Conv", "im2col", lambda: make_model(
             "Conv", {"x": f32(1, 3, 13, 11)}, 1, dict(strides=[2, 2], pads=[1, 2, 1, 0]),
             {"w": f32(16, 3, 3, 3), "b": f32(16)})),
         ("Conv", "pointwise_packed", lambda: make_model(  # 7x7: not whole cache lines
             "Conv", {"x": f32(1, 320, 7, 7)}, 1, {}, {"w": f32(24, 320, 1, 1, scale=0.1), "b": f32(24)})),
         ("Conv", "channel_vectorized", lambda: make_model(
             "Conv", {"x": f32(1, 64, 7, 7)}, 1, dict(pads=[1, 1, 1, 1]), {"w": f32(64, 64, 3, 3, scale=0.1)})),
         ("Conv", "pixel_vectorized", conv_model),
         ("Conv", "direct", conv_model),
         ("MaxPool", "vector", lambda: graph("MaxPool")),
         ("MaxPool", "direct", lambda: graph("MaxPool")),
         ("AveragePool", "vector", lambda: graph("AveragePool")),
         ("AveragePool", "direct", lambda: graph("AveragePool")),
         ("GlobalAveragePool", "vector", lambda: graph("GlobalAveragePool")),
         ("GlobalAveragePool", "direct", lambda: graph("GlobalAveragePool")),
         ("Gemm", "vector", lambda: graph("Gemm")),
         ("Gemm", "direct", lambda: graph("Gemm")),
         ("MatMul", "vector", lambda: graph("MatMul")),
         ("MatMul", "direct", lambda: graph("MatMul"))]


def variants_used(report, op):
    with open(report) as f:
        return [i["variant"]["name"] for i in json.load(f)["instructions"] if i["kernel"] == op]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("op, name, build", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_forced_variant_matches_onnxruntime(op, name, build, level, tmp_path):
    built = build()
    model, feeds = built if isinstance(built, tuple) else (built, None)
    if feeds is None:
        feeds = {i.name: f32(*[d.dim_value for d in i.type.tensor_type.shape.dim])
                 for i in model.graph.input}
    report = str(tmp_path / "m.json")
    check_against_onnxruntime(model, feeds, tmp_path / "b", rtol=1e-4, atol=1e-5,
                              dump_memory_report=report, kernel_variants={op: name},
                              **level.options)
    assert variants_used(report, op) == [name]


def test_selection_is_by_rank_and_plan(tmp_path):
    """Unforced: the highest-ranked variant whose plan answers; the report gives its params
    (compiled for AVX2 explicitly, so the choice is the same on every host; nothing runs)."""
    from glowpy.codegen import registry
    from glowpy.codegen.kernels import catalog  # noqa: F401
    ranks = [(v.name, v.rank) for v in registry.variants("Conv")]
    assert ranks == [("depthwise_phase", 41), ("depthwise", 40), ("im2col", 36), ("pointwise_strided", 35),
                     ("channel_vectorized", 30), ("pointwise_packed", 25), ("pixel_vectorized", 20), ("direct", 0)]
    import onnx

    import glowpy
    path = str(tmp_path / "m.onnx")
    onnx.save(conv_model(), path)
    report = str(tmp_path / "m.json")
    glowpy.compile(path, str(tmp_path / "b"), dump_memory_report=report, mcpu="x86-64-v3")
    with open(report) as f:
        [ins] = [i for i in json.load(f)["instructions"] if i["kernel"] == "Conv"]
    # 8 channels x 9 taps = 72 products per output: pixel lanes (channel tiles need >= 160)
    assert ins["variant"]["name"] == "pixel_vectorized"
    assert set(ins["variant"]["params"]) == {"flat", "mr", "nv", "chunk"}
    assert ins["variant"]["params"]["chunk"] == 0  # a 3x3 layer: tiles outermost, unchunked
    # every registered op has exactly one fallback (a variant without a plan) at the bottom
    for op in registry.ops():
        vs = registry.variants(op)
        assert vs[-1].plan is None and all(v.plan is not None for v in vs[:-1]), op


def test_cli_kernel_variant(tmp_path, capsys):
    import onnx
    import typer

    from glowpy.cli import app, run
    cmd = typer.main.get_command(app)
    path = str(tmp_path / "m.onnx")
    onnx.save(conv_model(), path)
    rep = tmp_path / "r.json"
    assert run([f"-model={path}", f"-emit-bundle={tmp_path / 'a'}", "-kernel-variant=Conv:direct",
                f"-dump-memory-report={rep}"], "model-compiler", cmd) == 0
    assert variants_used(rep, "Conv") == ["direct"]
    assert run([f"-model={path}", f"-emit-bundle={tmp_path / 'b'}",
                "-kernel-variant=Conv:!pixel_vectorized", "-kernel-variant=Conv:!channel_vectorized",
                f"-dump-memory-report={rep}", "-mcpu=x86-64-v3"], "model-compiler", cmd) == 0
    assert variants_used(rep, "Conv") == ["direct"]
    capsys.readouterr()
    assert run([f"-model={path}", f"-emit-bundle={tmp_path / 'c'}", "-kernel-variant=Conv:fast"],
               "model-compiler", cmd) == 2
    err = capsys.readouterr().err
    assert ("Conv has the variants depthwise_phase, depthwise, im2col, pointwise_strided, channel_vectorized, "
            "pointwise_packed, pixel_vectorized, direct") in err
    for args, text in [(["-kernel-variant=Conv:!fast"], "-kernel-variant=Conv:fast: Conv has the variants"),
                       (["-kernel-variant=Conv:direct", "-kernel-variant=Conv:!pixel_vectorized"],
                        "Conv is given more than once"),
                       (["-kernel-variant=Cnv:direct"], "no op 'Cnv' has kernels")]:
        assert run([f"-model={path}", f"-emit-bundle={tmp_path / 'e'}", *args], "model-compiler",
                   cmd) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and text in err, err
    assert run([f"-model={path}", f"-emit-bundle={tmp_path / 'd'}",
                "-kernel-variant=Conv:depthwise"], "model-compiler", cmd) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the forced variant 'depthwise' does not apply" in err
    assert not any((tmp_path / d).exists() for d in "cde")
