"""QConv 3x3 stride 1 as integer Winograd F(2x2, 3x3) on pmaddwd pairs
(glowpy/codegen/kernels/int8/winograd.py), compiled for the levels with 8-lane integer vectors
(x86-64-v3, and -v4 where the host runs it) with the variant forced: outputs equal the scalar
integer kernel's (QConv:direct) and the integer ops' numpy references bit for bit, and lie
within 1 LSB of onnxruntime. Cases: 16 -> 10 on 13x11 with a Relu (an odd output height: the
last tile row's second row is not stored); an odd channel count (the last pair's zero half),
13 output channels (a partial block of MR) on 20x37 (rows of three vectors of tiles, the
last partial) with per-tensor weights; a batch of two unpadded (4x3 outputs); asymmetric
padding; a channel whose bias saturates; a row of 35 tiles (five vectors); uint8 and int8
inputs with zero points; both roundings. Then the choice: taken by default without VNNI where
it pays, not with -winograd=false, not where 4x the sums could pass int32, and refused with a
clear error where forced on a layer it cannot run."""
from __future__ import annotations

import numpy as np
import pytest

from glowpy.errors import ModelError

from int8_check import byte_feeds, exact_against_direct, plan, same_as_references
from test_int8 import QDQ
from util import make_graph_model, memory_report
from vector_levels import LEVELS, params

AVX2_LEVELS = [lv for lv in params() if "avx2" in lv.values[0].features]
AVX2 = next(lv for lv in LEVELS if lv.name == "avx2")
FORCED = {"QConv": "winograd"}
INPUTS = {"a": (1, 16, 13, 11), "b": (1, 15, 20, 37), "c": (2, 9, 6, 5), "d": (1, 32, 9, 9),
          "e": (1, 8, 6, 70)}


