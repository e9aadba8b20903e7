"""Dilated convolutions computed over the input's phases (glowpy/ir/passes/dilated.py, chosen
by kernels/catalog.late_rewrites where the phase images have 144+ positions): compiled for each
runnable x86 level, run and compared with onnxruntime, with the instructions they compile to
(the phase reorders are Transposes; a plane not divisible by the dilation adds a Pad and a
Slice)."""

import numpy as np
import pytest

import vector_levels
from util import GraphBuilder, check_against_onnxruntime, memory_report

RNG = np.random.default_rng(5)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(c, m, h, w, k, d, stride=1, bn=False, residual=False):
    g = GraphBuilder(x=f32(1, c, h, w), **({"r": f32(1, m, h, w)} if residual else {}))
    y = g.node("Conv", ["x", f32(m, c, k, k, scale=1 / np.sqrt(c * k * k)), f32(m, scale=0.1)],
               output=False, pads=[d * (k // 2)] * 4, dilations=[d, d], strides=[stride] * 2)
    if bn:
        y = g.node("BatchNormalization", [y, f32(m), f32(m), f32(m, scale=0.1),
                                          np.abs(f32(m)) + 0.5], output=False)
    if residual:
        y = g.node("Add", [y, "r"], output=False)
    g.node("Relu", [y])
    return g.model(opset=13), g.feeds


CASES = {  # args, the kernels expected
    "divisible_bn": ((8, 12, 24, 24, 3, 2, 1, True), ["Transpose", "Conv", "Transpose"]),
    "pad_and_crop": ((6, 10, 29, 27, 3, 2), ["Pad", "Transpose", "Conv", "Transpose", "Slice"]),
    "k5_dilation3": ((4, 8, 37, 40, 5, 3), ["Pad", "Transpose", "Conv", "Transpose", "Slice"]),
    "residual_kept": ((8, 8, 24, 24, 3, 2, 1, False, True), ["Conv"]),
    "strided_kept": ((8, 8, 24, 24, 3, 2, 2), ["Conv"]),
    "small_phases_kept": ((8, 8, 20, 20, 3, 2), ["Conv"]),  # 10x10 phases
}


def kernels(m, tmp_path, **options):
    return [i["kernel"] for i in memory_report(m, tmp_path, **options)["instructions"]]


@pytest.mark.parametrize("level", vector_levels.params())
@pytest.mark.parametrize("case", sorted(CASES))
def test_phases_match_onnxruntime(case, level, tmp_path):
    args, expected = CASES[case]
    m, feeds = model(*args)
    assert kernels(m, tmp_path / "plan", **level.options) == expected
    check_against_onnxruntime(m, feeds, tmp_path / "run", rtol=1e-4, atol=1e-4, **level.options)


def test_memory_first_targets_keep_dilation(tmp_path):
    """Microcontrollers, and hosts told -activation-memory=min: no phase copies."""
    m, _ = model(*CASES["divisible_bn"][0])
    assert kernels(m, tmp_path / "m7", target="arm", mcpu="cortex-m7", float_abi="hard") == ["Conv"]
    assert kernels(m, tmp_path / "min", activation_memory="min") == ["Conv"]
