"""Integer layers of one shape compile as one function.

A repeated block (a transformer's layers, an unrolled scan's steps, a CNN stage) has int8
MatMuls, Muls, Adds, Requantizes and convolutions of equal shapes that differ only in their
scales and zero points. Those
numbers are read from the constant region at run time (Kernel.runtime_int), so the kernels'
text is the same and module._share keeps one function per shape: LLVM compiles each once.
Checked in the emitted IR (-dump-llvm-ir) at every runnable x86 level, per-tensor weights
(ONNX Runtime's quantize_static default), and the outputs equal the references bit for bit and
lie within 1 LSB of onnxruntime. Another shape keeps its own function. The Cortex-M7, which
counts bytes first, keeps the Requantize's numbers in its code."""
from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import onnx
import pytest

import glowpy

from int8_check import byte_feeds, plan, same_as_references
from test_int8 import QDQ
from util import make_graph_model
from vector_levels import params


def repeated_model(rng):
    m = QDQ(np.uint8)
    outs = []
    for i, (ys, yz) in enumerate([(0.21, 131), (0.17, 118)]):  # two layers of one shape
        x = m.dq("x", 0.05 + 0.01 * i, m.zp(120 + 3 * i))
        w, _ = m.weight((48, 40), 0, rng, per_channel=False)
        outs.append(m.q(m.op("MatMul", [x, w]), ys, yz))
        a, b = m.dq("a", 0.04, m.zp(100 + i)), m.dq("b", 0.03, m.zp(90 - i))
        outs.append(m.q(m.op("Mul", [a, b]), 0.05 + 0.02 * i, 110 + i))
        outs.append(m.q(m.op("Add", [a, b]), 0.07 + 0.005 * i, 100 - 2 * i))
        outs.append(m.q(m.dq("a", 0.04, m.zp(100)), 0.05 + 0.01 * i, 128 + 5 * i))
    w, _ = m.weight((48, 24), 0, rng, per_channel=False)  # another shape
    outs.append(m.q(m.op("MatMul", [m.dq("x", 0.05, m.zp(120)), w]), 0.2, 128))
    feeds = byte_feeds({"x": (6, 48), "a": (3, 70), "b": (3, 70)}, np.uint8, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("level", params())
def test_layers_of_one_shape_compile_once(level, tmp_path):
    model, feeds = repeated_model(np.random.default_rng(5))
    same_as_references(model, feeds, tmp_path, [dict(level.options,
                                                     dump_llvm_ir=str(tmp_path / "m.ll"))])
    text = (tmp_path / "m.ll").read_text()
    calls = Counter(re.findall(r'call void @"k\d+_(QMatMul|QMul|QAdd|Requantize)"', text))
    defined = Counter(re.findall(r'define internal void @"k\d+_(QMatMul|QMul|QAdd|Requantize)"',
                                 text))
    assert calls == {"QMatMul": 3, "QMul": 2, "QAdd": 2, "Requantize": 2}, calls
    assert defined == {"QMatMul": 2, "QMul": 1, "QAdd": 1, "Requantize": 1}, defined


def test_microcontrollers_keep_the_numbers_in_the_code(tmp_path):
    """The Cortex-M7 counts bytes first: its Requantize keeps the numbers as immediates
    instead of a 64-byte constant slot each (no run-time number among its constants)."""
    model, _ = repeated_model(np.random.default_rng(5))
    onnx.save(model, str(tmp_path / "m.onnx"))
    info = glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"), target="arm-none-eabi",
                          mcpu="cortex-m7")
    manifest = json.loads((tmp_path / "b" / f"{info.name}.json").read_text())
    kernels = {c.get("kernel", "").split("_", 1)[-1] for c in manifest["constants"]}
    assert "Requantize" not in kernels and "QMatMul" in {i.split("_", 1)[-1] for i in kernels}


@pytest.mark.parametrize("level", params())
def test_per_tensor_convolutions_of_one_shape_compile_once(level, tmp_path, monkeypatch):
    """Two 3x3 QConvs of one shape with per-tensor weights (one multiplier for all channels,
    different in each layer) and their own output zero points: one function, and the second
    is not even emitted (Kernel.taken_over: its tables written, the first's code taken)."""
    rng = np.random.default_rng(8)
    m = QDQ(np.uint8)
    outs = []
    for ys, yz in ((0.2, 126), (0.13, 140)):
        w, _ = m.weight((16, 32, 3, 3), 0, rng, per_channel=False)
        outs.append(m.q(m.op("Conv", [m.dq("x", 0.05, m.zp(120)), w], pads=[1, 1, 1, 1]), ys, yz))
    feeds = byte_feeds({"x": (1, 32, 9, 9)}, np.uint8, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    same_as_references(model, feeds, tmp_path, [dict(level.options,
                                                     dump_llvm_ir=str(tmp_path / "m.ll"))])
    text = (tmp_path / "m.ll").read_text()
    assert len(re.findall(r'call void @"k\d+_QConv"', text)) == 2
    assert len(re.findall(r'define internal void @"k\d+_QConv"', text)) == 1
    variants = {i["variant"]["name"] for i in plan(tmp_path) if i["op"] == "QConv"}
    from glowpy.codegen.kernels.int8 import pairs_window
    emitted = []
    run = pairs_window.WindowPairs.emit
    monkeypatch.setattr(pairs_window.WindowPairs, "emit",
                        lambda self: emitted.append(self.k.instr.name) or run(self))
    glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "again"), **level.options)
    # (quads16's correction tables are as long as each layer's weights need: another layout,
    # so the second is emitted, and its equal code shared by module._share)
    assert len(emitted) == (2 if variants == {"quads16"} else 1), (variants, emitted)