def model_of(dtype, rng):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0

    def conv(name, mo, pads, relu=False, per_channel=True, big_bias=False):
        c = INPUTS[name][1]
        w, sw = m.weight((mo, c, 3, 3), 0, rng, per_channel)
        b = rng.integers(-3000, 3000, mo).astype(np.int32)
        if big_bias:
            b[0] = (1 << 30) - 5
        bias = m.dq(m.c(b), (0.05 * np.asarray(sw) * np.ones(mo)).astype(np.float32),
                    np.zeros(mo, np.int32), 0)
        y = m.op("Conv", [m.dq(name, 0.05, m.zp(lo + 120)), w, bias], pads=pads)
        return m.q(m.op("Relu", [y]) if relu else y, 0.4, lo if relu else lo + 100)
    outs = [conv("a", 10, [1, 1, 1, 1], relu=True),
            conv("b", 13, [1, 1, 1, 1], per_channel=False),
            conv("c", 6, [0, 0, 0, 0]),
            conv("d", 7, [0, 1, 2, 0]),
            conv("d", 5, [1, 1, 1, 1], big_bias=True),
            conv("e", 12, [1, 1, 1, 1])]
    feeds = byte_feeds(INPUTS, dtype, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("rounding", ["even", "away"])
@pytest.mark.parametrize("level", AVX2_LEVELS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_winograd_qconv_is_exact(dtype, level, rounding, tmp_path):
    model, feeds = model_of(dtype, np.random.default_rng(41))
    opts = dict(level.options, quantization_rounding=rounding, kernel_variants=FORCED)
    exact_against_direct(model, feeds, tmp_path, opts, dtype, saturated=4)
    kinds = [(i["op"], i["variant"]["name"]) for i in plan(tmp_path) if "Conv" in i["op"]]
    assert kinds == [("QConv", "winograd")] * 6, kinds


def layer(c, m, hw, rng, wmax=127, stride=1, full=False):
    """A 3x3 c -> m over hw x hw (stride, pads 1) of weights within +-wmax (full: all +-wmax),
    after a Relu and a 2x2 max pool of a 2hw x 2hw input: the layer is not at the activations'
    peak (the Relu's output and the pool's), so its scratch has the room the rewrite allows
    (the region may grow by 25%)."""
    q = QDQ(np.uint8)
    shape = (m, c, 3, 3)
    w = rng.choice([-wmax, wmax], shape) if full else rng.integers(-wmax, wmax + 1, shape)
    w = q.c(w.astype(np.int8))
    sw = rng.uniform(0.002, 0.02, m).astype(np.float32)
    x = q.q(q.op("Relu", [q.dq("x", 0.05, q.zp(3))]), 0.05, 3)
    x = q.q(q.op("MaxPool", [q.dq(x, 0.05, q.zp(3))], kernel_shape=[2, 2], strides=[2, 2]),
            0.05, 3)
    y = q.op("Conv", [q.dq(x, 0.05, q.zp(3)), q.dq(w, sw, np.zeros(m, np.int8), 0),
                      q.bias(m, 0.05 * sw, rng)], pads=[1, 1, 1, 1], strides=[stride] * 2)
    feeds = byte_feeds({"x": (1, c, 2 * hw, 2 * hw)}, np.uint8, rng)
    return make_graph_model(q.nodes, feeds, [q.q(y, 0.5, 128)], q.inits, opset=13)


def variants(model, path, **opts):
    plan = memory_report(model, path, **opts)["instructions"]
    return [i["variant"]["name"] for i in plan if i["op"] == "QConv"]


@pytest.mark.parametrize("level", AVX2_LEVELS)
def test_winograd_is_chosen_where_it_pays(level, tmp_path):
    """On the 8-lane integer levels without VNNI a 64 -> 64 3x3 on 28x28 takes it by default
    (the cost model; 0.62-0.72 of quads16's time measured on such layers), equal to the scalar
    kernel and the references; not with -winograd=false, nor at stride 2; with VNNI the quads
    stay."""
    rng = np.random.default_rng(42)
    model = layer(64, 64, 28, rng)
    plan = memory_report(model, tmp_path / "a", **level.options)["instructions"]
    [conv] = [i for i in plan if i["op"] == "QConv"]
    assert conv["variant"]["name"] == "winograd", conv["variant"]
    # its input in the activation region, written by the layers before it (the test above
    # feeds graph inputs)
    x = byte_feeds({"x": (1, 64, 56, 56)}, np.uint8, rng)
    (tmp_path / "run").mkdir()
    same_as_references(model, x, tmp_path / "run", [level.options, dict(
        level.options, kernel_variants={"QConv": "direct"})])
    # direct: quads16, or pairs where too many of these uniform weights' quads need corrections
    assert variants(model, tmp_path / "b", winograd=False, **level.options)[0] in (
        "quads16", "pairs")
    assert variants(layer(64, 64, 28, rng, stride=2), tmp_path / "c", **level.options) \
        != ["winograd"]
    assert variants(model, tmp_path / "d", mcpu="cascadelake") == ["quads"]


def test_winograd_leaves_small_planes_to_the_direct(tmp_path):
    """The cost model counts each form's weight bytes (winograd_choice.WEIGHT_BYTE): a 3x3 over
    512 channels on 7x7, where 4U is 8.4 MB against 2.4 MB of int8 weights and 16 tiles share
    each word, stays direct (quads16 with its output channels on the lanes, pairs_lanes.py);
    256 on 14x14 and 64 on 28x28 take Winograd. The AVX2 plan, compiled on any host."""
    rng = np.random.default_rng(43)
    plans = {}
    for c, hw in ((512, 7), (256, 14), (64, 28)):
        plan = memory_report(layer(c, c, hw, rng, wmax=60), tmp_path / f"p{c}",
                             mcpu="x86-64-v3")["instructions"]
        [conv] = [i["variant"] for i in plan if i["op"] == "QConv"]
        plans[c] = (conv["name"], conv["params"].get("lanes"))
    assert plans == {512: ("quads16", 16), 256: ("winograd", None), 64: ("winograd", None)}, plans


def test_winograd_needs_four_sums_in_int32(tmp_path):
    """4 x the sums must fit int32 (winograd_choice.exact): 2048 input channels of weights
    +-127 bound 4 x 2048 x 9 x 127 x 252 = 2.36e9 past 2**31 (zero point 3): the layer stays
    direct, and forcing the variant on it is an error naming the instruction (its sums are past
    float32's exact integers too, so it stays integer)."""
    rng = np.random.default_rng(43)
    model = layer(2048, 8, 4, rng, full=True)
    assert "winograd" not in variants(model, tmp_path / "a", **AVX2.options)
    with pytest.raises(ModelError, match="'conv.*forced variant 'winograd' does not apply"):
        variants(model, tmp_path / "b", kernel_variants=FORCED, **AVX2.options)
    assert variants(layer(2048, 8, 4, rng, wmax=60, full=True), tmp_path / "c",
                    kernel_variants=FORCED, **AVX2.options) == ["winograd"]  # 1.1e9: within
