"""Conv against onnxruntime and glowpy's numpy reference: 1-D, 2-D and 3-D; explicit pads
(asymmetric too), auto_pad SAME_UPPER / SAME_LOWER / VALID, strides, dilations, groups
(depthwise with channel multipliers too), with and without bias, kernel_shape given or
inferred, weights as constants or run-time inputs. Each test is one graph of several Convs.

Tolerance: rtol 1e-4 / atol 1e-5 (float32 sums of up to ~100 products in another order)."""
import numpy as np
import pytest

from util import GraphBuilder, check_op, compile_and_run, reference_of, run_onnxruntime

RNG = np.random.default_rng(11)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# (weight shape, bias?, attributes) over a [2, 4, 7, 8] input
CONV2D = [
    ((6, 4, 3, 3), True, {}),
    ((6, 4, 3, 3), False, {"pads": [1, 1, 1, 1]}),
    ((6, 4, 3, 3), True, {"pads": [0, 1, 2, 1]}),
    ((6, 4, 3, 3), True, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((6, 4, 2, 5), True, {"strides": [2, 1], "pads": [1, 2, 0, 2]}),
    ((6, 4, 3, 3), True, {"dilations": [2, 2]}),
    ((6, 4, 3, 2), True, {"dilations": [2, 3], "strides": [1, 2], "pads": [2, 1, 1, 2]}),
    ((6, 4, 1, 1), True, {}),
    ((6, 4, 1, 1), False, {"strides": [2, 2]}),
    ((5, 4, 3, 3), True, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ((5, 4, 7, 8), True, {}),  # kernel covers the whole input
    ((6, 4, 9, 1), True, {"pads": [1, 0, 1, 0]}),  # kernel taller than the input, padded
]

AUTO = [
    ((6, 4, 3, 3), {"auto_pad": "SAME_UPPER"}),
    ((6, 4, 4, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 3]}),
    ((6, 4, 4, 2), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((6, 4, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((6, 4, 3, 3), {"auto_pad": "NOTSET", "pads": [1, 1, 1, 1]}),
]

GROUPS = [
    ((6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
    ((8, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 0, 1, 0]}),  # multiplier 2
    ((4, 1, 5, 5), {"group": 4, "auto_pad": "SAME_UPPER"}),
    ((4, 4, 1, 1), {"group": 1}),
    ((8, 1, 1, 1), {"group": 4}),
]


def _graph(x, cases, with_bias=True, opset=11):
    g = GraphBuilder(x=x)
    for case in cases:
        wshape, bias, attrs = case if len(case) == 3 else (case[0], with_bias, case[1])
        ins = ["x", rand(*wshape)] + ([rand(wshape[0])] if bias else [])
        g.node("Conv", ins, **attrs)
    return g


def test_conv2d(tmp_path):
    g = _graph(rand(2, 4, 7, 8), CONV2D)
    check_op(g.model(), g.feeds, tmp_path)


def test_conv2d_auto_pad(tmp_path):
    g = _graph(rand(2, 4, 7, 8), AUTO)
    check_op(g.model(), g.feeds, tmp_path)


def test_conv2d_groups(tmp_path):
    g = _graph(rand(2, 4, 7, 8), GROUPS)
    g2 = _graph(rand(1, 4, 9, 10), GROUPS, with_bias=False)
    check_op(g.model(), g.feeds, tmp_path / "bias")
    check_op(g2.model(), g2.feeds, tmp_path / "nobias")


CONV1D = [
    ((6, 4, 3), True, {}),
    ((6, 4, 3), False, {"pads": [1, 2]}),
    ((6, 4, 4), True, {"strides": [3], "pads": [2, 0]}),
    ((6, 4, 3), True, {"dilations": [3], "pads": [2, 2]}),
    ((6, 4, 4), True, {"auto_pad": "SAME_UPPER", "strides": [2]}),
    ((6, 4, 4), True, {"auto_pad": "SAME_LOWER", "strides": [2]}),
    ((6, 4, 3), True, {"auto_pad": "VALID", "strides": [2]}),
    ((8, 2, 3), True, {"group": 2, "pads": [1, 1]}),
    ((4, 1, 5), True, {"group": 4, "pads": [2, 2]}),
    ((6, 4, 1), True, {}),
]


@pytest.mark.parametrize("auto,pads", [("SAME_UPPER", [1, 0, 1, 1]), ("SAME_LOWER", [1, 1, 1, 0])])
def test_conv_same_with_dilations(auto, pads, tmp_path):
    """onnxruntime refuses auto_pad SAME with dilations; the spec pads for the dilated kernel
    (here 3x2, so 2 rows and 1 column in total), so compare with onnxruntime on the explicit
    pads that SAME_UPPER / SAME_LOWER stand for."""
    x, w, b = rand(2, 4, 7, 8), rand(6, 4, 2, 2), rand(6)
    g = GraphBuilder(x=x)
    g.node("Conv", ["x", w, b], auto_pad=auto, dilations=[2, 1])
    explicit = GraphBuilder(x=x)
    explicit.node("Conv", ["x", w, b], pads=pads, dilations=[2, 1])
    expected = run_onnxruntime(explicit.model(), explicit.feeds)[0]
    got = compile_and_run(g.model(), g.feeds, tmp_path)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(reference_of(g.model(), g.feeds)[0], expected, rtol=1e-4, atol=1e-5)


def test_conv1d(tmp_path):
    g = _graph(rand(2, 4, 11), CONV1D)
    check_op(g.model(), g.feeds, tmp_path)


def test_conv3d(tmp_path):
    cases = [((3, 2, 3, 3, 3), True, {"pads": [1, 1, 1, 1, 1, 1]}),
             ((4, 2, 2, 3, 1), True, {"strides": [2, 1, 2], "pads": [0, 1, 0, 1, 1, 0]}),
             ((2, 1, 3, 3, 3), False, {"group": 2, "auto_pad": "SAME_LOWER"})]
    g = _graph(rand(1, 2, 5, 6, 7), cases)
    check_op(g.model(), g.feeds, tmp_path)


def test_conv_runtime_weights(tmp_path):
    """Weights and bias as graph inputs (read at run time, not folded)."""
    g = GraphBuilder(x=rand(1, 3, 6, 6), w=rand(4, 3, 3, 3), b=rand(4), wd=rand(3, 1, 3, 3))
    g.node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])
    g.node("Conv", ["x", "w"], strides=[2, 2])
    g.node("Conv", ["x", "wd"], group=3, dilations=[2, 2])
    check_op(g.model(), g.feeds, tmp_path)


def test_conv_large_channels(tmp_path):
    """Enough channels and taps that the accumulation order matters (rtol 1e-4 holds)."""
    g = GraphBuilder(x=rand(1, 32, 12, 12))
    g.node("Conv", ["x", rand(16, 32, 3, 3), rand(16)], pads=[1, 1, 1, 1])
    g.node("Conv", ["x", rand(32, 1, 3, 3), rand(32)], group=32, strides=[2, 2], pads=[1, 1, 1, 1])
    g.node("Conv", ["x", rand(24, 32, 1, 1), rand(24)])
    check_op(g.model(), g.feeds, tmp_path, rtol=1e-4, atol=1e-4)


def test_conv_wide_kernels(tmp_path):
    """Kernels wider than the emitter's unrolled tap count (16): the last-dim taps become a
    loop with run-time valid ranges."""
    g = GraphBuilder(x=rand(2, 3, 40), x2=rand(1, 2, 5, 30))
    g.node("Conv", ["x", rand(4, 3, 19), rand(4)])
    g.node("Conv", ["x", rand(4, 3, 17), rand(4)], pads=[9, 3], strides=[3])
    g.node("Conv", ["x", rand(4, 3, 18)], dilations=[2], pads=[10, 10], strides=[2])
    g.node("Conv", ["x", rand(3, 1, 21)], group=3, auto_pad="SAME_UPPER")
    g.node("Conv", ["x2", rand(3, 2, 3, 20), rand(3)], pads=[1, 7, 1, 8], strides=[1, 2])
    check_op(g.model(), g.feeds, tmp_path, rtol=1e-4, atol=1e-4)
