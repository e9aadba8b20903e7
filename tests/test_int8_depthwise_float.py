"""Depthwise QConv on float vectors with int8 in and out (glowpy/codegen/kernels/int8/
depthwise_float.py), taken by default on every runnable vector level: outputs equal the
scalar integer kernel's (QConv:direct) and the integer ops' numpy references bit for bit, and
lie within 1 LSB of onnxruntime. Cases: 3x3 stride 1 with a Relu on 13x11 (odd sizes, row
tiles with partial vectors); 3x3 stride 2 with TF "same" padding on 6x6 over 40 channels (the two
slots of converted planes alternate 40 times; the layer whose legacy-SSE shuffles cost 2.5x on a
Zen 3); 5x5 on 15x15 with a saturating bias and per-tensor weights; 7x7 on 9x9 (flat tiles
where the estimate picks them); a batch of two; a 1-D k5 dilated 2 over 50; 11x11 on 20x22
(row tiles whose taps run as loops, conv/depthwise_loops.py, at every level); uint8 and int8
inputs with zero points; both roundings. Then a plane too large for the stack slots takes them
in the activation region, and one too large for that keeps the float rewrite (DequantizeLinear,
float Conv, QFinish), exact as well. Strided layers on large planes copy phase-split rows,
converting as they copy (QPhaseEmitter), on every level and on NEON under qemu."""
from __future__ import annotations

import numpy as np
import pytest

from int8_check import (aarch64_equals_references, byte_feeds, exact_against_direct, plan,
                        same_as_references)
from test_int8 import QDQ
from util import make_graph_model, memory_report
from vector_levels import params

INPUTS = {"a": (1, 5, 13, 11), "b": (1, 40, 6, 6), "c": (1, 7, 15, 15), "d": (2, 9, 9, 9),
          "e": (1, 6, 50), "f": (1, 3, 20, 22)}


LAYERS = [("a", 3, [1, 1, 1, 1], dict(relu=True)),
          ("b", 3, [0, 0, 1, 1], dict(stride=2)),
          ("c", 5, [2, 2, 2, 2], dict(per_channel=False, big_bias=True)),
          ("d", 7, [3, 3, 3, 3], {}),
          ("e", 5, [4, 4], dict(dil=2)),
          ("f", 11, [5, 5, 5, 5], {})]


