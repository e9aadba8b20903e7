"""QConv on x86's integer multiply-adds (glowpy/codegen/kernels/int8/pairs.py, and
pairs_window.py for windows) at every x86 vector level, as int16 pairs and as u8 x s8 quads
(groups.py; forced where the level has no VNNI, whose sums are then the same instruction's
in plain IR, and chosen on the VNNI level where the host runs it): outputs equal the scalar
integer kernel's (QConv:direct, forced) and the integer ops' numpy references bit for bit,
and lie within 1 LSB of onnxruntime. Cases: an odd channel count (the last pair's zero half) with 13
output channels (a partial register block) on a 7x7 plane (a partial tile) and a fused Relu; 64
-> 40 on 10x12 (full tiles, then a rest) with per-tensor weights; 3 input channels on 4x4; a
channel whose bias is near 2**30 (saturating); a batch of two; a Conv1d over 37 points; strided
1x1s (2 x 3 onto 5x4 from 10x12: vectors across output rows, gathered lane by lane; 1 x 2
onto 6x20 from 6x40: vectors within a row loaded whole, and across; 3 on the Conv1d); uint8
and int8 inputs with zero points; both roundings."""
from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import glowpy
from glowpy.codegen.kernels.int8 import pair_order
from glowpy.codegen.kernels.int8.groups import FIX_MAX, LANE_FIX_MAX, Quads16, copy_pays
from glowpy.codegen.kernels.int8.pairs import GROUP
from int8_check import byte_feeds, plan, same_as_references
from test_int8 import QDQ
from toolchains import require_tool
from util import make_graph_model, memory_report
from vector_levels import AVX1_RUNNABLE, RUNNABLE, VNNI, VNNI_RUNNABLE, params

# (level, grouping): pairs and forced quads on every runnable level, quads by choice on VNNI,
# pairs on SSE2's integer vectors under AVX's float ones (-mcpu=sandybridge); quads16
# (pmaddubsw) on the levels with 8-lane integer vectors
GROUPINGS = [pytest.param(lv.values[0], g, id=f"{lv.id}-{g}")
             for lv in params() for g in ("pairs", "quads")] + \
    [pytest.param(lv.values[0], "quads", id="vnni") for lv in params(VNNI_RUNNABLE)] + \
    [pytest.param(lv.values[0], "pairs", id="avx1") for lv in params(AVX1_RUNNABLE)] + \
    [pytest.param(lv.values[0], "quads16", id=f"{lv.id}-quads16")
     for lv in params() if "avx2" in lv.values[0].features]


def grouped(level, group: str, op: str = "QConv") -> dict:
    """The compile options of a level with the grouping forced, but for quads on VNNI (the
    grouping the level chooses)."""
    forced = not (group == "quads" and level == VNNI)
    return dict(level.options, **({"kernel_variants": {op: group}} if forced else {}))

INPUTS = {"a": (1, 15, 7, 7), "b": (1, 64, 10, 12), "c": (1, 3, 4, 4), "d": (2, 32, 9, 9),
          "e": (1, 20, 37), "f": (1, 16, 6, 40)}


