"""Conv variant im2col (glowpy/codegen/kernels/conv/im2col.py): first layers over few input
channels gathered into columns and multiplied from them, at each x86 vector level the host runs,
against onnxruntime under guard pages (a gather that strays out of the input, or a column
written past its buffer, faults), with the fused epilogues (residual add + Relu, per-channel
Mul + Clip) it must honour; and where the plan takes it unforced."""
import json

import pytest

from test_kernels_fast import check_guarded, f32
from util import GraphBuilder
from vector_levels import LEVELS, params

SHAPES = [  # (input, weights, attributes, forced params or None)
    # keyword spotting's first layer: a plane narrower than a vector, flattened into one chunk
    ((1, 1, 49, 10), (64, 1, 10, 4), dict(strides=[2, 2], pads=[4, 1, 5, 1]), None),
    # an RGB stem with TensorFlow's end-only padding
    ((1, 3, 34, 30), (24, 3, 3, 3), dict(strides=[2, 2], pads=[0, 0, 1, 1]), None),
    # a 5x5 stride-2 layer, odd sizes, a partial channel block, batch 2
    ((2, 3, 37, 41), (21, 3, 5, 5), dict(strides=[2, 2], pads=[2, 2, 2, 2]), None),
    # dilated, stride 2 down and 3 across, pads larger than the dilation reach
    ((1, 2, 20, 23), (16, 2, 3, 3), dict(strides=[2, 3], dilations=[2, 2], pads=[2, 1, 2, 3]), None),
    # stride 1 on rows narrower than two vectors
    ((1, 4, 10, 6), (17, 4, 3, 3), dict(pads=[1, 1, 1, 1]), None),
    # 1-D: a strided audio front end
    ((1, 1, 203), (32, 1, 10), dict(strides=[5], pads=[3, 2]), None),
    # a raw-audio row of 1,600 outputs: its inner vectors gathered in a loop (im2col.edges)
    ((1, 1, 8003), (24, 1, 10), dict(strides=[5], pads=[3, 2]), None),
    # rows of 75 outputs at stride 2, the inner vectors in a loop, a column of padding each side
    ((1, 3, 9, 150), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), None),
    # chunks of 3 rows (the last of 2), small register tiles: every chunk boundary exercised
    ((1, 3, 40, 40), (16, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]),
     {"rows": 3, "mr": 4, "nv": 1, "scratch": False}),
]


def _pair(xs, ws, attrs):
    """Two Convs of x with the layer's window (a residual add + Relu into the first, a
    per-channel Mul + Clip after the second)."""
    g = GraphBuilder(x=f32(*xs))
    nd = len(ws) - 2
    pads, dil, st = (attrs.get(k, [d] * n) for k, d, n in
                     (("pads", 0, 2 * nd), ("dilations", 1, nd), ("strides", 1, nd)))
    out = [(xs[2 + i] + pads[i] + pads[nd + i] - dil[i] * (ws[2 + i] - 1) - 1) // st[i] + 1
           for i in range(nd)]
    g.feeds["r"] = f32(xs[0], ws[0], *out)
    y = g.node("Conv", ["x", f32(*ws, scale=0.3), f32(ws[0])], output=False, **attrs)
    g.node("Relu", [g.node("Add", [y, "r"], output=False)])
    z = g.node("Conv", ["x", f32(*ws, scale=0.3)], output=False, **attrs)
    g.node("Clip", [g.node("Mul", [z, f32(ws[0], *[1] * len(out))], output=False), f32(), f32() + 2])
    return g


def _variants(report):
    return [i["variant"] for i in json.loads(report.read_text())["instructions"] if i["kernel"] == "Conv"]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("xs, ws, attrs, forced", SHAPES)
def test_im2col_matches_onnxruntime(xs, ws, attrs, forced, level, tmp_path):
    g = _pair(xs, ws, attrs)
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report),
                  kernel_variants={"Conv": ("im2col", forced) if forced else "im2col"})
    got = _variants(report)
    assert [v["name"] for v in got] == ["im2col"] * 2
    if forced:
        assert got[0]["params"] == forced


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_chosen_for_few_channels_and_enough_outputs(level, tmp_path):
    """Unforced, compiled for each level (nothing runs): keyword spotting's and an RGB stem's
    first layers take it; 8 output channels (the gather would cost ~60% of the GEMM), 8 input
    channels, a stride-1 3x3 on wide rows and a 7x7 stem (147 products: the channel tiles'
    reduction) do not; a raw-audio front end (1 -> 64 over 16,000 samples at stride 5) does."""
    import glowpy
    g = GraphBuilder(a=f32(1, 1, 49, 10), b=f32(1, 3, 64, 64), c=f32(1, 8, 32, 32),
                     d=f32(1, 1, 16000))
    g.node("Conv", ["a", f32(64, 1, 10, 4)], strides=[2, 2], pads=[4, 1, 5, 1])
    g.node("Conv", ["b", f32(32, 3, 3, 3)], strides=[2, 2], pads=[0, 0, 1, 1])
    g.node("Conv", ["b", f32(8, 3, 3, 3)], strides=[2, 2], pads=[0, 0, 1, 1])
    g.node("Conv", ["c", f32(32, 8, 3, 3)], strides=[2, 2], pads=[1, 1, 1, 1])
    g.node("Conv", ["b", f32(32, 3, 3, 3)], pads=[1, 1, 1, 1])
    g.node("Conv", ["b", f32(32, 3, 7, 7)], strides=[2, 2], pads=[3, 3, 3, 3])
    g.node("Conv", ["d", f32(64, 1, 10)], strides=[5])
    import onnx
    path = str(tmp_path / "m.onnx")
    onnx.save(g.model(opset=13), path)
    report = tmp_path / "m.json"
    glowpy.compile(path, str(tmp_path / "b"), dump_memory_report=str(report), **level.options)
    names = [v["name"] for v in _variants(report)]
    assert names[:2] == ["im2col", "im2col"] and "im2col" not in names[2:-1], names
    assert names[-1] == "im2col", names


@pytest.mark.parametrize("level", params())
def test_columns_in_an_activation_gap(level, tmp_path):
    """Past the stack budget (27 columns of a 96-wide plane: 6 rows per 64 KiB), the columns
    sized by the cache (the named levels' 512 KiB L2: 128 KiB, 12 rows) take a gap of the
    activation region that the wider layer after it (an intermediate) leaves: a scratch output, the result the
    same under guard pages."""
    g = GraphBuilder(x=f32(1, 3, 192, 192))
    y = g.node("Conv", ["x", f32(32, 3, 3, 3, scale=0.3), f32(32)], output=False, strides=[2, 2],
               pads=[1, 1, 1, 1])
    z = g.node("Relu", [g.node("Conv", [y, f32(96, 32, 1, 1, scale=0.2)], output=False)], output=False)
    g.node("Conv", [z, f32(8, 96, 1, 1, scale=0.1)])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    v = _variants(report)[0]
    assert v["name"] == "im2col" and v["params"]["scratch"] is True
    assert v["params"]["rows"] > 6