def model_of(dtype, rng, inputs=INPUTS, layers=LAYERS):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0

    def dw(name, k, pads, stride=1, relu=False, per_channel=True, big_bias=False, dil=1):
        shape = inputs[name]
        c = shape[1]
        w, sw = m.weight((c, 1) + (k,) * (len(shape) - 2), 0, rng, per_channel)
        b = rng.integers(-3000, 3000, c).astype(np.int32)
        if big_bias:
            b[0] = (1 << 30) - 5
        bias = m.dq(m.c(b), (0.05 * np.asarray(sw) * np.ones(c)).astype(np.float32),
                    np.zeros(c, np.int32), 0)
        nd = len(shape) - 2
        y = m.op("Conv", [m.dq(name, 0.05, m.zp(lo + 120)), w, bias], group=c, pads=pads,
                 strides=[stride] * nd, dilations=[dil] * nd, kernel_shape=[k] * nd)
        return m.q(m.op("Relu", [y]) if relu else y, 0.2, lo if relu else lo + 100)
    outs = [dw(name, k, pads, **kw) for name, k, pads, kw in layers if name in inputs]
    feeds = byte_feeds(inputs, dtype, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("rounding", ["even", "away"])
@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_depthwise_float_qconv_is_exact(dtype, level, rounding, tmp_path):
    model, feeds = model_of(dtype, np.random.default_rng(43))
    opts = dict(level.options, quantization_rounding=rounding)
    exact_against_direct(model, feeds, tmp_path, opts, dtype, saturated=2)
    kinds = [(i["op"], i["variant"]["name"]) for i in plan(tmp_path) if "Conv" in i["op"] or
             i["op"] in ("DequantizeLinear", "QFinish")]
    assert kinds == [("QConv", "depthwise_float")] * 6, kinds
    tilings = [i["variant"]["params"]["tiling"] for i in plan(tmp_path) if i["op"] == "QConv"]
    assert tilings[5][0] == "rows" and tilings[5][1] <= 5, tilings  # looped_plan: 11 - 4 >= 3


@pytest.mark.parametrize("level", params())
def test_large_planes_take_their_strip_in_the_region(level, tmp_path):
    """A 100x100 plane (40,000 bytes of floats) does not fit twice in the 32 KiB stack strip:
    its two slots take the activation region (here past its end: the model has no other
    activations), and the layer stays one QConv; a 200x200 plane, whose two slots pass
    REGION_FLOATS, runs as DequantizeLinear, the float depthwise Conv and QFinish. Both exact."""
    from glowpy.codegen.kernels.int8.depthwise_float import REGION_FLOATS
    for side, ops in ((100, ["QConv"]), (200, ["DequantizeLinear", "Conv", "QFinish"])):
        model, feeds = model_of(np.uint8, np.random.default_rng(44), {"a": (1, 3, side, side)})
        report = memory_report(model, tmp_path / f"plan{side}", **level.options)
        plan = report["instructions"]
        assert [i["op"] for i in plan] == ops, plan
        if side == 100:
            assert plan[0]["variant"]["name"] == "depthwise_float"
            assert 2 * 4 * side * side < report["regions"]["activation"] <= 4 * REGION_FLOATS
        (tmp_path / f"run{side}").mkdir()
        same_as_references(model, feeds, tmp_path / f"run{side}",
                           [level.options, dict(level.options, kernel_variants={"QConv": "direct"})])


# strided layers: 3x3/2 on 64x64 with a Relu, 5x5/2 on 57x45 with uneven padding and a
# saturating bias, 3x3/2 on 240x240 (two strip slots would pass REGION_FLOATS: before the phase
# tiles it ran as the float rewrite), 3x3/2 on 14x14 (the plain tiles: the copy costs more)
PHASE_INPUTS = {"p": (1, 6, 64, 64), "q": (1, 5, 57, 45), "r": (1, 3, 240, 240), "s": (1, 8, 14, 14)}
PHASE_LAYERS = [("p", 3, [1, 1, 1, 1], dict(stride=2, relu=True)),
                ("q", 5, [1, 2, 2, 1], dict(stride=2, big_bias=True)),
                ("r", 3, [0, 0, 1, 1], dict(stride=2)), ("s", 3, [1, 1, 1, 1], dict(stride=2))]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_strided_layers_convert_as_they_copy_phases(dtype, level, tmp_path):
    model, feeds = model_of(dtype, np.random.default_rng(45), PHASE_INPUTS, PHASE_LAYERS)
    exact_against_direct(model, feeds, tmp_path, dict(level.options), dtype, saturated=1)
    tilings = [(i["op"], i["variant"]["name"], i["variant"]["params"]["tiling"][0])
               for i in plan(tmp_path)]
    assert [t[:2] for t in tilings] == [("QConv", "depthwise_float")] * 4, tilings
    assert tilings[2][2] == "phase" and tilings[3][2] != "phase", tilings
    if level.lanes in (4, 8):  # the copy pays on the larger planes with 4 and 8 lanes
        assert tilings[0][2] == tilings[1][2] == "phase", tilings


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_strided_phases_on_neon_under_qemu_aarch64(dtype, tmp_path):
    model, feeds = model_of(dtype, np.random.default_rng(46), PHASE_INPUTS, PHASE_LAYERS)
    tilings = [i["variant"]["params"]["tiling"][0] for i in
               memory_report(model, tmp_path / "plan", target="aarch64")["instructions"]]
    assert tilings.count("phase") >= 1, tilings
    aarch64_equals_references(model, feeds, tmp_path)
