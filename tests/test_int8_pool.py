"""int8 MaxPool and QAvgPool on vector targets (glowpy/codegen/kernels/int8/pool.py), compiled
for every x86 level this host runs: windows of 1-D and 2-D pools (strides 1-3, padding on
either side, ceil_mode, count_include_pad, dilation, a window as large as the plane, rows wider
than a tile and narrower than a vector), int8 and uint8, the exact division of one scale and
the requantization between two, both rounding modes. Each bundle's outputs equal the integer
ops' numpy references bit for bit, the scalar kernels' (forced through the registry), and
onnxruntime within 1 LSB where the rounding is its own."""
from __future__ import annotations

import numpy as np
import pytest

from int8_check import aarch64_equals_references, plan, same_as_references
from test_int8 import QDQ
from util import make_graph_model
from vector_levels import RUNNABLE

# (input shape, window attributes)
WINDOWS = {
    "3x3-pad": ((1, 3, 37, 37), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),  # Inception's
    "3x3-s2": ((1, 2, 35, 35), dict(kernel_shape=[3, 3], strides=[2, 2])),
    "5x5-incl": ((1, 2, 19, 23), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2], count_include_pad=1)),
    "3x2-ceil": ((1, 2, 17, 9), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1],
                                    ceil_mode=1)),
    "s3-wide": ((2, 2, 11, 70), dict(kernel_shape=[3, 3], strides=[3, 3], pads=[1, 1, 1, 1])),
    "plane": ((1, 4, 7, 7), dict(kernel_shape=[7, 7])),
    "1d": ((1, 3, 50), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
}
IDS = list(WINDOWS)


def pool_model(shape, attrs, dtype, rng):
    """MaxPool (dilated where the window allows it) and AveragePool on one grid, AveragePool
    onto another (uniform counts only: the requantized form) and with a fused Relu."""
    m = QDQ(dtype)
    lo = int(np.iinfo(dtype).min)
    xs, xz = 0.05, lo + 117

    def x():
        return m.dq("x", xs, m.zp(xz))
    avg = {k: v for k, v in attrs.items()}
    mx = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    outs = [m.q(m.op("MaxPool", [x()], **mx), xs, xz),
            m.q(m.op("AveragePool", [x()], **avg), xs, xz),
            m.q(m.op("Relu", [m.op("AveragePool", [x()], **avg)]), xs, xz)]
    if len(shape) == 4 and attrs["kernel_shape"][0] < shape[2] // 2:
        outs.append(m.q(m.op("MaxPool", [x()], **dict(mx, dilations=[2, 2])), xs, xz))
    if not attrs.get("pads") and not attrs.get("ceil_mode") or attrs.get("count_include_pad"):
        outs.append(m.q(m.op("AveragePool", [x()], **avg), 0.031, lo + 90))
    feeds = {"x": rng.integers(lo, lo + 256, shape).astype(dtype)}
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


SCALAR = {"MaxPool": "direct", "QAvgPool": "default"}


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("window", IDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["u8", "s8"])
def test_int8_pools_on_vectors_are_exact(level, window, dtype, tmp_path):
    model, feeds = pool_model(*WINDOWS[window], dtype, np.random.default_rng(21))
    opts = dict(level.options)
    info, got = same_as_references(model, feeds, tmp_path,
                                   [opts, dict(opts, kernel_variants=SCALAR)])
    chosen = {(i["kernel"], i["variant"]["name"]) for i in plan(tmp_path)
              if i["kernel"] in ("MaxPool", "QAvgPool")}
    assert chosen == {("MaxPool", "int8_vector"), ("QAvgPool", "vector")}, chosen
    for p in info.outputs:  # a spread of values, not a clamp
        y = got[p["name"]]
        assert len(np.unique(y)) > min(10, y.size // 2), p["name"]


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("window", ["3x3-pad", "5x5-incl", "1d"])
def test_int8_average_rounds_half_away_on_request(level, window, tmp_path):
    """-quantization-rounding=away: TFLite's (d + count*y_zp +- count/2) / count."""
    model, feeds = pool_model(*WINDOWS[window], np.int8, np.random.default_rng(22))
    opts = dict(level.options, quantization_rounding="away")
    same_as_references(model, feeds, tmp_path, [opts, dict(opts, kernel_variants=SCALAR)],
                       ort_lsb=None)
    assert ("QAvgPool", "vector") in {(i["kernel"], i["variant"]["name"]) for i in plan(tmp_path)}


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
def test_large_counts_keep_the_integer_division(level, tmp_path):
    """A global average of a 130x130 plane (16,900 taps, past int8/pool.MAX_COUNT, where the
    float quotient could no longer be trusted to keep a half-integer's side) takes the scalar
    kernel, still exact; the MaxPool beside it is vectorized."""
    m = QDQ(np.uint8)
    x = m.dq("x", 0.05, m.zp(100))
    outs = [m.q(m.op("GlobalAveragePool", [x]), 0.05, 100),
            m.q(m.op("MaxPool", [x], kernel_shape=[130, 130]), 0.05, 100)]
    feeds = {"x": np.random.default_rng(23).integers(0, 256, (1, 3, 130, 130)).astype(np.uint8)}
    model = make_graph_model(m.nodes, feeds, outs, m.inits, opset=13)
    same_as_references(model, feeds, tmp_path, [dict(level.options)])
    chosen = {(i["kernel"], i["variant"]["name"]) for i in plan(tmp_path)
              if i["kernel"] in ("MaxPool", "QAvgPool")}
    assert chosen == {("MaxPool", "int8_vector"), ("QAvgPool", "default")}, chosen


@pytest.mark.parametrize("window", ["3x3-pad", "3x2-ceil", "1d"])
def test_int8_pools_on_neon_under_qemu_aarch64(window, tmp_path):
    """The same kernels on NEON (4 lanes, no mask registers), run under qemu-aarch64, equal the
    references."""
    from util import memory_report
    model, feeds = pool_model(*WINDOWS[window], np.int8, np.random.default_rng(24))
    plan_ = memory_report(model, tmp_path / "plan", target="aarch64")["instructions"]
    chosen = {(i["op"], i["variant"]["name"]) for i in plan_ if i["op"] in ("MaxPool", "QAvgPool")}
    assert chosen == {("MaxPool", "int8_vector"), ("QAvgPool", "vector")}, chosen
    aarch64_equals_references(model, feeds, tmp_path)
