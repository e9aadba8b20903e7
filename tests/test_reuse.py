"""Kernels reused without a second emission (glowpy/codegen/reuse.py): equal Winograd layers
call one function, the bundle computes what onnxruntime does, and the object file is byte for
byte the one every layer emitting its own kernel gives. Compiled for named x86-64 levels
(vector_levels.py), run where the host can."""
from __future__ import annotations

import glob
import json
import os

import numpy as np
import onnx
import pytest
from onnx import helper

import glowpy
from glowpy.codegen import registry, reuse
from util import check_against_onnxruntime, make_graph_model
from vector_levels import LEVELS, RUNNABLE

RNG = np.random.default_rng(11)
C, H = 16, 16


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def chain_model(layers=3):
    """x (4H x 4H) -> 1x1 -> Relu -> 4x4 MaxPool -> `layers` x (3x3 C -> C, own weights, Relu).
    The tensors before the pooling make room for Winograd's scratch (test_winograd.conv_model)."""
    inits = {"we": rand(C, C, 1, 1, scale=0.3)}
    nodes = [helper.make_node("Conv", ["x", "we"], ["e"]), helper.make_node("Relu", ["e"], ["er"]),
             helper.make_node("MaxPool", ["er"], ["t0"], kernel_shape=[4, 4], strides=[4, 4])]
    for i in range(layers):
        inits[f"w{i}"], inits[f"b{i}"] = rand(C, C, 3, 3, scale=0.2), rand(C)
        nodes += [helper.make_node("Conv", [f"t{i}", f"w{i}", f"b{i}"], [f"c{i}"],
                                   kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"t{i + 1}"])]
    return make_graph_model(nodes, {"x": rand(1, C, 4 * H, 4 * H)}, [f"t{layers}"], inits,
                            opset=13)


def winograd_kernels(bundle_dir):
    """The kernel function each Winograd layer's transformed weights belong to (the manifest)."""
    [manifest] = glob.glob(os.path.join(bundle_dir, "*.json"))
    with open(manifest) as f:
        consts = json.load(f)["constants"]
    return [c["kernel"] for c in consts if c.get("layout", "").startswith("winograd")]


@pytest.mark.parametrize("level", [pytest.param(lv, id=lv.name) for lv in LEVELS[1:]
                                   if lv in RUNNABLE])
def test_equal_winograd_layers_share_one_emission(level, tmp_path, monkeypatch):
    emitted = []
    emit = registry.emit

    def counting(k):
        emitted.append(k.instr.op)
        emit(k)
    monkeypatch.setattr(registry, "emit", counting)
    model = chain_model(4)
    feeds = {"x": rand(1, C, 4 * H, 4 * H)}
    report = str(tmp_path / "memory.json")
    check_against_onnxruntime(model, feeds, tmp_path / "a", rtol=1e-4, atol=1e-4,
                              dump_memory_report=report, **level.options)
    names = winograd_kernels(tmp_path / "a" / "bundle")
    with open(report) as f:  # a reused kernel's instruction still names its variant
        variants = [i.get("variant", {}).get("name") for i in json.load(f)["instructions"]
                    if i["kernel"] == "ConvWinograd"]
    assert variants == ["winograd"] * 4
    # the last layer writes the graph's output (another region), and on AVX2 the first one's
    # input has no room before it for whole-vector loads (Kernel.readable answers otherwise):
    # the two middle layers are equal in all, and the third is not emitted again (AVX2: 3
    # emissions, AVX-512, whose masked loads ask nothing: 2)
    assert len(names) == 4 and len(set(names)) < 4
    assert emitted.count("ConvWinograd") <= 3
    assert names[1] == names[2]


@pytest.mark.parametrize("level", [pytest.param(lv, id=lv.name) for lv in LEVELS[1:]])
def test_reuse_gives_the_same_object(level, tmp_path, monkeypatch):
    """Compiles only (every host, both levels): reused or emitted again, the same bytes."""
    path = str(tmp_path / "m.onnx")
    onnx.save(chain_model(4), path)
    glowpy.compile(path, str(tmp_path / "a"), **level.options)
    monkeypatch.setattr(reuse, "PURE", frozenset())
    glowpy.compile(path, str(tmp_path / "b"), **level.options)
    [a], [b] = (glob.glob(str(tmp_path / d / "*.o")) for d in "ab")
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fa.read() == fb.read()


class _Kernel:
    """What Reuse asks of a Kernel: its operands and the placement question."""

    def __init__(self, room):
        self.operands = ["x", "w", "y"]
        self.room = room

    def readable(self, buf, floats):
        return self.room[buf], self.room[buf]


def test_reuse_only_with_equal_placement_answers():
    r = reuse.Reuse()
    first = _Kernel({"x": True, "w": True, "y": True})
    trace = r.tracing(first)
    assert first.readable("x", 40) == (True, True)  # the emitter asks
    r.add("key", trace, "k1_ConvWinograd", {"variant": "winograd"}, wrote=False)
    assert trace == [((0, 40), (True, True))]
    assert r.find(_Kernel({"x": True, "w": False, "y": False}), "key") == \
        ("k1_ConvWinograd", {"variant": "winograd"})
    assert r.find(_Kernel({"x": False, "w": True, "y": True}), "key") is None
    assert r.find(first, "another key") is None
    # an emission that wrote a table (or asked about memory that is no operand) is not kept
    r.add("table", [], "k2_ConvWinograd", {}, wrote=True)
    assert r.find(first, "table") is None
    unknown = r.tracing(_Kernel({"x": True, "w": True, "y": True, "scratch": True}))
    unknown.append(None)
    r.add("asked", unknown, "k3_ConvWinograd", {}, wrote=False)
    assert r.find(first, "asked") is None
