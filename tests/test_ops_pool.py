"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool and MaxUnpool against onnxruntime
and glowpy's numpy references: 1-D, 2-D and 3-D windows, pads, strides, dilations, ceil_mode,
count_include_pad and auto_pad. Each test is one graph of several pooling nodes.

MaxPool and MaxUnpool are exact (they select); averages use rtol 1e-5 (float32 sums in another
order)."""
import numpy as np
import pytest

from util import GraphBuilder, check_op
from vector_levels import params

RNG = np.random.default_rng(5)
X2 = RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)
X1 = RNG.standard_normal((2, 3, 13)).astype(np.float32)
X3 = RNG.standard_normal((1, 2, 5, 6, 7)).astype(np.float32)

WINDOWS_2D = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 2, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [3, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [4, 4], "strides": [3, 3], "pads": [2, 2, 2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [2, 4], "auto_pad": "SAME_UPPER", "strides": [2, 3]},
    {"kernel_shape": [2, 4], "auto_pad": "SAME_LOWER", "strides": [2, 3]},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [9, 10]},  # global window
]
DILATED_2D = [
    {"kernel_shape": [2, 2], "dilations": [2, 2]},
    {"kernel_shape": [3, 2], "dilations": [2, 3], "strides": [2, 1], "pads": [2, 1, 1, 1]},
    {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2], "ceil_mode": 1},
]
WINDOWS_1D = [
    {"kernel_shape": [3]},
    {"kernel_shape": [4], "strides": [3], "pads": [2, 1]},
    {"kernel_shape": [3], "strides": [2], "ceil_mode": 1},
    {"kernel_shape": [3], "strides": [2], "pads": [1, 1], "ceil_mode": 1},
    {"kernel_shape": [4], "auto_pad": "SAME_UPPER", "strides": [2]},
    {"kernel_shape": [4], "auto_pad": "SAME_LOWER", "strides": [2]},
    {"kernel_shape": [5], "auto_pad": "VALID", "strides": [3]},
]
WINDOWS_3D = [
    {"kernel_shape": [2, 2, 2]},
    {"kernel_shape": [3, 3, 3], "strides": [2, 2, 2], "pads": [1, 1, 1, 1, 1, 1]},
    {"kernel_shape": [2, 3, 2], "strides": [1, 2, 3], "ceil_mode": 1},
]


def _pools(op, windows, extra=None, opset=12):
    g = GraphBuilder(x2=X2, x1=X1, x3=X3)
    for name, wins in windows:
        for attrs in wins:
            g.node(op, [name], **attrs, **(extra or {}))
    return g.model(opset), g.feeds


def test_maxpool(tmp_path):
    m, feeds = _pools("MaxPool", [("x2", WINDOWS_2D + DILATED_2D), ("x1", WINDOWS_1D),
                                  ("x3", WINDOWS_3D)])
    check_op(m, feeds, tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_averagepool(count_include_pad, tmp_path):
    m, feeds = _pools("AveragePool", [("x2", WINDOWS_2D), ("x1", WINDOWS_1D), ("x3", WINDOWS_3D)],
                      {"count_include_pad": count_include_pad})
    check_op(m, feeds, tmp_path, rtol=1e-5, atol=1e-6)


def test_averagepool_dilations(tmp_path):
    """AveragePool-19 takes dilations."""
    m, feeds = _pools("AveragePool", [("x2", DILATED_2D)], opset=19)
    check_op(m, feeds, tmp_path, rtol=1e-5, atol=1e-6)


def test_maxpool_with_infinities(tmp_path):
    """Windows of only -inf give -inf, +inf and the largest floats win. (onnxruntime counts
    padding as -FLT_MAX, glowpy skips it: windows of padding and -inf only differ, and are not
    tested.)"""
    x = RNG.standard_normal((1, 1, 4, 5)).astype(np.float32)
    x[0, 0, 1, :] = -np.inf
    x[0, 0, 2, 1] = np.inf
    x[0, 0, 3, 4] = 3e38
    g = GraphBuilder(x=x)
    g.node("MaxPool", ["x"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    g.node("MaxPool", ["x"], kernel_shape=[1, 3], strides=[1, 2])
    check_op(g.model(12), g.feeds, tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op, tmp_path):
    g = GraphBuilder(x1=X1, x2=X2, x3=X3, one=RNG.standard_normal((2, 5, 1, 1)).astype(np.float32))
    for name in ["x1", "x2", "x3", "one"]:
        g.node(op, [name])
    check_op(g.model(12), g.feeds, tmp_path, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"])
def test_whole_plane_windows(op, tmp_path):
    """Windows that cover the whole plane (a reduction over contiguous memory): planes of 3, 9,
    16, 125, 300 and 1000 elements, so one masked vector, whole vectors, the unrolled and the
    looped accumulators and the masked tail all run; large values check the -inf/0 fill."""
    feeds = {f"x{h}_{w}": (RNG.standard_normal((2, 3, h, w)) * 50).astype(np.float32)
             for h, w in [(1, 3), (3, 3), (4, 4), (25, 5), (15, 20), (40, 25)]}
    g = GraphBuilder(**feeds)
    for name, x in feeds.items():
        g.node(op, [name], **({} if op.startswith("Global") else {"kernel_shape": list(x.shape[2:])}))
    check_op(g.model(12), g.feeds, tmp_path, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_wide_windows(op, tmp_path):
    """Windows wider than the emitter's unrolled tap count (16)."""
    x = RNG.standard_normal((1, 2, 3, 45)).astype(np.float32)
    g = GraphBuilder(x=x)
    g.node(op, ["x"], kernel_shape=[1, 17])
    g.node(op, ["x"], kernel_shape=[2, 20], strides=[1, 3], pads=[1, 9, 0, 9])
    g.node(op, ["x"], kernel_shape=[3, 18], strides=[2, 4], ceil_mode=1, pads=[1, 5, 1, 5])
    g.node(op, ["x"], kernel_shape=[1, 25], auto_pad="SAME_LOWER", strides=[1, 2])
    check_op(g.model(12), g.feeds, tmp_path, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_long_rows(op, level, tmp_path):
    """Rows of several vectors (up to four per tile, then more tiles and an edge run): every
    vector's span of input columns, its masks at both ends, strides 1-3 and dilations, at each
    vector width the host runs (tests/vector_levels.py)."""
    x = RNG.standard_normal((1, 2, 7, 150)).astype(np.float32)
    g = GraphBuilder(x=x)
    g.node(op, ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    g.node(op, ["x"], kernel_shape=[2, 2], strides=[2, 2])
    g.node(op, ["x"], kernel_shape=[3, 3], strides=[3, 3], ceil_mode=1)
    g.node(op, ["x"], kernel_shape=[3, 5], strides=[2, 2], pads=[1, 2, 1, 2])
    g.node(op, ["x"], kernel_shape=[2, 3], strides=[1, 3], dilations=[2, 2], pads=[0, 2, 1, 1])
    check_op(g.model(19), g.feeds, tmp_path, rtol=1e-5, atol=1e-6, **level.options)


def test_maxpool_indices_output(tmp_path):
    """MaxPool's second output: the flat input index of each window's maximum (storage_order
    0 row-major, 1 column-major within each plane)."""
    g = GraphBuilder(x=X2)
    g.node("MaxPool", ["x"], outputs=2, kernel_shape=[2, 2])
    g.node("MaxPool", ["x"], outputs=2, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    g.node("MaxPool", ["x"], outputs=2, kernel_shape=[2, 3], storage_order=1)
    check_op(g.model(12), g.feeds, tmp_path, rtol=0, atol=0)


@pytest.mark.parametrize("x, pool, shape", [
    (X2[:, :, :8], {"kernel_shape": [2, 2], "strides": [2, 2]}, None),
    (X2, {"kernel_shape": [2, 2], "strides": [2, 2]}, [2, 3, 9, 10]),   # odd sizes restored
    (X2[:, :, :, :9], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, None),
    (X1, {"kernel_shape": [3], "strides": [2]}, [2, 3, 13]),
    (X3[:, :, 1:, :, 1:], {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, None),
], ids=["2d", "2d-output-shape", "2d-pads", "1d", "3d"])
def test_maxunpool_after_maxpool(x, pool, shape, tmp_path):
    """MaxUnpool of MaxPool's values (through a Relu) and indices, SegNet's decoder step: the
    default output shape, or output_shape restoring odd sizes (the flat indices scattered into
    it, as onnxruntime does); exact against onnxruntime and the numpy reference."""
    g = GraphBuilder(x=np.ascontiguousarray(x))
    y, i = g.node("MaxPool", ["x"], outputs=2, output=False, **pool)
    ins = [g.node("Relu", [y], output=False), i]
    g.node("MaxUnpool", ins + ([np.array(shape, np.int64)] if shape else []), **pool)
    check_op(g.model(11), g.feeds, tmp_path, rtol=0, atol=0)


def test_maxunpool_run_time_indices_out_of_range_write_nothing(tmp_path):
    """Indices fed at run time: negative ones count from the end, those outside the output
    (-1000, 10^12, the size itself) write nothing. Under valgrind memcheck (a bundle built for
    valgrind's x86-64-v3) nothing is written outside the output, and the output equals the
    numpy reference."""
    import onnx

    import glowpy
    from glowpy.runtime import Bundle
    from test_memcheck import VALGRIND, VG_CPU, need
    from util import reference_of
    need("valgrind")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    i = rng.integers(0, 2 * 6 * 8 - 1, x.shape).astype(np.int64)  # the last place: -1's only
    i[0, 0, 0, :] = [-1, -1000, 10 ** 12, 2 * 6 * 8]
    g = GraphBuilder(x=x, i=i)
    g.node("MaxUnpool", ["x", "i"], kernel_shape=[2, 2], strides=[2, 2])
    model = g.model(11)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), mcpu=VG_CPU)
    b = Bundle(str(tmp_path / "b"), info.name, runner=VALGRIND)
    got = b.run(g.feeds, timeout=600)[info.outputs[0]["name"]]
    assert "Invalid" not in b.last_stderr, b.last_stderr
    want = reference_of(model, g.feeds)[0]
    assert want.flat[-1] == x[0, 0, 0, 0]  # -1: the last element
    np.testing.assert_array_equal(got, want)
