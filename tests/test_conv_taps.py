"""Conv taps that read only padding are cut from the kernel (glowpy/ir/passes/conv_taps.py):
atrous convolutions on maps smaller than their dilation (DeepLabV3's ASPP at dilation 36 on a
28x28 map lands one tap of nine). Each case is compiled, run and compared with onnxruntime,
and the memory report's executed multiply-adds must count exactly the taps that land in some
output position (counted here by enumerating every output position and tap, independently of
the compiler's arithmetic). Hostile dilations (2^20, 2^62) compile to their landing taps in
seconds."""
import time

import numpy as np
import pytest

from hostile import HANG_GUARD
from util import GraphBuilder, check_against_onnxruntime, compile_and_run, memory_report

RNG = np.random.default_rng(11)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def landing_span(n, k, s, d, p0, p1, out):
    """Taps from the first to the last that reads an input position for some output, widened
    where cutting more would leave a negative pad (pads shrink by d per tap cut)."""
    hit = [t for t in range(k) if any(0 <= o * s + t * d - p0 < n for o in range(out))]
    return max(max(hit), k - 1 - p1 // d) - min(min(hit), p0 // d) + 1


def conv_model(c, m, spatial, k, d, s, pads, group=1, runtime_w=False):
    nd = len(spatial)
    feeds = {"x": f32(1, c, *spatial)}
    w = f32(m, c // group, *([k] * nd), scale=1 / np.sqrt(c * k ** nd))
    if runtime_w:
        feeds["w"] = w
    g = GraphBuilder(**feeds)
    g.node("Conv", ["x", "w" if runtime_w else w, f32(m, scale=0.1)], kernel_shape=[k] * nd,
           dilations=[d] * nd, strides=[s] * nd, pads=list(pads), group=group)
    return g.model(opset=13), g.feeds


def executed_macs(m, tmp_path, **options):
    return sum(i["executed_macs"] for i in memory_report(m, tmp_path, **options)["instructions"]
               if i["op"] in ("Conv", "QConv"))


CASES = {  # (C, M, spatial, kernel, dilation, stride, pads begin + end, group)
    "aspp_rate36_28x28": (16, 8, (28, 28), 3, 36, 1, (36, 36, 36, 36), 1),
    "aspp_rate24_32x32_kept": (8, 8, (32, 32), 3, 24, 1, (24, 24, 24, 24), 1),
    "aspp_rate18_7x7": (8, 8, (7, 7), 3, 18, 1, (18, 18, 18, 18), 1),
    "strided_asymmetric": (6, 10, (13, 11), 5, 7, 2, (14, 3, 14, 20), 1),
    "depthwise_rate12": (8, 8, (9, 9), 3, 12, 1, (12, 12, 12, 12), 8),
    "conv1d_rate16": (4, 6, (10,), 3, 16, 1, (16, 16), 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_trimmed_conv_matches_onnxruntime(case, tmp_path):
    c, m, spatial, k, d, s, pads, group = CASES[case]
    model, feeds = conv_model(c, m, spatial, k, d, s, pads, group)
    nd = len(spatial)
    outs = [(n + pads[i] + pads[i + nd] - (k - 1) * d - 1) // s + 1 for i, n in enumerate(spatial)]
    taps = np.prod([landing_span(n, k, s, d, pads[i], pads[i + nd], o)
                    for i, (n, o) in enumerate(zip(spatial, outs))])
    assert executed_macs(model, tmp_path / "plan") == m * (c // group) * np.prod(outs) * taps
    check_against_onnxruntime(model, feeds, tmp_path / "run", rtol=1e-4, atol=1e-5)
    check_against_onnxruntime(model, feeds, tmp_path / "O0", rtol=1e-4, atol=1e-5, opt_level=0)


def test_runtime_weights_are_sliced(tmp_path):
    """Weights fed at run time: a Slice of the landing taps before the Conv."""
    model, feeds = conv_model(8, 4, (12, 12), 3, 16, 1, (16,) * 4, runtime_w=True)
    assert executed_macs(model, tmp_path / "plan") == 4 * 8 * 12 * 12
    check_against_onnxruntime(model, feeds, tmp_path / "run", rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("per_channel", [True, False])
def test_quantized_weights_stay_quantized(per_channel, tmp_path):
    """QDQ weights (int8, per output channel or per tensor): the cut is taken of the integer
    constant, and the Conv still becomes an integer kernel (within one output quantum of
    onnxruntime); on the float kernels (the host's default, passes/quant/float_exact.py) it
    runs the cut too."""
    x = np.clip(f32(1, 8, 14, 14), -2, 2)
    g = GraphBuilder(x=x)
    xs = np.float32(4 / 255)
    xq = g.node("QuantizeLinear", ["x", np.array(xs), np.array(0, np.uint8)], output=False)
    xd = g.node("DequantizeLinear", [xq, np.array(xs), np.array(0, np.uint8)], output=False)
    wq = RNG.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8)
    if per_channel:
        wd = g.node("DequantizeLinear", [wq, np.full(8, 0.003, np.float32), np.zeros(8, np.int8)],
                    output=False, axis=0)
    else:
        wd = g.node("DequantizeLinear", [wq, np.array(0.003, np.float32), np.array(0, np.int8)],
                    output=False)
    y = g.node("Conv", [xd, wd], output=False, dilations=[20, 20], pads=[20] * 4,
               kernel_shape=[3, 3])
    ys = np.float32(0.05)
    yq = g.node("QuantizeLinear", [y, np.array(ys), np.array(128, np.uint8)], output=False)
    g.node("DequantizeLinear", [yq, np.array(ys), np.array(128, np.uint8)])
    model = g.model(opset=13)
    instrs = memory_report(model, tmp_path / "plan", quantized_convolutions="integer")["instructions"]
    ops = [i["op"] for i in instrs]
    assert "QConv" in ops and "Conv" not in ops, ops
    assert sum(i["executed_macs"] for i in instrs if i["op"] == "QConv") == 8 * 8 * 14 * 14
    check_against_onnxruntime(model, g.feeds, tmp_path / "run", rtol=0, atol=float(ys) * 1.01,
                              quantized_convolutions="integer")
    # the cut leaves a 1x1, which x86's integer GEMM would take: passed over here
    floats = {"QConv": ("!", {"pairs", "quads", "quads16"})}
    instrs = memory_report(model, tmp_path / "fplan", kernel_variants=floats)["instructions"]
    assert [i["op"] for i in instrs].count("QFinish") == 1
    assert sum(i["executed_macs"] for i in instrs if i["op"] == "Conv") == 8 * 8 * 14 * 14
    check_against_onnxruntime(model, g.feeds, tmp_path / "frun", rtol=0, atol=float(ys) * 1.01,
                              kernel_variants=floats)


def test_qlinearconv_is_cut_too(tmp_path):
    """The ONNX integer Conv (QLinearConv) at dilation 20 on 14x14: its centre tap only, an
    integer kernel, within one output quantum of onnxruntime (weights within 7 bits: its AVX2
    kernels without VNNI saturate u8 x s8 pairs past them)."""
    xq = RNG.integers(0, 256, (1, 8, 14, 14)).astype(np.uint8)
    g = GraphBuilder(x=xq)
    wq = RNG.integers(-64, 64, (6, 8, 3, 3)).astype(np.int8)
    g.node("QLinearConv", ["x", np.array(0.02, np.float32), np.array(128, np.uint8), wq,
                           np.full(6, 0.003, np.float32), np.zeros(6, np.int8),
                           np.array(0.05, np.float32), np.array(120, np.uint8)],
           dilations=[20, 20], pads=[20] * 4, kernel_shape=[3, 3])
    model = g.model(opset=13)
    assert executed_macs(model, tmp_path / "plan") == 6 * 8 * 14 * 14
    check_against_onnxruntime(model, g.feeds, tmp_path / "run", rtol=0, atol=1)


@pytest.mark.parametrize("dilation, attrs", [
    (2 ** 20, {"auto_pad": "SAME_UPPER"}),
    (2 ** 62, {"pads": [2 ** 62] * 4}),
])
def test_hostile_dilation_compiles_to_its_landing_tap(dilation, attrs, tmp_path):
    """Only the centre tap lands: the result is the 1x1 convolution by it, computed in
    seconds (onnxruntime cannot be asked: its im2col is sized by the dilation)."""
    x, w = f32(1, 3, 8, 8), f32(4, 3, 3, 3)
    g = GraphBuilder(x=x)
    g.node("Conv", ["x", w], kernel_shape=[3, 3], dilations=[dilation] * 2, **attrs)
    t0 = time.monotonic()
    got, = compile_and_run(g.model(opset=13), g.feeds, tmp_path)
    assert time.monotonic() - t0 < HANG_GUARD
    expected = np.einsum("mc,nchw->nmhw", w[:, :, 1, 1].astype(np.float64), x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_landing_span_counts_the_enumerated_taps():
    """The counting helper above against cases worked by hand: 3 taps at dilation 10 over 8
    inputs with pads 10/20 (18 outputs): taps 0 and 1 land, tap 2 (positions 10..27) never;
    with an end pad of 5 (3 outputs) only tap 1 lands, yet tap 2 stays (cutting it would
    leave the end pad at -5). 'Same'
    padding at dilation d over 28: all three taps land while d < 28."""
    assert landing_span(8, 3, 1, 10, 10, 20, 18) == 2
    assert landing_span(8, 3, 1, 10, 10, 5, 3) == 2
    assert all(landing_span(n, 3, 1, 1, 1, 1, n) == 3 for n in (3, 8))
    assert [landing_span(28, 3, 1, d, d, d, 28) for d in (12, 27, 28, 36)] == [3, 3, 1, 1]