def pointwise_model(dtype, rng):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    xs = {"a": 0.05, "b": 0.03, "c": 0.2, "d": 0.04, "e": 0.06, "f": 0.05}

    def conv(name, mo, per_channel=True, big_bias=False, relu=False, ys=0.05, yz=lo + 100,
             **attrs):
        c = INPUTS[name][1]
        w, sw = m.weight((mo, c) + (1,) * (len(INPUTS[name]) - 2), 0, rng, per_channel)
        b = rng.integers(-3000, 3000, mo).astype(np.int32)
        if big_bias:
            b[0] = (1 << 30) - 5
        bias = m.dq(m.c(b), (xs[name] * np.asarray(sw) * np.ones(mo)).astype(np.float32),
                    np.zeros(mo, np.int32), 0)
        y = m.op("Conv", [m.dq(name, xs[name], m.zp(lo + 120)), w, bias], **attrs)
        return m.q(m.op("Relu", [y]) if relu else y, ys, lo if relu else yz)
    outs = [conv("a", 13, relu=True), conv("b", 40, per_channel=False), conv("c", 8),
            conv("b", 12, big_bias=True), conv("d", 24), conv("e", 9),
            conv("b", 14, strides=[2, 3]), conv("e", 7, strides=[3]), conv("f", 10, strides=[1, 2])]
    feeds = byte_feeds(INPUTS, dtype, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("rounding", ["even", "away"])
@pytest.mark.parametrize("level,group", GROUPINGS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_pointwise_qconv_on_pairs(dtype, level, group, rounding, tmp_path):
    model, feeds = pointwise_model(dtype, np.random.default_rng(31))
    path = str(tmp_path / "m.onnx")
    opts = dict(quantization_rounding=rounding, **grouped(level, group))
    info, got = same_as_references(model, feeds, tmp_path,
                                   [opts, dict(opts, kernel_variants={"QConv": "direct"})],
                                   ort_lsb=1 if rounding == "even" else None)
    kinds = [(i["op"], i["variant"]["name"]) for i in plan(tmp_path) if "Conv" in i["op"]]
    assert kinds == [("QConv", group)] * 9, kinds
    if rounding == "even":  # weights stored once: their groups in place of the int8 ones
        ints = glowpy.compile(path, str(tmp_path / "i"), quantized_convolutions="integer",
                              **level.options)
        weights = [i for i in model.graph.initializer if i.data_type == 3 and len(i.dims) > 1]
        # and each nonzero output zero point (Kernel.runtime_int: 4 bytes, 64 aligned)
        inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        zps = sum(1 for n in model.graph.node if n.op_type == "QuantizeLinear"
                  and int(inits[n.input[2]].reshape(-1)[0]) != 0)
        extra = info.memory["constant"] - ints.memory["constant"] - 64 * zps
        if group == "pairs":  # int16: 1 byte more each
            least = sum(int(np.prod(w.dims)) for w in weights)
            assert least <= extra <= least + 16 * 64, (extra, least)
        else:  # the same int8 bytes, a table where C is no multiple of 4, the bias folded
            tables = sum(w.dims[0] * -(-w.dims[1] // 4) * 4 for w in weights if w.dims[1] % 4)
            biases = 4 * sum(w.dims[0] for w in weights)
            if group == "quads16":  # and the corrections' tables, of the weights with their
                for w in weights:  # channels re-paired (pair_order.py), and the order's table
                    w = numpy_helper.to_array(w).reshape(w.dims[0], -1)
                    order = pair_order.order_for(w)
                    fixes = Quads16.corrections(w if order is None else w[:, order])
                    tables += (0 if fixes is None else fixes[0].nbytes + fixes[1].nbytes) + \
                        (0 if order is None else 4 * len(order))
            assert tables <= extra <= tables + biases + 16 * 64, (extra, tables)
    sat = got[info.outputs[3]["name"]][0, 0]
    assert np.all(sat == np.iinfo(dtype).max)  # the 2**30 bias saturates its channel
    assert len(np.unique(got[info.outputs[1]["name"]])) > 50  # a spread of values, not a clamp


# AVX2 levels without VNNI, where quads16 is chosen by its cost rule rather than forced
QUADS16_LEVELS = [lv for lv in params() if "avx2" in lv.values[0].features]


@pytest.mark.parametrize("level", QUADS16_LEVELS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quads16_pairs_heavy_channels_with_light_ones(dtype, level, tmp_path):
    """1x1 QConvs over 128 channels (32 quads, Q16_MIN) of which a random half hold weights
    of 90-103 in every output channel (a sign per output channel) and the rest weights within
    25: in the model's order pmaddubsw would saturate the heavy neighbours' pairs, a share of
    corrected quads past FIX_MAX, so the layers would run as pairs; pair_order.py pairs each
    heavy channel with a light one, no quad needs a correction, and the cost rule takes
    quads16 unforced (stride 1 on 9x11, and 2 x 2). The bundle equals the scalar integer
    kernel and the references bit for bit (onnxruntime's AVX2 kernels saturate exactly these
    pairs, so it is not the reference here); its constants hold the order's table and no
    corrections."""
    rng = np.random.default_rng(43)
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    heavy = rng.permutation(128) < 64
    weights = []

    def conv(mo, **attrs):
        w = rng.integers(-25, 26, (mo, 128)).astype(np.int8)
        big = rng.integers(90, 104, (mo, 128)) * rng.choice([-1, 1], (mo, 1))
        w[:, heavy] = big[:, heavy]
        weights.append(w)
        sw = rng.uniform(0.002, 0.004, mo).astype(np.float32)
        wq = m.dq(m.c(w.reshape(mo, 128, 1, 1)), sw, np.zeros(mo, np.int8), 0)
        bias = m.dq(m.c(rng.integers(-3000, 3000, mo).astype(np.int32)),
                    (0.04 * sw).astype(np.float32), np.zeros(mo, np.int32), 0)
        y = m.op("Conv", [m.dq("x", 0.04, m.zp(lo + 120)), wq, bias], **attrs)
        return m.q(y, 0.5, lo + 128)
    outs = [conv(24), conv(16, strides=[2, 2])]
    feeds = byte_feeds({"x": (1, 128, 9, 11)}, dtype, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    for w in weights:
        order = pair_order.order_for(w)
        assert Quads16.share(w) > FIX_MAX and order is not None, Quads16.share(w)
        assert sorted(order) == list(range(128)) and pair_order.corrected(w[:, order]) == 0
    info, got = same_as_references(model, feeds, tmp_path,
                                   [level.options, dict(level.options,
                                                        kernel_variants={"QConv": "direct"})],
                                   ort_lsb=None)
    assert [i["variant"]["name"] for i in plan(tmp_path) if i["op"] == "QConv"] == \
        ["quads16"] * 2
    for y in got.values():  # a spread of values, not a clamp
        assert len(np.unique(y)) > 20
    ints = glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "i"),
                          quantized_convolutions="integer", **level.options)
    extra = info.memory["constant"] - ints.memory["constant"] - 64 * 2  # zero points
    orders = 2 * 4 * 128  # the orders' int32 tables; the biases u8 quads need, at most
    assert orders <= extra <= orders + 4 * 40 + 8 * 64, extra


WINDOWS = {"f": (1, 16, 13, 11), "g": (1, 3, 19, 17), "h": (2, 9, 6, 5), "i": (1, 12, 29)}


def window_model(dtype, rng, stem=True):
    """QConvs with windows: 3x3 padded (13x11: a row of one full vector and a rest on AVX2),
    3x3 at stride 2, 3x3 at dilation 2 with asymmetric padding, a 7x7 stride-2 stem over 3
    channels (an odd channel count, 147 reduction steps: an odd pair count), a 2x3 kernel over
    9 channels on 6x5 (rows narrower than a vector: several flat in a tile, a batch of two),
    a Conv1d of kernel 5 at stride 2 with padding, a fused Relu. stem=False leaves the stem
    out (its 147 steps over rows of 9 unrolled: 2.1 of the model's 8.4 CPU s in AVX-512 VNNI
    code)."""
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0

    def conv(name, mo, kernel, relu=False, **attrs):
        c = WINDOWS[name][1]
        w, sw = m.weight((mo, c) + kernel, 0, rng)
        bias = m.dq(m.c(rng.integers(-3000, 3000, mo).astype(np.int32)),
                    (0.05 * np.asarray(sw)).astype(np.float32), np.zeros(mo, np.int32), 0)
        y = m.op("Conv", [m.dq(name, 0.05, m.zp(lo + 120)), w, bias], **attrs)
        return m.q(m.op("Relu", [y]) if relu else y, 0.2, lo if relu else lo + 100)
    outs = [conv("f", 10, (3, 3), pads=[1, 1, 1, 1], relu=True),
            conv("f", 7, (3, 3), pads=[1, 1, 1, 1], strides=[2, 2]),
            conv("f", 8, (3, 3), pads=[2, 1, 0, 2], dilations=[2, 2]),
            conv("g", 16, (7, 7), pads=[3, 3, 3, 3], strides=[2, 2]) if stem else None,
            conv("h", 5, (2, 3)),
            conv("i", 6, (5,), pads=[2, 1], strides=[2])]
    outs = [o for o in outs if o is not None]
    feeds = byte_feeds({n: s for n, s in WINDOWS.items() if stem or n != "g"}, dtype, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("level,group", GROUPINGS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_window_qconv_on_pairs(dtype, level, group, tmp_path):
    model, feeds = window_model(dtype, np.random.default_rng(33))
    opts = grouped(level, group)
    info, got = same_as_references(model, feeds, tmp_path, [
        opts, dict(opts, kernel_variants={"QConv": "direct"})])
    convs = [i for i in plan(tmp_path) if "Conv" in i["op"]]
    kinds = [(i["op"], i["variant"]["name"], i["variant"]["params"]["window"]) for i in convs]
    assert kinds == [("QConv", group, True)] * 6, kinds
    # narrow rows flat across a tile (pairs_tiles.tile_shape), vectors put together from two rows
    assert any(i["variant"]["params"]["rows"] > 1 for i in convs)
    for p in info.outputs:
        y = got[p["name"]]
        assert len(np.unique(y)) > 20, p["name"]  # a spread of values, not a clamp


def long_rows_model(width, rng):
    """QConvs along rows of `width`: a Conv1d of kernel 5 padded, one of kernel 3 at stride 2
    and dilation 2, a 3x3 over 8 channels of 3 rows, padded, with a fused Relu."""
    m = QDQ(np.uint8)

    def conv(name, mo, kernel, relu=False, **attrs):
        w, sw = m.weight((mo, 8) + kernel, 0, rng)
        bias = m.dq(m.c(rng.integers(-3000, 3000, mo).astype(np.int32)),
                    (0.05 * np.asarray(sw)).astype(np.float32), np.zeros(mo, np.int32), 0)
        y = m.op("Conv", [m.dq(name, 0.05, m.zp(120)), w, bias], **attrs)
        return m.q(m.op("Relu", [y]) if relu else y, 0.2, 0 if relu else 100)
    outs = [conv("s", 6, (5,), pads=[2, 2]),
            conv("s", 5, (3,), pads=[1, 2], strides=[2], dilations=[2]),
            conv("r", 7, (3, 3), pads=[1, 1, 1, 1], relu=True)]
    feeds = byte_feeds({"s": (1, 8, width), "r": (1, 8, 3, width)}, np.uint8, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("level,group", GROUPINGS)
def test_long_rows_loop_over_their_inner_tiles(level, group, tmp_path):
    """Rows of 4,096: the tiles whose taps read whole vectors inside the row run as one loop
    (pairs_window.INNER_LOOP), those at the edges unrolled; bit for bit the scalar kernel and
    the references, and the object about that of rows of 1,024 (an unrolled row's code grew
    with its width: a 1-D Conv over 8,192 samples hung in LLVM)."""
    rng = np.random.default_rng(41)
    model, feeds = long_rows_model(4096, rng)
    opts = grouped(level, group)
    info, got = same_as_references(model, feeds, tmp_path, [
        opts, dict(opts, kernel_variants={"QConv": "direct"})])
    convs = [i for i in plan(tmp_path) if i["op"] == "QConv"]
    assert [(i["variant"]["name"], i["variant"]["params"]["rows"]) for i in convs] == \
        [(group, 1)] * 3, convs
    for y in got.values():
        assert len(np.unique(y)) > 20  # a spread of values, not a clamp
    short, _ = long_rows_model(1024, rng)
    onnx.save(short, str(tmp_path / "narrow.onnx"))
    small = glowpy.compile(str(tmp_path / "narrow.onnx"), str(tmp_path / "s"), **opts)
    sizes = [os.path.getsize(tmp_path / d / f"{i.name}.o") for d, i in (("b0", info), ("s", small))]
    assert sizes[0] <= 1.1 * sizes[1], sizes


@pytest.mark.parametrize("level,group", GROUPINGS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qmatmul_on_pairs(dtype, level, group, tmp_path):
    """QMatMul (pairs_matmul.py): a QDQ MatMul over 3-D activations with 21 output columns (a
    vector, then a partial one) and a fused Relu, MatMulInteger's exact int32 sums with a zero
    point, and 37 -> 64 over 13 rows (an odd K: the last pair's zero half; row blocks and a
    rest; quads read the other products' rows in place, int8 ones with their sign bits
    flipped), equal to the scalar kernel and the references, within 1 LSB of onnxruntime."""
    rng = np.random.default_rng(34)
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    w, sw = m.weight((40, 21), 1, rng)
    bias = m.dq(m.c(rng.integers(-2000, 2000, 21).astype(np.int32)),
                (0.04 * np.asarray(sw)).astype(np.float32), np.zeros(21, np.int32), 0)
    outs = [m.q(m.op("Relu", [m.op("Add", [m.op("MatMul", [m.dq("a", 0.04, m.zp(lo + 131)),
                                                            w]), bias])]), 0.05, lo)]
    # weights within 7 bits: onnxruntime's AVX2 kernels without VNNI add u8 x s8 pairs in
    # 16 bits (pmaddubsw), which saturate past them; the bundle's sums are exact either way
    outs.append(m.op("MatMulInteger", ["a", m.c(rng.integers(-64, 64, (40, 19)).astype(np.int8)),
                                       m.c(m.zp(lo + 131))]))
    w2, _ = m.weight((37, 64), 1, rng)
    outs.append(m.q(m.op("MatMul", [m.dq("c", 0.03, m.zp(lo + 100)), w2]), 0.2, lo + 128))
    feeds = byte_feeds({"a": (2, 5, 40), "c": (13, 37)}, dtype, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    opts = grouped(level, group, "QMatMul")
    info, got = same_as_references(model, feeds, tmp_path, [
        opts, dict(opts, kernel_variants={"QMatMul": "default"})])
    kinds = [(i["op"], i["variant"]["name"]) for i in plan(tmp_path) if "MatMul" in i["op"]]
    assert kinds == [("QMatMul", group)] * 3, kinds
    assert np.abs(got[info.outputs[1]["name"]]).max() > 1 << 15  # int32 sums, past 16 bits


@pytest.mark.parametrize("level", QUADS16_LEVELS)
def test_qmatmul_quads16_by_its_rule(level, tmp_path):
    """QMatMuls as onnxruntime's quantizer leaves a transformer's (int8 weights per tensor,
    bell-shaped: a few 127s, most within 40; uint8 activations) over K = 256 with 200 output
    columns (a partial vector last): a few pairs saturate pmaddubsw, their vectors' correction
    steps (lane_share) stay under LANE_FIX_MAX and the level's rule takes quads16 unforced, as
    for a reduction of 5 quads (no Q16_MIN: the rows are read in place); uniform weights (most
    blocks corrected) stay on pairs. All equal the scalar kernel and the references bit for
    bit (onnxruntime's AVX2 kernels saturate those pairs: not the reference here)."""
    rng = np.random.default_rng(52)
    m = QDQ(np.uint8)
    bell = np.clip(np.round(rng.standard_normal((256, 200)) * 127 / 4.2), -127, 127)
    flat = rng.integers(-127, 128, (256, 200))
    short = np.clip(np.round(rng.standard_normal((20, 48)) * 127 / 4.2), -127, 127)
    outs = []
    for w, a, ys in ((bell, "a", 0.3), (flat, "a", 0.3), (short, "s", 0.04)):
        wq = m.dq(m.c(w.astype(np.int8)), np.float32(0.002), np.int8(0))
        outs.append(m.q(m.op("MatMul", [m.dq(a, 0.03, m.zp(120)), wq]), ys, 128))
    feeds = byte_feeds({"a": (3, 21, 256), "s": (37, 20)}, np.uint8, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    lanes = 8 if level.lanes == 8 else 16
    shares = [Quads16.lane_share(w.T.astype(np.int8), lanes) for w in (bell, flat, short)]
    assert 0 < shares[0] < LANE_FIX_MAX < shares[1] and shares[2] < LANE_FIX_MAX, shares
    info, got = same_as_references(model, feeds, tmp_path, [
        level.options, dict(level.options, kernel_variants={"QMatMul": "default"})],
        ort_lsb=None)
    assert [i["variant"]["name"] for i in plan(tmp_path) if i["op"] == "QMatMul"] == \
        ["quads16", "pairs", "quads16"]
    for y in got.values():  # a spread of values, not a clamp
        assert len(np.unique(y)) > 50


@pytest.mark.parametrize("level", QUADS16_LEVELS)
def test_qmatmul_reads_its_rows_in_pair_order(level, tmp_path):
    """A QMatMul over K = 128 to 200 columns whose weights are heavy (90-103, a sign per
    column) in a random half of K and light (within 25) in the rest: in the model's order
    most (vector of columns, quad) blocks would take a correction step, past LANE_FIX_MAX; in
    pair_order's order each heavy step pairs with a light one and none does, which saves more
    than copying the rows costs (groups.copy_pays), so quads16 takes it unforced and
    reads A's rows from a copy in that order (pairs_matmul.place, _reorder_rows: 37 rows of
    int8 activations with their sign bits flipped). Equal to the scalar kernel and the
    references bit for bit; the constants hold the order's table and no corrections. Under an
    activation budget (the region may not grow, and the integer kernels run only forced) the
    same model reads A in the model's order, with the corrections, and gives the same
    outputs."""
    rng = np.random.default_rng(61)
    m = QDQ(np.int8)
    heavy = rng.permutation(128) < 64
    w = rng.integers(-25, 26, (128, 200))
    w[heavy] = (rng.integers(90, 104, (128, 200)) * rng.choice([-1, 1], (1, 200)))[heavy]
    sw = rng.uniform(0.002, 0.004, 200).astype(np.float32)
    wq = m.dq(m.c(w.astype(np.int8)), sw, np.zeros(200, np.int8), 1)
    out = m.q(m.op("MatMul", [m.dq("a", 0.04, m.zp(-8)), wq]), 0.5, 3)
    feeds = byte_feeds({"a": (37, 128)}, np.int8, rng)
    model = make_graph_model(m.nodes, feeds, [out], m.inits, opset=13)
    wt = w.T.astype(np.int8)  # [N, K], as QMatMul holds it
    order = pair_order.order_for(wt)
    lanes = 8 if level.lanes == 8 else 16
    assert Quads16.lane_share(wt, lanes) > LANE_FIX_MAX, Quads16.lane_share(wt, lanes)
    assert order is not None and Quads16.lane_share(wt[:, order], lanes) == 0
    assert copy_pays(wt, order)
    assert not copy_pays(wt[:40], order)  # 40 columns: the copy would not pay
    info, got = same_as_references(model, feeds, tmp_path, [
        level.options, dict(level.options, kernel_variants={"QMatMul": "default"})],
        ort_lsb=None)
    assert [i["variant"]["name"] for i in plan(tmp_path) if i["op"] == "QMatMul"] == ["quads16"]
    assert len(np.unique(got[info.outputs[0]["name"]])) > 50
    def tables(d, bundle):
        with open(tmp_path / d / f"{bundle.name}.json") as f:
            return [c["name"] for c in json.load(f)["constants"]]
    names = tables("b0", info)
    assert any(t.endswith("quads16 K order") for t in names), names
    assert not any("corrections" in t for t in names), names
    # the rows' copy is the activation region (the only activation besides it: none)
    assert info.memory["activations"] >= 37 * 128
    budget = glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "tight"),
                            max_activations=1 << 20,
                            **dict(level.options, kernel_variants={"QMatMul": "quads16"}))
    from glowpy.runtime import Bundle
    again = Bundle(str(tmp_path / "tight"), budget.name).run(feeds)
    np.testing.assert_array_equal(again[budget.outputs[0]["name"]], got[info.outputs[0]["name"]])
    names = tables("tight", budget)
    assert any("corrections" in t for t in names) and \
        not any(t.endswith("quads16 K order") for t in names), names


def test_pairs_leave_arm_and_can_be_passed_over(tmp_path):
    """AArch64 has no pair multiply-add worth it (TargetCaps.pair_madd): the layers take the
    float kernels there; -kernel-variant=QConv:!pairs does the same on x86, and
    -quantized-convolutions=integer keeps the int8-weight integer kernels."""
    model, _ = pointwise_model(np.uint8, np.random.default_rng(32))
    for name, opts in (("arm", dict(target="aarch64")),
                       ("x86", dict(mcpu="x86-64-v3",
                                    kernel_variants={"QConv": ("!", {"pairs", "quads16"})}))):
        ops = [i["op"] for i in memory_report(model, tmp_path / name, **opts)["instructions"]]
        assert "QConv" not in ops and ops.count("QFinish") == 9, (name, ops)
    # -quantized-convolutions=integer: the integer kernels with int8 weights alone
    ints = memory_report(model, tmp_path / "int", mcpu="x86-64-v3",
                         quantized_convolutions="integer")["instructions"]
    kinds = [(i["op"], i["variant"]["name"]) for i in ints if "Conv" in i["op"]]
    assert len(kinds) == 9 and all(o == "QConv" and v != "pairs" for o, v in kinds), kinds


@pytest.mark.parametrize("level,group", GROUPINGS)
def test_rows_per_tile_in_a_gap(level, group, tmp_path):
    """Window layers on small planes pack several output rows per tile (pairs_tiles.tile_shape): a
    3x3 over 512 channels on 4x4 after an 8x8 max pool of a 32x32 layer, whose dead 512 KiB
    leave its packed tile a gap of the activation region (pairs_window.place: 2 rows of 1,152
    quads on 8 lanes are 72 KiB, past the stack's SCRATCH_MAX, and so is one vector of 2,304
    pairs), and a 3x3 over 24 channels on 3x4 (several rows on the stack where a row is
    narrower than a vector); equal to the
    scalar kernel and the references, within 1 LSB of onnxruntime. A model whose region has no
    such gap grows it by the tile (test_tile_past_the_region)."""
    from glowpy.codegen.kernels.conv.pointwise_strided import SCRATCH_MAX
    from glowpy.codegen.kernels.int8.pairs_tiles import simd_of
    from glowpy.codegen.target.resolve import resolve_target
    rng = np.random.default_rng(35)
    m = QDQ(np.uint8)

    def conv(x, c, mo, kernel, xs, **attrs):
        w, sw = m.weight((mo, c) + kernel, 0, rng)
        bias = m.dq(m.c(rng.integers(-3000, 3000, mo).astype(np.int32)),
                    (xs * np.asarray(sw)).astype(np.float32), np.zeros(mo, np.int32), 0)
        return m.q(m.op("Relu", [m.op("Conv", [m.dq(x, xs, m.zp(0 if x[0] == "c" else 120)),
                                               w, bias], **attrs)]), 0.1, 0)
    wide = conv("x", 16, 512, (1, 1), 0.05)
    pooled = m.q(m.op("MaxPool", [m.dq(wide, 0.1, m.zp(0))], kernel_shape=[8, 8],
                      strides=[8, 8]), 0.1, 0)
    outs = [conv(pooled, 512, 32, (3, 3), 0.1, pads=[1, 1, 1, 1]),
            conv("s", 24, 16, (3, 3), 0.05, pads=[1, 1, 1, 1])]
    feeds = byte_feeds({"x": (1, 16, 32, 32), "s": (1, 24, 3, 4)}, np.uint8, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    opts = grouped(level, group)
    same_as_references(model, feeds, tmp_path,
                       [opts, dict(opts, kernel_variants={"QConv": "direct"})])
    convs = [i["variant"] for i in plan(tmp_path)
             if i["op"] == "QConv" and i["variant"]["params"]["window"]]
    lanes = simd_of(resolve_target(mcpu=level.cpu).caps).width  # the kernels' int32 lanes
    steps = 512 * 9 // GROUP[group]
    assert [v["name"] for v in convs] == [group] * 2, convs
    assert convs[0]["params"]["rows"] > 1, convs[0]
    if lanes > 4:  # 4-wide rows fill part of a vector (SSE2's exactly one: within rows)
        assert convs[1]["params"]["rows"] > 1, convs[1]
    if lanes == 8:  # the 512-channel layer's tile: in the gap, past the stack's budget
        assert 4 * steps * convs[0]["params"]["nv"] * lanes > SCRATCH_MAX, convs[0]


@pytest.mark.parametrize("level", params([lv for lv in RUNNABLE if lv.cpu == "x86-64-v3"]))
def test_tile_past_the_region(level, tmp_path):
    """A 3x3 over 512 channels on 4x4 straight from the model's input, its output the model's:
    the activation region is empty, so the packed tile that the stack cannot hold (one vector
    of 2,304 pairs on AVX2: 72 KiB) makes a region of its own (pairs_window.place's growth);
    equal to the scalar kernel and the references."""
    rng = np.random.default_rng(36)
    m = QDQ(np.uint8)
    w, sw = m.weight((32, 512, 3, 3), 0, rng)
    bias = m.dq(m.c(rng.integers(-3000, 3000, 32).astype(np.int32)),
                (0.1 * np.asarray(sw)).astype(np.float32), np.zeros(32, np.int32), 0)
    out = m.q(m.op("Conv", [m.dq("x", 0.1, m.zp(120)), w, bias], pads=[1, 1, 1, 1]), 0.1, 100)
    feeds = byte_feeds({"x": (1, 512, 4, 4)}, np.uint8, rng)
    model = make_graph_model(m.nodes, feeds, [out], m.inits, opset=13)
    opts = dict(level.options, kernel_variants={"QConv": "pairs"})  # (quads16's 36 KiB fit)
    info, _ = same_as_references(model, feeds, tmp_path,
                                 [opts, dict(opts, kernel_variants={"QConv": "direct"})])
    assert [i["variant"]["name"] for i in plan(tmp_path) if i["op"] == "QConv"] == ["pairs"]
    assert info.memory["activations"] >= 2304 * 8 * 4  # the tile, past the stack's budget


@pytest.mark.parametrize("mcpu,mattr,group,insn,reg", [
    ("cascadelake", None, "quads", "vpdpbusd", "zmm"),  # AVX512-VNNI: 16 lanes
    ("x86-64-v4", None, "pairs", "vpmaddwd", "zmm"),  # AVX512BW: 16 lanes
    ("x86-64-v4", "-avx512bw", "pairs", "vpmaddwd", "ymm"),  # AVX512F alone: AVX2's 8
    ("x86-64-v3", "+avxvnni", "quads", "vpdpbusd", "ymm")])  # AVX-VNNI: 8
def test_integer_lanes_follow_the_target(mcpu, mattr, group, insn, reg, tmp_path):
    """The int8 GEMM's int32 lanes are the target's widest integer multiply-add
    (TargetCaps.pair_madd, pairs_tiles.simd_of): its instruction on zmm registers where the target
    has AVX512BW, ymm where it has AVX2's width only. Compiled (not run, any host) and the
    QConv kernels read in the object."""
    model, _ = window_model(np.uint8, np.random.default_rng(33), stem=False)
    onnx_path = tmp_path / "m.onnx"
    onnx.save(model, str(onnx_path))
    opts = dict(mcpu=mcpu, **({"mattr": mattr} if mattr else {}))
    glowpy.compile(str(onnx_path), str(tmp_path / "b"), kernel_variants={"QConv": group},
                   **opts)
    objdump = require_tool("objdump", "binutils")
    obj = next((tmp_path / "b").glob("*.o"))
    asm = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(obj)],
                         capture_output=True, text=True, check=True).stdout
    uses = re.findall(rf"\b{insn}\b[^\n]*%([xyz]mm)", asm)
    assert uses and set(uses) == {reg}, sorted(set(uses))


QUADS = [g for g in GROUPINGS if g.values[1] == "quads"]


def lanes_model(dtype, rng):
    """A 3x3 128 -> 64 on 7x7 (a batch of two, a fused Relu), a 3x3 at stride 2 from 14x14
    onto 7x7 with 80 output channels (on AVX-512 a block of 64 channels and one of 16) and
    per-tensor weights, a 1x1 1024 -> 64 on 7x7 (49 positions: blocks of P and a rest), and
    a 3x3 16 -> 16 on 20x20."""
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0

    def conv(x, c, mo, kernel, relu=False, per_channel=True, **attrs):
        w, sw = m.weight((mo, c) + kernel, 0, rng, per_channel)
        bias = m.dq(m.c(rng.integers(-3000, 3000, mo).astype(np.int32)),
                    (0.05 * np.asarray(sw) * np.ones(mo)).astype(np.float32),
                    np.zeros(mo, np.int32), 0)
        y = m.op("Conv", [m.dq(x, 0.05, m.zp(lo + 120)), w, bias], **attrs)
        return m.q(m.op("Relu", [y]) if relu else y, 0.2, lo if relu else lo + 100)
    outs = [conv("a", 128, 64, (3, 3), relu=True, pads=[1, 1, 1, 1]),
            conv("b", 256, 80, (3, 3), per_channel=False, pads=[1, 1, 1, 1], strides=[2, 2]),
            conv("c", 1024, 64, (1, 1)),
            conv("d", 16, 16, (3, 3), pads=[1, 1, 1, 1])]
    feeds = byte_feeds({"a": (2, 128, 7, 7), "b": (2, 256, 14, 14), "c": (2, 1024, 7, 7),
                        "d": (1, 16, 20, 20)}, dtype, rng)
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


def lanes_of(convs) -> list:
    return sorted(v["params"]["lanes"] for v in convs)  # (the plan's order is its own)


@pytest.mark.parametrize("level,group", QUADS + [g for g in GROUPINGS if g.values[1] == "quads16"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_output_channels_on_the_lanes(dtype, level, group, tmp_path):
    """lanes_model's QConvs as quads on every level (forced but on VNNI's), and as quads16 on
    AVX2's and AVX-512's: the first three put the output channels on the lanes (pairs_lanes.py:
    4 vectors of them with 32 vector registers, 2 with 16), the 20x20 plane keeps the
    positions there (but as quads with 16 registers); quads16's corrections (these weights
    have saturating pairs) made with the positions on the lanes and added transposed; uint8
    and int8 inputs; equal to the scalar kernel and the references, within 1 LSB of
    onnxruntime."""
    from glowpy.codegen.kernels.int8.pairs_tiles import simd_of
    from glowpy.codegen.target.resolve import resolve_target
    model, feeds = lanes_model(dtype, np.random.default_rng(37))
    opts = grouped(level, group)
    info, got = same_as_references(model, feeds, tmp_path,
                                   [opts, dict(opts, kernel_variants={"QConv": "direct"})])
    convs = [i["variant"] for i in plan(tmp_path) if i["op"] == "QConv"]
    simd = simd_of(resolve_target(mcpu=level.cpu).caps)
    assert [v["name"] for v in convs] == [group] * 4, convs
    nvc = 4 if simd.registers >= 32 else 2
    # the 20x20 plane's 16 output channels: one block of 6 x 2 quads on 16 registers (the
    # positions' tiles take 6 channels at a time); quads16's corrections cost a transposing
    # store an output there (pairs_lanes.FIX), and 4 vectors of 16 channels are no block of 16
    small = nvc * simd.width if group == "quads" and nvc == 2 else 0
    assert lanes_of(convs) == [small] + [nvc * simd.width] * 3, convs
    if group == "quads16":
        tables = json.loads(next((tmp_path / "b0").glob("*.json")).read_text())["constants"]
        fixed = {t["for"] for t in tables if t["name"].endswith("quads16 correction offsets")}
        assert len(fixed) == 4, fixed  # every layer has corrections to make
    for p in info.outputs:
        assert len(np.unique(got[p["name"]])) > 20, p["name"]  # a spread, not a clamp


@pytest.mark.parametrize("mcpu,mattr,lanes", [("cascadelake", None, 64),
                                               ("x86-64-v3", "+avxvnni", 16)])
def test_channels_on_the_lanes_for_vnni(mcpu, mattr, lanes, tmp_path):
    """The plan lanes_model's QConvs get for VNNI targets on any host (compiled, not run:
    test_output_channels_on_the_lanes runs them where the host can): blocks of output channels
    on the lanes for the three small planes (AVX-512 VNNI: 4 vectors of 16; AVX-VNNI on ymm
    registers: 2 of 8), the positions for the 20x20 one but with 16 registers (its 16 output
    channels one 6 x 2 block)."""
    model, _ = lanes_model(np.uint8, np.random.default_rng(37))
    convs = [i["variant"] for i in memory_report(model, tmp_path / "b", mcpu=mcpu, mattr=mattr)[
        "instructions"] if i["op"] == "QConv"]
    assert [v["name"] for v in convs] == ["quads"] * 4, convs
    assert lanes_of(convs) == [0 if lanes == 64 else lanes, lanes, lanes, lanes], convs


@pytest.mark.parametrize("mcpu,group", [("cascadelake", "quads"), ("x86-64-v3", "pairs")])
def test_window_packing_stores_each_group_after_its_loads(mcpu, group, tmp_path):
    """pairs_window.pack_spots loads each group's g reduction steps just before storing them:
    loaded all at once (the 7x7 stride-2 stem's 3 x 49 taps), the loads shared one chain in
    LLVM's selection DAG and X86's load combine walked its users for each (quadratic: 11 s of
    ResNet-50 int8's compile). Compiled for explicit targets (any host); in each window QConv
    kernel's IR (-dump-llvm-ir) the vector loads between two stores of the packed tile are at
    most one group's: g steps of the tile's segments (nv vectors, split where rows meet)."""
    model, _ = window_model(np.uint8, np.random.default_rng(33))
    onnx.save(model, str(tmp_path / "m.onnx"))
    glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "b"), mcpu=mcpu,
                   kernel_variants={"QConv": group}, dump_llvm_ir=str(tmp_path / "m.ll"),
                   dump_memory_report=str(tmp_path / "b0.memory.json"))
    convs = [i for i in plan(tmp_path) if i["op"] == "QConv"]
    bodies = dict(re.findall(r'define [^\n]*@"k(\d+)_QConv"[^\n]*\n(.*?)\n\}',
                             (tmp_path / "m.ll").read_text(), re.S))
    assert len(bodies) == len(convs) == 6
    g, counts = GROUP[group], []
    for conv in convs:
        p = conv["variant"]["params"]
        run = longest = loads = 0
        for line in bodies[str(conv["index"])].split("\n"):
            if re.search(r"= load <", line):
                run, loads = run + 1, loads + 1
                longest = max(longest, run)
            elif re.match(r"\s*store <\d+ x i32>", line):
                run = 0
        assert 0 < longest <= g * (p["nv"] + p["rows"] - 1), (conv["variant"], longest, loads)
        counts.append(loads)
    assert max(counts) > 500, counts  # the stem's: 3 x 49 taps x its tile's segments


@pytest.mark.parametrize("level,group", GROUPINGS)
def test_layers_of_one_shape_share_their_kernel(level, group, tmp_path, monkeypatch):
    """Two 3x3 QConvs of one shape (a repeated block's), each with its own output zero point,
    and zero biases (equal small tables): the zero point is read at run time
    (quant.runtime_zp) and vector targets keep small tables per instruction
    (Kernel.add_table), so the two compile as one function (module._share); equal to the
    scalar kernel and the references, within 1 LSB of onnxruntime. A third layer of another
    shape keeps its own."""
    rng = np.random.default_rng(37)
    m = QDQ(np.uint8)

    def conv(x, c, mo, zp):
        w, sw = m.weight((mo, c, 3, 3), 0, rng)
        bias = m.dq(m.c(np.zeros(mo, np.int32)), (0.05 * np.asarray(sw)).astype(np.float32),
                    np.zeros(mo, np.int32), 0)
        return m.q(m.op("Conv", [m.dq(x, 0.05, m.zp(0)), w, bias], pads=[1, 1, 1, 1]), 0.2, zp)
    outs = [conv("x", 32, 16, 126), conv("x", 32, 16, 140), conv("y", 32, 24, 133)]
    feeds = byte_feeds({"x": (1, 32, 9, 9), "y": (1, 32, 9, 9)}, np.uint8, rng)
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    opts = grouped(level, group)
    same_as_references(model, feeds, tmp_path, [dict(opts, dump_llvm_ir=str(tmp_path / "m.ll")),
                                                dict(opts, kernel_variants={"QConv": "direct"})])
    assert [i["variant"]["name"] for i in plan(tmp_path) if i["op"] == "QConv"] == [group] * 3
    text = (tmp_path / "m.ll").read_text()
    kernels = re.findall(r'call void @"(k\d+_QConv)"', text)
    # (the 24-channel layer's code cannot be the others': the pair shares)
    assert sorted(kernels.count(f) for f in set(kernels)) == [1, 2], kernels
    # ... and the second of the pair is not even emitted: its tables are written, then it
    # takes over the first's function (Kernel.taken_over, reuse.TABLED); but for quads16,
    # whose correction tables are as long as the weights need (another layout: emitted, and
    # the equal text shared by module._share)
    from glowpy.codegen.kernels.int8 import pairs_window
    emitted = []
    run = pairs_window.WindowPairs.emit
    monkeypatch.setattr(pairs_window.WindowPairs, "emit",
                        lambda self: emitted.append(self.k.instr.name) or run(self))
    glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "again"), **opts)
    assert len(emitted) == (3 if group == "quads16" else 2), emitted
