"""Flat pixel tiles in chunks (glowpy/codegen/kernels/conv/pixel.py, the chunk size from
tiles.chunk_tiles): with the pixel tiles outermost, runs of tiles with every channel block
inside each run. Chunks forced onto small layers at each x86 vector level the host runs (the
interior tiles in chunks, the edge tiles and the leftover ones after them; every tile but the
last with AVX-512's free masks), run against onnxruntime under guard pages with the fused
epilogues; and the unforced plan per level and target."""
import json
from types import SimpleNamespace

import onnx
import pytest

import glowpy
from glowpy.codegen.kernels.tiles import chunk_tiles
from test_kernels_fast import check_guarded, check_pointwise_pair, f32
from util import GraphBuilder
from vector_levels import LEVELS, params, plan_only

POINTWISE = [  # (input, output channels, forced plan)
    ((1, 16, 20, 20), 40, {"flat": True, "mr": 4, "nv": 1, "chunk": 3}),  # leftover tiles
    ((1, 12, 19, 21), 37, {"flat": True, "mr": 5, "nv": 2, "chunk": 2}),  # a partial last tile
    ((2, 8, 16, 24), 9, {"flat": True, "mr": 3, "nv": 1, "chunk": 4}),  # batch 2, a partial block
]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("xs, m, forced", POINTWISE)
def test_chunked_pointwise(xs, m, forced, level, tmp_path):
    check_pointwise_pair("pixel_vectorized", xs, m, forced, level, tmp_path)


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("group", [1, 2])
def test_chunked_3x3(group, level, tmp_path):
    """Taps shifted across the plane: head and tail tiles with masks around the chunks of
    interior ones; grouped, the chunks run per group."""
    g = GraphBuilder(x=f32(1, 4, 18, 20))
    y = g.node("Conv", ["x", f32(12, 4 // group, 3, 3, scale=0.3), f32(12)], output=False,
               pads=[1, 1, 1, 1], group=group)
    g.node("Relu", [y])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report),
                  kernel_variants={"Conv": ("pixel_vectorized",
                                            {"flat": True, "mr": 4, "nv": 1, "chunk": 2})})
    [v] = [i["variant"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert v == {"name": "pixel_vectorized", "params": {"flat": True, "mr": 4, "nv": 1,
                                                        "chunk": 2}}


def test_chunk_tiles():
    """Half of L1 of input per chunk, whole cache lines per plane, at least 8 tiles; none
    without cache figures."""
    zen3 = SimpleNamespace(l1d_bytes=32 << 10)
    assert chunk_tiles(zen3, 16, 16) == 16  # 16 x 256 floats: 16 KiB
    assert chunk_tiles(zen3, 16, 24) == 10  # 11 tiles would end mid-line
    assert chunk_tiles(zen3, 32, 16) == 8
    assert chunk_tiles(zen3, 24, 16) == 10
    assert chunk_tiles(zen3, 64, 16) == 0  # 4 tiles: level or slower
    assert chunk_tiles(zen3, 128, 16) == 0
    assert chunk_tiles(SimpleNamespace(l1d_bytes=0), 16, 16) == 0


def _graph():
    g = GraphBuilder(x=f32(1, 16, 112, 112), y=f32(1, 128, 56, 56), z=f32(1, 3, 112, 112))
    g.node("Conv", ["x", f32(96, 16, 1, 1, scale=0.2)])
    g.node("Conv", ["y", f32(128, 128, 1, 1, scale=0.1)])
    g.node("Conv", ["z", f32(32, 3, 3, 3, scale=0.2)], pads=[1, 1, 1, 1])
    return g


def _plans(tmp_path, level=None, **options):
    """The Conv variants the model compiles to; where `level` runs here, the bundle is also
    checked against onnxruntime (the unforced chunks included)."""
    g = _graph()
    report = tmp_path / "r.json"
    if level is not None and not plan_only(level):
        check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    else:
        onnx.save(g.model(opset=13), tmp_path / "m.onnx")
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"),
                       dump_memory_report=str(report), **options)
    return [i["variant"] for i in json.loads(report.read_text())["instructions"]
            if i["kernel"] == "Conv"]


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_chosen_plan(level, tmp_path):
    """Unforced, compiled for each level (family caches: 32 KiB L1) and run against
    onnxruntime at the levels this host runs: MobileNetV2's 16 -> 96 expansion on 112x112
    runs in chunks of whole lines; a 128 -> 128 layer on 56x56 does not where a tile is two
    vectors or more; a 3x3 layer never (its shifted taps' masks)."""
    family = SimpleNamespace(l1d_bytes=32 << 10)
    big, small, shifted = _plans(tmp_path, level, **level.options)
    assert big["name"] == small["name"] == "pixel_vectorized" and big["params"]["flat"]
    assert shifted["params"].get("chunk", 0) == 0
    nr = big["params"]["nv"] * level.lanes
    assert big["params"]["chunk"] == chunk_tiles(family, 16, nr) >= 8
    nr = small["params"]["nv"] * level.lanes
    assert small["params"]["chunk"] == chunk_tiles(family, 128, nr)
    if level.lanes >= 8:  # two vectors a tile or more: 2 tiles a chunk at most, not taken
        assert small["params"]["chunk"] == 0


def test_scalar_target_unchunked(tmp_path):
    """Microcontrollers (no data-cache figures: they run from TCM/SRAM) keep one tile order."""
    plans = _plans(tmp_path, target="arm", mcpu="cortex-m7")
    assert [p["name"] for p in plans] == ["pixel_vectorized"] * 3
    assert [p["params"]["chunk"] for p in plans] == [0, 0, 0]
